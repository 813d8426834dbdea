"""Recorded messages published as they are: the control layer's pass-through.

A system that plays a recording of this suite's own messages (the replay) may offer
each frame's recorded messages (``MocapFrame.recorded``) beside its arrays. Publishing
those bytes, the node's stamp written in, is what ``ros2 bag play`` does and costs a
fraction of encoding the frame again; it is right only when the node's encoder would
write the same bytes. That depends on the node's output parameters, which are the
node's concern, not the adapter's: so the adapter only offers what it recorded
(:class:`OffersRecorded`: the recording's shape, and its messages attached to the frames
when asked) and knows nothing of ROS, and :class:`PassThrough`, owned by the node's
``FrameOutput``, decides at configure (:func:`pass_through_problem`), publishes, and
checks the encoder against the recording on the first frame, on every frame whose
structure changed and on one frame in GUARD_EVERY: a recording the encoder would not
write is caught, logged, and every frame is encoded from then on.

Every system's /diagnostics report the counters (:meth:`PassThrough.status`); a system
that offers nothing reports that and zeros.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .frame import (
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    RecordedMessages,
    SegmentArrays,
    SkeletonArrays,
)
from .frame_encoder import EncodedFrame, FrameEncoder

__all__ = [
    "ENCODER_PARAMETERS",
    "GUARD_EVERY",
    "NOT_OFFERED",
    "PUBLISHED_TOPICS",
    "OffersRecorded",
    "PassThrough",
    "RecordingShape",
    "pass_through_problem",
]

#: the data topics whose recorded messages may be published as they are
PUBLISHED_TOPICS = ("markers", "rigid_bodies", "skeletons")
#: the node's parameters that decide the bytes FrameEncoder writes (FrameOutput.open hands
#: them to it); besides the frame's arrays, stamp and number, nothing else does
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
#: what recorded_messages says of a system that offers no recorded messages
NOT_OFFERED = "the system offers no recorded messages"


class RecordingShape(Protocol):
    """What of a recording decides whether the node's encoder would write it again: the
    header frame_id of each recorded topic (by topic) and whether the recorded rigid
    bodies carry their markers."""

    @property
    def frame_ids(self) -> Mapping[str, str]: ...

    @property
    def body_markers(self) -> bool: ...


@runtime_checkable
class OffersRecorded(Protocol):
    """An adapter that can attach to its frames the messages they were recorded as."""

    def recording_shape(self) -> RecordingShape | None:
        """The shape of what was recorded, after connect; None when the source is not a
        recording of mocap4r2_interfaces messages."""
        ...

    def keep_recorded(self, keep: bool) -> None:
        """Attach (or not) each frame's recorded messages from the next frame decoded;
        called after connect, before start_streaming."""
        ...


def pass_through_problem(params: Mapping[str, Any], frame_ids: Mapping[str, str], body_markers: bool) -> str:
    """Why the encoder, configured with ``params`` (ENCODER_PARAMETERS), would not write
    again a recording whose topics (markers, rigid_bodies, skeletons) carry ``frame_ids``
    and whose rigid bodies carry their markers or not (``body_markers``); "" when it
    would, so the recorded messages may be published as they are. It also needs the
    recording to be what the encoder wrote from the same arrays (a session of this
    suite): PassThrough's comparisons check that."""
    if params["publish_tf"]:
        return "publish_tf is true (/tf is encoded from the bodies)"
    for topic in PUBLISHED_TOPICS:
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
    see the frames before can then write the recorded bytes (see PassThrough.republish)."""
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


class PassThrough:
    """Whether, and how often, a system's recorded messages were published as they are.

    ``warn`` takes the line logged when publishing them stops. The counters live from one
    configure (:meth:`decide`) to the next."""

    def __init__(self, warn: Callable[[str], object]) -> None:
        self._warn = warn
        self.reset()

    def reset(self) -> None:
        """Nothing published as recorded until :meth:`decide` allows it."""
        self._allowed = False
        #: "republished" when frames carry their recorded messages, else why not
        self.decision = NOT_OFFERED
        #: frames published from their recorded messages, and compared with the encoder
        self.republished = 0
        self.compared = 0
        #: why recorded messages are not published any more ("" while they are)
        self.stopped = ""
        self._since_compared = 0
        # the names tuples of the last frame published from its recording: a decoder
        # hands the same tuples while the structure of the messages stays the same
        self._names: tuple[object, ...] | None = None

    def decide(self, params: Mapping[str, Any], adapter: object) -> str:
        """At configure, after the adapter connected: whether the frames of ``adapter``
        carry their recorded messages, from the node's output ``params``; tells the
        adapter and returns "" when they do, else why not."""
        self.reset()
        if not isinstance(adapter, OffersRecorded):
            return NOT_OFFERED
        shape = adapter.recording_shape()
        problem = (
            NOT_OFFERED
            if shape is None
            else pass_through_problem(params, shape.frame_ids, shape.body_markers)
        )
        adapter.keep_recorded(not problem)
        self._allowed = not problem
        self.decision = problem or "republished"
        return problem

    def status(self) -> dict[str, str]:
        """What /diagnostics says of recorded messages published as they are."""
        return {
            "recorded_messages": self.decision,
            "frames_republished": str(self.republished),
            "frames_compared": str(self.compared),
            "republish_stopped": self.stopped or "no",
        }

    def republish(
        self,
        frame: MocapFrame,
        sec: int,
        nanosec: int,
        publishers: Mapping[str, Any],
        encoder: FrameEncoder,
    ) -> bool:
        """Publish the recorded messages of ``frame`` with the stamp (sec, nanosec) on
        ``publishers`` (topic -> publisher); False when they must not be (no recorded
        messages, not allowed, or they stop being published from now on, with the
        reason: a topic to publish has no recorded message, or ``encoder`` writes other
        bytes).

        The comparison runs on the first frame, on each frame whose structure changed
        (new names tuples: the decoder walked a message of another structure, which a
        frame_id or an asset change makes) and once in GUARD_EVERY frames. It encodes
        the frame with every row good first (``_all_good``): the held rows of a recorded
        frame carry the values its recorder held, and this gives the encoder those, so
        the comparison holds whatever frames the encoder did not see. A fallback then
        encodes from the held values of the recording."""
        recorded = frame.recorded
        if recorded is None or not self._allowed:
            return False
        messages = self._messages(frame, recorded, sec, nanosec, publishers)
        if messages is None:
            return False
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
            reason = self._compare(frame, messages, sec, nanosec, encoder)
            if reason:
                self._stop(reason)
                return False
            self._names = names
        for topic, data in messages:
            publishers[topic].publish(data)
        self.republished += 1
        return True

    def _messages(
        self,
        frame: MocapFrame,
        recorded: RecordedMessages,
        sec: int,
        nanosec: int,
        publishers: Mapping[str, Any],
    ) -> list[tuple[str, bytes]] | None:
        """(topic, bytes) of each topic published, with the stamp written in; None (and
        stopped) when one has no recorded message."""
        stamp = _STAMP.pack(sec, nanosec)
        messages: list[tuple[str, bytes]] = []
        for topic in publishers:
            data = getattr(recorded, topic)
            if data is None:
                self._stop(f"frame {frame.frame_number} has no recorded {topic} message")
                return None
            # rclpy publishes bytes: one copy, with the stamp written in when it differs
            # (stamps: now, or the stamper moved it)
            if data[_STAMP_AT] != stamp:
                data = b"".join((data[:4], stamp, data[12:]))
            elif type(data) is not bytes:
                data = bytes(data)
            messages.append((topic, data))
        return messages

    def _compare(
        self,
        frame: MocapFrame,
        messages: list[tuple[str, bytes]],
        sec: int,
        nanosec: int,
        encoder: FrameEncoder,
    ) -> str:
        """Why the encoder's bytes for ``frame`` are not ``messages`` ("" when they are)."""
        self._since_compared = 0
        self.compared += 1
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

    def _stop(self, reason: str) -> None:
        self._allowed = False
        self.stopped = reason
        self._warn(
            f"publishing recorded messages as they are stopped: {reason}; encoding every frame from now on"
        )
