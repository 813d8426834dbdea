"""The demo on a ROS distribution: the simulated system (streaming at once), the tools
and RViz with config/mocap4r2.rviz (where rviz2 is installed; skipped with a log line
elsewhere). The tools come from mocap4r2_tools, which the drivers do not depend on (it
brings the terminal libraries of the `mocap4r2` command): where it is not installed the
demo runs the system alone and says so.

    ros2 launch mocap4r2_drivers demo_bringup.launch.py            # rviz:=false: no RViz
    mocap4r2 tui                                                   # watch, start/stop

Each node gets its own parameters file: the system's included launch file takes
system_params, the tools' takes tools_params, and each include runs in a scoped group, so
no launch argument of one include can reach the nodes of the other.
"""

import os

from launch.actions import DeclareLaunchArgument, GroupAction, IncludeLaunchDescription, LogInfo
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription

HERE = os.path.dirname(os.path.realpath(__file__))


def _tools_launch_dir() -> str | None:
    """The folder of tools.launch.py: as mocap4r2_tools installs it, or in the source tree
    that package's launch/ folder beside this package's folder; None where neither has it."""
    try:
        from ament_index_python.packages import get_package_share_directory

        folder = os.path.join(get_package_share_directory("mocap4r2_tools"), "launch")
    except Exception:  # noqa: BLE001 - not installed: the source tree, if this is one
        folder = os.path.join(HERE, "..", "..", "mocap4r2_tools", "launch")
    return folder if os.path.exists(os.path.join(folder, "tools.launch.py")) else None


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    tools_dir = _tools_launch_dir()
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
            (
                GroupAction(
                    scoped=True,
                    actions=[
                        IncludeLaunchDescription(
                            PythonLaunchDescriptionSource(os.path.join(tools_dir, "tools.launch.py")),
                            launch_arguments={"rviz": LaunchConfiguration("rviz")}.items(),
                        )
                    ],
                )
                if tools_dir is not None
                else LogInfo(msg="mocap4r2_tools is not installed: the demo runs the simulated system alone")
            ),
        ]
    )
