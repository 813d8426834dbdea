"""The Vicon system (Nexus, Tracker, Shogun via the DataStream SDK) as a lifecycle node.

    ros2 launch mocap4r2_drivers vicon.launch.py host:=192.168.1.20 autostart:=true
    ros2 lifecycle set /vicon/vicon_system configure   # when autostart is false

Needs Vicon's DataStream SDK Python API (vicon_dssdk) installed: see docs/vicon.md.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode

from launch import LaunchDescription


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "vicon.yaml")
    return LaunchDescription(
        [
            # the node leaves (SIGTERM) if the launch process dies without stopping it
            SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
            DeclareLaunchArgument(
                "namespace", default_value="vicon", description="Namespace of the system's topics"
            ),
            DeclareLaunchArgument(
                "system_params", default_value=config, description="Parameters YAML of the system"
            ),
            DeclareLaunchArgument(
                "host",
                default_value="127.0.0.1",
                description="Address of the computer running Nexus, Tracker or Shogun",
            ),
            DeclareLaunchArgument(
                "autostart",
                default_value="false",
                description="Configure and activate without a lifecycle manager",
            ),
            LifecycleNode(
                package="mocap4r2_drivers",
                executable="vicon_system",
                name="vicon_system",
                namespace=LaunchConfiguration("namespace"),
                parameters=[
                    LaunchConfiguration("system_params"),
                    {"host": LaunchConfiguration("host"), "autostart": LaunchConfiguration("autostart")},
                ],
                output="screen",
            ),
        ]
    )
