"""A Gazebo (gz-sim) world as a mocap system, with the bridge of its model poses.

    ros2 launch mocap4r2_drivers gazebo.launch.py world:=empty models:="[robot1, drone1]" autostart:=true

Starts ``ros_gz_bridge parameter_bridge`` for /world/<world>/pose/info (gz.msgs.Pose_V ->
tf2_msgs/TFMessage) unless bridge:=false, and gazebo_system subscribed to it.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node


def _nodes(context):
    world = LaunchConfiguration("world").perform(context)
    topic = f"/world/{world}/pose/info"
    overrides = {"pose_topics": [topic], "autostart": LaunchConfiguration("autostart")}
    models = LaunchConfiguration("models").perform(context).strip()
    if models:
        # "[a, b]" or "a,b": the tracked models, in order
        overrides["models"] = [m.strip() for m in models.strip("[]").split(",") if m.strip()]
    return [
        Node(
            package="ros_gz_bridge",
            executable="parameter_bridge",
            name="gz_pose_bridge",
            arguments=[f"{topic}@tf2_msgs/msg/TFMessage[gz.msgs.Pose_V"],
            condition=IfCondition(LaunchConfiguration("bridge")),
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
    config = os.path.join(get_package_share_directory("mocap4r2_drivers"), "config", "gazebo.yaml")
    return LaunchDescription([
        # the node leaves (SIGTERM) if the launch process dies without stopping it
        SetEnvironmentVariable("MOCAP4R2_EXIT_WITH_PARENT", "1"),
        DeclareLaunchArgument("namespace", default_value="gazebo", description="Namespace of the system's topics"),
        DeclareLaunchArgument("system_params", default_value=config, description="Parameters YAML of the system"),
        DeclareLaunchArgument("world", default_value="default", description="Name of the Gazebo world"),
        DeclareLaunchArgument("models", default_value="",
                              description="Models tracked as rigid bodies, e.g. [robot1, drone1]; empty: the "
                                          "params file's"),
        DeclareLaunchArgument("bridge", default_value="true", description="Start ros_gz_bridge for the poses"),
        DeclareLaunchArgument("autostart", default_value="false",
                              description="Configure and activate without a lifecycle manager"),
        OpaqueFunction(function=_nodes),
    ])
