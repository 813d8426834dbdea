"""What a configured mocap system sends, and the thread that feeds it.

``FrameOutput`` owns the data topics, /tf, the CDR encoder and the stamper of one
configuration: ``publish`` turns one :class:`~mocap4r2_control.frame.MocapFrame` into the
three topics with one stamp and frame number, and records it in the statistics.
A frame a replay gives with its recorded messages attached (``MocapFrame.recorded``) has
them published as they are, its stamp written in, instead of encoded again: the replay
attaches them only when ``pass_through_problem`` finds nothing in the node's parameters
that would make the encoder write other bytes, and the encoder checks them on the first
frame, on every frame whose structure changed and on one frame in GUARD_EVERY (see
``FrameOutput.publish``).
``FrameReader`` is the dedicated reader thread (never the executor): it reads frames from
the adapter and hands each to a publish callable until it is told to stop.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

from .adapter import MocapAdapter
from .clock_model import FrameStamper
from .diagnostics import FrameStatistics, Thresholds
from .frame import (
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    RecordedMessages,
    SegmentArrays,
    SkeletonArrays,
)
from .frame_encoder import EncodedFrame, FrameEncoder
from .tf_out import TransformSender
from .timebase import split_seconds

DATA_TOPICS = (
    ("markers", Markers, "mocap4r2_interfaces/msg/Markers"),
    ("rigid_bodies", RigidBodies, "mocap4r2_interfaces/msg/RigidBodies"),
    ("skeletons", Skeletons, "mocap4r2_interfaces/msg/Skeletons"),
)


#: the node's parameters that decide the bytes FrameEncoder writes (open() hands them to
#: it); besides the frame's arrays, stamp and number, nothing else does
ENCODER_PARAMETERS = (
    "frame_id",
    "tf_prefix",
    "publish_markers",
    "publish_rigid_bodies",
    "publish_skeletons",
    "rigid_body_markers",
    "publish_tf",
)
#: recorded messages published as they are are compared with the encoder's bytes once in
#: this many frames (besides the first and every frame whose structure changed)
GUARD_EVERY = 1000
#: header.stamp (int32 sec, uint32 nanosec) is the first field of Markers, RigidBodies and
#: Skeletons: bytes 4-11 of the serialized message, after the encapsulation header
_STAMP = struct.Struct("<iI")
_STAMP_AT = slice(4, 12)


def pass_through_problem(params: Mapping[str, Any], frame_ids: Mapping[str, str], body_markers: bool) -> str:
    """Why the encoder, configured with ``params`` (ENCODER_PARAMETERS), would not write
    again a recording whose topics (markers, rigid_bodies, skeletons) carry ``frame_ids``
    and whose rigid bodies carry their markers or not (``body_markers``); "" when it
    would, so the recorded messages may be published as they are. It also needs the
    recording to be what the encoder wrote from the same arrays (a session of this
    suite): FrameOutput's comparisons check that."""
    if params["publish_tf"]:
        return "publish_tf is true (/tf is encoded from the bodies)"
    for topic, _, _ in DATA_TOPICS:
        if not params[f"publish_{topic}"]:
            continue  # not published: whatever the recording holds
        if topic not in frame_ids:
            return f"the recording has no {topic} topic, and publish_{topic} is true"
        if frame_ids[topic] != params["frame_id"]:
            return f"frame_id is {params['frame_id']!r}, the recorded {topic} say {frame_ids[topic]!r}"
    if params["publish_rigid_bodies"] and body_markers and not params["rigid_body_markers"]:
        return "rigid_body_markers is false and the recorded rigid bodies carry their markers"
    # tf_prefix names /tf's child frames only, off here
    return ""


def _all_good(frame: MocapFrame) -> MocapFrame:
    """The frame with every marker seen and every body and segment valid. Encoded before a
    comparison, it makes the values the encoder holds those of the frame's held rows,
    which in a recording are what the recording's encoder held: an encoder that did not
    see the frames before can then write the recorded bytes (see FrameOutput.publish)."""
    m, b, s = frame.markers, frame.bodies, frame.skeletons
    bm, seg = b.markers, s.segments
    return MocapFrame(
        frame.frame_number,
        MarkerArrays(m.ids, m.names, m.positions, np.zeros_like(m.occluded), m.residuals),
        BodyArrays(
            b.ids,
            b.names,
            b.positions,
            b.orientations,
            np.ones_like(b.valid),
            b.mean_errors,
            b.marker_offsets,
            MarkerArrays(bm.ids, bm.names, bm.positions, np.zeros_like(bm.occluded), bm.residuals),
        ),
        SkeletonArrays(
            s.ids,
            s.names,
            s.valid,
            s.segment_offsets,
            SegmentArrays(
                seg.ids, seg.names, seg.parent_ids, seg.positions, seg.orientations, np.ones_like(seg.valid)
            ),
        ),
    )


def _first_difference(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.frombuffer(a, np.uint8, n) != np.frombuffer(b, np.uint8, n))
    return int(diff[0]) if diff.size else n


class FrameOutput:
    """The publishers, /tf sender, encoder and stamper of one configuration of a system."""

    def __init__(self, node: Node, stats: FrameStatistics, time_source: str):
        self.node = node
        self.stats = stats
        self.stamper = FrameStamper(time_source)
        self._publishers: dict[str, Any] = {}
        self._tf: TransformSender | None = None
        self._encoder: FrameEncoder | None = None
        self._reset_pass_through(allowed=False)

    def _reset_pass_through(self, allowed: bool) -> None:
        # recorded messages may be published as they are (the replay attaches them only
        # when they may; /tf always needs the encoder)
        self._pass_through = allowed
        #: frames published from their recorded messages, and compared with the encoder
        self.republished = 0
        self.compared = 0
        #: why recorded messages are not published any more ("" while they are)
        self.pass_through_stopped = ""
        self._since_compared = 0
        # the names tuples of the last frame published from its recording: a decoder
        # hands the same tuples while the structure of the messages stays the same
        self._names: tuple[object, ...] | None = None

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
        self._reset_pass_through(allowed=not cfg["publish_tf"])

    def pass_through_status(self) -> dict[str, str]:
        """What /diagnostics says of recorded messages published as they are."""
        return {
            "frames_republished": str(self.republished),
            "frames_compared": str(self.compared),
            "republish_stopped": self.pass_through_stopped or "no",
        }

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
        recorded = frame.recorded
        if recorded is not None and self._pass_through and self._republish(frame, recorded, sec, nanosec):
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

    def _republish(self, frame: MocapFrame, recorded: RecordedMessages, sec: int, nanosec: int) -> bool:
        """Publish the recorded messages of ``frame`` with the stamp (sec, nanosec); False
        when they must not be (they stop being published from then on, with the reason):
        a topic to publish has no recorded message, or the encoder writes other bytes.

        The comparison runs on the first frame, on each frame whose structure changed
        (new names tuples: the decoder walked a message of another structure, which a
        frame_id or an asset change makes) and once in GUARD_EVERY frames. It encodes
        the frame with every row good first (``_all_good``): the held rows of a recorded
        frame carry the values its recorder held, and this gives the encoder those, so
        the comparison holds whatever frames the encoder did not see. A fallback then
        encodes from the held values of the recording."""
        stamp = _STAMP.pack(sec, nanosec)
        messages: list[tuple[str, bytes]] = []
        for topic in self._publishers:
            data = getattr(recorded, topic)
            if data is None:
                self._stop_pass_through(f"frame {frame.frame_number} has no recorded {topic} message")
                return False
            # rclpy publishes bytes: one copy, with the stamp written in when it differs
            # (stamps: now, or the stamper moved it)
            if data[_STAMP_AT] != stamp:
                data = b"".join((data[:4], stamp, data[12:]))
            elif type(data) is not bytes:
                data = bytes(data)
            messages.append((topic, data))
        names = (frame.markers.names, frame.bodies.names, frame.bodies.markers.names, frame.skeletons.names)
        last = self._names
        self._since_compared += 1
        if (
            self._since_compared >= GUARD_EVERY
            or last is None
            or names[0] is not last[0]
            or names[1] is not last[1]
            or names[2] is not last[2]
            or names[3] is not last[3]
        ):
            reason = self._compare(frame, messages, sec, nanosec)
            if reason:
                self._stop_pass_through(reason)
                return False
            self._names = names
        pubs = self._publishers
        for topic, data in messages:
            pubs[topic].publish(data)
        self.republished += 1
        return True

    def _compare(self, frame: MocapFrame, messages: list[tuple[str, bytes]], sec: int, nanosec: int) -> str:
        """Why the encoder's bytes for ``frame`` are not ``messages`` ("" when they are)."""
        self._since_compared = 0
        self.compared += 1
        encoder = self._encoder
        assert encoder is not None
        encoder.encode(_all_good(frame), sec, nanosec)
        encoded: EncodedFrame = encoder.encode(frame, sec, nanosec)
        for topic, data in messages:
            mine = getattr(encoded, topic)
            if mine != data:
                at = _first_difference(data, mine or b"")
                return (
                    f"the recorded {topic} of frame {frame.frame_number} are not what the encoder "
                    f"writes ({len(data)} recorded bytes, {len(mine or b'')} encoded, first difference "
                    f"at byte {at})"
                )
        return ""

    def _stop_pass_through(self, reason: str) -> None:
        self._pass_through = False
        self.pass_through_stopped = reason
        self.node.get_logger().warning(
            f"publishing recorded messages as they are stopped: {reason}; encoding every frame from now on"
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
