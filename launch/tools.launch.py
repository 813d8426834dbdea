"""The mocap4r2 tools: marker_viz, robot_ground_truth, trajectory_error (and RViz).

    ros2 launch mocap4r2_drivers simulated.launch.py namespace:=sim autostart:=true
    ros2 launch mocap4r2_tools tools.launch.py rviz:=true

Parameters come from config/tools.yaml (set up for the simulated system in /sim);
pass your own with params_file:=..., and switch tools off with e.g. robot_gt:=false.
recorder:=true also starts session_recorder with config/recorder.yaml (recorder_params:=...),
which records every capture session started on the control plane.
"""
import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

# launch/ and config/ are installed side by side (and sit side by side in the source tree)
CONFIG = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "config")


def generate_launch_description():
    params = LaunchConfiguration("params_file")
    tools = [
        ("marker_viz", "marker_viz", "marker_viz"),
        ("robot_gt", "robot_ground_truth", "robot_ground_truth"),
        ("trajectory_error", "trajectory_error", "trajectory_error"),
    ]
    actions = [
        DeclareLaunchArgument("params_file", default_value=os.path.join(CONFIG, "tools.yaml"),
                              description="Parameters of the tools (YAML keyed by node name)"),
        DeclareLaunchArgument("rviz", default_value="false", description="Start RViz with config/mocap4r2.rviz"),
    ]
    for switch, executable, name in tools:
        actions.append(DeclareLaunchArgument(switch, default_value="true", description=f"Start {executable}"))
        actions.append(Node(package="mocap4r2_tools", executable=executable, name=name, parameters=[params],
                            output="screen", condition=IfCondition(LaunchConfiguration(switch))))
    actions.append(DeclareLaunchArgument("recorder", default_value="false",
                                         description="Start session_recorder (records capture sessions)"))
    actions.append(DeclareLaunchArgument("recorder_params", default_value=os.path.join(CONFIG, "recorder.yaml"),
                                         description="Parameters of session_recorder"))
    actions.append(Node(package="mocap4r2_tools", executable="session_recorder", name="session_recorder",
                        parameters=[LaunchConfiguration("recorder_params")], output="screen",
                        condition=IfCondition(LaunchConfiguration("recorder"))))
    actions.append(Node(package="rviz2", executable="rviz2", name="rviz2",
                        arguments=["-d", os.path.join(CONFIG, "mocap4r2.rviz")],
                        condition=IfCondition(LaunchConfiguration("rviz"))))
    return LaunchDescription(actions)
