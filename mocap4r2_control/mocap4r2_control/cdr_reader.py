"""Reading serialized Markers, RigidBodies and Skeletons: the reader's side of cdr_layout.py.

cdr_layout.py writes down the wire rules (XCDR1 little endian, alignment counted from
the first byte after the 4-byte encapsulation header, strings and sequences as uint32
length/count first) and the writers follow them; this module reads by the same rules,
with the same :func:`~mocap4r2_control.cdr_layout.align` and Marker layout
(:func:`~mocap4r2_control.cdr_layout.marker_point`), so that a change of the wire
format is made once for both directions. Two readers build on it:

  * the replay (mocap4r2_drivers/replay/convert.py) walks one message with
    :func:`walk_message` to learn where every field lies, then gathers the fields of a
    whole batch of messages of that structure with numpy;
  * the marker tracker's point-cloud fast path (mocap4r2_tools/tracking/markers_cdr.py)
    reads the header with :class:`CdrCursor` and computes the markers' places at once
    when every name is empty, walking them with :class:`MarkerOffsets` otherwise.

Pure Python and numpy, no rclpy. Every count and length read is checked against the
bytes that are there before anything is allocated for it: a message that does not hold
what it says raises the reader's error class (a :class:`CdrDecodeError`) with the reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .cdr_layout import MARKER_TAIL, align, marker_point

__all__ = [
    "KINDS",
    "MAX_ELEMENTS",
    "CdrCursor",
    "CdrDecodeError",
    "FieldOffsets",
    "MarkerOffsets",
    "MessageWalk",
    "check_encapsulation",
    "marker_places",
    "walk_message",
]

_U32 = struct.Struct("<I")
#: the most elements a sequence may claim; a count above it is corrupt data, not a scene
MAX_ELEMENTS = 1_000_000
#: message kinds :func:`walk_message` reads
KINDS = ("markers", "rigid_bodies", "skeletons")


class CdrDecodeError(ValueError):
    """Bytes that are not the message they claim to be (truncated, big endian, corrupt).
    Each reader raises its own subclass, so that its callers catch what it documents."""


def check_encapsulation(data: bytes, error: type[CdrDecodeError] = CdrDecodeError) -> None:
    """Refuse anything but the encapsulation the writers write (``00 01``: little-endian
    plain CDR, what rmw_fastrtps writes); the one check of the suite's readers."""
    if len(data) < 4 or data[0] != 0 or data[1] != 1:
        raise error(f"not little-endian plain CDR (encapsulation {bytes(data[:4]).hex() or 'missing'})")


class CdrCursor:
    """A read position in one serialized message, moved field by field.

    Offsets returned are counted from the start of ``data`` (encapsulation included);
    alignment is counted from the byte after the encapsulation, as the wire rules say.
    ``structure``, when given, collects the offset of every byte that fixes the layout
    (each count and string length and each string's bytes): the replay compares those
    bytes to know that a message has the structure of the one walked before."""

    __slots__ = ("data", "pos", "structure", "error")

    def __init__(
        self,
        data: bytes,
        *,
        error: type[CdrDecodeError] = CdrDecodeError,
        structure: list[int] | None = None,
    ) -> None:
        check_encapsulation(data, error)
        self.data = data
        self.pos = 0  # relative to byte 4, where alignment counts from
        self.structure = structure
        self.error = error

    @property
    def offset(self) -> int:
        """Where the next field starts (unaligned), counted from the start of ``data``."""
        return self.pos + 4

    def _need(self, size: int) -> None:
        if 4 + self.pos + size > len(self.data):
            raise self.error(f"truncated message: {size} bytes needed at offset {self.pos + 4}")

    def fixed(self, size: int, count: int = 1) -> int:
        """Skip ``count`` values of ``size`` bytes (aligned to ``size``); their offset."""
        self.pos = align(self.pos, size)
        self._need(size * count)
        start = self.pos + 4
        self.pos += size * count
        return start

    def count(self, limit: int = MAX_ELEMENTS, what: str = "elements", min_size: int = 0) -> int:
        """A uint32 sequence count (or string length), refused above ``limit`` and when
        ``min_size`` bytes per element cannot fit in the bytes left."""
        start = self.fixed(4)
        if self.structure is not None:
            self.structure.extend(range(start, start + 4))
        value: int = _U32.unpack_from(self.data, start)[0]
        if value > limit:
            raise self.error(f"{value} {what}, more than the {limit} allowed")
        left = len(self.data) - 4 - self.pos
        if value * min_size > left:
            raise self.error(f"{value} {what} cannot fit in the {left} bytes left")
        return value

    def string(self) -> str:
        """A string: uint32 length counting the NUL, the UTF-8 bytes, the NUL."""
        length = self.count(what="bytes of a string")
        if length < 1:
            raise self.error(f"a string of length 0 at offset {self.pos}: CDR counts the NUL")
        self._need(length)
        start = self.pos + 4
        if self.structure is not None:
            self.structure.extend(range(start, start + length))
        self.pos += length
        return self.data[start : start + length - 1].decode("utf-8", "replace")

    def header(self) -> tuple[int, str, int]:
        """std_msgs/Header and the uint64 frame_number that follows it in every
        mocap4r2 collection: (offset of the stamp, frame_id, offset of frame_number)."""
        stamp = self.fixed(4, 2)
        frame_id = self.string()
        number = self.fixed(8)
        return stamp, frame_id, number


@dataclass
class MarkerOffsets:
    """Offsets of the fields of the Markers walked so far (int32 id, string name, Point,
    bool occluded, float32 residual)."""

    names: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    occluded: list[int] = field(default_factory=list)
    residuals: list[int] = field(default_factory=list)

    def walk(self, cursor: CdrCursor) -> None:
        """Read one Marker at the cursor."""
        self.ids.append(cursor.fixed(4))
        self.names.append(cursor.string())
        self.positions.append(cursor.fixed(8, 3))
        self.occluded.append(cursor.fixed(1))
        self.residuals.append(cursor.fixed(4))


def marker_places(cursor: CdrCursor, count: int) -> tuple[list[int], list[int]]:
    """The offsets of the ids and Points of ``count`` Markers at the cursor, walked name
    length by name length (only the lengths are read: no name is decoded), the cursor
    left after the last; what a reader of ids and positions needs, several times faster
    than :class:`MarkerOffsets` for labeled markers."""
    data, error = cursor.data, cursor.error
    size = len(data) - 4
    ids: list[int] = []
    points: list[int] = []
    at = cursor.pos
    unpack = _U32.unpack_from
    for i in range(count):
        at = align(at, 4)
        if at + 8 > size:
            raise error(f"truncated message: marker {i} at offset {at + 4}")
        name_len = unpack(data, at + 8)[0]
        point = marker_point(at, name_len)
        if name_len < 1 or point + MARKER_TAIL > size:
            raise error(f"marker {i}: name length {name_len} does not fit in the message")
        ids.append(at + 4)
        points.append(point + 4)
        at = point + MARKER_TAIL
    cursor.pos = at
    return ids, points


@dataclass(frozen=True)
class FieldOffsets:
    """One numeric field of every element walked: the offset of each element's value
    (``width`` consecutive values of ``dtype`` from there)."""

    name: str
    offsets: list[int]
    dtype: str
    width: int


@dataclass
class MessageWalk:
    """Where the fields of one Markers, RigidBodies or Skeletons message lie.

    ``names``/``counts`` are those of the collection's elements (bodies or skeletons);
    ``item_names`` those of their items (markers or segments, in order); ``structure``
    the offsets of every byte that fixes the layout."""

    frame_id: str
    number: int  # offset of frame_number
    count: int  # elements in the collection
    fields: list[FieldOffsets]
    names: tuple[str, ...] = ()
    counts: list[int] = field(default_factory=list)
    item_names: tuple[str, ...] = ()
    structure: list[int] = field(default_factory=list)


def _marker_fields(m: MarkerOffsets) -> list[FieldOffsets]:
    return [
        FieldOffsets("m_ids", m.ids, "<i4", 1),
        FieldOffsets("m_positions", m.positions, "<f8", 3),
        FieldOffsets("m_occluded", m.occluded, "u1", 1),
        FieldOffsets("m_residuals", m.residuals, "<f4", 1),
    ]


def walk_message(kind: str, data: bytes, error: type[CdrDecodeError] = CdrDecodeError) -> MessageWalk:
    """Walk one message of ``kind`` (``markers``, ``rigid_bodies`` or ``skeletons``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    structure: list[int] = []
    w = CdrCursor(data, error=error, structure=structure)
    _, frame_id, number = w.header()
    n = w.count()
    m = MarkerOffsets()
    if kind == "markers":
        for _ in range(n):
            m.walk(w)
        return MessageWalk(
            frame_id, number, n, _marker_fields(m), item_names=tuple(m.names), structure=structure
        )
    ids: list[int] = []
    names: list[str] = []
    valid: list[int] = []
    counts: list[int] = []
    if kind == "rigid_bodies":
        pose: list[int] = []
        errors: list[int] = []
        for _ in range(n):
            ids.append(w.fixed(4))
            names.append(w.string())
            valid.append(w.fixed(1))
            pose.append(w.fixed(8, 7))
            errors.append(w.fixed(4))
            k = w.count()
            counts.append(k)
            for _ in range(k):
                m.walk(w)
        fields = [
            FieldOffsets("ids", ids, "<i4", 1),
            FieldOffsets("valid", valid, "u1", 1),
            FieldOffsets("pose", pose, "<f8", 7),
            FieldOffsets("errors", errors, "<f4", 1),
            *_marker_fields(m),
        ]
        return MessageWalk(frame_id, number, n, fields, tuple(names), counts, tuple(m.names), structure)
    seg_ids: list[int] = []
    seg_names: list[str] = []
    parents: list[int] = []
    seg_valid: list[int] = []
    seg_pose: list[int] = []
    for _ in range(n):
        ids.append(w.fixed(4))
        names.append(w.string())
        valid.append(w.fixed(1))
        k = w.count()
        counts.append(k)
        for _ in range(k):
            seg_ids.append(w.fixed(4))
            seg_names.append(w.string())
            parents.append(w.fixed(4))
            seg_valid.append(w.fixed(1))
            seg_pose.append(w.fixed(8, 7))
    fields = [
        FieldOffsets("ids", ids, "<i4", 1),
        FieldOffsets("valid", valid, "u1", 1),
        FieldOffsets("seg_ids", seg_ids, "<i4", 1),
        FieldOffsets("parents", parents, "<i4", 1),
        FieldOffsets("seg_valid", seg_valid, "u1", 1),
        FieldOffsets("pose", seg_pose, "<f8", 7),
    ]
    return MessageWalk(frame_id, number, n, fields, tuple(names), counts, tuple(seg_names), structure)
