"""mocap4r2_control.cdr and cdr_layout: serialized messages from numpy arrays, checked
against rclpy (cdr_layout.py writes down the wire rules these tests hold it to).

The reference is ``rclpy.serialization.serialize_message`` of the equivalent message
object. Fast DDS leaves alignment padding uninitialised (it varies from call to call), so
the comparison is: same length, same bytes everywhere except padding, and our padding is
zero. Which bytes are padding comes from ``walk_cdr`` below, a slow generic CDR writer
driven by the message classes' own type introspection (independent of cdr.py and
cdr_layout.py); its output must equal ours exactly.
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
from mocap4r2_control.diagnostic_cdr import StatusFields, encode_diagnostic_array
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
        # a ``byte`` field (octet) holds a bytes object of length 1 in Python
        writer.put(_PRIMITIVES[slot_type.typename], value[0] if isinstance(value, bytes) else value)
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
def marker_objects(*, ids, names, positions, occluded, residuals) -> list[Marker]:
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


def _framed(msg, *, sec, nanosec, frame_id, frame_number):
    """``msg`` with its header and frame number set."""
    _header(msg, sec, nanosec, frame_id)
    msg.frame_number = frame_number
    return msg


def _identified(msg, *, ids, names, valid, **stamp):
    """``msg`` with its header and frame number set, and (id, name, validity, index) of
    each of its rigid bodies or skeletons."""
    _framed(msg, **stamp)
    return msg, [
        (dict(id=int(ids[i]), name=names[i], tracking_valid=bool(valid[i])), i) for i in range(len(names))
    ]


def markers_msg(*, ids, names, positions, occluded, residuals, **stamp) -> Markers:
    msg = _framed(Markers(), **stamp)
    msg.markers = marker_objects(
        ids=ids, names=names, positions=positions, occluded=occluded, residuals=residuals
    )
    return msg


def _nested(prefix, fields):
    """The nested columns (``marker_ids``, ...) taken out of ``fields``, keyed without
    ``prefix``."""
    return {key[len(prefix) :]: fields.pop(key) for key in [k for k in fields if k.startswith(prefix)]}


def bodies_msg(*, poses, mean_errors, **fields) -> RigidBodies:
    markers = _nested("marker_", fields)
    offsets = markers.pop("offsets")
    msg, identities = _identified(RigidBodies(), **fields)
    for identity, i in identities:
        a, b = int(offsets[i]), int(offsets[i + 1])
        own = marker_objects(**{column: values[a:b] for column, values in markers.items()})
        msg.rigid_bodies.append(
            RigidBody(**identity, pose=_pose(poses[i]), mean_error=float(mean_errors[i]), markers=own)
        )
    return msg


def skeletons_msg(**fields) -> Skeletons:
    segments = _nested("segment_", fields)
    offsets = segments.pop("offsets")
    msg, identities = _identified(Skeletons(), **fields)
    for identity, i in identities:
        own = [
            Segment(
                id=int(segments["ids"][k]),
                name=segments["names"][k],
                parent_id=int(segments["parent_ids"][k]),
                tracking_valid=bool(segments["valid"][k]),
                pose=_pose(segments["poses"][k]),
            )
            for k in range(int(offsets[i]), int(offsets[i + 1]))
        ]
        msg.skeletons.append(Skeleton(**identity, segments=own))
    return msg


def tf_msg(*, sec, nanosec, frame_id, child_frame_ids, poses) -> TFMessage:
    msg = TFMessage()
    for child, row in zip(child_frame_ids, poses):
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
    return dict(ids=ids, names=names, positions=positions, occluded=occluded, residuals=residuals)


def body_markers(columns):
    """Marker columns as RigidBodiesEncoder names them (marker_ids, ...)."""
    return {f"marker_{key}": value for key, value in columns.items()}


def header(sec, nanosec, frame_id, frame_number):
    return dict(sec=sec, nanosec=nanosec, frame_id=frame_id, frame_number=frame_number)


@st.composite
def stamped(draw):
    """The header fields of a random frame: stamp, frame_id, frame number."""
    (sec, nanosec), frame_id, number = draw(STAMPS), draw(FRAME_IDS), draw(FRAME_NUMBERS)
    return header(sec, nanosec, frame_id, number)


@st.composite
def object_columns(draw, count):
    """ids, names and validity of ``count`` rigid bodies or skeletons."""
    names = tuple(draw(st.lists(NAMES, min_size=count, max_size=count)))
    ids = np.array(draw(st.lists(INT32, min_size=count, max_size=count)), dtype=np.int32)
    valid = np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=bool)
    return dict(ids=ids, names=names, valid=valid)


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


def encode_both(cls, **fields) -> bytes:
    fresh = cls().encode(**fields)
    assert SHARED[cls].encode(**fields) == fresh, "a reused encoder gives other bytes than a fresh one"
    return fresh


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------- equivalence
@SETTINGS
@given(st.data())
def test_markers_match_serialize_message(data):
    count = data.draw(st.integers(0, 12))
    fields = {**data.draw(stamped()), **data.draw(marker_columns(count))}
    ours = encode_both(MarkersEncoder, **fields)
    assert_same_as_rclpy(ours, markers_msg(**fields))


# the diagnostics report's texts: any text rclpy takes (no lone surrogates); a NUL ends
# the string where rclpy copies it as a C string
REPORT_TEXT = st.text(max_size=12)


def diagnostic_array_msg(sec: int, nanosec: int, frame_id: str, statuses: list[StatusFields]):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    msg = DiagnosticArray()
    msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id = sec, nanosec, frame_id
    for fields in statuses:
        status = DiagnosticStatus(
            level=bytes((fields.level,)),
            name=fields.name,
            message=fields.message,
            hardware_id=fields.hardware_id,
        )
        status.values = [KeyValue(key=k, value=v) for k, v in fields.values.items()]
        msg.status.append(status)
    return msg


@SETTINGS
@given(st.data())
def test_diagnostic_arrays_match_serialize_message(data):
    statuses = data.draw(
        st.lists(
            st.builds(
                StatusFields,
                st.integers(0, 3),
                REPORT_TEXT,
                REPORT_TEXT,
                REPORT_TEXT,
                st.dictionaries(REPORT_TEXT, REPORT_TEXT, max_size=6),
            ),
            max_size=3,
        )
    )
    sec, nanosec = data.draw(st.integers(-(2**31), 2**31 - 1)), data.draw(st.integers(0, 2**32 - 1))
    frame_id = data.draw(REPORT_TEXT)
    ours = encode_diagnostic_array(sec, nanosec, frame_id, statuses)
    reference = diagnostic_array_msg(sec, nanosec, frame_id, statuses)
    texts = [frame_id, *(x for s in statuses for x in (s.name, s.message, s.hardware_id, *s.values.keys()))]
    texts += [v for s in statuses for v in s.values.values()]
    if any("\0" in t for t in texts):
        # rclpy ends a string at its NUL: the oracle is the message as it reads back
        reference = deserialize_message(serialize_message(reference), type(reference))
    assert_same_as_rclpy(ours, reference)


def test_a_diagnostic_text_rclpy_refuses_is_written_with_its_character_replaced():
    # a lone surrogate (a name decoded with surrogateescape from a hostile server's bytes)
    ours = encode_diagnostic_array(1, 2, "", [StatusFields(0, "body \udc80", "m", "h", {"k\udc80": "v"})])
    back = deserialize_message(ours, type(diagnostic_array_msg(0, 0, "", [])))
    assert back.status[0].name == "body ?" and back.status[0].values[0].key == "k?"
    with pytest.raises(ValueError, match="one octet"):
        encode_diagnostic_array(1, 2, "", [StatusFields(256, "", "", "", {})])


@SETTINGS
@given(st.data())
def test_rigid_bodies_match_serialize_message(data):
    count = data.draw(st.integers(0, 6))
    stamp, bodies = data.draw(stamped()), data.draw(object_columns(count))
    poses = poses_of(data.draw, count)
    errors = np.array(data.draw(st.lists(FLOAT32, min_size=count, max_size=count)), dtype=np.float32)
    offsets = data.draw(offsets_of(count, 4))
    markers = data.draw(marker_columns(int(offsets[-1])))
    fields = dict(
        **stamp,
        **bodies,
        poses=poses,
        mean_errors=errors,
        marker_offsets=offsets,
        **body_markers(markers),
    )
    assert_same_as_rclpy(encode_both(RigidBodiesEncoder, **fields), bodies_msg(**fields))


@SETTINGS
@given(st.data())
def test_skeletons_match_serialize_message(data):
    # skeletons without segments end 4-aligned: mixing them in moves everything after
    count = data.draw(st.integers(0, 5))
    stamp, skeletons = data.draw(stamped()), data.draw(object_columns(count))
    offsets = data.draw(offsets_of(count, 4))
    segments = data.draw(object_columns(int(offsets[-1])))
    m = int(offsets[-1])
    s_parents = np.array(data.draw(st.lists(INT32, min_size=m, max_size=m)), dtype=np.int32)
    fields = dict(
        **stamp,
        **skeletons,
        segment_offsets=offsets,
        segment_ids=segments["ids"],
        segment_names=segments["names"],
        segment_parent_ids=s_parents,
        segment_valid=segments["valid"],
        segment_poses=poses_of(data.draw, m),
    )
    assert_same_as_rclpy(encode_both(SkeletonsEncoder, **fields), skeletons_msg(**fields))


@SETTINGS
@given(st.data())
def test_empty_skeletons_match_serialize_message(data):
    """The shortcut for systems without skeletons gives rclpy's bytes, also between
    messages with skeletons from the same encoder (its layout is kept apart)."""
    stamp = data.draw(stamped())
    empty = dict(
        **stamp,
        ids=np.zeros(0, np.int32),
        names=(),
        valid=np.zeros(0, bool),
        segment_offsets=np.zeros(1, np.int64),
        segment_ids=np.zeros(0, np.int32),
        segment_names=(),
        segment_parent_ids=np.zeros(0, np.int32),
        segment_valid=np.zeros(0, bool),
        segment_poses=np.zeros((0, 7)),
    )
    one = dict(
        **stamp,
        ids=np.array([4], np.int32),
        names=("walker",),
        valid=np.array([True]),
        segment_offsets=np.array([0, 1]),
        segment_ids=np.array([9], np.int32),
        segment_names=("hips",),
        segment_parent_ids=np.array([-1], np.int32),
        segment_valid=np.array([True]),
        segment_poses=np.array([[1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 1.0]]),
    )
    encoder = SHARED[SkeletonsEncoder]
    for _ in range(2):
        assert_same_as_rclpy(encoder.encode_empty(**stamp), skeletons_msg(**empty))
        assert_same_as_rclpy(encoder.encode(**one), skeletons_msg(**one))


@SETTINGS
@given(st.data())
def test_tf_message_matches_serialize_message(data):
    count = data.draw(st.integers(0, 8))
    (sec, nanosec), frame_id = data.draw(STAMPS), data.draw(FRAME_IDS)
    children = tuple(data.draw(st.lists(NAMES, min_size=count, max_size=count)))
    poses = poses_of(data.draw, count)
    fields = dict(sec=sec, nanosec=nanosec, frame_id=frame_id, child_frame_ids=children, poses=poses)
    ours = encode_both(TFMessageEncoder, **fields)
    assert_same_as_rclpy(ours, tf_msg(**fields))


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
    markers = dict(ids=ids, names=names, positions=positions, occluded=occluded, residuals=residuals)
    marker_fields = {**header(1, 2, frame_id, 3), **markers}
    assert_same_as_rclpy(MarkersEncoder().encode(**marker_fields), markers_msg(**marker_fields))
    offsets = np.array([0, 2, 2, 3])
    poses = rng.normal(size=(3, 7))
    body_fields = dict(
        **header(5, 6, frame_id, 7),
        ids=ids,
        names=names,
        valid=occluded,
        poses=poses,
        mean_errors=residuals,
        marker_offsets=offsets,
        **body_markers(markers),
    )
    assert_same_as_rclpy(RigidBodiesEncoder().encode(**body_fields), bodies_msg(**body_fields))
    skel_fields = dict(
        **header(5, 6, frame_id, 7),
        ids=ids,
        names=names,
        valid=~occluded,
        segment_offsets=np.array([0, 0, 2, 3]),
        segment_ids=ids,
        segment_names=names,
        segment_parent_ids=ids[::-1].copy(),
        segment_valid=occluded,
        segment_poses=poses,
    )
    assert_same_as_rclpy(SkeletonsEncoder().encode(**skel_fields), skeletons_msg(**skel_fields))
    tf_fields = dict(sec=8, nanosec=9, frame_id=frame_id, child_frame_ids=names, poses=poses)
    assert_same_as_rclpy(TFMessageEncoder().encode(**tf_fields), tf_msg(**tf_fields))


def test_round_trip_through_deserialize_message():
    rng = np.random.default_rng(3)
    names = ("base", "", "ñandú", "robot1:front_left")
    ids = np.array([0, -1, 12, 99], dtype=np.int32)
    positions = rng.normal(size=(4, 3))
    occluded = np.array([False, True, False, False])
    residuals = np.array([0.001, -1.0, 0.5, 0.0], dtype=np.float32)
    markers = dict(ids=ids, names=names, positions=positions, occluded=occluded, residuals=residuals)

    marker_fields = {**header(1_700_000_000, 999_999_999, "world", 2**64 - 1), **markers}
    raw = MarkersEncoder().encode(**marker_fields)
    assert deserialize_message(raw, Markers) == markers_msg(**marker_fields)

    body_fields = dict(
        **header(-5, 0, "map", 42),
        ids=np.array([3, 4], dtype=np.int32),
        names=("a", "bb"),
        valid=np.array([True, False]),
        poses=rng.normal(size=(2, 7)),
        mean_errors=np.array([0.5, -1.0], dtype=np.float32),
        marker_offsets=np.array([0, 1, 4]),
        **body_markers(markers),
    )
    assert deserialize_message(RigidBodiesEncoder().encode(**body_fields), RigidBodies) == bodies_msg(
        **body_fields
    )

    skel_fields = dict(
        **header(7, 8, "world", 9),
        ids=np.array([1, 2, 3], dtype=np.int32),
        names=("walker", "", "runner"),
        valid=np.array([True, False, True]),
        segment_offsets=np.array([0, 3, 3, 4]),
        segment_ids=ids,
        segment_names=names,
        segment_parent_ids=np.array([-1, 0, 1, -1]),
        segment_valid=occluded,
        segment_poses=rng.normal(size=(4, 7)),
    )
    assert deserialize_message(SkeletonsEncoder().encode(**skel_fields), Skeletons) == skeletons_msg(
        **skel_fields
    )

    tf_fields = dict(
        sec=10, nanosec=11, frame_id="world", child_frame_ids=names, poses=rng.normal(size=(4, 7))
    )
    tf_raw = TFMessageEncoder().encode(**tf_fields)
    assert deserialize_message(tf_raw, TFMessage) == tf_msg(**tf_fields)


def test_inputs_in_other_dtypes_and_containers():
    """Lists, int64 ids, int flags and float64 residuals are converted like rclpy would."""
    positions = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    stamp = header(1, 2, "w", 3)
    ours = MarkersEncoder().encode(
        **stamp, ids=[5, -6], names=["a", "b"], positions=positions, occluded=[1, 0], residuals=[0.5, 0.25]
    )
    expected = markers_msg(
        **stamp,
        ids=[5, -6],
        names=["a", "b"],
        positions=positions,
        occluded=[True, False],
        residuals=[0.5, 0.25],
    )
    assert_same_as_rclpy(ours, expected)
    nothing = dict(ids=[], names=[], positions=[], occluded=[], residuals=[])
    empty = MarkersEncoder().encode(**stamp, **nothing)
    assert_same_as_rclpy(empty, markers_msg(**stamp, **nothing))


# ---------------------------------------------------------------------------- layout cache
def _markers(count, seed=0):
    rng = np.random.default_rng(seed)
    return (
        np.arange(count, dtype=np.int32),
        rng.normal(size=(count, 3)),
        rng.random(count) < 0.3,
        rng.random(count).astype(np.float32),
    )


def _marker_fields(frame, frame_id, ids, names, *, positions, occluded, residuals):
    """Markers of frame number ``frame`` stamped ``frame`` s, as encode() takes them."""
    return dict(
        **header(frame, 0, frame_id, frame),
        ids=ids,
        names=names,
        positions=positions,
        occluded=occluded,
        residuals=residuals,
    )


def test_layout_is_reused_for_same_names_and_rebuilt_when_they_change():
    encoder = MarkersEncoder()
    names = tuple(f"m{i}" for i in range(5))
    ids, pos, occ, res = _markers(5)
    for k in range(3):
        fields = _marker_fields(k, "world", ids, names, positions=pos + k, occluded=occ, residuals=res)
        assert_same_as_rclpy(encoder.encode(**fields), markers_msg(**fields))
    assert encoder.layouts_built == 1

    # equal names in a new tuple: found by equality, not rebuilt
    encoder.encode(
        **_marker_fields(0, "world", ids, tuple(list(names)), positions=pos, occluded=occ, residuals=res)
    )
    assert encoder.layouts_built == 1

    # a name changes (same length: same offsets, different bytes)
    renamed = names[:2] + ("zz",) + names[3:]
    fields = _marker_fields(0, "world", ids, renamed, positions=pos, occluded=occ, residuals=res)
    raw = encoder.encode(**fields)
    assert encoder.layouts_built == 2
    assert_same_as_rclpy(raw, markers_msg(**fields))

    # frame_id is part of the layout
    fields = _marker_fields(0, "map", ids, renamed, positions=pos, occluded=occ, residuals=res)
    raw = encoder.encode(**fields)
    assert encoder.layouts_built == 3
    assert_same_as_rclpy(raw, markers_msg(**fields))

    # back to the first names: still cached
    encoder.encode(**_marker_fields(0, "world", ids, names, positions=pos, occluded=occ, residuals=res))
    assert encoder.layouts_built == 3


def test_list_changed_in_place_is_not_trusted_by_identity():
    encoder = MarkersEncoder()
    names = ["a", "b", "c"]
    ids, pos, occ, res = _markers(3)
    encoder.encode(**_marker_fields(0, "world", ids, names, positions=pos, occluded=occ, residuals=res))
    names[1] = "a much longer name"
    fields = _marker_fields(0, "world", ids, names, positions=pos, occluded=occ, residuals=res)
    raw = encoder.encode(**fields)
    assert_same_as_rclpy(raw, markers_msg(**fields))
    assert encoder.layouts_built == 2


def _check_markers_frame(encoder, frame, names, rng):
    n = len(names)
    ids = rng.integers(-1, 50, size=n).astype(np.int32)
    pos, occ, res = rng.normal(size=(n, 3)), rng.random(n) < 0.5, rng.random(n).astype(np.float32)
    fields = _marker_fields(frame, "world", ids, names, positions=pos, occluded=occ, residuals=res)
    assert_same_as_rclpy(encoder.encode(**fields), markers_msg(**fields))


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
        fields = dict(
            **header(1, 2, "world", 3),
            ids=np.array([1, 2], dtype=np.int32),
            names=names,
            valid=np.array([True, True]),
            poses=rng.normal(size=(2, 7)),
            mean_errors=np.zeros(2, np.float32),
            marker_offsets=offsets,
            marker_ids=np.arange(5, dtype=np.int32),
            marker_names=m_names,
            marker_positions=rng.normal(size=(5, 3)),
            marker_occluded=np.zeros(5, bool),
            marker_residuals=np.ones(5, np.float32),
        )
        assert_same_as_rclpy(bodies.encode(**fields), bodies_msg(**fields))
    assert bodies.layouts_built == 3

    skeletons = SkeletonsEncoder()
    for offsets in ([0, 19, 38], [0, 19, 38], [0, 0, 38], [0, 38, 38]):
        seg_names = tuple(f"seg{i % 19}" for i in range(38))
        fields = dict(
            **header(1, 2, "world", 3),
            ids=np.array([1, 2], dtype=np.int32),
            names=("s1", "s2"),
            valid=np.array([True, False]),
            segment_offsets=np.array(offsets),
            segment_ids=np.arange(38, dtype=np.int32),
            segment_names=seg_names,
            segment_parent_ids=np.arange(-1, 37, dtype=np.int32),
            segment_valid=np.ones(38, bool),
            segment_poses=rng.normal(size=(38, 7)),
        )
        assert_same_as_rclpy(skeletons.encode(**fields), skeletons_msg(**fields))
    assert skeletons.layouts_built == 3


def test_cache_evicts_least_recently_used():
    encoder = TFMessageEncoder(cache_size=2)
    poses = np.zeros((1, 7))
    for child in ("a", "b", "a", "c", "a", "b"):
        fields = dict(sec=0, nanosec=0, frame_id="world", child_frame_ids=(child,), poses=poses)
        assert_same_as_rclpy(encoder.encode(**fields), tf_msg(**fields))
    # a, b built; a hit; c built (evicts b); a hit; b built again
    assert encoder.layouts_built == 4


def test_returned_bytes_are_not_changed_by_later_frames():
    encoder = MarkersEncoder()
    names = ("a", "b")
    ids, pos, occ, res = _markers(2)
    first = encoder.encode(
        **_marker_fields(1, "world", ids, names, positions=pos, occluded=occ, residuals=res)
    )
    copy = bytes(first)
    second_fields = _marker_fields(
        2, "world", ids, names, positions=pos * 2, occluded=~occ, residuals=res * 2
    )
    second = encoder.encode(**second_fields)
    assert first == copy and second != first
    assert_same_as_rclpy(second, markers_msg(**second_fields))


# ---------------------------------------------------------------------------- validation
def _good_markers():
    return dict(
        **header(1, 2, "world", 3),
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
        **header(1, 2, "world", 3),
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
        **header(1, 2, "world", 3),
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
        TFMessageEncoder().encode(
            sec=1, nanosec=2, frame_id="world", child_frame_ids=("a", "b"), poses=np.zeros((1, 7))
        )


def test_bad_input_leaves_the_encoder_usable():
    encoder = MarkersEncoder()
    good = _good_markers()
    with pytest.raises(ValueError):
        encoder.encode(**{**good, "names": ("a", "b\0")})
    with pytest.raises(ValueError):
        encoder.encode(**{**good, "frame_number": -1})
    raw = encoder.encode(**good)
    assert_same_as_rclpy(raw, markers_msg(**good))


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
            lambda k: (
                MarkersEncoder,
                dict(
                    **header(k, 5, "world", k),
                    ids=ids,
                    names=names,
                    positions=pos + k,
                    occluded=occ,
                    residuals=res,
                ),
                markers_msg,
            ),
        ),
        (
            "/cdr_test/rigid_bodies",
            RigidBodies,
            lambda k: (
                RigidBodiesEncoder,
                dict(
                    **header(k, 5, "world", k),
                    ids=np.array([4, 5], np.int32),
                    names=("b1", "b2"),
                    valid=np.array([True, False]),
                    poses=rng.normal(size=(2, 7)),
                    mean_errors=np.array([0.0, -1.0], np.float32),
                    marker_offsets=np.array([0, 2, 3]),
                    marker_ids=ids,
                    marker_names=names,
                    marker_positions=pos,
                    marker_occluded=occ,
                    marker_residuals=res,
                ),
                bodies_msg,
            ),
        ),
        (
            "/cdr_test/skeletons",
            Skeletons,
            lambda k: (
                SkeletonsEncoder,
                dict(
                    **header(k, 5, "world", k),
                    ids=np.array([1], np.int32),
                    names=("walker",),
                    valid=np.array([True]),
                    segment_offsets=np.array([0, 3]),
                    segment_ids=ids,
                    segment_names=names,
                    segment_parent_ids=np.array([-1, 0, 1], np.int32),
                    segment_valid=~occ,
                    segment_poses=rng.normal(size=(3, 7)),
                ),
                skeletons_msg,
            ),
        ),
        (
            "/cdr_test/tf",
            TFMessage,
            lambda k: (
                TFMessageEncoder,
                dict(
                    sec=k, nanosec=5, frame_id="world", child_frame_ids=names, poses=rng.normal(size=(3, 7))
                ),
                tf_msg,
            ),
        ),
    ]
    for topic, msg_type, make in cases:
        collector = ros.subscribe(topic, msg_type, qos)
        raw_received: list[bytes] = []
        raw_sub = ros.node.create_subscription(msg_type, topic, raw_received.append, qos, raw=True)
        publisher = ros.node.create_publisher(msg_type, topic, qos)
        try:
            wait_for(
                lambda publisher=publisher: publisher.get_subscription_count() >= 2,
                WAIT,
                publisher.get_subscription_count,
                what=f"{topic}: both subscribers matched",
            )
            encoder_class, _, _ = make(0)
            encoder = encoder_class()
            sent = {}
            for k in range(1, 6):
                _, fields, build = make(k)
                raw = encoder.encode(**fields)
                sent[k] = (raw, build(**fields))
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
                lambda raw_received=raw_received: len(raw_received) >= 5,
                WAIT,
                lambda raw_received=raw_received: len(raw_received),
                what=f"{topic}: 5 raw samples",
            )
            assert raw_received == [sent[k][0] for k in range(1, 6)], f"{topic}: raw bytes changed in transit"
        finally:
            ros.node.destroy_subscription(raw_sub)
            ros.node.destroy_publisher(publisher)
