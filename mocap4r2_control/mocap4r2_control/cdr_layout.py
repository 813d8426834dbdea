"""Where every byte of a serialized Markers, RigidBodies, Skeletons and TFMessage goes.

This module is the one place that writes down the wire rules the encoders of cdr.py
follow. They are those of ``rclpy.serialization.serialize_message`` (XCDR1 little endian,
"plain CDR", what rmw_fastrtps writes), and test/mocap4r2_control/test_cdr.py checks the
bytes against it, byte for byte:

  * the message is the 4-byte encapsulation header ``00 01 00 00`` and then the data;
  * offsets and alignment count from the first byte after the encapsulation header;
  * a primitive is aligned to its own size (bool 1, int32/uint32/float32 4,
    float64/uint64 8); padding bytes are zero here (Fast DDS leaves them uninitialised,
    so those bytes are the only ones that may differ from ``serialize_message``);
  * a string is a uint32 length counting the terminating NUL, the UTF-8 bytes, the NUL;
  * a sequence is a uint32 element count followed by the elements;
  * nested messages add no alignment of their own: their first field aligns itself.

The byte layout of a message depends only on its counts and strings. A layout here is
computed once, vectorised (no Python loop over markers or segments: 0.1-0.3 ms for 500
markers): one buffer whose data start is 8-byte aligned in memory, with strings, lengths
and counts written in place, and the index of every numeric field in a typed view of that
buffer. An encoder then only writes a frame's numbers through those indices.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = [
    "ENCAPSULATION",
    "MARKER_TAIL",
    "POSE_WIDTH",
    "Array",
    "BodiesLayout",
    "Buffer",
    "Header",
    "LayoutCache",
    "MarkerFields",
    "MarkersLayout",
    "MarkersView",
    "SkeletonsLayout",
    "Strings",
    "TFLayout",
    "align",
    "marker_point",
]

#: CDR little endian, XCDR1 ("plain CDR"), options 0: what rmw_fastrtps writes.
ENCAPSULATION = b"\x00\x01\x00\x00"
#: x, y, z, qx, qy, qz, qw: geometry_msgs/Pose and Transform alike
POSE_WIDTH = 7

#: numpy arrays of any dtype: offsets, field indices, values and raw bytes
Array = npt.NDArray[Any]


def align(offset: Any, size: int) -> Any:
    """``offset`` rounded up to a multiple of ``size`` (a power of two); ints or int64 arrays.

    The one alignment rule of the suite's CDR: the writers here and the readers of
    cdr_reader.py both count ``offset`` from the first byte after the encapsulation."""
    return (offset + (size - 1)) & -size


#: bytes from a Marker's Point to the end of the Marker: 3 float64, bool occluded,
#: padding to 4, float32 residual
MARKER_TAIL = 32


def marker_point(starts: Any, name_sizes: Any) -> Any:
    """Offset of a Marker's Point for Markers at ``starts`` whose names take
    ``name_sizes`` bytes with their NUL (int32 id, uint32 length, name, Point 8-aligned);
    ints or int64 arrays."""
    return align(starts + 8 + name_sizes, 8)


# ---------------------------------------------------------------------------- buffer
class Buffer:
    """One serialized message: encapsulation header + data, the data starting 8-byte
    aligned in memory so that typed views index every aligned field directly."""

    __slots__ = ("message", "u8", "i32", "u32", "f32", "f64", "u64")

    def __init__(self, data_size: int):
        padded = align(data_size, 8)
        raw = np.zeros(padded + 16, dtype=np.uint8)
        shift = (-(raw.ctypes.data + 4)) % 8
        self.message: Array = raw[shift : shift + 4 + data_size]
        self.message[:4] = np.frombuffer(ENCAPSULATION, dtype=np.uint8)
        data = raw[shift + 4 : shift + 4 + padded]
        self.u8: Array = data
        self.i32: Array = data.view("<i4")
        self.u32: Array = data.view("<u4")
        self.f32: Array = data.view("<f4")
        self.f64: Array = data.view("<f8")
        self.u64: Array = data.view("<u8")

    def put_strings(self, length_offsets: Array, strings: Strings) -> None:
        """Each string's uint32 length at ``length_offsets``, its bytes and NUL right after."""
        if not len(length_offsets):
            return
        self.u32[length_offsets // 4] = strings.sizes
        # byte j of string k goes to length_offsets[k] + 4 + (j - first byte of k)
        shift = length_offsets + 4 - strings.starts
        self.u8[np.repeat(shift, strings.sizes) + np.arange(strings.raw.size)] = strings.raw

    def tobytes(self) -> bytes:
        """The whole message, copied out (later frames write into the same buffer)."""
        return self.message.tobytes()


@dataclass(frozen=True, slots=True)
class Strings:
    """Strings as serialized: UTF-8 bytes each followed by a NUL, concatenated."""

    raw: Array  # uint8, all strings with their NULs
    sizes: Array  # int64 byte count of each string including its NUL
    starts: Array  # int64 index of each string's first byte in raw

    @classmethod
    def encode(cls, strings: Sequence[str], what: str) -> Strings:
        """``strings`` as serialized; ValueError naming ``what`` for what CDR cannot carry."""
        count = len(strings)
        if count == 0:
            empty = np.zeros(0, dtype=np.int64)
            return cls(np.zeros(0, dtype=np.uint8), empty, empty)
        try:
            joined = "\0".join(strings)
        except TypeError:
            bad = next(s for s in strings if not isinstance(s, str))
            raise ValueError(f"{what}: names must be str, got {type(bad).__name__}") from None
        if joined.count("\0") != count - 1:
            # serialize_message would silently cut the string at the NUL
            raise ValueError(f"{what}: a name contains a NUL character")
        try:
            raw = (joined + "\0").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{what}: a name is not valid UTF-8 text ({exc.reason})") from None
        data = np.frombuffer(raw, dtype=np.uint8)
        # UTF-8 has no zero byte except the NUL itself: the NULs split the strings
        ends = np.flatnonzero(data == 0)
        starts = np.zeros(count, dtype=np.int64)
        starts[1:] = ends[:-1] + 1
        return cls(data, ends - starts + 1, starts)

    @classmethod
    def one(cls, text: str, what: str) -> Strings:
        """A single string (a frame_id), refused unless it is a str."""
        if not isinstance(text, str):
            raise ValueError(f"{what} must be str, got {type(text).__name__}")
        return cls.encode((text,), what)


def _element_starts(run_starts: Array, offsets: Array, spans: Array) -> Array:
    """Offset of every element of consecutive runs (run i = elements offsets[i]:offsets[i+1],
    laid out from run_starts[i]) given each element's span in bytes."""
    csum = np.zeros(spans.size + 1, dtype=np.int64)
    np.cumsum(spans, out=csum[1:])
    starts: Array = np.repeat(run_starts - csum[offsets[:-1]], np.diff(offsets)) + csum[:-1]
    return starts


def _run_residues(run_starts: Array, offsets: Array, total: int) -> Array:
    """Start offset mod 8 of every element: the run's for its first element, 0 for the
    others (every element type here ends 8-aligned when it holds at least one float64)."""
    residues = np.zeros(total, dtype=np.int64)
    nonempty = offsets[1:] > offsets[:-1]
    residues[offsets[:-1][nonempty]] = run_starts[nonempty] % 8
    return residues


def _fields(starts: Array, width: int, itemsize: int) -> Array:
    """Indices in an ``itemsize`` view of ``width`` consecutive fields at each byte offset."""
    indices: Array = (starts // itemsize)[:, None] + np.arange(width)
    return indices


# ---------------------------------------------------------------------------- header
@dataclass(frozen=True, slots=True)
class Header:
    """std_msgs/Header + uint64 frame_number + the count of the one sequence that follows.

    The stamp is always at the start of the data: int32 sec at byte 0, uint32 nanosec
    at byte 4 (indices 0 and 1 of the 4-byte views)."""

    frame_id: Strings
    frame_number: int  # byte offset
    count: int  # byte offset of the sequence count
    first: int  # byte offset of the first element

    @classmethod
    def layout(cls, frame_id: str) -> Header:
        """Where the header's fields go for this ``frame_id``."""
        text = Strings.one(frame_id, "frame_id")
        # sec @0, nanosec @4, frame_id length @8, its bytes @12
        number = align(12 + int(text.sizes[0]), 8)
        return cls(text, number, number + 8, number + 12)

    def put(self, buf: Buffer, count: int) -> None:
        """Write the frame_id and the sequence count."""
        buf.put_strings(np.array([8]), self.frame_id)
        buf.u32[self.count // 4] = count


# ---------------------------------------------------------------------------- markers
def _marker_spans(residues: Array, names: Strings) -> Array:
    # int32 id, string name, Point (8-aligned), bool occluded, float32 residual
    spans: Array = marker_point(residues, names.sizes) - residues + MARKER_TAIL
    return spans


@dataclass(frozen=True, slots=True)
class MarkerFields:
    """Indices of a run of Marker fields in the typed views of a buffer."""

    ids: Array  # i32
    positions: Array  # f64, (m, 3)
    occluded: Array  # u8
    residuals: Array  # f32

    @classmethod
    def place(cls, buf: Buffer, starts: Array, names: Strings) -> MarkerFields:
        """Markers starting at byte offsets ``starts``; their names are written now."""
        buf.put_strings(starts + 4, names)
        point = marker_point(starts, names.sizes)
        return cls(starts // 4, _fields(point, 3, 8), point + 24, (point + 28) // 4)

    def write(self, buf: Buffer, *, ids: Array, positions: Array, occluded: Array, residuals: Array) -> None:
        """A frame's numbers, already checked for shape and type."""
        buf.i32[self.ids] = ids
        buf.f64[self.positions] = positions
        buf.u8[self.occluded] = occluded
        buf.f32[self.residuals] = residuals

    def first(self, count: int) -> MarkerFields:
        """The first ``count`` markers' fields."""
        return MarkerFields(
            self.ids[:count], self.positions[:count], self.occluded[:count], self.residuals[:count]
        )


@dataclass(frozen=True, slots=True)
class MarkersLayout:
    """Markers for ``head + (tail,) * capacity`` names. An element's place depends only on
    the elements before it, so the first ``n`` elements of this layout are also the layout
    of any shorter list of names that starts the same way: a varying number of unlabeled
    markers (equal, usually empty, names appended last) reuses one layout."""

    buf: Buffer
    header: Header
    markers: MarkerFields
    ends: Array  # byte offset just after each element
    frame_id: str
    head: tuple[str, ...]
    tail: str | None  # the repeated last name, None without elements

    @classmethod
    def build(cls, frame_id: str, names: tuple[str, ...], min_spare: int = 0) -> MarkersLayout:
        """Layout for ``names`` and at least ``min_spare`` (at least as many as there are
        already: room grows geometrically) more copies of the last name."""
        head_len = len(names)
        while head_len and names[head_len - 1] == names[-1]:  # the run of equal names at the end
            head_len -= 1
        tail = names[-1] if names else None
        if tail is not None:
            names += (tail,) * max(min_spare, len(names) - head_len)
        header = Header.layout(frame_id)
        strings = Strings.encode(names, "markers")
        count = len(names)
        run = np.array([header.first], dtype=np.int64)
        offsets = np.array([0, count], dtype=np.int64)
        spans = _marker_spans(_run_residues(run, offsets, count), strings)
        starts = _element_starts(run, offsets, spans)
        buf = Buffer(header.first + int(spans.sum()))
        header.put(buf, count)
        markers = MarkerFields.place(buf, starts, strings)
        return cls(buf, header, markers, starts + spans, frame_id, names[:head_len], tail)

    @property
    def capacity(self) -> int:
        """How many markers the layout has room for."""
        return len(self.ends)

    def fits(self, frame_id: str, names: Sequence[str]) -> bool:
        """True when names = head + some (possibly none) tail names, within capacity."""
        head = len(self.head)
        if frame_id != self.frame_id or not head <= len(names) <= self.capacity:
            return False
        rest = names[head:]
        return (not rest or rest.count(self.tail) == len(rest)) and names[:head] == self.head

    def first(self, count: int) -> MarkersView:
        """The message of the first ``count`` markers."""
        end = int(self.ends[count - 1]) if count else self.header.first
        return MarkersView(self, self.markers.first(count), self.buf.message[: 4 + end])


@dataclass(frozen=True, slots=True)
class MarkersView:
    """The first ``count`` markers of a layout: what one message uses of it."""

    layout: MarkersLayout
    markers: MarkerFields
    message: Array


# ---------------------------------------------------------------------------- rigid bodies
@dataclass(frozen=True, slots=True)
class BodiesLayout:
    """RigidBodies: each body's fields, then the fields of every body's markers."""

    buf: Buffer
    header: Header
    ids: Array  # i32
    valid: Array  # u8
    poses: Array  # f64, (n, 7)
    errors: Array  # f32
    markers: MarkerFields

    @classmethod
    def build(
        cls, frame_id: str, names: Sequence[str], offsets: Array, marker_names: Sequence[str]
    ) -> BodiesLayout:
        """Layout for bodies ``names`` whose markers are ``marker_names[offsets[i]:offsets[i + 1]]``."""
        header = Header.layout(frame_id)
        body_names = Strings.encode(names, "rigid bodies")
        marker_strings = Strings.encode(marker_names, "rigid body markers")
        count = len(names)
        # a body's markers start 8-aligned (right after its uint32 count, which follows
        # float32 mean_error at Pose + 56), so their spans do not depend on where the body is
        marker_spans = _marker_spans(np.zeros(len(marker_names), dtype=np.int64), marker_strings)
        csum = np.zeros(marker_spans.size + 1, dtype=np.int64)
        np.cumsum(marker_spans, out=csum[1:])
        run_bytes = csum[offsets[1:]] - csum[offsets[:-1]]
        # body: int32 id, string name, bool tracking_valid, Pose (8-aligned),
        # float32 mean_error, uint32 count, markers; only the first body may start 4 mod 8
        residues = np.zeros(count, dtype=np.int64)
        if count:
            residues[0] = header.first % 8
        spans = align(residues + 9 + body_names.sizes, 8) - residues + 64 + run_bytes
        starts = _element_starts(np.array([header.first]), np.array([0, count]), spans)
        pose = align(starts + 9 + body_names.sizes, 8)
        buf = Buffer(header.first + int(spans.sum()))
        header.put(buf, count)
        buf.put_strings(starts + 4, body_names)
        buf.u32[(pose + 60) // 4] = np.diff(offsets)
        marker_starts = _element_starts(pose + 64, offsets, marker_spans)
        markers = MarkerFields.place(buf, marker_starts, marker_strings)
        return cls(
            buf,
            header,
            starts // 4,
            starts + 8 + body_names.sizes,
            _fields(pose, POSE_WIDTH, 8),
            (pose + 56) // 4,
            markers,
        )


# ---------------------------------------------------------------------------- skeletons
def _segment_spans(residues: Array, names: Strings) -> Array:
    # int32 id, string name, int32 parent_id, bool tracking_valid, Pose (8-aligned)
    spans: Array = align(align(residues + 8 + names.sizes, 4) + 5, 8) - residues + 56
    return spans


@dataclass(frozen=True, slots=True)
class SkeletonsLayout:
    """Skeletons: each skeleton's fields and those of its segments."""

    buf: Buffer
    header: Header
    ids: Array  # i32
    valid: Array  # u8
    segment_ids: Array  # i32
    parent_ids: Array  # i32
    segment_valid: Array  # u8
    segment_poses: Array  # f64, (m, 7)

    @classmethod
    def build(
        cls, frame_id: str, names: Sequence[str], offsets: Array, segment_names: Sequence[str]
    ) -> SkeletonsLayout:
        """Layout for skeletons ``names`` whose segments are ``segment_names[offsets[i]:offsets[i + 1]]``."""
        header = Header.layout(frame_id)
        skeleton_names = Strings.encode(names, "skeletons")
        segment_strings = Strings.encode(segment_names, "segments")
        count = len(names)
        total = len(segment_names)
        spans_at = {r: _segment_spans(np.full(total, r, dtype=np.int64), segment_strings) for r in (0, 4)}
        csum0 = np.zeros(total + 1, dtype=np.int64)
        np.cumsum(spans_at[0], out=csum0[1:])
        # a skeleton without segments ends 4-aligned, so where the next one starts
        # depends on all before it: walk the (few) skeletons, not their segments
        starts = np.zeros(count, dtype=np.int64)
        runs = np.zeros(count, dtype=np.int64)
        offs = offsets.tolist()
        sizes = skeleton_names.sizes.tolist()
        at = header.first
        for i in range(count):
            starts[i] = at
            run = align(at + 9 + sizes[i], 4) + 4  # int32 id, string name, bool, uint32 count
            runs[i] = run
            a, b = offs[i], offs[i + 1]
            at = run if a == b else run + int(spans_at[run % 8][a]) + int(csum0[b] - csum0[a + 1])
        residues = _run_residues(runs, offsets, total)
        spans = np.where(residues == 0, spans_at[0], spans_at[4])
        seg_starts = _element_starts(runs, offsets, spans)
        parent = align(seg_starts + 8 + segment_strings.sizes, 4)
        pose = align(parent + 5, 8)
        buf = Buffer(at)
        header.put(buf, count)
        buf.put_strings(starts + 4, skeleton_names)
        buf.u32[(runs - 4) // 4] = np.diff(offsets)
        buf.put_strings(seg_starts + 4, segment_strings)
        return cls(
            buf,
            header,
            starts // 4,
            starts + 8 + skeleton_names.sizes,
            seg_starts // 4,
            parent // 4,
            parent + 4,
            _fields(pose, POSE_WIDTH, 8),
        )


# ---------------------------------------------------------------------------- tf
@dataclass(frozen=True, slots=True)
class TFLayout:
    """TFMessage: one TransformStamped per child frame, each with its own header."""

    buf: Buffer
    sec: Array  # i32
    nanosec: Array  # u32
    poses: Array  # f64, (n, 7): Transform is Vector3 + Quaternion, like Pose

    @classmethod
    def build(cls, frame_id: str, child_frame_ids: Sequence[str]) -> TFLayout:
        """Layout for transforms ``frame_id`` -> each of ``child_frame_ids``."""
        parent = Strings.one(frame_id, "frame_id")
        children = Strings.encode(child_frame_ids, "child_frame_ids")
        count = len(child_frame_ids)
        parent_size = int(parent.sizes[0])
        # TransformStamped: Header (int32 sec, uint32 nanosec, string frame_id),
        # string child_frame_id, Transform (8-aligned); the first one starts at 4
        residues = np.zeros(count, dtype=np.int64)
        if count:
            residues[0] = 4
        spans = align(align(residues + 12 + parent_size, 4) + 4 + children.sizes, 8) - residues + 56
        starts = _element_starts(np.array([4]), np.array([0, count]), spans)
        child = align(starts + 12 + parent_size, 4)
        pose = align(child + 4 + children.sizes, 8)
        buf = Buffer(4 + int(spans.sum()))
        buf.u32[0] = count
        if count:
            parents = Strings(
                np.tile(parent.raw, count),
                np.full(count, parent_size, dtype=np.int64),
                np.arange(count, dtype=np.int64) * parent_size,
            )
            buf.put_strings(starts + 8, parents)
        buf.put_strings(child, children)
        return cls(buf, starts // 4, starts // 4 + 1, _fields(pose, POSE_WIDTH, 8))


# ---------------------------------------------------------------------------- cache
L = TypeVar("L")
#: what a layout depends on: frame_id, names, offsets as bytes and their dtype
KeyPart = str | bytes | Sequence[str]


class LayoutCache(Generic[L]):
    """Layouts by key, most recently used kept. ``parts`` of a lookup are strings, bytes
    and name sequences; the last lookup's parts are checked first, tuples by identity
    (immutable, and adapters reuse theirs) and str/bytes by equality, before hashing."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError("cache_size must be at least 1")
        self.size = size
        self.builds = 0
        self._layouts: OrderedDict[Hashable, L] = OrderedDict()
        self._last_parts: tuple[KeyPart, ...] | None = None
        self._last: L | None = None

    def get(self, parts: tuple[KeyPart, ...], build: Callable[[], L]) -> L:
        """The layout for ``parts``, built by ``build`` when it is not kept."""
        last, kept = self._last_parts, self._last
        if last is not None and kept is not None:
            # the same parts as the last lookup (the usual case, every frame): a plain loop,
            # since a function call per part would cost more than the comparisons
            for a, b in zip(parts, last):
                if a is b:
                    # a list may have been changed in place since: only immutable values qualify
                    if type(a) not in _IMMUTABLE:
                        break
                elif type(a) not in _TEXT or a != b:
                    break
            else:
                return kept
        key = tuple(_hashable(p) for p in parts)
        try:
            layout = self._layouts.get(key)
        except TypeError:  # unhashable, so not str: let the layout say what is wrong
            layout = None
        if layout is None:
            layout = build()
            self.builds += 1
            self._layouts[key] = layout
            if len(self._layouts) > self.size:
                self._layouts.popitem(last=False)
        else:
            self._layouts.move_to_end(key)
        self._last_parts = parts
        self._last = layout
        return layout


def _hashable(part: KeyPart) -> Hashable:
    # a names list becomes a tuple; an unhashable element still fails the lookup
    return part if isinstance(part, (str, bytes, tuple)) else tuple(part)


_IMMUTABLE = (tuple, str, bytes)
_TEXT = (str, bytes)
