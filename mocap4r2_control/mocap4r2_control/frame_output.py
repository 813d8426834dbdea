"""What a configured mocap system sends, and the thread that feeds it.

``FrameOutput`` owns the data topics, /tf, the CDR encoder and the stamper of one
configuration: ``publish`` turns one :class:`~mocap4r2_control.frame.MocapFrame` into the
three topics with one stamp and frame number, and records it in the statistics.
``FrameReader`` is the dedicated reader thread (never the executor): it reads frames from
the adapter and hands each to a publish callable until it is told to stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

from .adapter import MocapAdapter
from .clock_model import FrameStamper
from .diagnostics import FrameStatistics, Thresholds
from .frame import MocapFrame
from .frame_encoder import FrameEncoder
from .tf_out import TransformSender
from .timebase import split_seconds

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

    def open(self, cfg: dict[str, Any]) -> None:
        """Create the outputs ``cfg`` (the base parameters' values) asks for."""
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
        )
        self.stats.thresholds = Thresholds(no_frame_error_s=cfg["no_frame_error"])
        # a new connection may be a new clock: the model starts afresh on every configure
        self.stamper = FrameStamper(cfg["time_source"])

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
        encoded = encoder.encode(frame, *split_seconds(capture))
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


class FrameReader:
    """The reader thread of an active system: read, publish, until stopped."""

    def __init__(self, node: Node, stats: FrameStatistics, enter_log_route: Callable[[], None]):
        self.node = node
        self.stats = stats
        self._enter_log_route = enter_log_route
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(
        self, adapter: MocapAdapter, timeout: float, publish: Callable[[MocapFrame, float], None]
    ) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(adapter, timeout, publish), name="mocap4r2-reader", daemon=True
        )
        self._thread.start()

    def stop(self, join_timeout: float) -> None:
        """Tell the thread to stop and join it (not from the thread itself)."""
        self._stop.set()
        reader = self._thread
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=join_timeout)
            if reader.is_alive():
                self.node.get_logger().error(
                    "the reader thread did not stop in time (adapter blocked in read)"
                )
        self._thread = None

    def _loop(
        self, adapter: MocapAdapter, timeout: float, publish: Callable[[MocapFrame, float], None]
    ) -> None:
        name_os_thread("mocap4r2-reader")
        self._enter_log_route()
        # stamps are on the node's clock: system time, or simulation time with use_sim_time
        clock = self.node.get_clock()
        now: Callable[[], float] = (
            (lambda: clock.now().nanoseconds * 1e-9)
            if self.node.get_parameter("use_sim_time").value
            else time.time
        )
        log = self.node.get_logger()
        failing_since: float | None = None
        while not self._stop.is_set():
            try:
                frame = adapter.read_frame(timeout)
            except Exception as exc:  # noqa: BLE001 - the adapter reconnects, we report
                self.stats.error(f"read failed: {exc}")
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.error(f"reading from the {adapter.system_type} system failed: {exc}")
                self._stop.wait(min(0.5, max(timeout, 0.01)))
                continue
            if frame is None:
                continue
            arrival = now()
            if failing_since is not None:
                log.info(f"frames again after {time.monotonic() - failing_since:.1f} s")
                failing_since = None
            try:
                publish(frame, arrival)
            except Exception as exc:  # noqa: BLE001 - a bad frame must not stop the stream
                self.stats.error(f"bad frame {getattr(frame, 'frame_number', '?')}: {exc}", bad_frame=True)
                log.error(f"dropped a bad frame: {exc}", throttle_duration_sec=5.0)


def name_os_thread(name: str) -> None:
    """Give the calling thread a name the OS shows (top -H, /proc/<pid>/task/*/comm),
    so a leaked reader thread can be seen from outside the process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
