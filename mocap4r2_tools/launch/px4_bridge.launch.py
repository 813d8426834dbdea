"""px4_bridge: one mocap rigid body to a PX4 flight controller over MAVLink.

    ros2 launch mocap4r2_drivers simulated.launch.py namespace:=sim autostart:=true
    ros2 launch mocap4r2_tools px4_bridge.launch.py body:=drone1 connection:=udpin:127.0.0.1:14540

Parameters come from config/px4_bridge.yaml; the arguments body, connection, backend
and message override it when given. See docs/px4.md before flying.
"""

import os

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription

CONFIG = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "config")
OVERRIDES = ("body", "connection", "backend", "message", "rigid_bodies_topic")


def _bridge(context):
    overrides = {name: LaunchConfiguration(name).perform(context) for name in OVERRIDES}
    overrides = {name: value for name, value in overrides.items() if value}
    return [
        Node(
            package="mocap4r2_tools",
            executable="px4_bridge",
            name="px4_bridge",
            parameters=[LaunchConfiguration("px4_bridge_params"), overrides],
            output="screen",
        )
    ]


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    actions = [
        DeclareLaunchArgument(
            "px4_bridge_params",
            default_value=os.path.join(CONFIG, "px4_bridge.yaml"),
            description="Parameters of px4_bridge (YAML keyed by node name)",
        )
    ]
    for name in OVERRIDES:
        actions.append(
            DeclareLaunchArgument(name, default_value="", description=f"{name} (empty: the params file's)")
        )
    actions.append(OpaqueFunction(function=_bridge))
    return LaunchDescription(actions)
