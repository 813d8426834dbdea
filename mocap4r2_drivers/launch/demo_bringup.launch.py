"""The demo on a ROS distribution: the simulated system (streaming at once), the tools
and RViz with config/mocap4r2.rviz (where rviz2 is installed; skipped with a log line
elsewhere).

    ros2 launch mocap4r2_drivers demo_bringup.launch.py            # rviz:=false: no RViz
    mocap4r2 tui                                                   # watch, start/stop

Each node gets its own parameters file: the system's included launch file takes
system_params, the tools' takes tools_params, and each include runs in a scoped group, so
no launch argument of one include can reach the nodes of the other.
"""

import os

from launch.actions import DeclareLaunchArgument, GroupAction, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription

HERE = os.path.dirname(os.path.realpath(__file__))


def _tools_launch_dir() -> str:
    """tools.launch.py is installed by mocap4r2_tools; in the source tree it sits in that
    package's launch/ folder, beside this package's folder."""
    try:
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory("mocap4r2_tools"), "launch")
    except Exception:  # noqa: BLE001 - not installed: the source tree
        return os.path.join(HERE, "..", "..", "mocap4r2_tools", "launch")


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "rviz", default_value="true", description="Start RViz (only where rviz2 is installed)"
            ),
            DeclareLaunchArgument(
                "autostart",
                default_value="true",
                description="Stream at once (false: wait for `mocap4r2 start`)",
            ),
            GroupAction(
                scoped=True,
                actions=[
                    IncludeLaunchDescription(
                        PythonLaunchDescriptionSource(os.path.join(HERE, "simulated.launch.py")),
                        launch_arguments={
                            "namespace": "sim",
                            "autostart": LaunchConfiguration("autostart"),
                        }.items(),
                    )
                ],
            ),
            GroupAction(
                scoped=True,
                actions=[
                    IncludeLaunchDescription(
                        PythonLaunchDescriptionSource(os.path.join(_tools_launch_dir(), "tools.launch.py")),
                        launch_arguments={"rviz": LaunchConfiguration("rviz")}.items(),
                    )
                ],
            ),
        ]
    )
