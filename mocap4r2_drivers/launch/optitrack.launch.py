"""The OptiTrack (Motive, NatNet) system as a lifecycle node.

    ros2 launch mocap4r2_drivers optitrack.launch.py server_address:=192.168.1.20 autostart:=true
    ros2 lifecycle set /optitrack/optitrack_system configure   # when autostart is false

Without Motive at hand, ``natnet_simulator`` (installed with the package) stands in for it:
    natnet_simulator &
    ros2 launch mocap4r2_drivers optitrack.launch.py autostart:=true
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode

from launch import LaunchDescription


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "optitrack.yaml")
    return LaunchDescription(
        [
            # the node leaves (SIGTERM) if the launch process dies without stopping it
            SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
            DeclareLaunchArgument(
                "namespace", default_value="optitrack", description="Namespace of the system's topics"
            ),
            DeclareLaunchArgument(
                "system_params", default_value=config, description="Parameters YAML of the system"
            ),
            DeclareLaunchArgument(
                "server_address",
                default_value="127.0.0.1",
                description="Address of the computer running Motive",
            ),
            DeclareLaunchArgument(
                "connection_type",
                default_value="multicast",
                description="multicast or unicast (Motive's Transmission Type)",
            ),
            DeclareLaunchArgument(
                "autostart",
                default_value="false",
                description="Configure and activate without a lifecycle manager",
            ),
            LifecycleNode(
                package="mocap4r2_drivers",
                executable="optitrack_system",
                name="optitrack_system",
                namespace=LaunchConfiguration("namespace"),
                parameters=[
                    LaunchConfiguration("system_params"),
                    {
                        "server_address": LaunchConfiguration("server_address"),
                        "connection_type": LaunchConfiguration("connection_type"),
                        "autostart": LaunchConfiguration("autostart"),
                    },
                ],
                output="screen",
            ),
        ]
    )
