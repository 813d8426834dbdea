"""A Gazebo (gz-sim) world as a mocap system, with the bridge of its model poses.

    ros2 launch mocap4r2_drivers gazebo.launch.py world:=empty models:="[robot1, drone1]" autostart:=true

Starts ``ros_gz_bridge parameter_bridge`` for each model's PosePublisher topic
/model/<model>/pose (gz.msgs.Pose_V -> tf2_msgs/TFMessage; the SDF block is in
docs/gazebo.md) unless bridge:=false, and gazebo_system subscribed to them.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from launch import LaunchDescription


def _nodes(context):
    world = LaunchConfiguration("world").perform(context)
    # "[a, b]" or "a,b": the tracked models, in order, each with a PosePublisher
    models = [
        m.strip()
        for m in LaunchConfiguration("models").perform(context).strip().strip("[]").split(",")
        if m.strip()
    ]
    topics = [f"/model/{m.replace('::', '/')}/pose" for m in models]
    overrides = {"world": world, "autostart": LaunchConfiguration("autostart")}
    if models:
        overrides.update(models=models, pose_topics=topics)
    return [
        Node(
            package="ros_gz_bridge",
            executable="parameter_bridge",
            name="gz_pose_bridge",
            arguments=[f"{topic}@tf2_msgs/msg/TFMessage[gz.msgs.Pose_V" for topic in topics],
            condition=IfCondition(LaunchConfiguration("bridge") if topics else "false"),
            output="screen",
        ),
        LifecycleNode(
            package="mocap4r2_drivers",
            executable="gazebo_system",
            name="gazebo_system",
            namespace=LaunchConfiguration("namespace"),
            parameters=[LaunchConfiguration("system_params"), overrides],
            output="screen",
        ),
    ]


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "gazebo.yaml")
    return LaunchDescription(
        [
            # the node leaves (SIGTERM) if the launch process dies without stopping it
            SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
            DeclareLaunchArgument(
                "namespace", default_value="gazebo", description="Namespace of the system's topics"
            ),
            DeclareLaunchArgument(
                "system_params", default_value=config, description="Parameters YAML of the system"
            ),
            DeclareLaunchArgument("world", default_value="default", description="Name of the Gazebo world"),
            DeclareLaunchArgument(
                "models",
                default_value="",
                description="Models tracked as rigid bodies, each with a PosePublisher, e.g. "
                "[robot1, drone1]; empty: the params file's (and no bridge)",
            ),
            DeclareLaunchArgument(
                "bridge", default_value="true", description="Start ros_gz_bridge for the poses"
            ),
            DeclareLaunchArgument(
                "autostart",
                default_value="false",
                description="Configure and activate without a lifecycle manager",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
