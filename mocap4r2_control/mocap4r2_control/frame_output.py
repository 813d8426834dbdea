"""What a configured mocap system sends.

``FrameOutput`` owns the data topics, /tf, the CDR encoder and the stamper of one
configuration: ``publish`` turns one :class:`~mocap4r2_control.frame.MocapFrame` into the
three topics with one stamp and frame number, and records it in the statistics.
A frame that carries its recorded messages (``MocapFrame.recorded``: a replay offers
them when the node's :class:`~mocap4r2_control.pass_through.PassThrough` allowed it at
configure) has them published as they are, its stamp written in, instead of encoded
again (pass_through.py says when, and how the encoder keeps checking them).
The thread that reads frames and hands them here is frame_reader.py's.
"""

from __future__ import annotations

import time
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

from .clock_model import FrameStamper
from .diagnostics import FrameStatistics, Thresholds
from .frame import MocapFrame
from .frame_encoder import FrameEncoder
from .pass_through import PassThrough
from .tf_out import TransformSender
from .timebase import node_clock, split_seconds

__all__ = ["DATA_TOPICS", "FrameOutput"]

DATA_TOPICS = (
    ("markers", Markers, "mocap4r2_interfaces/msg/Markers"),
    ("rigid_bodies", RigidBodies, "mocap4r2_interfaces/msg/RigidBodies"),
    ("skeletons", Skeletons, "mocap4r2_interfaces/msg/Skeletons"),
)


class FrameOutput:
    """The publishers, /tf sender, encoder and stamper of one configuration of a system."""

    def __init__(self, node: Node, stats: FrameStatistics, time_source: str):
        self.node = node
        self.stats = stats
        self.stamper = FrameStamper(time_source)
        self._publishers: dict[str, Any] = {}
        self._tf: TransformSender | None = None
        self._encoder: FrameEncoder | None = None
        self.pass_through = PassThrough(lambda line: node.get_logger().warning(line))

    def open(self, cfg: dict[str, Any], *, compiled_markers: bool = True) -> None:
        """Create the outputs ``cfg`` (the base parameters' values) asks for. Recorded
        messages are published as they are only once ``pass_through.decide`` allowed it.
        ``compiled_markers`` False keeps markers on the numpy path (the system's frames
        never hold any: the markers pass is not loaded); the bodies' poses still go
        through their compiled pass."""
        qos = QoSProfile(
            depth=cfg["qos_depth"],
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        for topic, msg_type, _ in DATA_TOPICS:
            if cfg[f"publish_{topic}"]:
                self._publishers[topic] = self.node.create_publisher(msg_type, topic, qos)
        self._tf = TransformSender(self.node) if cfg["publish_tf"] else None
        self._encoder = FrameEncoder(
            cfg["frame_id"],
            cfg["tf_prefix"],
            markers=cfg["publish_markers"],
            rigid_bodies=cfg["publish_rigid_bodies"],
            body_markers=cfg["rigid_body_markers"],
            skeletons=cfg["publish_skeletons"],
            tf=cfg["publish_tf"],
            compiled_markers=compiled_markers,
        )
        self.stats.thresholds = Thresholds(no_frame_error_s=cfg["no_frame_error"])
        # a new connection may be a new clock: the model starts afresh on every configure;
        # its host clock is the reader's (ROS time with use_sim_time)
        self.stamper = FrameStamper(cfg["time_source"], clock=node_clock(self.node))
        self.pass_through.reset()

    def close(self) -> None:
        """Destroy the publishers and the /tf sender; safe twice."""
        for pub in self._publishers.values():
            self.node.destroy_publisher(pub)
        self._publishers.clear()
        if self._tf is not None:
            self._tf.destroy()
            self._tf = None

    def publish(self, frame: MocapFrame, arrival: float | None = None) -> None:
        """Publish one frame on every enabled topic with one stamp and frame number."""
        frame.check()
        arrival = time.time() if arrival is None else arrival
        capture = self.stamper.stamp(
            arrival, frame.latency, frame.system_time, frame.capture_time, frame.frame_number
        )
        encoder = self._encoder
        if encoder is None:
            raise RuntimeError("no frame encoder: the system is not configured")
        sec, nanosec = split_seconds(capture)
        if frame.recorded is not None and self.pass_through.republish(
            frame, sec, nanosec, self._publishers, encoder
        ):
            # the frame's bodies say what was published for each: the recorded validity
            self.stats.record(
                frame.frame_number,
                arrival - capture,
                frame.bodies.ids,
                frame.bodies.names,
                frame.bodies.valid,
            )
            return
        encoded = encoder.encode(frame, sec, nanosec)
        pubs = self._publishers
        # serialized CDR, published as is (None: the topic is off)
        if encoded.markers is not None:
            pubs["markers"].publish(encoded.markers)
        if encoded.rigid_bodies is not None:
            pubs["rigid_bodies"].publish(encoded.rigid_bodies)
        if encoded.skeletons is not None:
            pubs["skeletons"].publish(encoded.skeletons)
        if encoded.tf is not None and self._tf is not None:
            self._tf.send_serialized(encoded.tf)
        self.stats.record(
            frame.frame_number, arrival - capture, frame.bodies.ids, frame.bodies.names, encoded.body_valid
        )
