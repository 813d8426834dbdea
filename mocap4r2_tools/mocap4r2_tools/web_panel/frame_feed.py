"""The live view's frames: each system's newest Markers, RigidBodies and Skeletons,
taken at the page's rate and turned into the page's form only when a client asks."""

from __future__ import annotations

from typing import Any

import rclpy
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rclpy.serialization import deserialize_message

from mocap4r2_control.control_plane import ControlClient
from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

from .core import MAX_CLIENT_RATE, LatestFrames, LiveFrame, body_row, marker_rows

FRAME_TYPES = {
    "mocap4r2_interfaces/msg/Markers": ("markers", Markers),
    "mocap4r2_interfaces/msg/RigidBodies": ("rigid_bodies", RigidBodies),
    "mocap4r2_interfaces/msg/Skeletons": ("skeletons", Skeletons),
}
FRAME_CLASSES = dict(FRAME_TYPES.values())
#: frame topics subscribed at most (every announced system's three)
MAX_FRAME_TOPICS = 192


class FrameFeed:
    """Raw subscriptions to the announced systems' frame topics, polled by timers of
    ``node`` (its executor thread), on a node of their own that no executor waits on."""

    def __init__(self, node: Node, control: ControlClient):
        self.control = control
        self.frames = LatestFrames()
        self._decoded_cache: dict[tuple[str, str], tuple[float, Any]] = {}
        self._subs: dict[str, tuple[str, str, Any, Any]] = {}
        self.node = rclpy.create_node(
            f"{node.get_name()}_frames", namespace=node.get_namespace(), context=node.context
        )

    def start(self, node: Node) -> None:
        """New systems' frame topics are subscribed from ``node``'s executor thread (a
        timer), and polled there."""
        node.create_timer(0.5, self.subscribe)
        node.create_timer(1.0 / MAX_CLIENT_RATE, self.poll)

    def subscribe(self) -> None:
        for name, info in self.control.systems().items():
            for topic, type_name in zip(info.topics, info.topic_types):
                kind = FRAME_TYPES.get(type_name)
                if kind is None or topic in self._subs or len(self._subs) >= MAX_FRAME_TOPICS:
                    continue
                label, cls = kind
                # on the node no executor waits on: polled by poll()
                sub = self.node.create_subscription(
                    cls, topic, lambda _: None, qos_profile_sensor_data, raw=True
                )
                self._subs[topic] = (name, label, cls, sub)

    def poll(self) -> None:
        """Decimation at the source: a browser never needs more than MAX_CLIENT_RATE
        frames a second, and an executor callback per message costs far more than the
        panel's own work (1 kHz x 3 topics would be most of a core). So the frame
        subscriptions sit on a node no executor waits on, and this timer takes what each
        holds (its queue is the sensor-data depth, so what is older is dropped by DDS),
        keeping the newest serialized message; deserialization happens only when a
        client asks for it."""
        for name, label, cls, sub in self._subs.values():
            newest = None
            for _ in range(64):
                with sub.handle:
                    taken = sub.handle.take_message(cls, True)
                if taken is None:
                    break
                newest = taken[0]
            if newest is not None:
                self.frames.put(name, label, newest)

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
