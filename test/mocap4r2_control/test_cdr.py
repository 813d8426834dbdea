"""mocap4r2_control.cdr: serialized messages from numpy arrays, checked against rclpy.

The reference is ``rclpy.serialization.serialize_message`` of the equivalent message
object. Fast DDS leaves alignment padding uninitialised (it varies from call to call), so
the comparison is: same length, same bytes everywhere except padding, and our padding is
zero. Which bytes are padding comes from ``walk_cdr`` below, a slow generic CDR writer
driven by the message classes' own type introspection (independent of cdr.py); its
output must equal ours exactly.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from geometry_msgs.msg import TransformStamped
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rclpy.serialization import deserialize_message, serialize_message
from rosidl_parser.definition import BasicType, NamespacedType, UnboundedSequence, UnboundedString
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for
from tf2_msgs.msg import TFMessage

from mocap4r2_control.cdr import MarkersEncoder, RigidBodiesEncoder, SkeletonsEncoder, TFMessageEncoder
from mocap4r2_interfaces.msg import Marker, Markers, RigidBodies, RigidBody, Segment, Skeleton, Skeletons

# ---------------------------------------------------------------------------- oracle
_PRIMITIVES = {
    "boolean": "?",
    "octet": "B",
    "uint8": "B",
    "int8": "b",
    "char": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "float": "f",
    "double": "d",
}


class _Writer:
    def __init__(self):
        self.data = bytearray()
        self.is_data: list[bool] = []

    def align(self, size: int) -> None:
        while len(self.data) % size:
            self.data.append(0)
            self.is_data.append(False)

    def put(self, fmt: str, value) -> None:
        raw = struct.pack("<" + fmt, value)
        self.align(len(raw))
        self.data += raw
        self.is_data += [True] * len(raw)

    def put_string(self, text: str) -> None:
        raw = text.encode() + b"\0"
        self.put("I", len(raw))
        self.data += raw
        self.is_data += [True] * len(raw)


def _walk(writer: _Writer, msg) -> None:
    for name, slot_type in zip(msg.get_fields_and_field_types(), type(msg).SLOT_TYPES):
        _walk_value(writer, slot_type, getattr(msg, name))


def _walk_value(writer: _Writer, slot_type, value) -> None:
    if isinstance(slot_type, BasicType):
        writer.put(_PRIMITIVES[slot_type.typename], value)
    elif isinstance(slot_type, UnboundedString):
        writer.put_string(value)
    elif isinstance(slot_type, NamespacedType):
        _walk(writer, value)
    elif isinstance(slot_type, UnboundedSequence):
        writer.put("I", len(value))
        for item in value:
            _walk_value(writer, slot_type.value_type, item)
    else:
        raise NotImplementedError(type(slot_type).__name__)


def walk_cdr(msg) -> tuple[bytes, np.ndarray]:
    """(serialized with zero padding, mask of the non-padding bytes)."""
    writer = _Writer()
    _walk(writer, msg)
    return b"\x00\x01\x00\x00" + bytes(writer.data), np.array([True] * 4 + writer.is_data)


def assert_same_as_rclpy(ours: bytes, msg) -> None:
    expected, is_data = walk_cdr(msg)
    reference = np.frombuffer(serialize_message(msg), dtype=np.uint8)
    assert reference.size == is_data.size, "the oracle disagrees with serialize_message on the length"
    assert len(ours) == reference.size, f"length {len(ours)}, serialize_message gives {reference.size}"
    mine = np.frombuffer(ours, dtype=np.uint8)
    differ = np.flatnonzero((mine != reference) & is_data)
    assert differ.size == 0, (
        f"bytes differ from serialize_message at {differ[:10].tolist()}: "
        f"ours {mine[differ[:10]].tolist()} vs {reference[differ[:10]].tolist()}"
    )
    assert ours == expected, "padding bytes must be zero"


# ---------------------------------------------------------------------------- message objects
def marker_objects(ids, names, positions, occluded, residuals) -> list[Marker]:
    return [
        Marker(id=int(i), name=n, position=_point(p), occluded=bool(o), residual=float(r))
        for i, n, p, o, r in zip(ids, names, positions, occluded, residuals)
    ]


def _point(p):
    from geometry_msgs.msg import Point

    return Point(x=float(p[0]), y=float(p[1]), z=float(p[2]))


def _pose(row):
    from geometry_msgs.msg import Pose, Quaternion

    x, y, z, qx, qy, qz, qw = (float(v) for v in row)
    return Pose(position=_point((x, y, z)), orientation=Quaternion(x=qx, y=qy, z=qz, w=qw))


def _header(msg, sec, nanosec, frame_id):
    msg.header.stamp.sec = sec
    msg.header.stamp.nanosec = nanosec
    msg.header.frame_id = frame_id
    return msg


def markers_msg(sec, nanosec, frame_id, frame_number, *columns) -> Markers:
    msg = _header(Markers(), sec, nanosec, frame_id)
    msg.frame_number = frame_number
    msg.markers = marker_objects(*columns)
    return msg


def bodies_msg(
    sec,
    nanosec,
    frame_id,
    frame_number,
    ids,
    names,
    valid,
    poses,
    errors,
    offsets,
    m_ids,
    m_names,
    m_pos,
    m_occ,
    m_res,
) -> RigidBodies:
    msg = _header(RigidBodies(), sec, nanosec, frame_id)
    msg.frame_number = frame_number
    for i in range(len(names)):
        a, b = int(offsets[i]), int(offsets[i + 1])
        msg.rigid_bodies.append(
            RigidBody(
                id=int(ids[i]),
                name=names[i],
                tracking_valid=bool(valid[i]),
                pose=_pose(poses[i]),
                mean_error=float(errors[i]),
                markers=marker_objects(m_ids[a:b], m_names[a:b], m_pos[a:b], m_occ[a:b], m_res[a:b]),
            )
        )
    return msg


def skeletons_msg(
    sec,
    nanosec,
    frame_id,
    frame_number,
    ids,
    names,
    valid,
    offsets,
    s_ids,
    s_names,
    s_parents,
    s_valid,
    s_poses,
) -> Skeletons:
    msg = _header(Skeletons(), sec, nanosec, frame_id)
    msg.frame_number = frame_number
    for i in range(len(names)):
        a, b = int(offsets[i]), int(offsets[i + 1])
        msg.skeletons.append(
            Skeleton(
                id=int(ids[i]),
                name=names[i],
                tracking_valid=bool(valid[i]),
                segments=[
                    Segment(
                        id=int(s_ids[k]),
                        name=s_names[k],
                        parent_id=int(s_parents[k]),
                        tracking_valid=bool(s_valid[k]),
                        pose=_pose(s_poses[k]),
                    )
                    for k in range(a, b)
                ],
            )
        )
    return msg


def tf_msg(sec, nanosec, frame_id, children, poses) -> TFMessage:
    msg = TFMessage()
    for child, row in zip(children, poses):
        t = TransformStamped()
        _header(t, sec, nanosec, frame_id)
        t.child_frame_id = child
        x, y, z, qx, qy, qz, qw = (float(v) for v in row)
        t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = x, y, z
        r = t.transform.rotation
        r.x, r.y, r.z, r.w = qx, qy, qz, qw
        msg.transforms.append(t)
    return msg


# ---------------------------------------------------------------------------- strategies
NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=11)
FRAME_IDS = st.one_of(st.sampled_from(["", "world", "map", "mocap_frame"]), NAMES)
INT32 = st.integers(-(2**31), 2**31 - 1)
STAMPS = st.tuples(INT32, st.integers(0, 2**32 - 1))
FRAME_NUMBERS = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 1000))
FLOATS = st.floats(allow_nan=False, width=64)
FLOAT32 = st.floats(allow_nan=False, width=32)


@st.composite
def marker_columns(draw, count):
    # often labeled names then unlabeled ones (empty names), as adapters hand them over
    labeled = draw(st.integers(0, count))
    tail = draw(st.sampled_from(["", "", "x", "ü"]))
    names = tuple(draw(st.lists(NAMES, min_size=labeled, max_size=labeled))) + (tail,) * (count - labeled)
    ids = np.array(draw(st.lists(INT32, min_size=count, max_size=count)), dtype=np.int32)
    positions = np.array(
        draw(st.lists(st.tuples(FLOATS, FLOATS, FLOATS), min_size=count, max_size=count)), dtype=np.float64
    ).reshape(count, 3)
    occluded = np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=bool)
    residuals = np.array(draw(st.lists(FLOAT32, min_size=count, max_size=count)), dtype=np.float32)
    return ids, names, positions, occluded, residuals


def poses_of(draw, count):
    return np.array(
        draw(st.lists(st.tuples(*[FLOATS] * 7), min_size=count, max_size=count)), dtype=np.float64
    ).reshape(count, 7)


@st.composite
def offsets_of(draw, count, max_each):
    counts = draw(st.lists(st.integers(0, max_each), min_size=count, max_size=count))
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


# long-lived encoders with small caches: random frames one after the other exercise
# layout reuse, growth and eviction (each test also checks a fresh encoder)
SHARED = {
    cls: cls(cache_size=3) for cls in (MarkersEncoder, RigidBodiesEncoder, SkeletonsEncoder, TFMessageEncoder)
}


def encode_both(cls, *args) -> bytes:
    fresh = cls().encode(*args)
    assert SHARED[cls].encode(*args) == fresh, "a reused encoder gives other bytes than a fresh one"
    return fresh


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------- equivalence
@SETTINGS
@given(st.data())
def test_markers_match_serialize_message(data):
    count = data.draw(st.integers(0, 12))
    (sec, nanosec), frame_id, number = data.draw(STAMPS), data.draw(FRAME_IDS), data.draw(FRAME_NUMBERS)
    columns = data.draw(marker_columns(count))
    ours = encode_both(MarkersEncoder, sec, nanosec, frame_id, number, *columns)
    assert_same_as_rclpy(ours, markers_msg(sec, nanosec, frame_id, number, *columns))


@SETTINGS
@given(st.data())
def test_rigid_bodies_match_serialize_message(data):
    count = data.draw(st.integers(0, 6))
    (sec, nanosec), frame_id, number = data.draw(STAMPS), data.draw(FRAME_IDS), data.draw(FRAME_NUMBERS)
    names = tuple(data.draw(st.lists(NAMES, min_size=count, max_size=count)))
    ids = np.array(data.draw(st.lists(INT32, min_size=count, max_size=count)), dtype=np.int32)
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=bool)
    poses = poses_of(data.draw, count)
    errors = np.array(data.draw(st.lists(FLOAT32, min_size=count, max_size=count)), dtype=np.float32)
    offsets = data.draw(offsets_of(count, 4))
    markers = data.draw(marker_columns(int(offsets[-1])))
    args = (sec, nanosec, frame_id, number, ids, names, valid, poses, errors, offsets, *markers)
    assert_same_as_rclpy(encode_both(RigidBodiesEncoder, *args), bodies_msg(*args))


@SETTINGS
@given(st.data())
def test_skeletons_match_serialize_message(data):
    # skeletons without segments end 4-aligned: mixing them in moves everything after
    count = data.draw(st.integers(0, 5))
    (sec, nanosec), frame_id, number = data.draw(STAMPS), data.draw(FRAME_IDS), data.draw(FRAME_NUMBERS)
    names = tuple(data.draw(st.lists(NAMES, min_size=count, max_size=count)))
    ids = np.array(data.draw(st.lists(INT32, min_size=count, max_size=count)), dtype=np.int32)
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=bool)
    offsets = data.draw(offsets_of(count, 4))
    m = int(offsets[-1])
    s_names = tuple(data.draw(st.lists(NAMES, min_size=m, max_size=m)))
    s_ids = np.array(data.draw(st.lists(INT32, min_size=m, max_size=m)), dtype=np.int32)
    s_parents = np.array(data.draw(st.lists(INT32, min_size=m, max_size=m)), dtype=np.int32)
    s_valid = np.array(data.draw(st.lists(st.booleans(), min_size=m, max_size=m)), dtype=bool)
    s_poses = poses_of(data.draw, m)
    args = (
        sec,
        nanosec,
        frame_id,
        number,
        ids,
        names,
        valid,
        offsets,
        s_ids,
        s_names,
        s_parents,
        s_valid,
        s_poses,
    )
    assert_same_as_rclpy(encode_both(SkeletonsEncoder, *args), skeletons_msg(*args))


@SETTINGS
@given(st.data())
def test_empty_skeletons_match_serialize_message(data):
    """The shortcut for systems without skeletons gives rclpy's bytes, also between
    messages with skeletons from the same encoder (its layout is kept apart)."""
    (sec, nanosec), frame_id, number = data.draw(STAMPS), data.draw(FRAME_IDS), data.draw(FRAME_NUMBERS)
    empty = (
        sec,
        nanosec,
        frame_id,
        number,
        np.zeros(0, np.int32),
        (),
        np.zeros(0, bool),
        np.zeros(1, np.int64),
        np.zeros(0, np.int32),
        (),
        np.zeros(0, np.int32),
        np.zeros(0, bool),
        np.zeros((0, 7)),
    )
    one = (
        sec,
        nanosec,
        frame_id,
        number,
        np.array([4], np.int32),
        ("walker",),
        np.array([True]),
        np.array([0, 1]),
        np.array([9], np.int32),
        ("hips",),
        np.array([-1], np.int32),
        np.array([True]),
        np.array([[1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 1.0]]),
    )
    encoder = SHARED[SkeletonsEncoder]
    for _ in range(2):
        assert_same_as_rclpy(encoder.encode_empty(sec, nanosec, frame_id, number), skeletons_msg(*empty))
        assert_same_as_rclpy(encoder.encode(*one), skeletons_msg(*one))


@SETTINGS
@given(st.data())
def test_tf_message_matches_serialize_message(data):
    count = data.draw(st.integers(0, 8))
    (sec, nanosec), frame_id = data.draw(STAMPS), data.draw(FRAME_IDS)
    children = tuple(data.draw(st.lists(NAMES, min_size=count, max_size=count)))
    poses = poses_of(data.draw, count)
    ours = encode_both(TFMessageEncoder, sec, nanosec, frame_id, children, poses)
    assert_same_as_rclpy(ours, tf_msg(sec, nanosec, frame_id, children, poses))


@pytest.mark.parametrize("frame_id_len", range(9))
@pytest.mark.parametrize("name_len", range(9))
def test_every_string_length_residue(frame_id_len, name_len):
    """Every alignment case, deterministically: lengths 0..8 of frame_id and names."""
    rng = np.random.default_rng(frame_id_len * 16 + name_len)
    frame_id = "f" * frame_id_len
    names = ("n" * name_len, "é" * (name_len // 2), "x" * ((name_len + 3) % 9))
    ids = np.array([-1, 7, 2**31 - 1], dtype=np.int32)
    positions = rng.normal(size=(3, 3))
    occluded = np.array([True, False, True])
    residuals = np.array([-1.0, 0.25, 3.5], dtype=np.float32)
    markers = (ids, names, positions, occluded, residuals)
    assert_same_as_rclpy(
        MarkersEncoder().encode(1, 2, frame_id, 3, *markers), markers_msg(1, 2, frame_id, 3, *markers)
    )
    offsets = np.array([0, 2, 2, 3])
    poses = rng.normal(size=(3, 7))
    body_args = (5, 6, frame_id, 7, ids, names, occluded, poses, residuals, offsets, *markers)
    assert_same_as_rclpy(RigidBodiesEncoder().encode(*body_args), bodies_msg(*body_args))
    skel_args = (
        5,
        6,
        frame_id,
        7,
        ids,
        names,
        ~occluded,
        np.array([0, 0, 2, 3]),
        ids,
        names,
        ids[::-1].copy(),
        occluded,
        poses,
    )
    assert_same_as_rclpy(SkeletonsEncoder().encode(*skel_args), skeletons_msg(*skel_args))
    assert_same_as_rclpy(
        TFMessageEncoder().encode(8, 9, frame_id, names, poses), tf_msg(8, 9, frame_id, names, poses)
    )


def test_round_trip_through_deserialize_message():
    rng = np.random.default_rng(3)
    names = ("base", "", "ñandú", "robot1:front_left")
    ids = np.array([0, -1, 12, 99], dtype=np.int32)
    positions = rng.normal(size=(4, 3))
    occluded = np.array([False, True, False, False])
    residuals = np.array([0.001, -1.0, 0.5, 0.0], dtype=np.float32)
    markers = (ids, names, positions, occluded, residuals)

    raw = MarkersEncoder().encode(1_700_000_000, 999_999_999, "world", 2**64 - 1, *markers)
    assert deserialize_message(raw, Markers) == markers_msg(
        1_700_000_000, 999_999_999, "world", 2**64 - 1, *markers
    )

    body_args = (
        -5,
        0,
        "map",
        42,
        np.array([3, 4], dtype=np.int32),
        ("a", "bb"),
        np.array([True, False]),
        rng.normal(size=(2, 7)),
        np.array([0.5, -1.0], dtype=np.float32),
        np.array([0, 1, 4]),
        *markers,
    )
    assert deserialize_message(RigidBodiesEncoder().encode(*body_args), RigidBodies) == bodies_msg(*body_args)

    skel_args = (
        7,
        8,
        "world",
        9,
        np.array([1, 2, 3], dtype=np.int32),
        ("walker", "", "runner"),
        np.array([True, False, True]),
        np.array([0, 3, 3, 4]),
        ids,
        names,
        np.array([-1, 0, 1, -1]),
        occluded,
        rng.normal(size=(4, 7)),
    )
    assert deserialize_message(SkeletonsEncoder().encode(*skel_args), Skeletons) == skeletons_msg(*skel_args)

    poses = rng.normal(size=(4, 7))
    tf_raw = TFMessageEncoder().encode(10, 11, "world", names, poses)
    assert deserialize_message(tf_raw, TFMessage) == tf_msg(10, 11, "world", names, poses)


def test_inputs_in_other_dtypes_and_containers():
    """Lists, int64 ids, int flags and float64 residuals are converted like rclpy would."""
    positions = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    ours = MarkersEncoder().encode(1, 2, "w", 3, [5, -6], ["a", "b"], positions, [1, 0], [0.5, 0.25])
    expected = markers_msg(1, 2, "w", 3, [5, -6], ["a", "b"], positions, [True, False], [0.5, 0.25])
    assert_same_as_rclpy(ours, expected)
    empty = MarkersEncoder().encode(1, 2, "w", 3, [], [], [], [], [])
    assert_same_as_rclpy(empty, markers_msg(1, 2, "w", 3, [], [], [], [], []))


# ---------------------------------------------------------------------------- layout cache
def _markers(count, seed=0):
    rng = np.random.default_rng(seed)
    return (
        np.arange(count, dtype=np.int32),
        rng.normal(size=(count, 3)),
        rng.random(count) < 0.3,
        rng.random(count).astype(np.float32),
    )


def test_layout_is_reused_for_same_names_and_rebuilt_when_they_change():
    encoder = MarkersEncoder()
    names = tuple(f"m{i}" for i in range(5))
    ids, pos, occ, res = _markers(5)
    for k in range(3):
        raw = encoder.encode(k, 0, "world", k, ids, names, pos + k, occ, res)
        assert_same_as_rclpy(raw, markers_msg(k, 0, "world", k, ids, names, pos + k, occ, res))
    assert encoder.layouts_built == 1

    # equal names in a new tuple: found by equality, not rebuilt
    encoder.encode(0, 0, "world", 0, ids, tuple(list(names)), pos, occ, res)
    assert encoder.layouts_built == 1

    # a name changes (same length: same offsets, different bytes)
    renamed = names[:2] + ("zz",) + names[3:]
    raw = encoder.encode(0, 0, "world", 0, ids, renamed, pos, occ, res)
    assert encoder.layouts_built == 2
    assert_same_as_rclpy(raw, markers_msg(0, 0, "world", 0, ids, renamed, pos, occ, res))

    # frame_id is part of the layout
    raw = encoder.encode(0, 0, "map", 0, ids, renamed, pos, occ, res)
    assert encoder.layouts_built == 3
    assert_same_as_rclpy(raw, markers_msg(0, 0, "map", 0, ids, renamed, pos, occ, res))

    # back to the first names: still cached
    encoder.encode(0, 0, "world", 0, ids, names, pos, occ, res)
    assert encoder.layouts_built == 3


def test_list_changed_in_place_is_not_trusted_by_identity():
    encoder = MarkersEncoder()
    names = ["a", "b", "c"]
    ids, pos, occ, res = _markers(3)
    encoder.encode(0, 0, "world", 0, ids, names, pos, occ, res)
    names[1] = "a much longer name"
    raw = encoder.encode(0, 0, "world", 0, ids, names, pos, occ, res)
    assert_same_as_rclpy(raw, markers_msg(0, 0, "world", 0, ids, names, pos, occ, res))
    assert encoder.layouts_built == 2


def _check_markers_frame(encoder, frame, names, rng):
    n = len(names)
    ids = rng.integers(-1, 50, size=n).astype(np.int32)
    pos, occ, res = rng.normal(size=(n, 3)), rng.random(n) < 0.5, rng.random(n).astype(np.float32)
    raw = encoder.encode(frame, 0, "world", frame, ids, names, pos, occ, res)
    assert_same_as_rclpy(raw, markers_msg(frame, 0, "world", frame, ids, names, pos, occ, res))


def test_varying_number_of_unlabeled_markers_appended():
    """Labeled markers + a varying tail of unlabeled ones (empty names), the names tuple
    rebuilt every frame as an adapter does: one layout serves every count."""
    encoder = MarkersEncoder()
    labeled = tuple(f"body{i // 4}:m{i % 4}" for i in range(12))
    rng = np.random.default_rng(5)
    for frame, extra in enumerate([3, 0, 7, 3, 0, 12, 7, 1, 30, 2]):
        _check_markers_frame(encoder, frame, labeled + ("",) * extra, rng)
    assert encoder.layouts_built == 1


def test_unlabeled_tail_growing_past_the_spare_room():
    encoder = MarkersEncoder()
    labeled = ("a", "bb", "ccc")
    rng = np.random.default_rng(6)
    for frame, extra in enumerate(range(0, 400, 7)):
        _check_markers_frame(encoder, frame, labeled + ("",) * extra, rng)
    # room grows geometrically: a handful of builds for 57 different counts
    assert encoder.layouts_built <= 6
    # frames that no longer start with the same labeled names, or drop some of them
    for frame, names in enumerate(
        [
            ("a", "bb", "zzz", "", ""),
            ("a", "bb"),
            (),
            ("", ""),
            ("q",) * 5,
            ("q",) * 3 + ("r",),
            labeled + ("x",) * 3,
            labeled + ("", "x"),
        ]
    ):
        before = encoder.layouts_built
        _check_markers_frame(encoder, frame, names, rng)
        assert encoder.layouts_built == before + 1, names


def test_counts_change_rebuilds_rigid_bodies_and_skeletons():
    bodies = RigidBodiesEncoder()
    names = ("a", "b")
    rng = np.random.default_rng(1)
    for offsets in ([0, 2, 5], [0, 2, 5], [0, 3, 5], [0, 0, 5], [0, 2, 5]):
        offsets = np.array(offsets)
        m_names = tuple(f"mk{i}" for i in range(5))
        args = (
            1,
            2,
            "world",
            3,
            np.array([1, 2], dtype=np.int32),
            names,
            np.array([True, True]),
            rng.normal(size=(2, 7)),
            np.zeros(2, np.float32),
            offsets,
            np.arange(5, dtype=np.int32),
            m_names,
            rng.normal(size=(5, 3)),
            np.zeros(5, bool),
            np.ones(5, np.float32),
        )
        assert_same_as_rclpy(bodies.encode(*args), bodies_msg(*args))
    assert bodies.layouts_built == 3

    skeletons = SkeletonsEncoder()
    for offsets in ([0, 19, 38], [0, 19, 38], [0, 0, 38], [0, 38, 38]):
        seg_names = tuple(f"seg{i % 19}" for i in range(38))
        args = (
            1,
            2,
            "world",
            3,
            np.array([1, 2], dtype=np.int32),
            ("s1", "s2"),
            np.array([True, False]),
            np.array(offsets),
            np.arange(38, dtype=np.int32),
            seg_names,
            np.arange(-1, 37, dtype=np.int32),
            np.ones(38, bool),
            rng.normal(size=(38, 7)),
        )
        assert_same_as_rclpy(skeletons.encode(*args), skeletons_msg(*args))
    assert skeletons.layouts_built == 3


def test_cache_evicts_least_recently_used():
    encoder = TFMessageEncoder(cache_size=2)
    poses = np.zeros((1, 7))
    for child in ("a", "b", "a", "c", "a", "b"):
        raw = encoder.encode(0, 0, "world", (child,), poses)
        assert_same_as_rclpy(raw, tf_msg(0, 0, "world", (child,), poses))
    # a, b built; a hit; c built (evicts b); a hit; b built again
    assert encoder.layouts_built == 4


def test_returned_bytes_are_not_changed_by_later_frames():
    encoder = MarkersEncoder()
    names = ("a", "b")
    ids, pos, occ, res = _markers(2)
    first = encoder.encode(1, 0, "world", 1, ids, names, pos, occ, res)
    copy = bytes(first)
    second = encoder.encode(2, 0, "world", 2, ids, names, pos * 2, ~occ, res * 2)
    assert first == copy and second != first
    assert_same_as_rclpy(second, markers_msg(2, 0, "world", 2, ids, names, pos * 2, ~occ, res * 2))


# ---------------------------------------------------------------------------- validation
def _good_markers():
    return dict(
        sec=1,
        nanosec=2,
        frame_id="world",
        frame_number=3,
        ids=np.array([1, 2], dtype=np.int32),
        names=("a", "b"),
        positions=np.zeros((2, 3)),
        occluded=np.zeros(2, bool),
        residuals=np.zeros(2, np.float32),
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(ids=np.array([1, 2, 3], dtype=np.int32)), "ids has shape (3,), expected (2,)"),
        (dict(names=("a",)), "ids has shape (2,), expected (1,)"),
        (dict(positions=np.zeros((2, 4))), "positions has shape (2, 4), expected (2, 3)"),
        (dict(positions=np.zeros((3, 3))), "positions has shape"),
        (dict(occluded=np.zeros(3, bool)), "occluded has shape"),
        (dict(occluded=np.array([0.5, 0.0])), "occluded has dtype float64"),
        (dict(residuals=np.zeros((2, 1))), "residuals has shape"),
        (dict(positions=np.array([["x"] * 3] * 2)), "positions has dtype"),
        (dict(ids=np.array([1, 2**31], dtype=np.int64)), "outside the int32 range"),
        (dict(ids=np.array([1.0, 2.0])), "ids has dtype float64"),
        (dict(sec=2**31), "sec = 2147483648 is outside"),
        (dict(nanosec=-1), "nanosec = -1 is outside"),
        (dict(frame_number=-3), "frame_number = -3 is outside"),
        (dict(frame_number=2**64), "frame_number"),
        (dict(sec=1.5), "sec must be an integer"),
        (dict(frame_id=None), "frame_id must be str"),
        (dict(names=("a", 3)), "names must be str, got int"),
        (dict(names=("a", ["b"])), "names must be str, got list"),
        (dict(names=("a", "b\0c")), "NUL"),
        (dict(names=("a", "\ud800")), "not valid UTF-8"),
        (dict(names="ab"), "sequence of str"),
    ],
)
def test_markers_reject_inconsistent_input(change, message):
    with pytest.raises(ValueError) as info:
        MarkersEncoder().encode(**{**_good_markers(), **change})
    assert message in str(info.value)


def test_offsets_and_nested_shapes_are_checked():
    base = dict(
        sec=1,
        nanosec=2,
        frame_id="world",
        frame_number=3,
        ids=np.array([1, 2], dtype=np.int32),
        names=("a", "b"),
        valid=np.ones(2, bool),
        poses=np.zeros((2, 7)),
        mean_errors=np.zeros(2, np.float32),
        marker_offsets=np.array([0, 1, 3]),
        marker_ids=np.zeros(3, np.int32),
        marker_names=("x", "y", "z"),
        marker_positions=np.zeros((3, 3)),
        marker_occluded=np.zeros(3, bool),
        marker_residuals=np.zeros(3, np.float32),
    )
    RigidBodiesEncoder().encode(**base)
    for change, message in [
        (dict(marker_offsets=np.array([0, 3])), "marker_offsets has shape (2,), expected (3,)"),
        (dict(marker_offsets=np.array([0, 2, 1])), "must rise from 0 to 3"),
        (dict(marker_offsets=np.array([1, 2, 3])), "must rise from 0 to 3"),
        (dict(marker_offsets=np.array([0, 1, 4])), "must rise from 0 to 3"),
        (dict(poses=np.zeros((2, 4))), "poses has shape (2, 4), expected (2, 7)"),
        (dict(marker_positions=np.zeros((2, 3))), "marker_positions has shape"),
        (dict(valid=np.ones(3, bool)), "valid has shape"),
    ]:
        with pytest.raises(ValueError, match=None) as info:
            RigidBodiesEncoder().encode(**{**base, **change})
        assert message in str(info.value), str(info.value)

    skel = dict(
        sec=1,
        nanosec=2,
        frame_id="world",
        frame_number=3,
        ids=np.array([1], dtype=np.int32),
        names=("s",),
        valid=np.ones(1, bool),
        segment_offsets=np.array([0, 2]),
        segment_ids=np.zeros(2, np.int32),
        segment_names=("a", "b"),
        segment_parent_ids=np.array([-1, 0], np.int32),
        segment_valid=np.ones(2, bool),
        segment_poses=np.zeros((2, 7)),
    )
    SkeletonsEncoder().encode(**skel)
    for change, message in [
        (dict(segment_offsets=np.array([0, 1])), "must rise from 0 to 2"),
        (dict(segment_parent_ids=np.array([-1], np.int32)), "segment_parent_ids has shape"),
        (dict(segment_poses=np.zeros((2, 3))), "segment_poses has shape"),
    ]:
        with pytest.raises(ValueError) as info:
            SkeletonsEncoder().encode(**{**skel, **change})
        assert message in str(info.value), str(info.value)

    with pytest.raises(ValueError, match=r"tf: poses has shape \(1, 7\), expected \(2, 7\)"):
        TFMessageEncoder().encode(1, 2, "world", ("a", "b"), np.zeros((1, 7)))


def test_bad_input_leaves_the_encoder_usable():
    encoder = MarkersEncoder()
    good = _good_markers()
    with pytest.raises(ValueError):
        encoder.encode(**{**good, "names": ("a", "b\0")})
    with pytest.raises(ValueError):
        encoder.encode(**{**good, "frame_number": -1})
    raw = encoder.encode(**good)
    assert_same_as_rclpy(raw, markers_msg(*good.values()))


# ---------------------------------------------------------------------------- over DDS
def test_published_bytes_arrive_as_messages(ros):
    """publish(raw_bytes) through Fast DDS to ordinary subscribers (and a raw one)."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    rng = np.random.default_rng(9)
    names = ("m0", "", "mañana")
    ids, occ = np.array([1, -1, 3], dtype=np.int32), np.array([False, True, False])
    pos, res = rng.normal(size=(3, 3)), np.array([0.1, -1.0, 0.2], dtype=np.float32)
    cases = [
        (
            "/cdr_test/markers",
            Markers,
            lambda k: (MarkersEncoder, (k, 5, "world", k, ids, names, pos + k, occ, res), markers_msg),
        ),
        (
            "/cdr_test/rigid_bodies",
            RigidBodies,
            lambda k: (
                RigidBodiesEncoder,
                (
                    k,
                    5,
                    "world",
                    k,
                    np.array([4, 5], np.int32),
                    ("b1", "b2"),
                    np.array([True, False]),
                    rng.normal(size=(2, 7)),
                    np.array([0.0, -1.0], np.float32),
                    np.array([0, 2, 3]),
                    ids,
                    names,
                    pos,
                    occ,
                    res,
                ),
                bodies_msg,
            ),
        ),
        (
            "/cdr_test/skeletons",
            Skeletons,
            lambda k: (
                SkeletonsEncoder,
                (
                    k,
                    5,
                    "world",
                    k,
                    np.array([1], np.int32),
                    ("walker",),
                    np.array([True]),
                    np.array([0, 3]),
                    ids,
                    names,
                    np.array([-1, 0, 1], np.int32),
                    ~occ,
                    rng.normal(size=(3, 7)),
                ),
                skeletons_msg,
            ),
        ),
        (
            "/cdr_test/tf",
            TFMessage,
            lambda k: (TFMessageEncoder, (k, 5, "world", names, rng.normal(size=(3, 7))), tf_msg),
        ),
    ]
    for topic, msg_type, make in cases:
        collector = ros.subscribe(topic, msg_type, qos)
        raw_received: list[bytes] = []
        raw_sub = ros.node.create_subscription(msg_type, topic, raw_received.append, qos, raw=True)
        publisher = ros.node.create_publisher(msg_type, topic, qos)
        try:
            wait_for(
                lambda: publisher.get_subscription_count() >= 2,
                WAIT,
                publisher.get_subscription_count,
                what=f"{topic}: both subscribers matched",
            )
            encoder_class, _, _ = make(0)
            encoder = encoder_class()
            sent = {}
            for k in range(1, 6):
                _, args, build = make(k)
                raw = encoder.encode(*args)
                sent[k] = (raw, build(*args))
                publisher.publish(raw)
            received = collector.wait_count(5, timeout=WAIT)
            stamps = [
                m.header.stamp.sec if msg_type is not TFMessage else m.transforms[0].header.stamp.sec
                for m in received
            ]
            assert stamps == [1, 2, 3, 4, 5]
            for msg, k in zip(received, stamps):
                assert msg == sent[k][1], f"{topic}: frame {k} arrived different"
            wait_for(
                lambda: len(raw_received) >= 5,
                WAIT,
                lambda: len(raw_received),
                what=f"{topic}: 5 raw samples",
            )
            assert raw_received == [sent[k][0] for k in range(1, 6)], f"{topic}: raw bytes changed in transit"
        finally:
            ros.node.destroy_subscription(raw_sub)
            ros.node.destroy_publisher(publisher)
