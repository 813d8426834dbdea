"""A Gazebo (gz-sim) world as a mocap system, with the bridge of its model poses.

    ros2 launch mocap4r2_drivers gazebo.launch.py world:=empty models:="[robot1, drone1]" autostart:=true

Starts ``ros_gz_bridge parameter_bridge`` for each model's PosePublisher topic
/model/<model>/pose (gz.msgs.Pose_V -> tf2_msgs/TFMessage; the SDF block is in
docs/gazebo.md) unless bridge:=false, and gazebo_system subscribed to them.
"""

from mocap4r2_drivers.system_launch import LaunchArgument, SystemLaunch

SYSTEM = SystemLaunch(
    "gazebo",
    arguments=(
        LaunchArgument("world", "default", "Name of the Gazebo world"),
        LaunchArgument(
            "models",
            "",
            "Models tracked as rigid bodies, each with a PosePublisher, e.g. "
            "[robot1, drone1]; empty: the params file's (and no bridge)",
        ),
        LaunchArgument("bridge", "true", "Start ros_gz_bridge for the poses"),
    ),
)


def _nodes(context):
    # launch and launch_ros come with a ROS distribution: imported where they are used, so
    # the plan above reads without them (SystemLaunch's docstring says why)
    from launch.conditions import IfCondition
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

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
        *SYSTEM.node(overrides),
    ]


def generate_launch_description():
    """What `ros2 launch` runs from this file (see the module docstring)."""
    from launch.actions import OpaqueFunction

    return SYSTEM.launch_description([OpaqueFunction(function=_nodes)])
