"""Read a serialized ``mocap4r2_interfaces/Markers`` message with numpy: header, frame
number and every marker's id and position, without a Python object per marker.

The bytes are what a raw subscription hands over (``create_subscription(..., raw=True)``):
the 4-byte encapsulation header, then plain CDR little endian, the rules written down in
``mocap4r2_control/cdr_layout.py`` (offsets count from the first byte after the
encapsulation; primitives align to their size; a string is a uint32 length counting its
NUL, the bytes, the NUL; a sequence is a uint32 count, then the elements). A Marker is
``int32 id, string name, Point position (3 float64), bool occluded, float32 residual``.

A point cloud (every name empty, as an unlabeled system or the simulated system with
``publish_labels: false`` sends) has elements of one size after the first: their places are
computed at once and checked. Markers with names (a labeled system) are walked name
length by name length; only integers are read there, no message object is built.

Every count and length read is checked against the bytes that are there: a message that
does not hold what it says raises :class:`MarkersDecodeError` with the reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: CDR little endian (XCDR1, "plain CDR"), as rmw_fastrtps writes it
CDR_LE = b"\x00\x01"
_POINT_TO_END = 32  # 3 float64, bool, pad to 4, float32: the bytes from a Point to the next element
_MIN_ELEMENT = 4 + 4 + 1 + _POINT_TO_END  # id, empty name (length + NUL), point onwards


class MarkersDecodeError(ValueError):
    """Bytes that are not a Markers message this decoder can read; the message says why."""


@dataclass(frozen=True)
class DecodedMarkers:
    """One Markers message: header, frame number, ids and positions (n, 3) in metres.
    Occluded markers are included as sent (``occluded`` says which)."""

    sec: int
    nanosec: int
    frame_id: str
    frame_number: int
    ids: npt.NDArray[np.int32]
    positions: FloatArray
    occluded: npt.NDArray[np.bool_]

    @property
    def stamp(self) -> float:
        return self.sec + self.nanosec * 1e-9


def _align(offset: int, size: int) -> int:
    return (offset + size - 1) & ~(size - 1)


def _u32(data: bytes, offset: int, size: int, what: str) -> int:
    if offset + 4 > size:
        raise MarkersDecodeError(f"truncated: {what} at byte {offset} of {size}")
    value: int = struct.unpack_from("<I", data, 4 + offset)[0]
    return value


def decode_markers(data: bytes, max_markers: int = 100_000) -> DecodedMarkers:
    """The Markers message in ``data`` (raw CDR with its encapsulation header)."""
    if len(data) < 4 or data[:2] != CDR_LE:
        raise MarkersDecodeError(
            f"not little-endian plain CDR (encapsulation {bytes(data[:4]).hex() or 'missing'})"
        )
    size = len(data) - 4  # bytes after the encapsulation header
    if size < 12:
        raise MarkersDecodeError(f"truncated: {size} bytes, a header needs at least 12")
    sec, nanosec = struct.unpack_from("<iI", data, 4)
    id_len = _u32(data, 8, size, "frame_id length")
    if id_len < 1 or 12 + id_len > size:
        raise MarkersDecodeError(f"frame_id length {id_len} does not fit in {size} bytes")
    frame_id = bytes(data[16 : 16 + id_len - 1]).decode("utf-8", errors="replace")
    number_at = _align(12 + id_len, 8)
    if number_at + 12 > size:
        raise MarkersDecodeError(f"truncated: frame_number and count need {number_at + 12} of {size} bytes")
    frame_number: int = struct.unpack_from("<Q", data, 4 + number_at)[0]
    count = _u32(data, number_at + 8, size, "marker count")
    first = number_at + 12
    if count > max_markers:
        raise MarkersDecodeError(f"{count} markers, more than the {max_markers} allowed")
    if count * _MIN_ELEMENT > size - first:
        raise MarkersDecodeError(f"{count} markers cannot fit in the {size - first} bytes left")
    starts = _cloud_starts(data, first, count, size)
    if starts is None:
        starts = _named_starts(data, first, count, size)
    name_len = _gather_u32(data, starts + 4) if count else np.zeros(0, dtype=np.int64)
    points = _point_offsets(starts, name_len)
    if count and int(points[-1]) + _POINT_TO_END > size:
        raise MarkersDecodeError("truncated: the last marker runs past the end of the message")
    raw = np.frombuffer(data, np.uint8)
    payload = raw[4:]
    ids = _gather(payload, starts, 4).view("<i4").reshape(-1).astype(np.int32)
    positions = _gather(payload, points, 24).view("<f8").reshape(-1, 3).astype(np.float64)
    occluded = payload[points + 24] != 0 if count else np.zeros(0, dtype=bool)
    return DecodedMarkers(int(sec), int(nanosec), frame_id, int(frame_number), ids, positions, occluded)


def _gather(payload: npt.NDArray[np.uint8], offsets: IntArray, width: int) -> npt.NDArray[np.uint8]:
    """``width`` bytes at each offset, as (n, width) contiguous bytes."""
    out: npt.NDArray[np.uint8] = payload[offsets[:, None] + np.arange(width)]
    return np.ascontiguousarray(out)


def _gather_u32(data: bytes, offsets: IntArray) -> IntArray:
    payload = np.frombuffer(data, np.uint8)[4:]
    return _gather(payload, offsets, 4).view("<u4").reshape(-1).astype(np.int64)


def _point_offsets(starts: IntArray, name_len: IntArray) -> IntArray:
    # id (4) + length (4) + name, then the Point aligned to 8
    return (starts + 8 + name_len + 7) & ~np.int64(7)


def _cloud_starts(data: bytes, first: int, count: int, size: int) -> IntArray | None:
    """Element offsets if every name is empty (None otherwise): after the first element,
    whose padding depends on where it starts, every element is 48 bytes."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    first_point = _align(first + 9, 8)
    second = first_point + _POINT_TO_END
    starts = np.empty(count, dtype=np.int64)
    starts[0] = first
    starts[1:] = second + 48 * np.arange(count - 1, dtype=np.int64)
    if int(starts[-1]) + 8 > size:
        return None
    if not np.all(_gather_u32(data, starts + 4) == 1):
        return None
    return starts


def _named_starts(data: bytes, first: int, count: int, size: int) -> IntArray:
    """Element offsets walked one name length at a time (labeled markers)."""
    starts = np.empty(count, dtype=np.int64)
    at = first
    for i in range(count):
        at = _align(at, 4)
        starts[i] = at
        name_len = _u32(data, at + 4, size, f"name length of marker {i}")
        if name_len < 1 or at + 8 + name_len > size:
            raise MarkersDecodeError(f"marker {i}: name length {name_len} does not fit in the message")
        at = _align(at + 8 + name_len, 8) + _POINT_TO_END
    return starts
