"""Frame numbers straight from serialized bytes, and the gaps between them.

Markers, RigidBodies and Skeletons start with ``std_msgs/Header header`` followed by
``uint64 frame_number``. In plain CDR (XCDR1, little or big endian after a 4-byte
encapsulation header) that is: int32 sec, uint32 nanosec, the frame_id string (uint32
length counting the NUL, then the bytes), padding to a multiple of 8 counted from the
first byte after the encapsulation header, then the uint64. Reading those few bytes is
all the recorder does with a message, so the hot path never deserializes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

#: message types whose second field is the system's frame number
FRAME_TYPES = frozenset(
    {
        "mocap4r2_interfaces/msg/Markers",
        "mocap4r2_interfaces/msg/RigidBodies",
        "mocap4r2_interfaces/msg/Skeletons",
    }
)

_U32 = {0: struct.Struct("<I"), 1: struct.Struct(">I")}
_U64 = {0: struct.Struct("<Q"), 1: struct.Struct(">Q")}
#: gap ranges kept per topic (a budget: the counts stay exact beyond it)
MAX_RANGES = 10_000


def frame_number(data: bytes) -> int | None:
    """The frame number of a serialized Markers/RigidBodies/Skeletons, None if the bytes
    are too short or not plain CDR."""
    if len(data) < 16 or data[0] != 0 or data[1] > 1:
        return None
    little = data[1] & 1
    endian = 0 if little else 1
    length = _U32[endian].unpack_from(data, 12)[0]
    offset = 16 + length - 4  # relative to the data start (byte 4)
    offset = (offset + 7) & ~7
    if 4 + offset + 8 > len(data):
        return None
    return _U64[endian].unpack_from(data, 4 + offset)[0]


@dataclass
class FrameTrack:
    """Frame numbers seen on one topic: first, last, count, and the missing ranges."""

    first: int | None = None
    last: int | None = None
    received: int = 0
    missing: int = 0
    restarts: int = 0
    unreadable: int = 0
    ranges: list[tuple[int, int]] = field(default_factory=list)  # inclusive, missing

    def add(self, number: int | None) -> None:
        if number is None:
            self.unreadable += 1
            return
        self.received += 1
        last = self.last
        if last is None:
            self.first = number
        elif number > last + 1:
            self.missing += number - last - 1
            if len(self.ranges) < MAX_RANGES:
                self.ranges.append((last + 1, number - 1))
        elif number <= last:
            # the system restarted its numbering (or repeated a frame): a new run
            self.restarts += 1
        self.last = number


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def system_gaps(tracks: list[FrameTrack]) -> tuple[int, int]:
    """(whole frames missing on every topic of a system, messages missing on some topics
    while other topics of the same frame arrived) over the span all topics cover."""
    # first and last are set together, by the first frame number a topic sees
    spans = [(t.first, t.last, t.ranges) for t in tracks if t.first is not None and t.last is not None]
    if not spans:
        return 0, 0
    lo = max(first for first, _, _ in spans)
    hi = min(last for _, last, _ in spans)
    clipped = [[(max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and b >= lo] for _, _, ranges in spans]
    common = clipped[0]
    for ranges in clipped[1:]:
        common = _intersect(common, ranges)
    whole = sum(b - a + 1 for a, b in common)
    partial = sum(sum(b - a + 1 for a, b in ranges) - whole for ranges in clipped)
    return whole, partial
