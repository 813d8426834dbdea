"""The mocap4r2 tools: marker_viz, robot_ground_truth, trajectory_error (and RViz).

    ros2 launch mocap4r2_drivers simulated.launch.py namespace:=sim autostart:=true
    ros2 launch mocap4r2_tools tools.launch.py rviz:=true

Parameters come from config/tools.yaml (set up for the simulated system in /sim);
pass your own with tools_params:=..., and switch tools off with e.g. robot_gt:=false.
The argument is named tools_params, not params_file: launch arguments are not scoped by
an include, so a launch file that includes a system's (system_params) and this one must
not find the same name in both.

RViz starts only where the rviz2 package is installed; elsewhere the launch says so and
goes on without it (it must never fail halfway, after the tools have started).
recorder:=true also starts session_recorder with config/recorder.yaml (recorder_params:=...),
which records every capture session started on the control plane.
"""

import os

from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription

# launch/ and config/ are installed side by side (and sit side by side in the source tree)
CONFIG = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "config")
TOOLS = (  # (on/off argument, executable = node name = key in the parameters file)
    ("marker_viz", "marker_viz"),
    ("robot_gt", "robot_ground_truth"),
    ("trajectory_error", "trajectory_error"),
)


def rviz_installed() -> bool:
    """Whether the ament index knows rviz2 (not every machine has it)."""
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        get_package_share_directory("rviz2")
    except PackageNotFoundError:
        return False
    return True


def _rviz(context):
    if LaunchConfiguration("rviz").perform(context).lower() not in ("true", "1", "yes", "on"):
        return []
    if not rviz_installed():
        return [LogInfo(msg="rviz2 is not installed: RViz is skipped (the tools run without it)")]
    return [
        Node(
            package="rviz2",
            executable="rviz2",
            name="rviz2",
            arguments=["-d", os.path.join(CONFIG, "mocap4r2.rviz")],
        )
    ]


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    params = LaunchConfiguration("tools_params")
    actions = [
        # each node leaves (SIGTERM) if the launch process dies without stopping it
        SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
        DeclareLaunchArgument(
            "tools_params",
            default_value=os.path.join(CONFIG, "tools.yaml"),
            description="Parameters of the tools (YAML keyed by node name)",
        ),
        DeclareLaunchArgument(
            "rviz",
            default_value="false",
            description="Start RViz with config/mocap4r2.rviz (where rviz2 is installed)",
        ),
    ]
    for switch, executable in TOOLS:
        actions.append(DeclareLaunchArgument(switch, default_value="true", description=f"Start {executable}"))
        actions.append(
            Node(
                package="mocap4r2_tools",
                executable=executable,
                name=executable,
                parameters=[params],
                output="screen",
                condition=IfCondition(LaunchConfiguration(switch)),
            )
        )
    actions.append(
        DeclareLaunchArgument(
            "recorder", default_value="false", description="Start session_recorder (records capture sessions)"
        )
    )
    actions.append(
        DeclareLaunchArgument(
            "recorder_params",
            default_value=os.path.join(CONFIG, "recorder.yaml"),
            description="Parameters of session_recorder",
        )
    )
    actions.append(
        Node(
            package="mocap4r2_tools",
            executable="session_recorder",
            name="session_recorder",
            parameters=[LaunchConfiguration("recorder_params")],
            output="screen",
            condition=IfCondition(LaunchConfiguration("recorder")),
        )
    )
    actions.append(OpaqueFunction(function=_rviz))
    return LaunchDescription(actions)
