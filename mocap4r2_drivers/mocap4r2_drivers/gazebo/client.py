"""The ROS side of gazebo_system's input: subscriptions to the topics ros_gz_bridge
publishes (``tf2_msgs/TFMessage`` converted from ``gz.msgs.Pose_V``).

They are created on the system node itself (handed to the adapter by
``MocapAdapter.attach``), so its namespace, remappings and ``use_sim_time`` apply and
no node of our own is hidden in the process. They get their own callback group: the
executor can run them while a lifecycle transition (configure waiting for the first
poses) occupies the node's default group.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

# a deep history: the bridge sends every pose, and a pose lost while the process is busy
# would make a frame use an older one
QUEUE_DEPTH = 1000


class BridgeSubscriptions:
    """The subscriptions to ros_gz_bridge's pose topics, on the system node, each
    message handed to ``callback(topic, message)``."""

    def __init__(self, topics: Sequence[str], best_effort: bool, callback: Callable[[str, object], None]):
        self.topics = list(topics)
        self.best_effort = best_effort
        self.callback = callback
        self._node: Any = None  # the system node (rclpy Node) the subscriptions belong to
        self._subscriptions: list = []

    def attach(self, node) -> None:
        from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from tf2_msgs.msg import TFMessage

        self.close()
        qos = QoSProfile(
            depth=QUEUE_DEPTH,
            reliability=ReliabilityPolicy.BEST_EFFORT if self.best_effort else ReliabilityPolicy.RELIABLE,
        )
        group = MutuallyExclusiveCallbackGroup()  # one pose message at a time, in arrival order
        self._node = node
        self._subscriptions = [
            node.create_subscription(
                TFMessage, topic, (lambda msg, t=topic: self.callback(t, msg)), qos, callback_group=group
            )
            for topic in self.topics
        ]

    @property
    def attached(self) -> bool:
        return self._node is not None

    def close(self) -> None:
        node, self._node = self._node, None
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            with contextlib.suppress(Exception):  # the node is being destroyed already
                node.destroy_subscription(subscription)
