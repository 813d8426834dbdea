"""SceneUpdates of rigid bodies and markers written straight to protobuf bytes.

Building foxglove-sdk's message objects costs about ten Python-to-Rust constructions a
body (25 µs) and three a marker, which at 50 bodies and 200 markers a frame is most of the
node's time. These two scenes are the hot ones, so they are written here with ``struct``
from Foxglove's schema (foxglove.SceneUpdate: the field numbers of its .proto), the
constant parts (axes, colours, sizes) encoded once and each pose's doubles packed by one
``struct`` call in a fixed layout. The one liberty taken: a pose's coordinates are always
written, a zero too, where the SDK leaves a zero out (proto3 reads a written zero and an
absent field alike). Everything else is byte for byte what the SDK's ``encode()`` gives
for the objects :mod:`.convert` builds, and a decoder reads the same message from both
(test_scene_wire.py: Foxglove's client decodes both on random scenes). No rclpy here.

The live node and the exports hand over serialized messages, so RigidBodies and Markers
are also read here from their CDR bytes (``*_frame_cdr``), never as rclpy objects: by
mocap4r2_control's CDR reader, whose walk of a topic's message is kept and reused while
the topic's messages keep their structure (a system's bodies, markers and names rarely
change), and the bodies scene of a structure is built once as a template whose numbers
each frame writes in.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mocap4r2_control.cdr_reader import CdrCursor, CdrDecodeError, marker_places, walk_message
from mocap4r2_control.rotation import FloatArray

from ..tracking.markers_cdr import MarkersDecodeError, decode_markers
from . import convert
from .convert import Style

_DOUBLE = struct.Struct("<d")
# a Pose (position and orientation, every double written): the two sub-messages' keys
# and lengths, then each double behind its key
_POSE = struct.Struct("<BBBdBdBdBBBdBdBdBd")
_POSE_LEN = 2 + 27 + 2 + 36
# a Pose's position alone (the orientation, identity, appended as constant bytes)
_POSITION = struct.Struct("<BBBdBdBd")
# wire types
_VARINT, _FIXED64, _LEN = 0, 1, 2
_LINE_LIST = 2  # foxglove.LinePrimitive.Type


_SMALL = [bytes((n,)) for n in range(0x80)]


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@functools.cache
def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _len(field: int, payload: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(payload)) + payload


def _double(field: int, value: float) -> bytes:
    return _key(field, _FIXED64) + _DOUBLE.pack(value) if value != 0.0 else b""


def _doubles(values: Sequence[float]) -> bytes:
    """Fields 1.. of a message of doubles (Vector3, Point3, Quaternion, Color)."""
    return b"".join(_double(i, v) for i, v in enumerate(values, start=1))


def _string(field: int, text: str) -> bytes:
    return _len(field, text.encode()) if text else b""


def _time(ns: int) -> bytes:
    """google.protobuf.Timestamp / Duration (int64 seconds, int32 nanos), from ns >= 0."""
    sec, nsec = divmod(ns, 1_000_000_000)
    return (_key(1, _VARINT) + _varint(sec) if sec else b"") + (
        _key(2, _VARINT) + _varint(nsec) if nsec else b""
    )


def _color(name: str) -> bytes:
    return _doubles(convert.RGBA[name])


@functools.lru_cache(maxsize=16)
def _constants(style: Style) -> dict[str, bytes]:
    """What every body or marker of a style shares, encoded once."""
    length = style.axis_length
    points = [(0.0, 0.0, 0.0), (length, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, length, 0.0), (0.0, 0.0, 0.0)]
    points.append((0.0, 0.0, length))
    line_points = b"".join(_len(5, _doubles(p)) for p in points)
    axis_colors = b"".join(_len(7, _color(axis)) for axis in "xyz" for _ in (0, 1))
    grey_colors = b"".join(_len(7, _color("untracked")) for _ in range(6))
    lifetime = convert.Duration.from_secs(style.lifetime) if style.lifetime > 0 else None
    size = _doubles((style.marker_size,) * 3)
    size_field = _len(2, size)
    identity = _len(2, _doubles((0.0, 0.0, 0.0, 1.0)))
    return {
        "line_head": _key(1, _VARINT) + _varint(_LINE_LIST),
        "line_tail": _double(3, style.line_width) + line_points,
        "axes": axis_colors,
        "grey_axes": grey_colors,
        "text_style": _key(2, _VARINT) + b"\x01" + _double(3, style.text_size),
        "text_color": _len(5, _color("text")),
        "grey_text_color": _len(5, _color("untracked")),
        "lifetime": _len(4, _time(lifetime.sec * 1_000_000_000 + lifetime.nsec)) if lifetime else b"",
        "tracked": _len(6, _string(1, "tracking_valid") + _string(2, "true")),
        "not_tracked": _len(6, _string(1, "tracking_valid") + _string(2, "false")),
        "identity": identity,
        # keys and lengths before the fixed-layout poses
        "line_pose": _key(2, _LEN) + _varint(_POSE_LEN),
        "text_pose": _key(1, _LEN) + _varint(2 + 27 + len(identity)),
        "sphere_pose": _key(1, _LEN) + _varint(2 + 27 + len(identity)),
        "sphere_size": size_field,
        "labeled": _len(3, _color("labeled")),
        "unlabeled": _len(3, _color("unlabeled")),
        "occluded": _len(3, _color("occluded")),
    }


@dataclass
class BodiesFrame:
    """What a bodies scene needs of a RigidBodies message: its stamp (ns), frame, and per
    body the name, id, tracking flag and pose row (x, y, z, qx, qy, qz, qw)."""

    stamp_ns: int
    frame_id: str
    names: list[str]
    ids: list[int]
    valid: list[bool]
    rows: FloatArray  # (n, 7)


class BadCdr(CdrDecodeError):
    """Serialized RigidBodies or Markers that are not what they claim (truncated, corrupt)."""


_STAMP = struct.Struct("<iI")
_U64 = struct.Struct("<Q")


def bodies_frame(msg: Any) -> BodiesFrame:
    """The frame of a RigidBodies message object (rclpy's, or rosbags')."""
    bodies = list(msg.rigid_bodies)
    rows = np.array(
        [
            (p.x, p.y, p.z, q.x, q.y, q.z, q.w)
            for b in bodies
            for p, q in ((b.pose.position, b.pose.orientation),)
        ],
        dtype=np.float64,
    ).reshape(-1, 7)
    return BodiesFrame(
        convert.stamp_ns(msg.header.stamp),
        msg.header.frame_id,
        [b.name for b in bodies],
        [b.id for b in bodies],
        [bool(b.tracking_valid) for b in bodies],
        rows,
    )


@dataclass(frozen=True)
class _BodiesLayout:
    """Where the fields of one RigidBodies structure lie, kept per topic and reused while
    a message has the same length and the same bytes at every offset that fixes the
    layout (the encapsulation, each count, each body's name, each marker's name length):
    the walk is a function of those bytes alone, so such a message has every field at
    the same offset (the replay's premise too). Index arrays are byte indices into the
    message, gathered with numpy."""

    length: int
    structure: npt.NDArray[np.intp]
    template: npt.NDArray[np.uint8]
    frame_id: str
    names: tuple[str, ...]
    ids: npt.NDArray[np.intp]
    valid: npt.NDArray[np.intp]
    poses: npt.NDArray[np.intp]


#: the layout of each topic's last RigidBodies structure (at most this many topics kept)
_BODIES_LAYOUTS: dict[str, _BodiesLayout] = {}
MAX_LAYOUTS = 64


def _byte_index(offsets: list[int], size: int) -> npt.NDArray[np.intp]:
    return (np.asarray(offsets, dtype=np.intp)[:, None] + np.arange(size)).reshape(-1)


def _keep(store: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep ``value`` under ``key`` as the newest of at most MAX_LAYOUTS entries."""
    store.pop(key, None)
    while len(store) >= MAX_LAYOUTS:
        store.pop(next(iter(store)))
    store[key] = value


def _same_structure(
    length: int, structure: npt.NDArray[np.intp], template: npt.NDArray[np.uint8], data: bytes
) -> Any:
    """The message's bytes as uint8 when it has this length and these bytes at every
    offset of ``structure`` (so the layout walked from ``template``'s message fits it);
    None otherwise."""
    if len(data) != length:
        return None
    raw = np.frombuffer(data, np.uint8)
    return raw if np.array_equal(raw[structure], template) else None


def _walk_bodies(data: bytes) -> tuple[BodiesFrame, _BodiesLayout]:
    """Walk a serialized RigidBodies (mocap4r2_control.cdr_reader's rules and bounds; the
    bodies' markers skipped by their name lengths, never decoded): its frame, and its
    layout for the messages of the same structure."""
    structure = [0, 1]  # the encapsulation (little-endian plain CDR)
    w = CdrCursor(data, error=BadCdr, structure=structure)
    stamp_at, frame_id, _ = w.header()
    sec, nsec = _STAMP.unpack_from(data, stamp_at)
    n = w.count(min_size=4 + 4 + 1 + 56 + 4 + 4, what="rigid bodies")
    names: list[str] = []
    ids: list[int] = []
    valid: list[int] = []
    poses: list[int] = []
    for _ in range(n):
        ids.append(w.fixed(4))
        names.append(w.string())
        valid.append(w.fixed(1))
        poses.append(w.fixed(8, 7))
        w.fixed(4)  # mean_error
        marker_ids, _points = marker_places(
            w, w.count(what="markers of a body", min_size=4 + 4 + 1 + 24 + 1 + 4)
        )
        for at in marker_ids:  # each marker's name length, which places what follows
            structure.extend(range(at + 4, at + 8))
    layout = _BodiesLayout(
        len(data),
        np.asarray(structure, dtype=np.intp),
        np.frombuffer(data, np.uint8)[structure],
        frame_id,
        tuple(names),
        _byte_index(ids, 4),
        np.asarray(valid, dtype=np.intp),
        _byte_index(poses, 8 * 7),
    )
    stamp = convert.stamp_ns(NsStamp(sec, nsec))
    return _bodies_gather(np.frombuffer(data, np.uint8), layout, stamp), layout


def _bodies_gather(raw: npt.NDArray[np.uint8], layout: _BodiesLayout, stamp: int) -> BodiesFrame:
    return BodiesFrame(
        stamp,
        layout.frame_id,
        list(layout.names),
        raw[layout.ids].view("<i4").tolist(),
        (raw[layout.valid] != 0).tolist(),
        raw[layout.poses].view("<f8").reshape(-1, 7),
    )


def bodies_frame_cdr(data: bytes, topic: str | None = None) -> BodiesFrame:
    """The frame of a serialized RigidBodies, read in place: what rclpy would otherwise
    turn into a few hundred objects a frame. With ``topic``, the layout of that topic's
    previous message is reused when this one has its structure (a system's bodies and
    their markers rarely change): the fields are then gathered at once, without a walk.
    Raises :class:`BadCdr` with the reason."""
    layout = _BODIES_LAYOUTS.get(topic) if topic is not None else None
    if layout is not None:
        raw = _same_structure(layout.length, layout.structure, layout.template, data)
        if raw is not None:
            return _bodies_gather(raw, layout, _stamp_ns(data))
    frame, layout = _walk_bodies(data)
    if topic is not None:
        _keep(_BODIES_LAYOUTS, topic, layout)
    return frame


def _stamp_ns(data: bytes) -> int:
    """The header stamp of a message whose structure was checked (it opens the message)."""
    sec, nsec = _STAMP.unpack_from(data, 4)
    return convert.stamp_ns(NsStamp(sec, nsec))


@dataclass(frozen=True)
class NsStamp:
    """A builtin_interfaces/Time read from bytes."""

    sec: int
    nanosec: int


def bodies_scene(msg: Any, system: str, style: Style = convert.DEFAULT_STYLE) -> bytes:
    """The bytes of :func:`convert.bodies_scene` (same rules: a body without a usable
    pose is left out, an untracked one grey and named so)."""
    return bodies_scene_of(bodies_frame(msg), system, style)


def bodies_scene_cdr(data: bytes, system: str, style: Style = convert.DEFAULT_STYLE) -> bytes:
    """The same from a serialized RigidBodies (:func:`bodies_frame_cdr`)."""
    return bodies_scene_of(bodies_frame_cdr(data), system, style)


@dataclass(frozen=True)
class _BodiesTemplate:
    """A bodies scene's bytes with every number left at zero, for the frames of one
    structure (the bodies drawn, their names, ids and tracking, the style, the length of
    the stamp and frame id that open each entity): ``heads`` are the byte indices of each
    entity's timestamp and frame id, ``doubles`` those of each body's ten doubles (the
    axes' pose: x, y, z, qx, qy, qz, qw; its label's position: x, y, z)."""

    data: npt.NDArray[np.uint8]
    heads: npt.NDArray[np.intp]
    doubles: npt.NDArray[np.intp]


#: templates of the bodies scenes seen last (at most MAX_LAYOUTS kept)
_BODIES_TEMPLATES: dict[tuple[Any, ...], _BodiesTemplate] = {}
# where the doubles lie in _POSE and _POSITION (each behind its one-byte key)
_POSE_DOUBLES = (3, 12, 21, 32, 41, 50, 59)
_POSITION_DOUBLES = (3, 12, 21)
_ZERO_POSE = _POSE.pack(
    0x0A, 27, 0x09, 0.0, 0x11, 0.0, 0x19, 0.0, 0x12, 36, 0x09, 0.0, 0x11, 0.0, 0x19, 0.0, 0x21, 0.0
)
_ZERO_POSITION = _POSITION.pack(0x0A, 27, 0x09, 0.0, 0x11, 0.0, 0x19, 0.0)


def _bodies_template(
    names: Sequence[str],
    ids: Sequence[int],
    tracked: Sequence[bool],
    *,
    system: str,
    style: Style,
    head_size: int,
) -> _BodiesTemplate:
    """The template of a scene of these bodies (those drawn): each entity as
    :func:`convert.body_entity` builds it (its axes as a line list posed at the body's
    pose, its name above it, grey and named so when not tracked), every double at zero."""
    c = _constants(style)
    head = bytes(head_size)
    parts: list[bytes] = []
    heads: list[int] = []
    doubles: list[int] = []
    at = 0
    for name, id_, valid in zip(names, ids, tracked):
        line = (
            c["line_head"]
            + c["line_pose"]
            + _ZERO_POSE
            + c["line_tail"]
            + (c["axes"] if valid else c["grey_axes"])
        )
        label = name if valid else f"{name} (not tracked)"
        text = (
            c["text_pose"]
            + _ZERO_POSITION
            + c["identity"]
            + c["text_style"]
            + (c["text_color"] if valid else c["grey_text_color"])
            + _string(6, label)
        )
        before = (
            head
            + _string(3, f"{system}/bodies/{name or id_}")
            + c["lifetime"]
            + (c["tracked"] if valid else c["not_tracked"])
        )
        line_field = _key(11, _LEN) + _varint(len(line))
        text_field = _key(13, _LEN) + _varint(len(text))
        entity = before + line_field + line + text_field + text
        prefix = _key(2, _LEN) + _varint(len(entity))
        start = at + len(prefix)
        pose_at = start + len(before) + len(line_field) + len(c["line_head"]) + len(c["line_pose"])
        text_at = start + len(before) + len(line_field) + len(line) + len(text_field) + len(c["text_pose"])
        heads.append(start)
        doubles += [pose_at + o for o in _POSE_DOUBLES] + [text_at + o for o in _POSITION_DOUBLES]
        parts.append(prefix + entity)
        at += len(prefix) + len(entity)
    return _BodiesTemplate(
        np.frombuffer(b"".join(parts), np.uint8),
        _byte_index(heads, head_size),
        _byte_index(doubles, 8),
    )


def bodies_scene_of(frame: BodiesFrame, system: str, style: Style) -> bytes:
    """The SceneUpdate bytes of a bodies frame, however it was read: the template of its
    structure (built once, kept while the bodies, their names and tracking stay the
    same) with the frame's stamp, frame id and poses written in with numpy. A body
    without a usable pose is left out."""
    head = _len(1, _time(frame.stamp_ns)) + _string(2, frame.frame_id)
    positions, quats = convert.usable_rows(frame.rows)
    usable = ~np.isnan(positions[:, 0])
    drawn = usable.tolist()
    names = tuple(n for n, ok in zip(frame.names, drawn) if ok)
    ids = tuple(i for i, ok in zip(frame.ids, drawn) if ok)
    tracked = tuple(bool(v) for v, ok in zip(frame.valid, drawn) if ok)
    key = (system, style, len(head), names, ids, tracked)
    template = _BODIES_TEMPLATES.get(key)
    if template is None:
        template = _bodies_template(names, ids, tracked, system=system, style=style, head_size=len(head))
        _keep(_BODIES_TEMPLATES, key, template)
    out = template.data.copy()
    out[template.heads] = np.tile(np.frombuffer(head, np.uint8), len(names))
    p = positions[usable]
    # the label's height: the same sum, in the same order, as convert.body_entity
    values = np.column_stack((p, quats[usable], p[:, :2], p[:, 2] + style.axis_length + style.text_size))
    out[template.doubles] = values.astype("<f8").view(np.uint8).reshape(-1)
    return out.tobytes()


#: the marker kinds, in the order of their entities; a MarkersFrame's ``kinds`` index it
MARKER_KINDS = ("labeled", "unlabeled", "occluded")


@dataclass
class MarkersFrame:
    """What a markers scene needs of a Markers message: its stamp (ns), frame, frame
    number, and per marker its position (n, 3) and kind (an index of MARKER_KINDS)."""

    stamp_ns: int
    frame_id: str
    frame_number: int
    positions: FloatArray
    kinds: npt.NDArray[np.intp]


def marker_kinds(ids: npt.ArrayLike, named: npt.ArrayLike, occluded: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """:func:`convert.marker_kind` for a whole frame at once (ids, whether each marker has a
    name, occlusion flags), as indices of MARKER_KINDS: occluded; else unlabeled when it
    has no id (-1) and no name; else labeled."""
    unlabeled = (np.asarray(ids) == -1) & ~np.asarray(named, dtype=bool)
    kinds: npt.NDArray[np.intp] = np.where(np.asarray(occluded, dtype=bool), 2, np.where(unlabeled, 1, 0))
    return kinds


def markers_frame(msg: Any) -> MarkersFrame:
    """The frame of a Markers message object (rclpy's, or rosbags')."""
    markers = list(msg.markers)
    positions = np.array(
        [(m.position.x, m.position.y, m.position.z) for m in markers], dtype=np.float64
    ).reshape(-1, 3)
    kinds = marker_kinds(
        [m.id for m in markers], [bool(m.name) for m in markers], [bool(m.occluded) for m in markers]
    )
    return MarkersFrame(
        convert.stamp_ns(msg.header.stamp), msg.header.frame_id, int(msg.frame_number), positions, kinds
    )


@dataclass(frozen=True)
class _MarkersLayout:
    """Where the fields of one Markers structure lie (cdr_reader.walk_message), reused as
    :class:`_BodiesLayout` is; byte indices into the message."""

    length: int
    structure: npt.NDArray[np.intp]
    template: npt.NDArray[np.uint8]
    frame_id: str
    number: int
    ids: npt.NDArray[np.intp]
    points: npt.NDArray[np.intp]
    occluded: npt.NDArray[np.intp]
    named: npt.NDArray[np.bool_]


#: per topic, the layout of its last Markers structure, or the length of its last message
#: when that was read without one
_MARKERS_LAYOUTS: dict[str, _MarkersLayout | int] = {}


def _walk_markers(data: bytes) -> _MarkersLayout:
    walk = walk_message("markers", data, BadCdr)
    fields = {f.name: f for f in walk.fields}
    structure = [0, 1, *walk.structure]  # the encapsulation too
    return _MarkersLayout(
        len(data),
        np.asarray(structure, dtype=np.intp),
        np.frombuffer(data, np.uint8)[structure],
        walk.frame_id,
        walk.number,
        _byte_index(fields["m_ids"].offsets, 4),
        _byte_index(fields["m_positions"].offsets, 24),
        np.asarray(fields["m_occluded"].offsets, dtype=np.intp),
        np.array([bool(name) for name in walk.item_names], dtype=bool),
    )


def _markers_gather(data: bytes, raw: npt.NDArray[np.uint8], layout: _MarkersLayout) -> MarkersFrame:
    return MarkersFrame(
        _stamp_ns(data),
        layout.frame_id,
        _U64.unpack_from(data, layout.number)[0],
        raw[layout.points].view("<f8").reshape(-1, 3),
        marker_kinds(raw[layout.ids].view("<i4"), layout.named, raw[layout.occluded] != 0),
    )


def markers_frame_cdr(data: bytes, topic: str | None = None) -> MarkersFrame:
    """The frame of a serialized Markers, read in place instead of through rclpy's
    deserializer and a Python object per marker. With ``topic``, once two of its
    messages in a row have the same length (a labeled system: its markers keep their
    names), the layout walked by mocap4r2_control's cdr_reader is kept and reused while
    the messages keep its structure, as for the bodies; otherwise (an unlabeled cloud
    whose count changes) each is read by the suite's Markers reader
    (:func:`mocap4r2_tools.tracking.markers_cdr.decode_markers`, whose cloud reading
    needs no walk). Every count and length is bounded by the bytes there; raises
    :class:`BadCdr` with the reason."""
    entry = _MARKERS_LAYOUTS.get(topic) if topic is not None else None
    if isinstance(entry, _MarkersLayout):
        raw = _same_structure(entry.length, entry.structure, entry.template, data)
        if raw is not None:
            return _markers_gather(data, raw, entry)
    last_length = entry.length if isinstance(entry, _MarkersLayout) else entry
    if topic is not None and last_length == len(data):
        layout = _walk_markers(data)
        _keep(_MARKERS_LAYOUTS, topic, layout)
        return _markers_gather(data, np.frombuffer(data, np.uint8), layout)
    try:
        decoded = decode_markers(data)
    except MarkersDecodeError as exc:
        raise BadCdr(str(exc)) from None
    if topic is not None:
        _keep(_MARKERS_LAYOUTS, topic, len(data))
    return MarkersFrame(
        convert.stamp_ns(NsStamp(decoded.sec, decoded.nanosec)),
        decoded.frame_id,
        decoded.frame_number,
        decoded.positions,
        marker_kinds(decoded.ids, decoded.named, decoded.occluded),
    )


def markers_scene(msg: Any, system: str, style: Style = convert.DEFAULT_STYLE) -> bytes:
    """The bytes of :func:`convert.markers_scene`."""
    return markers_scene_of(markers_frame(msg), system, style)


def markers_scene_cdr(data: bytes, system: str, style: Style = convert.DEFAULT_STYLE) -> bytes:
    """The same from a serialized Markers (:func:`markers_frame_cdr`)."""
    return markers_scene_of(markers_frame_cdr(data), system, style)


def markers_scene_of(frame: MarkersFrame, system: str, style: Style) -> bytes:
    """The SceneUpdate bytes of a markers frame, however it was read: per kind, an entity
    whose spheres are one fixed-size record each (key, length, pose, size, colour), all
    written at once with numpy into copies of one record (a non-finite position is left
    out)."""
    c = _constants(style)
    finite = np.isfinite(frame.positions).all(axis=1)
    start = _len(1, _time(frame.stamp_ns)) + _string(2, frame.frame_id)
    metadata = _len(6, _string(1, "frame_number") + _string(2, str(frame.frame_number)))
    entities = []
    for index, kind in enumerate(MARKER_KINDS):
        points = frame.positions[finite & (frame.kinds == index)]
        tail = c["identity"] + c["sphere_size"] + c[kind]
        head = _key(9, _LEN) + _varint(len(c["sphere_pose"]) + _POSITION.size + len(tail)) + c["sphere_pose"]
        record = np.frombuffer(
            head + _POSITION.pack(0x0A, 27, 0x09, 0.0, 0x11, 0.0, 0x19, 0.0) + tail, np.uint8
        )
        spheres = np.tile(record, (len(points), 1))
        for axis, at in enumerate((3, 12, 21)):  # the doubles behind their keys in _POSITION
            column = len(head) + at
            spheres[:, column : column + 8] = points[:, axis].astype("<f8").view(np.uint8).reshape(-1, 8)
        entities.append(
            _len(
                2,
                start + _string(3, f"{system}/markers/{kind}") + c["lifetime"] + metadata + spheres.tobytes(),
            )
        )
    return b"".join(entities)
