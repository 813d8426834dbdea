"""A VRPN server's trackers (Vicon Tracker, Motive, DTrack, vrpn_server, ...) as a lifecycle node.

    ros2 launch mocap4r2_drivers vrpn.launch.py host:=192.168.1.10 autostart:=true
    ros2 lifecycle set /vrpn/vrpn_system configure   # when autostart is false

Without a VRPN server at hand, ``vrpn_simulator`` (installed with the package) stands in for one:
    vrpn_simulator --port 3883 &
    ros2 launch mocap4r2_drivers vrpn.launch.py autostart:=true
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode

from launch import LaunchDescription


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "vrpn.yaml")
    return LaunchDescription(
        [
            # the node leaves (SIGTERM) if the launch process dies without stopping it
            SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
            DeclareLaunchArgument(
                "namespace", default_value="vrpn", description="Namespace of the system's topics"
            ),
            DeclareLaunchArgument(
                "system_params", default_value=config, description="Parameters YAML of the system"
            ),
            DeclareLaunchArgument(
                "host", default_value="127.0.0.1", description="Address of the VRPN server"
            ),
            DeclareLaunchArgument("port", default_value="3883", description="VRPN server port"),
            DeclareLaunchArgument(
                "autostart",
                default_value="false",
                description="Configure and activate without a lifecycle manager",
            ),
            LifecycleNode(
                package="mocap4r2_drivers",
                executable="vrpn_system",
                name="vrpn_system",
                namespace=LaunchConfiguration("namespace"),
                parameters=[
                    LaunchConfiguration("system_params"),
                    {
                        "host": LaunchConfiguration("host"),
                        "port": LaunchConfiguration("port"),
                        "autostart": LaunchConfiguration("autostart"),
                    },
                ],
                output="screen",
            ),
        ]
    )
