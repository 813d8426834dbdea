"""Sending /tf: tf2_ros where it is installed, an equivalent publisher elsewhere.

On a ROS distribution tf2_ros.TransformBroadcaster is used. A wheels-only machine has no
tf2_ros; there we publish tf2_msgs/TFMessage on /tf with the QoS of tf2_ros's
DynamicBroadcasterQoS (reliable, volatile, keep last 100), which is what every tf
listener subscribes with.
"""

from __future__ import annotations

from collections.abc import Sequence

from geometry_msgs.msg import TransformStamped
from rclpy.node import Node

from .qos import keep_last

TF_QOS = keep_last(100)
TF_STATIC_QOS = keep_last(1, transient_local=True)


class TransformSender:
    """send(transforms) on /tf, through tf2_ros when available."""

    def __init__(self, node: Node):
        self.node = node
        self.uses_tf2_ros = False
        try:
            from tf2_ros import TransformBroadcaster

            self._broadcaster = TransformBroadcaster(node)
            self.uses_tf2_ros = True
            self._publisher = None
        except ImportError:
            from tf2_msgs.msg import TFMessage

            self._broadcaster = None
            self._message = TFMessage()
            self._publisher = node.create_publisher(TFMessage, "/tf", TF_QOS)

    def send(self, transforms: Sequence[TransformStamped]) -> None:
        if not transforms:
            return
        if self._broadcaster is not None:
            self._broadcaster.sendTransform(list(transforms))
        else:
            self._message.transforms = list(transforms)
            assert self._publisher is not None  # set whenever there is no broadcaster
            self._publisher.publish(self._message)

    def send_serialized(self, data: bytes) -> None:
        """Publish an already serialized TFMessage (see cdr.TFMessageEncoder) through
        tf2_ros's own /tf publisher, or ours."""
        publisher = (
            self._publisher if self._publisher is not None else getattr(self._broadcaster, "pub_tf", None)
        )
        if publisher is not None:
            publisher.publish(data)
        else:  # a tf2_ros without the attribute: go through message objects
            from rclpy.serialization import deserialize_message
            from tf2_msgs.msg import TFMessage

            self._broadcaster.sendTransform(deserialize_message(data, TFMessage).transforms)

    def destroy(self) -> None:
        if self._publisher is not None:
            self.node.destroy_publisher(self._publisher)
            self._publisher = None
        elif self._broadcaster is not None:
            self.node.destroy_publisher(self._broadcaster.pub_tf)
            self._broadcaster = None
