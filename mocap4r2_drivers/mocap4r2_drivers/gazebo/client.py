"""What gazebo_system reads from ROS, as data: the topics ros_gz_bridge publishes
(``tf2_msgs/TFMessage`` converted from ``gz.msgs.Pose_V``), declared as
:class:`~mocap4r2_control.adapter.TopicInput`.

The system node subscribes to them on itself (``mocap4r2_control/topic_inputs.py``), so
its namespace, remappings and ``use_sim_time`` apply, and hands each message to the
adapter; nothing here imports rclpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mocap4r2_control.adapter import TopicInput

__all__ = ["POSE_TYPE", "QUEUE_DEPTH", "bridge_inputs"]

# what ros_gz_bridge turns gz.msgs.Pose_V into
POSE_TYPE = "tf2_msgs/msg/TFMessage"
# a deep history: the bridge sends every pose, and a pose lost while the process is busy
# would make a frame use an older one
QUEUE_DEPTH = 1000


def bridge_inputs(
    topics: Sequence[str], best_effort: bool, deliver: Callable[[str, object], None]
) -> tuple[TopicInput, ...]:
    """One input per pose topic of the bridge, each message to ``deliver(topic, message)``."""
    return tuple(TopicInput(topic, POSE_TYPE, QUEUE_DEPTH, best_effort, deliver) for topic in topics)
