"""FrameEncoder's per-layout template: a frame whose structure is the previous frame's
only has its numbers written into the previous message (the encoders' repeat()). Every
change of what the template holds (names, ids, counts, parents, frame_id, tf_prefix)
must give the message of an encoder that never saw the old structure; and the check
itself is shown to catch a stale template (an encoder that reuses it on equal shapes
publishes the old names)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rclpy.serialization import deserialize_message
from tf2_msgs.msg import TFMessage

from mocap4r2_control import frame_encoder
from mocap4r2_control.frame import BodyArrays, MarkerArrays, MocapFrame, SegmentArrays, SkeletonArrays
from mocap4r2_control.frame_encoder import FrameEncoder
from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

TOPICS = ("markers", "rigid_bodies", "skeletons", "tf")


def _frame(
    number: int,
    *,
    marker_names=("a1", "a2", "b1", "b2"),
    marker_ids=(11, 12, 21, 22),
    body_names=("a", "b"),
    body_ids=(1, 2),
    counts=(2, 2),
    segment_names=("hip", "knee"),
    parents=(-1, 0),
) -> MocapFrame:
    """Every row valid and measured, so an encoder's held values are this frame's own."""
    rng = np.random.default_rng(number)
    m, b = len(marker_names), len(body_names)
    markers = MarkerArrays.build(
        marker_ids, rng.normal(size=(m, 3)), names=marker_names, residuals=rng.random(m)
    )
    quats = rng.normal(size=(b, 4))
    bodies = BodyArrays.build(
        body_ids,
        body_names,
        rng.normal(size=(b, 3)),
        quats / np.linalg.norm(quats, axis=1, keepdims=True),
        mean_errors=rng.random(b),
        markers=dataclasses.replace(markers),
        marker_counts=counts,
    )
    s = len(segment_names)
    segments = SegmentArrays(
        ids=np.arange(s, dtype=np.int32),
        names=tuple(segment_names),
        parent_ids=np.asarray(parents, dtype=np.int32),
        positions=rng.normal(size=(s, 3)),
        orientations=np.tile([0.0, 0.0, 0.0, 1.0], (s, 1)),
        valid=np.ones(s, dtype=bool),
    )
    skeletons = SkeletonArrays(
        ids=np.array([7], dtype=np.int32),
        names=("walker",),
        valid=np.ones(1, dtype=bool),
        segment_offsets=np.array([0, s]),
        segments=segments,
    )
    return MocapFrame(number, markers=markers, bodies=bodies, skeletons=skeletons)


def _messages(encoder: FrameEncoder, frame: MocapFrame) -> dict[str, bytes | None]:
    encoded = encoder.encode(frame, 100, frame.frame_number)
    return {topic: getattr(encoded, topic) for topic in TOPICS}


def _after_a_steady_stream(changed: MocapFrame, encoder: FrameEncoder | None = None) -> dict:
    """``changed`` encoded after three frames of the default structure (the template is
    then in use), next to what a new encoder gives for it."""
    encoder = encoder or FrameEncoder("world", "p/", tf=True)
    for number in range(3):
        _messages(encoder, _frame(number))
    return {
        "got": _messages(encoder, changed),
        "fresh": _messages(FrameEncoder("world", "p/", tf=True), changed),
    }


CHANGES = {
    # names of the same lengths: every size and offset of the message stays the same
    "marker names": {"marker_names": ("a1", "a2", "b1", "b9")},
    "body names": {"body_names": ("a", "z")},
    "ids": {"marker_ids": (11, 12, 21, 23), "body_ids": (1, 3)},
    # the same markers, one moved from body a to body b: only the counts change
    "counts": {"counts": (1, 3)},
    "segment names": {"segment_names": ("hip", "kne2")},
    "parents": {"parents": (-1, -1)},
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_a_changed_structure_gives_the_message_of_a_new_encoder(change):
    result = _after_a_steady_stream(_frame(3, **CHANGES[change]))
    for topic in TOPICS:
        assert result["got"][topic] == result["fresh"][topic], (change, topic)


def test_the_check_catches_a_stale_template(monkeypatch):
    """The test above can fail: an encoder that trusts its template whenever the shapes
    are equal publishes the previous frame's names."""

    def shapes_only(self, frame_id, names, arrays):
        return self._names is not None and [len(n) for n in names] == [len(n) for n in self._names]

    monkeypatch.setattr(frame_encoder._Unchanged, "same", shapes_only)
    result = _after_a_steady_stream(_frame(3, **CHANGES["marker names"]))
    assert result["got"]["markers"] != result["fresh"]["markers"]
    names = [m.name for m in deserialize_message(result["got"]["markers"], Markers).markers]
    assert names == ["a1", "a2", "b1", "b2"]  # the stale names


def test_frame_id_and_tf_prefix_set_on_the_encoder_reach_every_message():
    encoder = FrameEncoder("world", "p/", tf=True)
    for number in range(3):
        _messages(encoder, _frame(number))
    encoder.frame_id = "map"
    encoder.tf_prefix = "q/"
    got = _messages(encoder, _frame(3))
    for topic, msg_type in (("markers", Markers), ("rigid_bodies", RigidBodies), ("skeletons", Skeletons)):
        assert deserialize_message(got[topic], msg_type).header.frame_id == "map", topic
    transforms = deserialize_message(got["tf"], TFMessage).transforms
    assert [(t.header.frame_id, t.child_frame_id) for t in transforms] == [("map", "q/a"), ("map", "q/b")]
    assert got == _messages(FrameEncoder("map", "q/", tf=True), _frame(3))


def test_a_structure_changing_back_is_published_right_each_time():
    """A -> B -> A -> B: each frame's bytes are those of a new encoder for it."""
    encoder = FrameEncoder("world", "p/", tf=True)
    for number in range(12):
        change = CHANGES["counts"] if (number // 3) % 2 else {}
        frame = _frame(number, **change)
        assert _messages(encoder, frame) == _messages(FrameEncoder("world", "p/", tf=True), frame), number
