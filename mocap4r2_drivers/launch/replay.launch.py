"""A recorded session, a rosbag2 bag or a C3D file played back as a mocap system.

    ros2 launch mocap4r2_drivers replay.launch.py file:=/path/to/sessions/<id> autostart:=true
    ros2 launch mocap4r2_drivers replay.launch.py file:=walk.c3d namespace:=lab rate_factor:=0.5

START and STOP on the control plane (or the lifecycle activate/deactivate) resume and
pause. Every parameter is in config/replay.yaml; docs/replay.md says what each does.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode

from launch import LaunchDescription


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "replay.yaml")
    return LaunchDescription(
        [
            # the node leaves (SIGTERM) if the launch process dies without stopping it
            SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
            DeclareLaunchArgument(
                "namespace", default_value="replay", description="Namespace of the system's topics"
            ),
            DeclareLaunchArgument(
                "system_params", default_value=config, description="Parameters YAML of the system"
            ),
            DeclareLaunchArgument("file", description="A bag folder, an .mcap, a .db3 or a .c3d"),
            DeclareLaunchArgument(
                "source", default_value="", description="Namespace of the recorded system in a bag"
            ),
            DeclareLaunchArgument(
                "rate_factor", default_value="1.0", description="1: real time, 0: as fast as it goes"
            ),
            DeclareLaunchArgument(
                "autostart",
                default_value="false",
                description="Configure and activate without a lifecycle manager",
            ),
            LifecycleNode(
                package="mocap4r2_drivers",
                executable="replay_system",
                name="replay_system",
                namespace=LaunchConfiguration("namespace"),
                parameters=[
                    LaunchConfiguration("system_params"),
                    {
                        "file": LaunchConfiguration("file"),
                        "source": LaunchConfiguration("source"),
                        "rate_factor": LaunchConfiguration("rate_factor"),
                        "autostart": LaunchConfiguration("autostart"),
                    },
                ],
                output="screen",
            ),
        ]
    )
