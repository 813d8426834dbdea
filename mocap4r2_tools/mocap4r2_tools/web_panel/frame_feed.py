"""The live view's frames: each system's newest Markers, RigidBodies and Skeletons,
taken when a client is due a frame and turned into the page's form only then."""

from __future__ import annotations

import threading
from typing import Any

import rclpy
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rclpy.serialization import deserialize_message

from mocap4r2_control.control_plane import ControlClient
from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

from .core import LatestFrames, LiveFrame, body_row, marker_rows

FRAME_TYPES = {
    "mocap4r2_interfaces/msg/Markers": ("markers", Markers),
    "mocap4r2_interfaces/msg/RigidBodies": ("rigid_bodies", RigidBodies),
    "mocap4r2_interfaces/msg/Skeletons": ("skeletons", Skeletons),
}
FRAME_CLASSES = dict(FRAME_TYPES.values())
#: frame topics subscribed at most (every announced system's three)
MAX_FRAME_TOPICS = 192
#: messages taken from one subscription at once: more than its queue holds (the sensor
#: data depth), so one take empties it
MAX_TAKE = 64


class FrameFeed:
    """Raw subscriptions to the announced systems' frame topics, on a node of their own
    that no executor waits on: a client due a frame takes what they hold (``take``)."""

    def __init__(self, node: Node, control: ControlClient):
        self.control = control
        self.frames = LatestFrames()
        self._decoded_cache: dict[tuple[str, str], tuple[float, Any]] = {}
        # system -> [(kind, message class, subscription)]; created on the executor
        # thread, taken from on the server's: the lock keeps one taker per subscription
        self._subs: dict[str, list[tuple[str, Any, Any]]] = {}
        self._topics: set[str] = set()
        self._lock = threading.Lock()
        self.node = rclpy.create_node(
            f"{node.get_name()}_frames", namespace=node.get_namespace(), context=node.context
        )

    def start(self, node: Node) -> None:
        """New systems' frame topics are subscribed from ``node``'s executor thread (a
        timer)."""
        node.create_timer(0.5, self.subscribe)

    def subscribe(self) -> None:
        for name, info in self.control.systems().items():
            for topic, type_name in zip(info.topics, info.topic_types):
                kind = FRAME_TYPES.get(type_name)
                if kind is None or topic in self._topics or len(self._topics) >= MAX_FRAME_TOPICS:
                    continue
                label, cls = kind
                # on the node no executor waits on: taken from by take()
                sub = self.node.create_subscription(
                    cls, topic, lambda _: None, qos_profile_sensor_data, raw=True
                )
                with self._lock:
                    self._topics.add(topic)
                    self._subs.setdefault(name, []).append((label, cls, sub))

    def take(self, system: str) -> None:
        """Take what ``system``'s subscriptions hold, keeping the newest serialized
        message of each (deserialized only when a client asks for it).

        Decimation at the source, at the moment a client is due a frame: a browser
        never needs more than ``core.MAX_CLIENT_RATE`` frames a second, and an executor
        callback per message costs far more than the panel's own work (1 kHz x 3 topics
        would be most of a core). Each queue is the sensor-data depth, so what is older
        is dropped by DDS, and what is taken here is the newest the panel has; taking
        on a timer of its own instead would age every frame by up to that timer's
        period before a client's turn even began. Nothing is taken while no client
        watches ``system``."""
        with self._lock:
            for label, cls, sub in self._subs.get(system, ()):
                newest = None
                for _ in range(MAX_TAKE):
                    with sub.handle:
                        taken = sub.handle.take_message(cls, True)
                    if taken is None:
                        break
                    newest = taken[0]
                if newest is not None:
                    self.frames.put(system, label, newest)

    def live_frame(self, system: str) -> LiveFrame | None:
        """The latest frame of ``system`` in the page's form (built here, on demand, at
        the clients' rate; never per message)."""
        raw = self.frames.get(system)
        if not raw:
            return None
        slot = {kind: (self._decoded(system, kind, data, at), at) for kind, (data, at) in raw.items()}
        newest = max(slot.values(), key=lambda item: item[1])
        msg = newest[0]
        frame = LiveFrame(
            system=system,
            frame_number=int(msg.frame_number),
            stamp=msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9,
            received=newest[1],
        )
        if "markers" in slot:
            points = [
                (m.position.x, m.position.y, m.position.z, m.occluded) for m in slot["markers"][0].markers
            ]
            frame.markers, frame.occluded = marker_rows(points)
        if "rigid_bodies" in slot:
            for body in slot["rigid_bodies"][0].rigid_bodies[:200]:
                p, q = body.pose.position, body.pose.orientation
                frame.bodies.append(
                    body_row(body.name, body.id, (p.x, p.y, p.z), (q.x, q.y, q.z, q.w), body.tracking_valid)
                )
        if "skeletons" in slot:
            for skeleton in slot["skeletons"][0].skeletons[:20]:
                for seg in skeleton.segments[:100]:
                    p = seg.pose.position
                    row = body_row(
                        seg.name, seg.id, (p.x, p.y, p.z), (0.0, 0.0, 0.0, 1.0), seg.tracking_valid
                    )
                    row["parent"] = int(seg.parent_id)
                    row["skeleton"] = skeleton.name[:64]
                    frame.segments.append(row)
        return frame

    def _decoded(self, system: str, kind: str, data: bytes, received: float) -> Any:
        """The message of ``data``, deserialized once however many clients ask."""
        key = (system, kind)
        cached = self._decoded_cache.get(key)
        if cached is not None and cached[0] == received:
            return cached[1]
        message = deserialize_message(data, FRAME_CLASSES[kind])
        if len(self._decoded_cache) < 3 * 64:
            self._decoded_cache[key] = (received, message)
        else:
            self._decoded_cache.pop(key, None)
        return message
