"""worldmodel_server: a hector_worldmodel_msgs world model of the tracked bodies.

    ros2 launch mocap4r2_drivers simulated.launch.py namespace:=sim autostart:=true
    ros2 launch mocap4r2_tools worldmodel.launch.py

Parameters (systems, object identities, timeout, verify_distance) come from
config/worldmodel.yaml; topics and services are under <worldmodel_namespace>/worldmodel/.
"""

import os

from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription

CONFIG = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "config")


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "worldmodel_params",
                default_value=os.path.join(CONFIG, "worldmodel.yaml"),
                description="Parameters of worldmodel_server (YAML keyed by node name)",
            ),
            DeclareLaunchArgument(
                "worldmodel_namespace",
                default_value="",
                description="Namespace of the node (and of worldmodel/)",
            ),
            Node(
                package="mocap4r2_tools",
                executable="worldmodel_server",
                name="worldmodel_server",
                namespace=LaunchConfiguration("worldmodel_namespace"),
                parameters=[LaunchConfiguration("worldmodel_params")],
                output="screen",
            ),
        ]
    )
