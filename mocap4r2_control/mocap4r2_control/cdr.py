"""Serialized (CDR) Markers, RigidBodies, Skeletons and TFMessage straight from numpy arrays.

``rclpy``'s ``Publisher.publish`` also takes ``bytes``: the message already serialized
the way ``rclpy.serialization.serialize_message`` does it (XCDR1 little endian behind
the 4-byte encapsulation header ``00 01 00 00``). Converting message objects to C field
by field costs milliseconds for a frame of a few hundred markers; these encoders write
the same bytes with a handful of vectorised numpy assignments instead.

Wire rules (checked byte for byte against ``serialize_message`` in test/core/test_cdr.py):
  * offsets and alignment count from the first byte after the encapsulation header;
  * a primitive is aligned to its own size (bool 1, int32/uint32/float32 4,
    float64/uint64 8); padding bytes are zero here (Fast DDS leaves them uninitialised,
    so those bytes are the only ones that may differ from ``serialize_message``);
  * a string is a uint32 length counting the terminating NUL, the UTF-8 bytes, the NUL;
  * a sequence is a uint32 element count followed by the elements;
  * nested messages add no alignment of their own: their first field aligns itself.

How it is fast: the byte layout of a message depends only on its counts and strings. An
encoder computes it once (every numeric field's index in a typed view of one buffer whose
data start is 8-byte aligned in memory; strings, lengths and counts written in place) and
keeps it in a small LRU cache keyed by the strings and counts: by identity for tuples
(the normal case: adapters reuse their names tuples), else by hash and equality. A frame
then only writes its numbers into that buffer and copies it out. Since an element's
place depends only on what precedes it, a Markers layout built with spare copies of its
last name also serves every shorter list that starts the same way: a varying number of
unlabeled markers (empty names, appended last) costs no rebuild. Computing a layout is
vectorised too (no Python loop over markers or segments: 0.1-0.3 ms for 500 markers),
so even a miss every frame stays far cheaper than message objects.

Callers: pass the same names tuple object from frame to frame when the names do not
change (an identity check then replaces hashing); lists work but are hashed every call.
An encoder is not thread-safe: use one per publishing thread.
"""

from __future__ import annotations

import math
import operator
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

__all__ = ["ENCAPSULATION", "MarkersEncoder", "RigidBodiesEncoder", "SkeletonsEncoder", "TFMessageEncoder"]

#: CDR little endian, XCDR1 ("plain CDR"), options 0: what rmw_fastrtps writes.
ENCAPSULATION = b"\x00\x01\x00\x00"

_INT32 = (-(2**31), 2**31 - 1)
_UINT32 = (0, 2**32 - 1)
_UINT64 = (0, 2**64 - 1)
_INT32_DTYPE = np.dtype("<i4")
_POSE_WIDTH = 7  # x, y, z, qx, qy, qz, qw: geometry_msgs/Pose and Transform alike
_DEFAULT_CACHE = 32  # layouts kept per encoder (names sets or counts that alternate)


def _align(offset, size: int):
    """``offset`` rounded up to a multiple of ``size`` (a power of two); ints or int64 arrays."""
    return (offset + (size - 1)) & -size


# ---------------------------------------------------------------------------- buffer
class _Buffer:
    """One serialized message: encapsulation header + data, the data starting 8-byte
    aligned in memory so that typed views index every aligned field directly."""

    __slots__ = ("message", "u8", "i32", "u32", "f32", "f64", "u64")

    def __init__(self, data_size: int):
        padded = _align(data_size, 8)
        raw = np.zeros(padded + 16, dtype=np.uint8)
        shift = (-(raw.ctypes.data + 4)) % 8
        self.message = raw[shift : shift + 4 + data_size]
        self.message[:4] = np.frombuffer(ENCAPSULATION, dtype=np.uint8)
        data = raw[shift + 4 : shift + 4 + padded]
        self.u8 = data
        self.i32 = data.view("<i4")
        self.u32 = data.view("<u4")
        self.f32 = data.view("<f4")
        self.f64 = data.view("<f8")
        self.u64 = data.view("<u8")

    def put_strings(self, length_offsets: np.ndarray, strings: _Strings) -> None:
        """Each string's uint32 length at ``length_offsets``, its bytes and NUL right after."""
        if not len(length_offsets):
            return
        self.u32[length_offsets // 4] = strings.sizes
        # byte j of string k goes to length_offsets[k] + 4 + (j - first byte of k)
        shift = length_offsets + 4 - strings.starts
        self.u8[np.repeat(shift, strings.sizes) + np.arange(strings.raw.size)] = strings.raw

    def tobytes(self) -> bytes:
        return self.message.tobytes()


@dataclass(frozen=True, slots=True)
class _Strings:
    """Strings as serialized: UTF-8 bytes each followed by a NUL, concatenated."""

    raw: np.ndarray  # uint8, all strings with their NULs
    sizes: np.ndarray  # int64 byte count of each string including its NUL
    starts: np.ndarray  # int64 index of each string's first byte in raw

    @classmethod
    def encode(cls, strings: Sequence[str], what: str) -> _Strings:
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


def _string(text: str, what: str) -> _Strings:
    if not isinstance(text, str):
        raise ValueError(f"{what} must be str, got {type(text).__name__}")
    return _Strings.encode((text,), what)


def _element_starts(run_starts: np.ndarray, offsets: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Offset of every element of consecutive runs (run i = elements offsets[i]:offsets[i+1],
    laid out from run_starts[i]) given each element's span in bytes."""
    csum = np.zeros(spans.size + 1, dtype=np.int64)
    np.cumsum(spans, out=csum[1:])
    return np.repeat(run_starts - csum[offsets[:-1]], np.diff(offsets)) + csum[:-1]


def _run_residues(run_starts: np.ndarray, offsets: np.ndarray, total: int) -> np.ndarray:
    """Start offset mod 8 of every element: the run's for its first element, 0 for the
    others (every element type here ends 8-aligned when it holds at least one float64)."""
    residues = np.zeros(total, dtype=np.int64)
    nonempty = offsets[1:] > offsets[:-1]
    residues[offsets[:-1][nonempty]] = run_starts[nonempty] % 8
    return residues


def _fields(starts: np.ndarray, width: int, itemsize: int) -> np.ndarray:
    """Indices in an ``itemsize`` view of ``width`` consecutive fields at each byte offset."""
    return (starts // itemsize)[:, None] + np.arange(width)


# ---------------------------------------------------------------------------- header
@dataclass(frozen=True, slots=True)
class _Header:
    """std_msgs/Header + uint64 frame_number + the count of the one sequence that follows."""

    frame_id: _Strings
    frame_number: int  # byte offset
    count: int  # byte offset of the sequence count
    first: int  # byte offset of the first element

    @classmethod
    def layout(cls, frame_id: str) -> _Header:
        text = _string(frame_id, "frame_id")
        # sec @0, nanosec @4, frame_id length @8, its bytes @12
        number = _align(12 + int(text.sizes[0]), 8)
        return cls(text, number, number + 8, number + 12)

    def put(self, buf: _Buffer, count: int) -> None:
        buf.put_strings(np.array([8]), self.frame_id)
        buf.u32[self.count // 4] = count


def _put_header_numbers(buf: _Buffer, header: _Header, sec: int, nanosec: int, frame_number: int) -> None:
    buf.i32[0] = _scalar(sec, "sec", _INT32)
    buf.u32[1] = _scalar(nanosec, "nanosec", _UINT32)
    buf.u64[header.frame_number // 8] = _scalar(frame_number, "frame_number", _UINT64)


# ---------------------------------------------------------------------------- markers
def _marker_spans(residues: np.ndarray, names: _Strings) -> np.ndarray:
    # int32 id, string name, Point (8-aligned), bool occluded, float32 residual
    return _align(residues + 8 + names.sizes, 8) - residues + 32


@dataclass(frozen=True, slots=True)
class _MarkerFields:
    """Indices of a run of Marker fields in the typed views of a buffer."""

    ids: np.ndarray  # i32
    positions: np.ndarray  # f64, (m, 3)
    occluded: np.ndarray  # u8
    residuals: np.ndarray  # f32

    @classmethod
    def place(cls, buf: _Buffer, starts: np.ndarray, names: _Strings) -> _MarkerFields:
        buf.put_strings(starts + 4, names)
        point = _align(starts + 8 + names.sizes, 8)
        return cls(starts // 4, _fields(point, 3, 8), point + 24, (point + 28) // 4)

    def write(self, buf: _Buffer, ids, positions, occluded, residuals) -> None:
        buf.i32[self.ids] = ids
        buf.f64[self.positions] = positions
        buf.u8[self.occluded] = occluded
        buf.f32[self.residuals] = residuals


@dataclass(frozen=True, slots=True)
class _MarkersLayout:
    """Markers for ``head + (tail,) * capacity`` names. An element's place depends only on
    the elements before it, so the first ``n`` elements of this layout are also the layout
    of any shorter list of names that starts the same way: a varying number of unlabeled
    markers (equal, usually empty, names appended last) reuses one layout."""

    buf: _Buffer
    header: _Header
    markers: _MarkerFields
    ends: np.ndarray  # byte offset just after each element
    frame_id: str
    head: tuple[str, ...]
    tail: str | None  # the repeated last name, None without elements

    @classmethod
    def build(cls, frame_id: str, names: tuple[str, ...], min_spare: int = 0) -> _MarkersLayout:
        """Layout for ``names`` and at least ``min_spare`` (at least as many as there are
        already: room grows geometrically) more copies of the last name."""
        head_len = len(names)
        while head_len and names[head_len - 1] == names[-1]:  # the run of equal names at the end
            head_len -= 1
        tail = names[-1] if names else None
        if names:
            names += (tail,) * max(min_spare, len(names) - head_len)
        header = _Header.layout(frame_id)
        strings = _Strings.encode(names, "markers")
        count = len(names)
        run = np.array([header.first], dtype=np.int64)
        offsets = np.array([0, count], dtype=np.int64)
        spans = _marker_spans(_run_residues(run, offsets, count), strings)
        starts = _element_starts(run, offsets, spans)
        buf = _Buffer(header.first + int(spans.sum()))
        header.put(buf, count)
        markers = _MarkerFields.place(buf, starts, strings)
        return cls(buf, header, markers, starts + spans, frame_id, names[:head_len], tail)

    @property
    def capacity(self) -> int:
        return len(self.ends)

    def fits(self, frame_id: str, names: Sequence[str]) -> bool:
        """True when names = head + some (possibly none) tail names, within capacity."""
        head = len(self.head)
        if frame_id != self.frame_id or not head <= len(names) <= self.capacity:
            return False
        rest = names[head:]
        return (not rest or rest.count(self.tail) == len(rest)) and names[:head] == self.head

    def first(self, count: int) -> _MarkersView:
        fields = self.markers
        end = int(self.ends[count - 1]) if count else self.header.first
        return _MarkersView(
            self,
            _MarkerFields(
                fields.ids[:count],
                fields.positions[:count],
                fields.occluded[:count],
                fields.residuals[:count],
            ),
            self.buf.message[: 4 + end],
        )


@dataclass(frozen=True, slots=True)
class _MarkersView:
    """The first ``count`` markers of a layout: what one message uses of it."""

    layout: _MarkersLayout
    markers: _MarkerFields
    message: np.ndarray


# ---------------------------------------------------------------------------- rigid bodies
@dataclass(frozen=True, slots=True)
class _BodiesLayout:
    buf: _Buffer
    header: _Header
    ids: np.ndarray  # i32
    valid: np.ndarray  # u8
    poses: np.ndarray  # f64, (n, 7)
    errors: np.ndarray  # f32
    markers: _MarkerFields

    @classmethod
    def build(
        cls, frame_id: str, names: Sequence[str], offsets: np.ndarray, marker_names: Sequence[str]
    ) -> _BodiesLayout:
        header = _Header.layout(frame_id)
        body_names = _Strings.encode(names, "rigid bodies")
        marker_strings = _Strings.encode(marker_names, "rigid body markers")
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
        spans = _align(residues + 9 + body_names.sizes, 8) - residues + 64 + run_bytes
        starts = _element_starts(np.array([header.first]), np.array([0, count]), spans)
        pose = _align(starts + 9 + body_names.sizes, 8)
        buf = _Buffer(header.first + int(spans.sum()))
        header.put(buf, count)
        buf.put_strings(starts + 4, body_names)
        buf.u32[(pose + 60) // 4] = np.diff(offsets)
        marker_starts = _element_starts(pose + 64, offsets, marker_spans)
        markers = _MarkerFields.place(buf, marker_starts, marker_strings)
        return cls(
            buf,
            header,
            starts // 4,
            starts + 8 + body_names.sizes,
            _fields(pose, _POSE_WIDTH, 8),
            (pose + 56) // 4,
            markers,
        )


# ---------------------------------------------------------------------------- skeletons
def _segment_spans(residues: np.ndarray, names: _Strings) -> np.ndarray:
    # int32 id, string name, int32 parent_id, bool tracking_valid, Pose (8-aligned)
    return _align(_align(residues + 8 + names.sizes, 4) + 5, 8) - residues + 56


@dataclass(frozen=True, slots=True)
class _SkeletonsLayout:
    buf: _Buffer
    header: _Header
    ids: np.ndarray  # i32
    valid: np.ndarray  # u8
    segment_ids: np.ndarray  # i32
    parent_ids: np.ndarray  # i32
    segment_valid: np.ndarray  # u8
    segment_poses: np.ndarray  # f64, (m, 7)

    @classmethod
    def build(
        cls, frame_id: str, names: Sequence[str], offsets: np.ndarray, segment_names: Sequence[str]
    ) -> _SkeletonsLayout:
        header = _Header.layout(frame_id)
        skeleton_names = _Strings.encode(names, "skeletons")
        segment_strings = _Strings.encode(segment_names, "segments")
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
            run = _align(at + 9 + sizes[i], 4) + 4  # int32 id, string name, bool, uint32 count
            runs[i] = run
            a, b = offs[i], offs[i + 1]
            at = run if a == b else run + int(spans_at[run % 8][a]) + int(csum0[b] - csum0[a + 1])
        residues = _run_residues(runs, offsets, total)
        spans = np.where(residues == 0, spans_at[0], spans_at[4])
        seg_starts = _element_starts(runs, offsets, spans)
        parent = _align(seg_starts + 8 + segment_strings.sizes, 4)
        pose = _align(parent + 5, 8)
        buf = _Buffer(at)
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
            _fields(pose, _POSE_WIDTH, 8),
        )


# ---------------------------------------------------------------------------- tf
@dataclass(frozen=True, slots=True)
class _TFLayout:
    buf: _Buffer
    sec: np.ndarray  # i32
    nanosec: np.ndarray  # u32
    poses: np.ndarray  # f64, (n, 7): Transform is Vector3 + Quaternion, like Pose

    @classmethod
    def build(cls, frame_id: str, child_frame_ids: Sequence[str]) -> _TFLayout:
        parent = _string(frame_id, "frame_id")
        children = _Strings.encode(child_frame_ids, "child_frame_ids")
        count = len(child_frame_ids)
        parent_size = int(parent.sizes[0])
        # TransformStamped: Header (int32 sec, uint32 nanosec, string frame_id),
        # string child_frame_id, Transform (8-aligned); the first one starts at 4
        residues = np.zeros(count, dtype=np.int64)
        if count:
            residues[0] = 4
        spans = _align(_align(residues + 12 + parent_size, 4) + 4 + children.sizes, 8) - residues + 56
        starts = _element_starts(np.array([4]), np.array([0, count]), spans)
        child = _align(starts + 12 + parent_size, 4)
        pose = _align(child + 4 + children.sizes, 8)
        buf = _Buffer(4 + int(spans.sum()))
        buf.u32[0] = count
        if count:
            parents = _Strings(
                np.tile(parent.raw, count),
                np.full(count, parent_size, dtype=np.int64),
                np.arange(count, dtype=np.int64) * parent_size,
            )
            buf.put_strings(starts + 8, parents)
        buf.put_strings(child, children)
        return cls(buf, starts // 4, starts // 4 + 1, _fields(pose, _POSE_WIDTH, 8))


# ---------------------------------------------------------------------------- cache
L = TypeVar("L")


class _LayoutCache(Generic[L]):
    """Layouts by key, most recently used kept. ``parts`` of a lookup are strings, bytes
    and name sequences; the last lookup's parts are checked first, tuples by identity
    (immutable, and adapters reuse theirs) and str/bytes by equality, before hashing."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError("cache_size must be at least 1")
        self.size = size
        self.builds = 0
        self._layouts: OrderedDict[Hashable, L] = OrderedDict()
        self._last_parts: tuple | None = None
        self._last: L | None = None

    def get(self, parts: tuple, build: Callable[[], L]) -> L:
        last = self._last_parts
        if last is not None and all(map(_same, parts, last)):
            return self._last  # type: ignore[return-value]
        key = tuple(p if isinstance(p, (str, bytes, tuple)) else tuple(p) for p in parts)
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


def _same(a, b) -> bool:
    if a is b:
        # a list may have been changed in place since: only immutable values qualify
        return type(a) in (tuple, str, bytes)
    return type(a) in (str, bytes) and a == b


# ---------------------------------------------------------------------------- input checks
def _scalar(value, what: str, bounds: tuple[int, int]) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {type(value).__name__}") from None
    if not bounds[0] <= number <= bounds[1]:
        raise ValueError(f"{what} = {number} is outside [{bounds[0]}, {bounds[1]}]")
    return number


def _shaped(values, what: str, shape: tuple[int, ...], kinds: str) -> np.ndarray:
    # called some twenty times a frame: the checks below stay on attributes (comparing
    # a dtype with a type object, np.int32 or np.bool_, costs a microsecond each time)
    array = values if type(values) is np.ndarray else np.asarray(values)
    if array.shape != shape and array.size == 0 == math.prod(shape):
        array = array.reshape(shape)  # e.g. [] for no markers
    if array.shape != shape:
        raise ValueError(f"{what} has shape {array.shape}, expected {shape}")
    if array.dtype.kind not in kinds and array.size:
        raise ValueError(f"{what} has dtype {array.dtype}, not usable here")
    return array


def _int32s(values, what: str, count: int) -> np.ndarray:
    array = _shaped(values, what, (count,), "iu")
    if array.dtype is not _INT32_DTYPE and array.size:
        low, high = int(array.min()), int(array.max())
        if low < _INT32[0] or high > _INT32[1]:
            raise ValueError(f"{what} has values outside the int32 range ({low}..{high})")
    return array


def _floats(values, what: str, shape: tuple[int, ...]) -> np.ndarray:
    return _shaped(values, what, shape, "fiu")


def _flags(values, what: str, count: int) -> np.ndarray:
    array = _shaped(values, what, (count,), "biu")
    # as bytes 0/1: a same-type copy into the buffer, no cast
    return (array if array.dtype.kind == "b" else array != 0).view(np.uint8)


def _frame_id(frame_id: str) -> str:
    if not isinstance(frame_id, str):
        raise ValueError(f"frame_id must be str, got {type(frame_id).__name__}")
    return frame_id


def _names(names: Sequence[str], what: str) -> Sequence[str]:
    if isinstance(names, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of str, not a single {type(names).__name__}")
    return names


def _offsets(offsets: np.ndarray, what: str, total: int) -> np.ndarray:
    """Checked once per layout (the cache key holds the offsets, so cached ones are valid)."""
    offsets = offsets.astype(np.int64, copy=False)
    if offsets[0] != 0 or offsets[-1] != total or np.any(offsets[1:] < offsets[:-1]):
        raise ValueError(f"{what} must rise from 0 to {total} (the number of items), got {offsets.tolist()}")
    return offsets


def _repeated_shapes(what: str, rows_shape: tuple[int, int], rows: np.ndarray, *per_row: np.ndarray) -> None:
    """repeat(): ``rows`` (n, width) and each of ``per_row`` (n,) as in the last encode
    (numpy would broadcast a single row over all of them without a word)."""
    count = (rows_shape[0],)
    bad = rows.shape != rows_shape
    for values in per_row:  # a plain loop: a generator costs more than the check, per frame
        bad = bad or values.shape != count
    if bad:
        raise ValueError(
            f"{what}: repeat() takes arrays shaped as in the last encode, {rows_shape} and "
            f"{count}, got {rows.shape} and {[values.shape for values in per_row]}"
        )


def _repeated_flags(values: np.ndarray) -> np.ndarray:
    # a bool array goes into the bytes as 0/1 as it is; anything else as its truth
    return values if values.dtype.kind == "b" else values != 0


# ---------------------------------------------------------------------------- encoders
class MarkersEncoder:
    """mocap4r2_interfaces/msg/Markers as serialized bytes.

    Besides the cache of exact names lists, the encoder keeps its newest layout with room
    for more copies of its last name: frames that only append a different number of
    markers with that name (unlabeled markers, empty names) use it without a rebuild."""

    #: spare copies of the trailing name a new layout gets, at least
    SPARE = 32

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        self._cache: _LayoutCache[_MarkersView] = _LayoutCache(cache_size)
        self._growable: _MarkersLayout | None = None
        self._builds = 0
        self._last: _MarkersView | None = None  # what repeat() writes into

    @property
    def layouts_built(self) -> int:
        """How many layouts were computed so far (reusing one for another count is not a build)."""
        return self._builds

    def _view(self, frame_id: str, names: Sequence[str]) -> _MarkersView:
        names = tuple(names)
        growable = self._growable
        if growable is None or not growable.fits(frame_id, names):
            growable = self._growable = _MarkersLayout.build(frame_id, names, self.SPARE)
            self._builds += 1
        return growable.first(len(names))

    def encode(
        self,
        sec: int,
        nanosec: int,
        frame_id: str,
        frame_number: int,
        ids: np.ndarray,
        names: Sequence[str],
        positions: np.ndarray,
        occluded: np.ndarray,
        residuals: np.ndarray,
    ) -> bytes:
        frame_id = _frame_id(frame_id)
        names = _names(names, "markers: names")
        count = len(names)
        ids = _int32s(ids, "markers: ids", count)
        positions = _floats(positions, "markers: positions", (count, 3))
        occluded = _flags(occluded, "markers: occluded", count)
        residuals = _floats(residuals, "markers: residuals", (count,))
        self._last = None  # a failure below leaves nothing to repeat
        view = self._cache.get((frame_id, names), lambda: self._view(frame_id, names))
        buf = view.layout.buf
        _put_header_numbers(buf, view.layout.header, sec, nanosec, frame_number)
        buf.u32[view.layout.header.count // 4] = count  # layouts are shared by several counts
        view.markers.write(buf, ids, positions, occluded, residuals)
        self._last = view
        return view.message.tobytes()

    def repeat(
        self,
        sec: int,
        nanosec: int,
        frame_number: int,
        positions: np.ndarray,
        occluded: np.ndarray,
        residuals: np.ndarray,
    ) -> bytes:
        """The message of the last ``encode`` with a new stamp, frame number, positions,
        occlusion flags and residuals; frame_id, ids and names as then.

        For a stream whose markers stay the same from frame to frame (the usual case):
        ids, names and count are in the buffer already, so only what changes per frame
        is checked and written. Arrays of another shape than then are refused."""
        view = self._last
        if view is None:
            raise ValueError("markers: nothing encoded to repeat")
        fields = view.markers
        _repeated_shapes("markers", fields.positions.shape, positions, occluded, residuals)
        buf = view.layout.buf
        _put_header_numbers(buf, view.layout.header, sec, nanosec, frame_number)
        buf.f64[fields.positions] = positions
        buf.u8[fields.occluded] = _repeated_flags(occluded)
        buf.f32[fields.residuals] = residuals
        return view.message.tobytes()


class RigidBodiesEncoder:
    """mocap4r2_interfaces/msg/RigidBodies as serialized bytes; a body's markers are the
    rows ``marker_offsets[i]:marker_offsets[i + 1]`` of the marker arrays."""

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        self._cache: _LayoutCache[_BodiesLayout] = _LayoutCache(cache_size)
        self._last: _BodiesLayout | None = None  # what repeat() writes into

    @property
    def layouts_built(self) -> int:
        return self._cache.builds

    def encode(
        self,
        sec: int,
        nanosec: int,
        frame_id: str,
        frame_number: int,
        ids: np.ndarray,
        names: Sequence[str],
        valid: np.ndarray,
        poses: np.ndarray,
        mean_errors: np.ndarray,
        marker_offsets: np.ndarray,
        marker_ids: np.ndarray,
        marker_names: Sequence[str],
        marker_positions: np.ndarray,
        marker_occluded: np.ndarray,
        marker_residuals: np.ndarray,
    ) -> bytes:
        frame_id = _frame_id(frame_id)
        names = _names(names, "rigid bodies: names")
        marker_names = _names(marker_names, "rigid bodies: marker_names")
        count, markers = len(names), len(marker_names)
        ids = _int32s(ids, "rigid bodies: ids", count)
        valid = _flags(valid, "rigid bodies: valid", count)
        poses = _floats(poses, "rigid bodies: poses", (count, _POSE_WIDTH))
        mean_errors = _floats(mean_errors, "rigid bodies: mean_errors", (count,))
        offsets = _shaped(marker_offsets, "rigid bodies: marker_offsets", (count + 1,), "iu")
        marker_ids = _int32s(marker_ids, "rigid bodies: marker_ids", markers)
        marker_positions = _floats(marker_positions, "rigid bodies: marker_positions", (markers, 3))
        marker_occluded = _flags(marker_occluded, "rigid bodies: marker_occluded", markers)
        marker_residuals = _floats(marker_residuals, "rigid bodies: marker_residuals", (markers,))
        self._last = None  # a failure below leaves nothing to repeat
        layout = self._cache.get(
            (frame_id, names, offsets.dtype.str, offsets.tobytes(), marker_names),
            lambda: _BodiesLayout.build(
                frame_id, names, _offsets(offsets, "rigid bodies: marker_offsets", markers), marker_names
            ),
        )
        buf = layout.buf
        _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
        buf.i32[layout.ids] = ids
        buf.u8[layout.valid] = valid
        buf.f64[layout.poses] = poses
        buf.f32[layout.errors] = mean_errors
        layout.markers.write(buf, marker_ids, marker_positions, marker_occluded, marker_residuals)
        self._last = layout
        return buf.tobytes()

    def repeat(
        self,
        sec: int,
        nanosec: int,
        frame_number: int,
        valid: np.ndarray,
        poses: np.ndarray,
        mean_errors: np.ndarray,
        marker_positions: np.ndarray,
        marker_occluded: np.ndarray,
        marker_residuals: np.ndarray,
    ) -> bytes:
        """The message of the last ``encode`` with a new stamp, frame number and per-frame
        values; frame_id, ids, names and each body's markers (ids, names, counts) as then.
        See :meth:`MarkersEncoder.repeat`."""
        layout = self._last
        if layout is None:
            raise ValueError("rigid bodies: nothing encoded to repeat")
        _repeated_shapes("rigid bodies", layout.poses.shape, poses, valid, mean_errors)
        fields = layout.markers
        _repeated_shapes(
            "rigid bodies: markers",
            fields.positions.shape,
            marker_positions,
            marker_occluded,
            marker_residuals,
        )
        buf = layout.buf
        _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
        buf.u8[layout.valid] = _repeated_flags(valid)
        buf.f64[layout.poses] = poses
        buf.f32[layout.errors] = mean_errors
        buf.f64[fields.positions] = marker_positions
        buf.u8[fields.occluded] = _repeated_flags(marker_occluded)
        buf.f32[fields.residuals] = marker_residuals
        return buf.tobytes()


class SkeletonsEncoder:
    """mocap4r2_interfaces/msg/Skeletons as serialized bytes; the segments of skeleton i
    are the rows ``segment_offsets[i]:segment_offsets[i + 1]`` of the segment arrays."""

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        self._cache: _LayoutCache[_SkeletonsLayout] = _LayoutCache(cache_size)
        self._empty: _LayoutCache[_SkeletonsLayout] = _LayoutCache(cache_size)
        self._last: _SkeletonsLayout | None = None  # what repeat() writes into

    @property
    def layouts_built(self) -> int:
        return self._cache.builds + self._empty.builds

    def encode(
        self,
        sec: int,
        nanosec: int,
        frame_id: str,
        frame_number: int,
        ids: np.ndarray,
        names: Sequence[str],
        valid: np.ndarray,
        segment_offsets: np.ndarray,
        segment_ids: np.ndarray,
        segment_names: Sequence[str],
        segment_parent_ids: np.ndarray,
        segment_valid: np.ndarray,
        segment_poses: np.ndarray,
    ) -> bytes:
        frame_id = _frame_id(frame_id)
        names = _names(names, "skeletons: names")
        segment_names = _names(segment_names, "skeletons: segment_names")
        count, segments = len(names), len(segment_names)
        ids = _int32s(ids, "skeletons: ids", count)
        valid = _flags(valid, "skeletons: valid", count)
        offsets = _shaped(segment_offsets, "skeletons: segment_offsets", (count + 1,), "iu")
        segment_ids = _int32s(segment_ids, "skeletons: segment_ids", segments)
        parent_ids = _int32s(segment_parent_ids, "skeletons: segment_parent_ids", segments)
        segment_valid = _flags(segment_valid, "skeletons: segment_valid", segments)
        segment_poses = _floats(segment_poses, "skeletons: segment_poses", (segments, _POSE_WIDTH))
        self._last = None  # a failure below leaves nothing to repeat
        layout = self._cache.get(
            (frame_id, names, offsets.dtype.str, offsets.tobytes(), segment_names),
            lambda: _SkeletonsLayout.build(
                frame_id, names, _offsets(offsets, "skeletons: segment_offsets", segments), segment_names
            ),
        )
        buf = layout.buf
        _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
        buf.i32[layout.ids] = ids
        buf.u8[layout.valid] = valid
        buf.i32[layout.segment_ids] = segment_ids
        buf.i32[layout.parent_ids] = parent_ids
        buf.u8[layout.segment_valid] = segment_valid
        buf.f64[layout.segment_poses] = segment_poses
        self._last = layout
        return buf.tobytes()

    def repeat(
        self,
        sec: int,
        nanosec: int,
        frame_number: int,
        valid: np.ndarray,
        segment_valid: np.ndarray,
        segment_poses: np.ndarray,
    ) -> bytes:
        """The message of the last ``encode`` with a new stamp, frame number and per-frame
        values; frame_id, ids, names and parents as then. See :meth:`MarkersEncoder.repeat`."""
        layout = self._last
        if layout is None:
            raise ValueError("skeletons: nothing encoded to repeat")
        _repeated_shapes("skeletons", layout.segment_poses.shape, segment_poses, segment_valid)
        if valid.shape != layout.valid.shape:
            raise ValueError(
                f"skeletons: repeat() takes valid shaped {layout.valid.shape}, got {valid.shape}"
            )
        buf = layout.buf
        _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
        buf.u8[layout.valid] = _repeated_flags(valid)
        buf.u8[layout.segment_valid] = _repeated_flags(segment_valid)
        buf.f64[layout.segment_poses] = segment_poses
        return buf.tobytes()

    def encode_empty(self, sec: int, nanosec: int, frame_id: str, frame_number: int) -> bytes:
        """A Skeletons message without skeletons: what most systems send every frame, so
        it only writes the stamp and frame number into its layout (``encode`` with empty
        arrays gives the same bytes after checking eleven inputs, 25 us a frame)."""
        layout = self._empty.get(
            (frame_id,),
            lambda: _SkeletonsLayout.build(_frame_id(frame_id), (), np.zeros(1, dtype=np.int64), ()),
        )
        _put_header_numbers(layout.buf, layout.header, sec, nanosec, frame_number)
        return layout.buf.tobytes()


class TFMessageEncoder:
    """tf2_msgs/msg/TFMessage as serialized bytes: one transform frame_id -> child per
    row of ``poses`` (x, y, z, qx, qy, qz, qw), all with the same stamp."""

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        self._cache: _LayoutCache[_TFLayout] = _LayoutCache(cache_size)

    @property
    def layouts_built(self) -> int:
        return self._cache.builds

    def encode(
        self, sec: int, nanosec: int, frame_id: str, child_frame_ids: Sequence[str], poses: np.ndarray
    ) -> bytes:
        frame_id = _frame_id(frame_id)
        child_frame_ids = _names(child_frame_ids, "tf: child_frame_ids")
        count = len(child_frame_ids)
        poses = _floats(poses, "tf: poses", (count, _POSE_WIDTH))
        sec = _scalar(sec, "sec", _INT32)
        nanosec = _scalar(nanosec, "nanosec", _UINT32)
        layout = self._cache.get(
            (frame_id, child_frame_ids), lambda: _TFLayout.build(frame_id, child_frame_ids)
        )
        buf = layout.buf
        buf.i32[layout.sec] = sec
        buf.u32[layout.nanosec] = nanosec
        buf.f64[layout.poses] = poses
        return buf.tobytes()
