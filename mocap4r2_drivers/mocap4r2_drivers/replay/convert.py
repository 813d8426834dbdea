"""Recorded messages and C3D points -> :class:`~mocap4r2_control.frame.MocapFrame`.

Serialized ``Markers``, ``RigidBodies`` and ``Skeletons`` (plain little-endian CDR, as
rmw and the recorder store them) are decoded without building message objects: one walk
over the bytes finds where every numeric field lies, and numpy gathers them all at once.
The walk is the only per-element Python work, and it is skipped when a message has the
structure of the previous one on its topic (the usual case: a system's assets rarely
change), which is checked by comparing the bytes of every count and name at once.

Alignment in XCDR1 is counted from the first byte after the 4-byte encapsulation header.
Every length read is checked against the bytes left before anything is allocated.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from mocap4r2_control.frame import BodyArrays, MarkerArrays, MocapFrame, SegmentArrays, SkeletonArrays

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
#: the most elements a sequence may claim; a count above it is corrupt data, not a scene
MAX_ELEMENTS = 1_000_000


class ReplayDecodeError(ValueError):
    """Bytes that are not the message they claim to be (truncated, big endian, corrupt)."""


def _align(offset: int, size: int) -> int:
    return (offset + size - 1) & ~(size - 1)


class _Walk:
    """Offsets of one message's fields, found by reading its counts and string lengths."""

    def __init__(self, data: bytes) -> None:
        if len(data) < 8:
            raise ReplayDecodeError(f"{len(data)} bytes: too short for a CDR message")
        if data[0] != 0 or data[1] != 1:
            raise ReplayDecodeError(
                f"encapsulation {data[0]:#04x} {data[1]:#04x}: only little-endian plain CDR is read"
            )
        self.data = data
        self.pos = 0  # relative to byte 4
        # bytes that fix the layout: counts, string lengths and string contents
        self.structure: list[int] = []

    def _need(self, size: int) -> None:
        if 4 + self.pos + size > len(self.data):
            raise ReplayDecodeError(f"truncated message: {size} bytes needed at offset {self.pos + 4}")

    def fixed(self, size: int, count: int = 1) -> int:
        """Skip ``count`` values of ``size`` bytes (aligned to ``size``); their offset."""
        self.pos = _align(self.pos, size)
        self._need(size * count)
        start = self.pos + 4
        self.pos += size * count
        return start

    def count(self) -> int:
        start = self.fixed(4)
        self.structure.extend(range(start, start + 4))
        value = _U32.unpack_from(self.data, start)[0]
        if value > MAX_ELEMENTS:
            raise ReplayDecodeError(f"a sequence of {value} elements (at most {MAX_ELEMENTS})")
        return value

    def string(self) -> str:
        length = self.count()
        self._need(length)
        start = self.pos + 4
        self.structure.extend(range(start, start + length))
        self.pos += length
        if length == 0:
            return ""
        return self.data[start : start + length - 1].decode("utf-8", "replace")

    def header(self) -> tuple[int, str, int]:
        """(offset of the stamp, frame_id, offset of frame_number)."""
        stamp = self.fixed(4, 2)
        frame_id = self.string()
        number = self.fixed(8)
        return stamp, frame_id, number


@dataclass
class _MarkerOffsets:
    names: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    occluded: list[int] = field(default_factory=list)
    residuals: list[int] = field(default_factory=list)

    def walk(self, w: _Walk) -> None:
        self.ids.append(w.fixed(4))
        self.names.append(w.string())
        self.positions.append(w.fixed(8, 3))
        self.occluded.append(w.fixed(1))
        self.residuals.append(w.fixed(4))


def _gather(buf: np.ndarray, offsets: list[int] | np.ndarray, dtype: str, width: int = 1) -> np.ndarray:
    """Values of ``dtype`` at ``offsets`` (``width`` consecutive ones each) as an array."""
    size = np.dtype(dtype).itemsize
    offs = np.asarray(offsets, dtype=np.int64)
    if offs.size == 0:
        shape = (0, width) if width > 1 else (0,)
        return np.zeros(shape, dtype=np.dtype(dtype).newbyteorder("="))
    idx = offs[:, None] + np.arange(size * width)
    values = buf[idx].view(dtype).astype(np.dtype(dtype).newbyteorder("="))
    return values.reshape(-1, width) if width > 1 else values.reshape(-1)


@dataclass
class _Layout:
    """Where the fields of one message lie: reused while the structure bytes are equal."""

    length: int
    structure: np.ndarray
    structure_bytes: bytes
    stamp: int
    number: int
    frame_id: str
    extra: dict


@dataclass
class Decoded:
    """One decoded message: its stamp, frame number and arrays."""

    sec: int
    nanosec: int
    frame_number: int
    frame_id: str
    markers: MarkerArrays | None = None
    bodies: BodyArrays | None = None
    skeletons: SkeletonArrays | None = None


class MessageDecoder:
    """Decodes one topic's serialized messages of one type (Markers, RigidBodies or
    Skeletons), reusing the field layout of the previous message when it still fits."""

    KINDS = ("markers", "rigid_bodies", "skeletons")

    def __init__(self, kind: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        self.kind = kind
        self._layout: _Layout | None = None
        self.layouts_built = 0

    def decode(self, data: bytes) -> Decoded:
        buf = np.frombuffer(data, dtype=np.uint8)
        layout = self._layout
        if not (
            layout is not None
            and layout.length == len(data)
            and buf[layout.structure].tobytes() == layout.structure_bytes
        ):
            layout = self._build(data, buf)
        sec, nanosec = struct.unpack_from("<iI", data, layout.stamp)
        number = _U64.unpack_from(data, layout.number)[0]
        out = Decoded(sec, nanosec, number, layout.frame_id)
        x = layout.extra
        if self.kind == "markers":
            out.markers = _markers(buf, x["m"])
        elif self.kind == "rigid_bodies":
            out.bodies = BodyArrays(
                ids=_gather(buf, x["ids"], "<i4"),
                names=x["names"],
                positions=_gather(buf, x["pose"], "<f8", 7)[:, :3].copy(),
                orientations=_gather(buf, x["pose"], "<f8", 7)[:, 3:].copy(),
                valid=_gather(buf, x["valid"], "u1").astype(bool),
                mean_errors=_gather(buf, x["errors"], "<f4"),
                marker_offsets=x["offsets"],
                markers=_markers(buf, x["m"]),
            )
        else:
            poses = _gather(buf, x["pose"], "<f8", 7)
            out.skeletons = SkeletonArrays(
                ids=_gather(buf, x["ids"], "<i4"),
                names=x["names"],
                valid=_gather(buf, x["valid"], "u1").astype(bool),
                segment_offsets=x["offsets"],
                segments=SegmentArrays(
                    ids=_gather(buf, x["seg_ids"], "<i4"),
                    names=x["seg_names"],
                    parent_ids=_gather(buf, x["parents"], "<i4"),
                    positions=poses[:, :3].copy(),
                    orientations=poses[:, 3:].copy(),
                    valid=_gather(buf, x["seg_valid"], "u1").astype(bool),
                ),
            )
        return out

    def _build(self, data: bytes, buf: np.ndarray) -> _Layout:
        w = _Walk(data)
        stamp, frame_id, number = w.header()
        extra: dict = {}
        n = w.count()
        if self.kind == "markers":
            m = _MarkerOffsets()
            for _ in range(n):
                m.walk(w)
            extra["m"] = _frozen(m)
        elif self.kind == "rigid_bodies":
            ids, names, valid, pose, errors, counts = [], [], [], [], [], []
            m = _MarkerOffsets()
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
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            extra.update(
                ids=ids,
                names=tuple(names),
                valid=valid,
                pose=pose,
                errors=errors,
                offsets=offsets,
                m=_frozen(m),
            )
        else:
            ids, names, valid, counts = [], [], [], []
            seg_ids, seg_names, parents, seg_valid, pose = [], [], [], [], []
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
                    pose.append(w.fixed(8, 7))
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            extra.update(
                ids=ids,
                names=tuple(names),
                valid=valid,
                offsets=offsets,
                seg_ids=seg_ids,
                seg_names=tuple(seg_names),
                parents=parents,
                seg_valid=seg_valid,
                pose=pose,
            )
        structure = np.asarray(w.structure, dtype=np.int64)
        layout = _Layout(len(data), structure, buf[structure].tobytes(), stamp, number, frame_id, extra)
        self._layout = layout
        self.layouts_built += 1
        return layout


@dataclass
class _FrozenMarkers:
    names: tuple[str, ...]
    ids: np.ndarray
    positions: np.ndarray
    occluded: np.ndarray
    residuals: np.ndarray


def _frozen(m: _MarkerOffsets) -> _FrozenMarkers:
    return _FrozenMarkers(
        tuple(m.names),
        np.asarray(m.ids, dtype=np.int64),
        np.asarray(m.positions, dtype=np.int64),
        np.asarray(m.occluded, dtype=np.int64),
        np.asarray(m.residuals, dtype=np.int64),
    )


def _markers(buf: np.ndarray, m: _FrozenMarkers) -> MarkerArrays:
    return MarkerArrays(
        ids=_gather(buf, m.ids, "<i4"),
        names=m.names,
        positions=_gather(buf, m.positions, "<f8", 3),
        occluded=_gather(buf, m.occluded, "u1").astype(bool),
        residuals=_gather(buf, m.residuals, "<f4"),
    )


def seconds_for_stamp(sec: int, nanosec: int) -> float:
    """A time in seconds that the node's stamping (``timebase.split_seconds``) turns back
    into exactly ``(sec, nanosec)`` when such a float exists (it does for every stamp a
    node of this suite wrote), else the nearest one. A float64 near today's Unix time
    has a step of about 240 ns, so ``sec + nanosec * 1e-9`` alone is often one ns off."""
    value = sec + nanosec * 1e-9
    candidate = value
    for _ in range(4):
        got = int((candidate - sec) * 1e9) if candidate >= sec else -1
        if got == nanosec:
            return candidate
        candidate = math.nextafter(candidate, math.inf if got < nanosec else -math.inf)
    down = value
    for _ in range(4):
        down = math.nextafter(down, -math.inf)
        if int((down - sec) * 1e9) == nanosec:
            return down
    return value


def frame_from_messages(
    number: int,
    markers: Decoded | None,
    bodies: Decoded | None,
    skeletons: Decoded | None,
) -> MocapFrame:
    """One frame from the decoded messages of one frame number (any may be missing)."""
    frame = MocapFrame(number)
    if markers is not None and markers.markers is not None:
        frame.markers = markers.markers
    if bodies is not None and bodies.bodies is not None:
        frame.bodies = bodies.bodies
    if skeletons is not None and skeletons.skeletons is not None:
        frame.skeletons = skeletons.skeletons
    return frame
