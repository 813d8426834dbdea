"""The Vicon system (Nexus, Tracker, Shogun via the DataStream SDK) as a lifecycle node.

    ros2 launch mocap4r2_drivers vicon.launch.py host:=192.168.1.20 autostart:=true
    ros2 lifecycle set /vicon/vicon_system configure   # when autostart is false

Needs Vicon's DataStream SDK Python API (vicon_dssdk) installed: see docs/vicon.md.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode


def generate_launch_description():
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "vicon.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value="vicon", description="Namespace of the system's topics"),
        DeclareLaunchArgument("params_file", default_value=config, description="Parameters YAML"),
        DeclareLaunchArgument("host", default_value="127.0.0.1",
                              description="Address of the computer running Nexus, Tracker or Shogun"),
        DeclareLaunchArgument("autostart", default_value="false",
                              description="Configure and activate without a lifecycle manager"),
        LifecycleNode(
            package="mocap4r2_drivers",
            executable="vicon_system",
            name="vicon_system",
            namespace=LaunchConfiguration("namespace"),
            parameters=[LaunchConfiguration("params_file"),
                        {"host": LaunchConfiguration("host"), "autostart": LaunchConfiguration("autostart")}],
            output="screen",
        ),
    ])
