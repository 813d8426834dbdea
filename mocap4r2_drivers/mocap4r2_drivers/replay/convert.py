"""Recorded messages -> :class:`~mocap4r2_control.frame.MocapFrame`.

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
    """Offsets of the fields of the markers walked so far."""

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


@dataclass
class _Field:
    """One field's values inside the packed bytes of a message: ``packed[start:stop]``."""

    start: int
    stop: int
    dtype: str
    width: int


@dataclass
class _Layout:
    """Where the fields of one message lie: reused while the structure bytes are equal.

    ``order`` lists, first, the bytes of every count and name (``checked`` of them), then
    the bytes of every numeric field, so one numpy gather per message both checks the
    structure and packs every value (each field a contiguous slice, viewed in place)."""

    length: int
    order: np.ndarray
    checked: int
    structure_bytes: bytes
    stamp: int
    number: int
    frame_id: str
    fields: dict[str, _Field]
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


class _Packer:
    """Collects the byte offsets of fields while a message is walked."""

    def __init__(self, structure: list[int]) -> None:
        self.parts: list[np.ndarray] = [np.asarray(structure, dtype=np.int64)]
        self.size = len(structure)
        self.fields: dict[str, _Field] = {}

    def add(self, name: str, offsets: list[int], dtype: str, width: int = 1) -> None:
        item = np.dtype(dtype).itemsize * width
        offs = np.asarray(offsets, dtype=np.int64)
        idx = (offs[:, None] + np.arange(item)).reshape(-1)
        self.parts.append(idx)
        self.fields[name] = _Field(self.size, self.size + idx.size, dtype, width)
        self.size += idx.size


def _values(packed: np.ndarray, f: _Field) -> np.ndarray:
    values = packed[f.start : f.stop].view(f.dtype)
    return values.reshape(-1, f.width) if f.width > 1 else values


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
        packed = None
        if layout is not None and layout.length == len(data):
            packed = buf[layout.order]
            if packed[: layout.checked].tobytes() != layout.structure_bytes:
                packed = None
        if packed is None or layout is None:
            layout = self._build(data, buf)
            packed = buf[layout.order]
        sec, nanosec = struct.unpack_from("<iI", data, layout.stamp)
        number = _U64.unpack_from(data, layout.number)[0]
        out = Decoded(sec, nanosec, number, layout.frame_id)
        f, x = layout.fields, layout.extra
        if self.kind == "markers":
            out.markers = _markers(packed, f, "m", x["m_names"])
        elif self.kind == "rigid_bodies":
            poses = _values(packed, f["pose"])
            out.bodies = BodyArrays(
                ids=_values(packed, f["ids"]),
                names=x["names"],
                positions=poses[:, :3],
                orientations=poses[:, 3:],
                valid=_values(packed, f["valid"]).view(bool),
                mean_errors=_values(packed, f["errors"]),
                marker_offsets=x["offsets"],
                markers=_markers(packed, f, "m", x["m_names"]),
            )
        else:
            poses = _values(packed, f["pose"])
            out.skeletons = SkeletonArrays(
                ids=_values(packed, f["ids"]),
                names=x["names"],
                valid=_values(packed, f["valid"]).view(bool),
                segment_offsets=x["offsets"],
                segments=SegmentArrays(
                    ids=_values(packed, f["seg_ids"]),
                    names=x["seg_names"],
                    parent_ids=_values(packed, f["parents"]),
                    positions=poses[:, :3],
                    orientations=poses[:, 3:],
                    valid=_values(packed, f["seg_valid"]).view(bool),
                ),
            )
        return out

    def _build(self, data: bytes, buf: np.ndarray) -> _Layout:
        w = _Walk(data)
        stamp, frame_id, number = w.header()
        extra: dict = {}
        n = w.count()
        values: list[tuple[str, list[int], str, int]] = []
        m = _MarkerOffsets()
        if self.kind == "markers":
            for _ in range(n):
                m.walk(w)
        elif self.kind == "rigid_bodies":
            ids, names, valid, pose, errors, counts = [], [], [], [], [], []
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
            extra.update(names=tuple(names), offsets=_offsets(counts))
            values += [("ids", ids, "<i4", 1), ("valid", valid, "u1", 1), ("pose", pose, "<f8", 7)]
            values.append(("errors", errors, "<f4", 1))
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
            extra.update(names=tuple(names), offsets=_offsets(counts), seg_names=tuple(seg_names))
            values += [("ids", ids, "<i4", 1), ("valid", valid, "u1", 1), ("seg_ids", seg_ids, "<i4", 1)]
            values += [("parents", parents, "<i4", 1), ("seg_valid", seg_valid, "u1", 1)]
            values.append(("pose", pose, "<f8", 7))
        if self.kind != "skeletons":
            extra["m_names"] = tuple(m.names)
            values += [("m_ids", m.ids, "<i4", 1), ("m_positions", m.positions, "<f8", 3)]
            values += [("m_occluded", m.occluded, "u1", 1), ("m_residuals", m.residuals, "<f4", 1)]
        packer = _Packer(w.structure)
        for name, offsets, dtype, width in values:
            packer.add(name, offsets, dtype, width)
        order = np.concatenate(packer.parts)
        checked = len(w.structure)
        layout = _Layout(
            len(data),
            order,
            checked,
            buf[order[:checked]].tobytes(),
            stamp,
            number,
            frame_id,
            packer.fields,
            extra,
        )
        self._layout = layout
        self.layouts_built += 1
        return layout


def _offsets(counts: list[int]) -> np.ndarray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _markers(packed: np.ndarray, f: dict[str, _Field], prefix: str, names: tuple[str, ...]) -> MarkerArrays:
    return MarkerArrays(
        ids=_values(packed, f[f"{prefix}_ids"]),
        names=names,
        positions=_values(packed, f[f"{prefix}_positions"]),
        occluded=_values(packed, f[f"{prefix}_occluded"]).view(bool),
        residuals=_values(packed, f[f"{prefix}_residuals"]),
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
