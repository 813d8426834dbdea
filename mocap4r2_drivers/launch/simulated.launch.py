"""The simulated mocap system as a lifecycle node.

ros2 launch mocap4r2_drivers simulated.launch.py namespace:=sim autostart:=true
ros2 lifecycle set /sim/simulated_system configure   # when autostart is false
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode

from launch import LaunchDescription


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "simulated.yaml")
    return LaunchDescription(
        [
            # the node leaves (SIGTERM) if the launch process dies without stopping it
            SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
            DeclareLaunchArgument(
                "namespace", default_value="sim", description="Namespace of the system's topics"
            ),
            DeclareLaunchArgument(
                "system_params", default_value=config, description="Parameters YAML of the system"
            ),
            DeclareLaunchArgument(
                "autostart",
                default_value="false",
                description="Configure and activate without a lifecycle manager",
            ),
            LifecycleNode(
                package="mocap4r2_drivers",
                executable="simulated_system",
                name="simulated_system",
                namespace=LaunchConfiguration("namespace"),
                parameters=[
                    LaunchConfiguration("system_params"),
                    {"autostart": LaunchConfiguration("autostart")},
                ],
                output="screen",
            ),
        ]
    )
