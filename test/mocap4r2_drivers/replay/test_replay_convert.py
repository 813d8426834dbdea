"""convert.py: recorded CDR messages decoded with numpy give the frames that were encoded,
field for field (the node's encoder against our decoder on the same bytes), the layout is
reused while the structure stays and rebuilt when it changes, and bad bytes are refused
with the reason."""

from __future__ import annotations

import numpy as np
import pytest
from rclpy.serialization import deserialize_message

from mocap4r2_control.frame import MocapFrame
from mocap4r2_control.frame_encoder import FrameEncoder
from mocap4r2_control.timebase import split_seconds
from mocap4r2_drivers.replay.convert import MessageDecoder, ReplayDecodeError, seconds_for_stamp
from mocap4r2_drivers.simulated.scene import Scene, default_scene_path
from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons


@pytest.fixture(scope="module")
def scene() -> Scene:
    return Scene.from_file(str(default_scene_path()), seed=7)


def test_decoded_messages_match_rclpy_deserialization_field_for_field(scene):
    encoder = FrameEncoder("world")
    decoders = {k: MessageDecoder(k) for k in MessageDecoder.KINDS}
    for k in range(60):
        enc = encoder.encode(scene.frame(k), 1_780_000_000 + k, 123_456_789)
        m = decoders["markers"].decode(enc.markers)
        ref = deserialize_message(enc.markers, Markers)
        assert (m.sec, m.nanosec, m.frame_number, m.frame_id) == (
            ref.header.stamp.sec,
            ref.header.stamp.nanosec,
            ref.frame_number,
            "world",
        )
        assert list(m.markers.names) == [x.name for x in ref.markers]
        assert m.markers.ids.tolist() == [x.id for x in ref.markers]
        assert m.markers.positions.tolist() == [
            [x.position.x, x.position.y, x.position.z] for x in ref.markers
        ]
        assert m.markers.occluded.tolist() == [x.occluded for x in ref.markers]
        assert m.markers.residuals.tolist() == [np.float32(x.residual) for x in ref.markers]

        b = decoders["rigid_bodies"].decode(enc.rigid_bodies).bodies
        ref_b = deserialize_message(enc.rigid_bodies, RigidBodies)
        assert b is not None
        assert list(b.names) == [x.name for x in ref_b.rigid_bodies]
        assert b.valid.tolist() == [x.tracking_valid for x in ref_b.rigid_bodies]
        for row, body in enumerate(ref_b.rigid_bodies):
            p, q = body.pose.position, body.pose.orientation
            assert b.positions[row].tolist() == [p.x, p.y, p.z]
            assert b.orientations[row].tolist() == [q.x, q.y, q.z, q.w]
            lo, hi = b.marker_offsets[row], b.marker_offsets[row + 1]
            assert list(b.markers.names[lo:hi]) == [x.name for x in body.markers]
            assert b.markers.positions[lo:hi].tolist() == [
                [x.position.x, x.position.y, x.position.z] for x in body.markers
            ]
        s = decoders["skeletons"].decode(enc.skeletons).skeletons
        ref_s = deserialize_message(enc.skeletons, Skeletons)
        assert s is not None
        segments = [seg for sk in ref_s.skeletons for seg in sk.segments]
        assert list(s.segments.names) == [x.name for x in segments]
        assert s.segments.parent_ids.tolist() == [x.parent_id for x in segments]
        assert s.segments.positions.tolist() == [
            [x.pose.position.x, x.pose.position.y, x.pose.position.z] for x in segments
        ]
        MocapFrame(m.frame_number, markers=m.markers, bodies=b, skeletons=s).check()
    # one walk per topic while the structure stays (the scene's assets do not change)
    assert decoders["skeletons"].layouts_built == 1


def test_a_changed_structure_builds_a_new_layout(scene):
    encoder = FrameEncoder("world")
    decoder = MessageDecoder("markers")
    frame = scene.frame(0)
    decoder.decode(encoder.encode(frame, 1, 2).markers)
    # same count and lengths, another name: the names are part of the structure
    names = list(frame.markers.names)
    names[0] = "X" * len(names[0]) if names[0] else ""
    names[1] = "renamed"
    frame.markers.names = tuple(names)
    got = decoder.decode(encoder.encode(frame, 1, 2).markers)
    assert got.markers is not None and got.markers.names[1] == "renamed"
    assert decoder.layouts_built == 2


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x00\x01", "too short"),
        (b"\x00\x00" + bytes(30), "little-endian"),
        (b"\x00\x01\x00\x00" + bytes(8) + b"\x64\x00\x00\x00", "truncated"),
        (
            b"\x00\x01\x00\x00"
            + bytes(8)
            + b"\x01\x00\x00\x00\x00"
            + bytes(3)
            + bytes(8)
            + b"\xff\xff\xff\x0f",
            "elements",
        ),
    ],
)
def test_bad_bytes_are_refused_with_the_reason(data, words):
    with pytest.raises(ReplayDecodeError, match=words):
        MessageDecoder("markers").decode(data)


def test_every_truncation_of_a_real_message_is_refused_never_an_index_error(scene):
    data = FrameEncoder("world").encode(scene.frame(3), 5, 6).rigid_bodies
    for cut in range(0, len(data) - 1, 7):
        with pytest.raises(ReplayDecodeError):
            MessageDecoder("rigid_bodies").decode(data[:cut])


def test_stamps_come_back_to_the_nanosecond():
    rng = np.random.default_rng(3)
    for seconds in 1_780_000_000 + rng.uniform(0, 1e6, 5000):
        sec, nanosec = split_seconds(float(seconds))
        assert split_seconds(seconds_for_stamp(sec, nanosec)) == (sec, nanosec)


def _same(a, b) -> None:
    """Two decoded arrays objects hold the same values, bit for bit."""
    for name in a.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
        elif hasattr(x, "__slots__"):
            _same(x, y)
        else:
            assert x == y, name


def test_a_batch_decodes_as_its_messages_one_by_one(scene):
    """Messages of one topic in one buffer at unaligned places (as in an MCAP chunk),
    their structure changing twice and changing back: decode_many gives, for each, what
    decoding it alone gives (the decoding checked against rclpy above)."""
    encoder = FrameEncoder("world")
    kinds = {"markers": [], "rigid_bodies": [], "skeletons": []}
    for k in range(40):
        frame = scene.frame(k)
        if 12 <= k < 18:  # another name of the same length: same sizes, another structure
            names = list(frame.markers.names)
            names[1] = "Z" * len(names[1])
            frame.markers.names = tuple(names)
        if k >= 30:  # a marker less: another length
            m = frame.markers
            frame.markers = type(m)(m.ids[1:], m.names[1:], m.positions[1:], m.occluded[1:], m.residuals[1:])
        encoded = encoder.encode(frame, 1_780_000_000 + k, 1000 * k)
        for kind, messages in kinds.items():
            messages.append(getattr(encoded, kind))
    for kind, messages in kinds.items():
        blob, starts = bytearray(b"\x07"), []
        for k, data in enumerate(messages):
            blob += bytes(k % 5)
            starts.append(len(blob))
            blob += data
        batch = MessageDecoder(kind)
        got = batch.decode_many(
            np.frombuffer(bytes(blob), dtype=np.uint8), starts, [len(m) for m in messages]
        )
        assert len(got) == len(messages)
        for k, (decoded, data) in enumerate(zip(got, messages)):
            alone = MessageDecoder(kind).decode(data)
            assert (decoded.sec, decoded.nanosec, decoded.frame_number, decoded.frame_id) == (
                1_780_000_000 + k,
                1000 * k,
                alone.frame_number,
                "world",
            )
            _same(
                getattr(decoded, kind if kind != "rigid_bodies" else "bodies"),
                getattr(alone, kind if kind != "rigid_bodies" else "bodies"),
            )
        one_by_one = MessageDecoder(kind)
        for data in messages:
            one_by_one.decode(data)
        # a layout per run of one structure, as many as decoding one at a time builds
        assert batch.layouts_built == one_by_one.layouts_built >= (3 if kind == "markers" else 1)


def test_a_batch_reaching_past_its_buffer_is_refused(scene):
    data = FrameEncoder("world").encode(scene.frame(0), 1, 2).markers
    with pytest.raises(ReplayDecodeError, match="past"):
        MessageDecoder("markers").decode_many(np.frombuffer(data, dtype=np.uint8), [4], [len(data)])


def test_messages_without_elements_then_with_them(scene):
    """Empty messages (most systems send no skeletons) share one empty collection per
    layout, with each message's own stamp and frame number; messages with elements that
    follow them in the same batch decode as they do alone."""
    encoder = FrameEncoder("world")
    kinds = {"markers": [], "rigid_bodies": [], "skeletons": []}
    for k in range(12):
        frame = scene.frame(k) if k >= 8 else MocapFrame(k)
        encoded = encoder.encode(frame, 1_780_000_000 + k, 1000 * k)
        for kind, messages in kinds.items():
            messages.append(getattr(encoded, kind))
    for kind, messages in kinds.items():
        blob = b"".join(messages)
        starts = np.cumsum([0] + [len(m) for m in messages[:-1]]).tolist()
        got = MessageDecoder(kind).decode_many(
            np.frombuffer(blob, dtype=np.uint8), starts, [len(m) for m in messages]
        )
        part = "bodies" if kind == "rigid_bodies" else kind
        empty = [getattr(d, part) for d in got[:8]]
        assert all(len(c) == 0 and c is empty[0] for c in empty), kind
        assert [(d.sec, d.nanosec, d.frame_number) for d in got] == [
            (1_780_000_000 + k, 1000 * k, k) for k in range(12)
        ]
        for decoded, data in zip(got[8:], messages[8:]):
            _same(getattr(decoded, part), getattr(MessageDecoder(kind).decode(data), part))
        assert len(getattr(got[-1], part)) > 0  # the scene has markers, bodies and a skeleton


def test_each_decoded_message_holds_contiguous_arrays(scene):
    """Every array of every message of a batch is C-contiguous (the node's compiled
    passes take only such arrays: strided ones would be copied frame by frame, or, before
    kernel_input, sent every replayed frame down the numpy path), for every kind."""
    encoder = FrameEncoder("world")
    encoded = [encoder.encode(scene.frame(k), 1_780_000_000 + k, 0) for k in range(12)]
    for kind, field in (("markers", "markers"), ("rigid_bodies", "bodies"), ("skeletons", "skeletons")):
        messages = [getattr(e, kind) for e in encoded]
        blob = b"".join(messages)
        starts = np.cumsum([0] + [len(m) for m in messages[:-1]]).tolist()
        decoded = MessageDecoder(kind).decode_many(
            np.frombuffer(blob, dtype=np.uint8), starts, [len(m) for m in messages]
        )
        arrays = []
        for message in decoded:
            part = getattr(message, field)
            if field == "markers":
                arrays += [part.positions, part.occluded, part.residuals]
            elif field == "bodies":
                arrays += [part.positions, part.orientations, part.valid, part.mean_errors]
                arrays += [part.markers.positions, part.markers.occluded, part.markers.residuals]
            else:
                arrays += [
                    part.valid,
                    part.segments.positions,
                    part.segments.orientations,
                    part.segments.valid,
                ]
        assert arrays and any(a.size for a in arrays), kind
        assert all(a.flags.c_contiguous for a in arrays), kind
