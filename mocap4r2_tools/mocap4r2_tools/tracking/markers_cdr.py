"""Read a serialized ``mocap4r2_interfaces/Markers`` message with numpy: header, frame
number and every marker's id and position, without a Python object per marker.

The bytes are what a raw subscription hands over (``create_subscription(..., raw=True)``):
the 4-byte encapsulation header, then plain CDR little endian. The wire rules, the
alignment and the place of a Marker's fields are mocap4r2_control's (cdr_layout.py writes
them down, cdr_reader.py reads by them): this module adds only the point cloud's shortcut.

A point cloud (every name empty, as an unlabeled system or the simulated system with
``publish_labels: false`` sends) has elements of one size after the first: their places are
computed at once and checked. Markers with names (a labeled system) are walked name
length by name length (cdr_reader.marker_places); no message object is built.

Every count and length read is checked against the bytes that are there: a message that
does not hold what it says raises :class:`MarkersDecodeError` with the reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mocap4r2_control.cdr_layout import ENCAPSULATION, MARKER_TAIL, marker_point
from mocap4r2_control.cdr_reader import CdrCursor, CdrDecodeError, marker_places

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: CDR little endian (XCDR1, "plain CDR"), as rmw_fastrtps writes it
CDR_LE = ENCAPSULATION[:2]
_MIN_ELEMENT = 4 + 4 + 1 + MARKER_TAIL  # id, empty name (length + NUL), point onwards
_CLOUD_ELEMENT = 48  # an element with an empty name, starting 8-aligned (all after the first)
_STAMP = struct.Struct("<iI")
_U64 = struct.Struct("<Q")


class MarkersDecodeError(CdrDecodeError):
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
    #: which markers have a name (a marker with a name is labeled even without an id)
    named: npt.NDArray[np.bool_]

    @property
    def stamp(self) -> float:
        return self.sec + self.nanosec * 1e-9


def decode_markers(data: bytes, max_markers: int = 100_000) -> DecodedMarkers:
    """The Markers message in ``data`` (raw CDR with its encapsulation header)."""
    cursor = CdrCursor(data, error=MarkersDecodeError)
    stamp_at, frame_id, number_at = cursor.header()
    sec, nanosec = _STAMP.unpack_from(data, stamp_at)
    frame_number: int = _U64.unpack_from(data, number_at)[0]
    count = cursor.count(limit=max_markers, what="markers", min_size=_MIN_ELEMENT)
    raw = np.frombuffer(data, np.uint8)
    starts = _cloud_starts(raw, cursor.offset, count)
    if starts is None:
        ids_at, points_at = marker_places(cursor, count)
        starts = np.asarray(ids_at, dtype=np.int64)
        points = np.asarray(points_at, dtype=np.int64)
        named = _gather(raw, starts + 4, 4).view("<u4").reshape(-1) > 1  # length counts the NUL
    else:
        named = np.zeros(count, dtype=bool)
        name_len = _gather(raw, starts + 4, 4).view("<u4").reshape(-1).astype(np.int64)
        points = marker_point(starts - 4, name_len) + 4
        if count and int(points[-1]) + MARKER_TAIL > len(data):
            raise MarkersDecodeError("truncated: the last marker runs past the end of the message")
    ids = _gather(raw, starts, 4).view("<i4").reshape(-1).astype(np.int32)
    positions = _gather(raw, points, 24).view("<f8").reshape(-1, 3).astype(np.float64)
    occluded = raw[points + 24] != 0 if count else np.zeros(0, dtype=bool)
    return DecodedMarkers(int(sec), int(nanosec), frame_id, frame_number, ids, positions, occluded, named)


def _gather(raw: npt.NDArray[np.uint8], offsets: IntArray, width: int) -> npt.NDArray[np.uint8]:
    """``width`` bytes at each offset, as (n, width) contiguous bytes."""
    out: npt.NDArray[np.uint8] = raw[offsets[:, None] + np.arange(width)]
    return np.ascontiguousarray(out)


def _cloud_starts(raw: npt.NDArray[np.uint8], first: int, count: int) -> IntArray | None:
    """Element offsets (from the start of the message) if every name is empty, None
    otherwise: after the first element, whose padding depends on where it starts,
    every element is 48 bytes."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    # offsets below are counted from the start of the message; the wire rules count
    # from byte 4, hence the shifts around marker_point
    second = marker_point(first - 4, 1) + 4 + MARKER_TAIL
    starts = np.empty(count, dtype=np.int64)
    starts[0] = first
    starts[1:] = second + _CLOUD_ELEMENT * np.arange(count - 1, dtype=np.int64)
    if int(starts[-1]) + 8 > raw.size:
        return None
    if not np.all(_gather(raw, starts + 4, 4).view("<u4") == 1):
        return None
    return starts
