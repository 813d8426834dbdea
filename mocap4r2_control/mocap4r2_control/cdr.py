"""Serialized (CDR) Markers, RigidBodies, Skeletons and TFMessage straight from numpy arrays.

``rclpy``'s ``Publisher.publish`` also takes ``bytes``: the message already serialized
the way ``rclpy.serialization.serialize_message`` does it. Converting message objects to
C field by field costs milliseconds for a frame of a few hundred markers; these encoders
write the same bytes with a handful of vectorised numpy assignments instead. The wire
rules, and where each field goes, are in cdr_layout.py; this module checks the inputs
and writes a frame's numbers.

How it is fast: the byte layout of a message depends only on its counts and strings. An
encoder keeps the layouts it computed (cdr_layout.py) in a small LRU cache keyed by the
strings and counts: by identity for tuples (the normal case: adapters reuse their names
tuples), else by hash and equality. A frame then only writes its numbers into that
buffer and copies it out. Since an element's place depends only on what precedes it, a
Markers layout built with spare copies of its last name also serves every shorter list
that starts the same way: a varying number of unlabeled markers (empty names, appended
last) costs no rebuild. Even a miss every frame stays far cheaper than message objects.

Every argument of ``encode`` and ``repeat`` is keyword-only: most of them are arrays of
the same length, and two passed in the wrong order would be written without a word.

Callers: pass the same names tuple object from frame to frame when the names do not
change (an identity check then replaces hashing); lists work but are hashed every call.
An encoder is not thread-safe: use one per publishing thread.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from .cdr_layout import (
    ENCAPSULATION,
    POSE_WIDTH,
    Array,
    BodiesLayout,
    Buffer,
    Header,
    LayoutCache,
    MarkersLayout,
    MarkersView,
    SkeletonsLayout,
    TFLayout,
)

__all__ = ["ENCAPSULATION", "MarkersEncoder", "RigidBodiesEncoder", "SkeletonsEncoder", "TFMessageEncoder"]

_INT32 = (-(2**31), 2**31 - 1)
_UINT32 = (0, 2**32 - 1)
_UINT64 = (0, 2**64 - 1)
_INT32_DTYPE = np.dtype("<i4")
_UINT8_DTYPE = np.dtype(np.uint8)  # a view to a dtype object costs less than to a type
_DEFAULT_CACHE = 32  # layouts kept per encoder (names sets or counts that alternate)
# a list whose element i owns the items offsets[i]:offsets[i + 1] (a body's markers, a
# skeleton's segments)
_Nested = TypeVar("_Nested", BodiesLayout, SkeletonsLayout)
_MARKER_OFFSETS = "rigid bodies: marker_offsets"
_SEGMENT_OFFSETS = "skeletons: segment_offsets"


# ---------------------------------------------------------------------------- input checks
def _scalar(value: object, what: str, bounds: tuple[int, int]) -> int:
    # called three times a message: a plain int in range (the usual case) skips the
    # protocol call that also accepts numpy integers
    if type(value) is int and bounds[0] <= value <= bounds[1]:
        return value
    try:
        number = operator.index(value)  # type: ignore[arg-type]  # refused below when not an integer
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {type(value).__name__}") from None
    if not bounds[0] <= number <= bounds[1]:
        raise ValueError(f"{what} = {number} is outside [{bounds[0]}, {bounds[1]}]")
    return number


def _shaped(values: npt.ArrayLike, what: str, shape: tuple[int, ...], kinds: str) -> Array:
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


def _int32s(values: npt.ArrayLike, what: str, count: int) -> Array:
    array = _shaped(values, what, (count,), "iu")
    if array.dtype is not _INT32_DTYPE and array.size:
        low, high = int(array.min()), int(array.max())
        if low < _INT32[0] or high > _INT32[1]:
            raise ValueError(f"{what} has values outside the int32 range ({low}..{high})")
    return array


def _floats(values: npt.ArrayLike, what: str, shape: tuple[int, ...]) -> Array:
    return _shaped(values, what, shape, "fiu")


def _flags(values: npt.ArrayLike, what: str, count: int) -> Array:
    array = _shaped(values, what, (count,), "biu")
    # as bytes 0/1: a same-type copy into the buffer, no cast
    return (array if array.dtype.kind == "b" else array != 0).view(_UINT8_DTYPE)


def _frame_id(frame_id: str) -> str:
    if not isinstance(frame_id, str):
        raise ValueError(f"frame_id must be str, got {type(frame_id).__name__}")
    return frame_id


def _names(names: Sequence[str], what: str) -> Sequence[str]:
    if isinstance(names, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of str, not a single {type(names).__name__}")
    return names


def _offsets(offsets: Array, what: str, total: int) -> Array:
    """Checked once per layout (the cache key holds the offsets, so cached ones are valid)."""
    offsets = offsets.astype(np.int64, copy=False)
    if offsets[0] != 0 or offsets[-1] != total or np.any(offsets[1:] < offsets[:-1]):
        raise ValueError(f"{what} must rise from 0 to {total} (the number of items), got {offsets.tolist()}")
    return offsets


def _repeated_shapes(what: str, rows_shape: tuple[int, ...], rows: Array, *per_row: Array) -> None:
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


def _repeated_flags(values: Array) -> Array:
    # a bool array goes into the bytes as its 0/1 bytes (viewed as uint8: a plain copy,
    # where assigning bools to uint8 would run numpy's casting loop); anything else as
    # its truth
    return (values if values.dtype.kind == "b" else values != 0).view(_UINT8_DTYPE)


def _put_header_numbers(buf: Buffer, header: Header, sec: int, nanosec: int, frame_number: int) -> None:
    # int32 sec at byte 0 and uint32 nanosec at byte 4 are one little-endian uint64: one
    # numpy assignment instead of two
    stamp = (_scalar(sec, "sec", _INT32) & 0xFFFFFFFF) | (_scalar(nanosec, "nanosec", _UINT32) << 32)
    buf.u64[0] = stamp
    buf.u64[header.frame_number // 8] = _scalar(frame_number, "frame_number", _UINT64)


def _nested_layout(
    cache: LayoutCache[_Nested],
    build: Callable[[str, Sequence[str], Array, Sequence[str]], _Nested],
    *,
    frame_id: str,
    names: Sequence[str],
    offsets: Array,
    item_names: Sequence[str],
    what: str,
) -> _Nested:
    """The layout of a nested list (elements ``names``, items ``item_names``, element i
    owning the items ``offsets[i]:offsets[i + 1]``), from ``cache`` or built once."""
    return cache.get(
        (frame_id, names, offsets.dtype.str, offsets.tobytes(), item_names),
        lambda: build(frame_id, names, _offsets(offsets, what, len(item_names)), item_names),
    )


def _put_elements(
    layout: _Nested, *, sec: int, nanosec: int, frame_number: int, ids: Array, valid: Array
) -> Buffer:
    """Write the header's numbers and each element's id and validity; returns the buffer
    for the rest of the frame."""
    buf = layout.buf
    _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
    buf.i32[layout.ids] = ids
    buf.u8[layout.valid] = valid
    return buf


# ---------------------------------------------------------------------------- encoders
_Layout = TypeVar("_Layout")


class _CachedEncoder(Generic[_Layout]):
    """An encoder with one LRU cache of the layouts it computed."""

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        self._cache: LayoutCache[_Layout] = LayoutCache(cache_size)

    @property
    def layouts_built(self) -> int:
        """How many layouts were computed so far."""
        return self._cache.builds


class MarkersEncoder:
    """mocap4r2_interfaces/msg/Markers as serialized bytes.

    Besides the cache of exact names lists, the encoder keeps its newest layout with room
    for more copies of its last name: frames that only append a different number of
    markers with that name (unlabeled markers, empty names) use it without a rebuild."""

    #: spare copies of the trailing name a new layout gets, at least
    SPARE = 32

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        self._cache: LayoutCache[MarkersView] = LayoutCache(cache_size)
        self._growable: MarkersLayout | None = None
        self._builds = 0
        self._last: MarkersView | None = None  # what repeat() writes into

    @property
    def layouts_built(self) -> int:
        """How many layouts were computed so far (reusing one for another count is not a build)."""
        return self._builds

    def _view(self, frame_id: str, names: Sequence[str]) -> MarkersView:
        names = tuple(names)
        growable = self._growable
        if growable is None or not growable.fits(frame_id, names):
            growable = self._growable = MarkersLayout.build(frame_id, names, self.SPARE)
            self._builds += 1
        return growable.first(len(names))

    def encode(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_id: str,
        frame_number: int,
        ids: npt.ArrayLike,
        names: Sequence[str],
        positions: npt.ArrayLike,
        occluded: npt.ArrayLike,
        residuals: npt.ArrayLike,
    ) -> bytes:
        """One Markers message: marker i is ``ids[i]``, ``names[i]``, ``positions[i]`` (x, y,
        z), ``occluded[i]`` and ``residuals[i]``."""
        frame_id = _frame_id(frame_id)
        names = _names(names, "markers: names")
        count = len(names)
        checked_ids = _int32s(ids, "markers: ids", count)
        checked_positions = _floats(positions, "markers: positions", (count, 3))
        checked_occluded = _flags(occluded, "markers: occluded", count)
        checked_residuals = _floats(residuals, "markers: residuals", (count,))
        self._last = None  # a failure below leaves nothing to repeat
        view = self._cache.get((frame_id, names), lambda: self._view(frame_id, names))
        buf = view.layout.buf
        _put_header_numbers(buf, view.layout.header, sec, nanosec, frame_number)
        buf.u32[view.layout.header.count // 4] = count  # layouts are shared by several counts
        view.markers.write(
            buf,
            ids=checked_ids,
            positions=checked_positions,
            occluded=checked_occluded,
            residuals=checked_residuals,
        )
        self._last = view
        return view.message.tobytes()

    def repeat(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_number: int,
        positions: Array,
        occluded: Array,
        residuals: Array,
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

    def restamp(self, *, sec: int, nanosec: int, frame_number: int) -> MarkersView:
        """The message of the last ``encode`` with a new stamp and frame number written,
        for a caller that writes the markers' numbers itself (``repeat``'s job done by
        markers_pass.py's compiled pass) and then copies out ``view.message``."""
        view = self._last
        if view is None:
            raise ValueError("markers: nothing encoded to repeat")
        _put_header_numbers(view.layout.buf, view.layout.header, sec, nanosec, frame_number)
        return view


class RigidBodiesEncoder(_CachedEncoder[BodiesLayout]):
    """mocap4r2_interfaces/msg/RigidBodies as serialized bytes; a body's markers are the
    rows ``marker_offsets[i]:marker_offsets[i + 1]`` of the marker arrays."""

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        super().__init__(cache_size)
        self._last: BodiesLayout | None = None  # what repeat() writes into

    def encode(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_id: str,
        frame_number: int,
        ids: npt.ArrayLike,
        names: Sequence[str],
        valid: npt.ArrayLike,
        poses: npt.ArrayLike,
        mean_errors: npt.ArrayLike,
        marker_offsets: npt.ArrayLike,
        marker_ids: npt.ArrayLike,
        marker_names: Sequence[str],
        marker_positions: npt.ArrayLike,
        marker_occluded: npt.ArrayLike,
        marker_residuals: npt.ArrayLike,
    ) -> bytes:
        """One RigidBodies message: body i is ``ids[i]``, ``names[i]``, ``valid[i]``,
        ``poses[i]`` (x, y, z, qx, qy, qz, qw) and ``mean_errors[i]``, with the markers
        ``marker_offsets[i]:marker_offsets[i + 1]`` of the ``marker_*`` arrays."""
        frame_id = _frame_id(frame_id)
        names = _names(names, "rigid bodies: names")
        marker_names = _names(marker_names, "rigid bodies: marker_names")
        count, markers = len(names), len(marker_names)
        checked_ids = _int32s(ids, "rigid bodies: ids", count)
        checked_valid = _flags(valid, "rigid bodies: valid", count)
        checked_poses = _floats(poses, "rigid bodies: poses", (count, POSE_WIDTH))
        checked_errors = _floats(mean_errors, "rigid bodies: mean_errors", (count,))
        offsets = _shaped(marker_offsets, _MARKER_OFFSETS, (count + 1,), "iu")
        checked_marker_ids = _int32s(marker_ids, "rigid bodies: marker_ids", markers)
        checked_marker_positions = _floats(marker_positions, "rigid bodies: marker_positions", (markers, 3))
        checked_marker_occluded = _flags(marker_occluded, "rigid bodies: marker_occluded", markers)
        checked_marker_residuals = _floats(marker_residuals, "rigid bodies: marker_residuals", (markers,))
        self._last = None  # a failure below leaves nothing to repeat
        layout = _nested_layout(
            self._cache,
            BodiesLayout.build,
            frame_id=frame_id,
            names=names,
            offsets=offsets,
            item_names=marker_names,
            what=_MARKER_OFFSETS,
        )
        buf = _put_elements(
            layout, sec=sec, nanosec=nanosec, frame_number=frame_number, ids=checked_ids, valid=checked_valid
        )
        buf.f64[layout.poses] = checked_poses
        buf.f32[layout.errors] = checked_errors
        layout.markers.write(
            buf,
            ids=checked_marker_ids,
            positions=checked_marker_positions,
            occluded=checked_marker_occluded,
            residuals=checked_marker_residuals,
        )
        self._last = layout
        return buf.tobytes()

    def repeat(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_number: int,
        valid: Array,
        poses: Array,
        mean_errors: Array,
        marker_positions: Array,
        marker_occluded: Array,
        marker_residuals: Array,
    ) -> bytes:
        """The message of the last ``encode`` with a new stamp, frame number and per-frame
        values; frame_id, ids, names and each body's markers (ids, names, counts) as then.
        See :meth:`MarkersEncoder.repeat`."""
        layout = self._last
        if layout is None:
            raise ValueError("rigid bodies: nothing encoded to repeat")
        fields = layout.markers
        _repeated_shapes(
            "rigid bodies: markers",
            fields.positions.shape,
            marker_positions,
            marker_occluded,
            marker_residuals,
        )
        buf = self.restamp(
            sec=sec,
            nanosec=nanosec,
            frame_number=frame_number,
            valid=valid,
            poses=poses,
            mean_errors=mean_errors,
        ).buf
        buf.f64[fields.positions] = marker_positions
        buf.u8[fields.occluded] = _repeated_flags(marker_occluded)
        buf.f32[fields.residuals] = marker_residuals
        return buf.tobytes()

    def restamp(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_number: int,
        valid: Array | None = None,
        poses: Array | None = None,
        mean_errors: Array | None = None,
    ) -> BodiesLayout:
        """``repeat`` without the bodies' markers: the message of the last ``encode`` with
        a new stamp, frame number, validity, poses and mean errors written, for a caller
        that writes the markers' numbers itself (markers_pass.py's compiled pass) and then
        copies out ``layout.buf``. Without validity, poses and mean errors only the stamp
        and frame number are written (a caller writing the bodies' numbers too:
        bodies_pass.py)."""
        layout = self._last
        if layout is None:
            raise ValueError("rigid bodies: nothing encoded to repeat")
        buf = layout.buf
        if valid is None and poses is None and mean_errors is None:
            _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
            return layout
        if valid is None or poses is None or mean_errors is None:
            raise ValueError("rigid bodies: restamp() takes validity, poses and mean errors, or none")
        _repeated_shapes("rigid bodies", layout.poses.shape, poses, valid, mean_errors)
        _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
        buf.u8[layout.valid] = _repeated_flags(valid)
        buf.f64[layout.poses] = poses
        buf.f32[layout.errors] = mean_errors
        return layout


class SkeletonsEncoder:
    """mocap4r2_interfaces/msg/Skeletons as serialized bytes; the segments of skeleton i
    are the rows ``segment_offsets[i]:segment_offsets[i + 1]`` of the segment arrays."""

    def __init__(self, cache_size: int = _DEFAULT_CACHE):
        self._cache: LayoutCache[SkeletonsLayout] = LayoutCache(cache_size)
        self._empty: LayoutCache[SkeletonsLayout] = LayoutCache(cache_size)
        self._last: SkeletonsLayout | None = None  # what repeat() writes into

    @property
    def layouts_built(self) -> int:
        """How many layouts were computed so far."""
        return self._cache.builds + self._empty.builds

    def encode(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_id: str,
        frame_number: int,
        ids: npt.ArrayLike,
        names: Sequence[str],
        valid: npt.ArrayLike,
        segment_offsets: npt.ArrayLike,
        segment_ids: npt.ArrayLike,
        segment_names: Sequence[str],
        segment_parent_ids: npt.ArrayLike,
        segment_valid: npt.ArrayLike,
        segment_poses: npt.ArrayLike,
    ) -> bytes:
        """One Skeletons message: skeleton i is ``ids[i]``, ``names[i]`` and ``valid[i]``,
        with the segments ``segment_offsets[i]:segment_offsets[i + 1]`` of the
        ``segment_*`` arrays (poses x, y, z, qx, qy, qz, qw)."""
        frame_id = _frame_id(frame_id)
        names = _names(names, "skeletons: names")
        segment_names = _names(segment_names, "skeletons: segment_names")
        count, segments = len(names), len(segment_names)
        checked_ids = _int32s(ids, "skeletons: ids", count)
        checked_valid = _flags(valid, "skeletons: valid", count)
        offsets = _shaped(segment_offsets, _SEGMENT_OFFSETS, (count + 1,), "iu")
        checked_segment_ids = _int32s(segment_ids, "skeletons: segment_ids", segments)
        parent_ids = _int32s(segment_parent_ids, "skeletons: segment_parent_ids", segments)
        checked_segment_valid = _flags(segment_valid, "skeletons: segment_valid", segments)
        checked_segment_poses = _floats(segment_poses, "skeletons: segment_poses", (segments, POSE_WIDTH))
        self._last = None  # a failure below leaves nothing to repeat
        layout = _nested_layout(
            self._cache,
            SkeletonsLayout.build,
            frame_id=frame_id,
            names=names,
            offsets=offsets,
            item_names=segment_names,
            what=_SEGMENT_OFFSETS,
        )
        buf = _put_elements(
            layout, sec=sec, nanosec=nanosec, frame_number=frame_number, ids=checked_ids, valid=checked_valid
        )
        buf.i32[layout.segment_ids] = checked_segment_ids
        buf.i32[layout.parent_ids] = parent_ids
        buf.u8[layout.segment_valid] = checked_segment_valid
        buf.f64[layout.segment_poses] = checked_segment_poses
        self._last = layout
        return buf.tobytes()

    def repeat(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_number: int,
        valid: Array,
        segment_valid: Array,
        segment_poses: Array,
    ) -> bytes:
        """The message of the last ``encode`` with a new stamp, frame number and per-frame
        values; frame_id, ids, names and parents as then. See :meth:`MarkersEncoder.repeat`."""
        layout = self._last
        if layout is None:
            raise ValueError("skeletons: nothing encoded to repeat")
        _repeated_shapes("skeletons", layout.segment_poses.shape, segment_poses, segment_valid)
        buf = self.restamp(sec=sec, nanosec=nanosec, frame_number=frame_number, valid=valid).buf
        buf.u8[layout.segment_valid] = _repeated_flags(segment_valid)
        buf.f64[layout.segment_poses] = segment_poses
        return buf.tobytes()

    def restamp(self, *, sec: int, nanosec: int, frame_number: int, valid: Array) -> SkeletonsLayout:
        """``repeat`` without the segments: the message of the last ``encode`` with a new
        stamp, frame number and skeletons' validity written, for a caller that writes the
        segments' validity and poses itself (bodies_pass.py's compiled pass) and then
        copies out ``layout.buf``."""
        layout = self._last
        if layout is None:
            raise ValueError("skeletons: nothing encoded to repeat")
        if valid.shape != layout.valid.shape:
            raise ValueError(
                f"skeletons: repeat() takes valid shaped {layout.valid.shape}, got {valid.shape}"
            )
        buf = layout.buf
        _put_header_numbers(buf, layout.header, sec, nanosec, frame_number)
        buf.u8[layout.valid] = _repeated_flags(valid)
        return layout

    def encode_empty(self, *, sec: int, nanosec: int, frame_id: str, frame_number: int) -> bytes:
        """A Skeletons message without skeletons: what most systems send every frame, so
        it only writes the stamp and frame number into its layout (``encode`` with empty
        arrays gives the same bytes after checking eleven inputs, 25 us a frame)."""
        layout = self._empty.get(
            (frame_id,),
            lambda: SkeletonsLayout.build(_frame_id(frame_id), (), np.zeros(1, dtype=np.int64), ()),
        )
        _put_header_numbers(layout.buf, layout.header, sec, nanosec, frame_number)
        return layout.buf.tobytes()


class TFMessageEncoder(_CachedEncoder[TFLayout]):
    """tf2_msgs/msg/TFMessage as serialized bytes: one transform frame_id -> child per
    row of ``poses`` (x, y, z, qx, qy, qz, qw), all with the same stamp."""

    def encode(
        self,
        *,
        sec: int,
        nanosec: int,
        frame_id: str,
        child_frame_ids: Sequence[str],
        poses: npt.ArrayLike,
    ) -> bytes:
        """One TFMessage: transform i is ``frame_id`` -> ``child_frame_ids[i]`` at ``poses[i]``."""
        frame_id = _frame_id(frame_id)
        child_frame_ids = _names(child_frame_ids, "tf: child_frame_ids")
        count = len(child_frame_ids)
        checked_poses = _floats(poses, "tf: poses", (count, POSE_WIDTH))
        checked_sec = _scalar(sec, "sec", _INT32)
        checked_nanosec = _scalar(nanosec, "nanosec", _UINT32)
        layout = self._cache.get(
            (frame_id, child_frame_ids), lambda: TFLayout.build(frame_id, child_frame_ids)
        )
        buf = layout.buf
        buf.i32[layout.sec] = checked_sec
        buf.u32[layout.nanosec] = checked_nanosec
        buf.f64[layout.poses] = checked_poses
        return buf.tobytes()
