"""Recorded messages -> :class:`~mocap4r2_control.frame.MocapFrame`.

Serialized ``Markers``, ``RigidBodies`` and ``Skeletons`` (plain little-endian CDR, as
rmw and the recorder store them) are decoded without building message objects: one walk
over the bytes finds where every numeric field lies (the layout), and numpy gathers the
fields of a whole batch of messages at once (``decode_many``: the messages of a topic in
one MCAP chunk). The walk is the only per-element Python work, and it is skipped while
messages have the structure of the previous one on their topic (the usual case: a
system's assets rarely change), which is checked by comparing the bytes of every count
and name of the batch in one operation.

The walk is mocap4r2_control's CDR reader (cdr_reader.walk_message: the wire rules of
the suite's writer, read back); this module batches what it finds. Every length read is
checked against the bytes left before anything is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mocap4r2_control.cdr_reader import KINDS, MAX_ELEMENTS, CdrDecodeError, walk_message
from mocap4r2_control.frame import BodyArrays, MarkerArrays, SegmentArrays, SkeletonArrays

__all__ = [
    "MAX_ELEMENTS",
    "Decoded",
    "DecodedColumns",
    "MessageDecoder",
    "ReplayDecodeError",
    "seconds_for_stamp",
]


class ReplayDecodeError(CdrDecodeError):
    """Bytes that are not the message they claim to be (truncated, big endian, corrupt)."""


@dataclass
class _Field:
    """One field of a message: the indices of its values in a message's row viewed as
    ``dtype`` (see :class:`_Layout`), ``width`` values per element."""

    dtype: np.dtype
    index: np.ndarray
    width: int


@dataclass
class _Layout:
    """Where the fields of one message lie: reused while the structure bytes are equal.

    A batch of messages of this layout is copied into rows of ``padded`` bytes, each
    message starting at byte 4 of its row: CDR aligns a value to its size counted from
    the message's byte 4, which then lies at byte 8 of the row, so every value is aligned
    in the row and a field is gathered by viewing the rows as its dtype. ``words`` are
    the 64-bit words of a row holding bytes that fix the layout (the encapsulation, every
    count and name), ``template`` and ``mask`` those words of this message and which of
    their bytes count: a message has this layout when they are equal (only those words
    are compared: the numbers between them are most of a message's bytes)."""

    length: int
    padded: int
    words: np.ndarray
    template: np.ndarray
    mask: np.ndarray
    number: int
    frame_id: str
    fields: dict[str, _Field]
    extra: dict


@dataclass(slots=True)
class Decoded:
    """One decoded message: its stamp, frame number and arrays."""

    sec: int
    nanosec: int
    frame_number: int
    frame_id: str
    markers: MarkerArrays | None = None
    bodies: BodyArrays | None = None
    skeletons: SkeletonArrays | None = None


@dataclass(slots=True)
class DecodedColumns:
    """Decoded messages as columns: message i has stamp ``(secs[i], nanosecs[i])``, frame
    number ``numbers[i]`` and arrays ``parts[i]`` (MarkerArrays, BodyArrays or
    SkeletonArrays, by the decoder's kind)."""

    secs: list[int]
    nanosecs: list[int]
    numbers: list[int]
    parts: list[Any]


#: dtype objects for views: a view to a dtype object costs less than to its string
_I4, _U4, _U8 = np.dtype("<i4"), np.dtype("<u4"), np.dtype("<u8")

#: where a message starts in its row (see _Layout)
_ROW_START = 4


def _columns(rows: np.ndarray, f: _Field, first: int = 0, width: int | None = None) -> np.ndarray:
    """One field of every message of a batch: (messages, count) or (messages, count,
    width); ``first`` and ``width`` take those columns of each element only (a pose's
    position, its orientation).

    C-contiguous (``take``; ``[:, index]`` gives the messages' axis innermost), so each
    message's arrays are contiguous views: the encoder's compiled passes take them as they
    are, where strided ones had to be copied, frame by frame."""
    index = f.index
    if width is not None:
        index = index.reshape(-1, f.width)[:, first : first + width].reshape(-1)
    values = rows.view(f.dtype).take(index, axis=1)
    step = f.width if width is None else width
    if step > 1:
        return values.reshape(rows.shape[0], -1, step)
    return values


class MessageDecoder:
    """Decodes one topic's serialized messages of one type (Markers, RigidBodies or
    Skeletons), reusing the field layout of the previous message when it still fits."""

    KINDS = KINDS

    def __init__(self, kind: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        self.kind = kind
        self._layout: _Layout | None = None
        self.layouts_built = 0

    @property
    def frame_id(self) -> str | None:
        """header.frame_id of the last message decoded (None before the first)."""
        return self._layout.frame_id if self._layout is not None else None

    def decode(self, data: bytes) -> Decoded:
        """One message."""
        return self.decode_many(np.frombuffer(data, dtype=np.uint8), [0], [len(data)])[0]

    def decode_many(self, buf: np.ndarray, starts: Sequence[int], lengths: Sequence[int]) -> list[Decoded]:
        """The messages ``buf[starts[i]:starts[i] + lengths[i]]`` (uint8), in order. A run
        of messages with one structure is gathered by a single numpy indexing."""
        out: list[Decoded] = []
        field = {"markers": "markers", "rigid_bodies": "bodies", "skeletons": "skeletons"}[self.kind]
        for layout, rows in self._runs(buf, starts, lengths):
            secs, nanosecs, numbers = _stamps(layout, rows)
            frame_id = layout.frame_id
            for sec, ns, number, part in zip(secs, nanosecs, numbers, self._parts(layout, rows)):
                out.append(Decoded(sec, ns, number, frame_id, **{field: part}))
        return out

    def decode_columns(
        self, buf: np.ndarray, starts: Sequence[int], lengths: Sequence[int]
    ) -> DecodedColumns:
        """``decode_many`` without a Decoded object per message: the stamps, frame numbers
        and arrays (MarkerArrays, BodyArrays or SkeletonArrays) of the messages as lists,
        in order (what a reader groups into frames)."""
        secs: list[int] = []
        nanosecs: list[int] = []
        numbers: list[int] = []
        parts: list[Any] = []
        for layout, rows in self._runs(buf, starts, lengths):
            s, ns, n = _stamps(layout, rows)
            secs += s
            nanosecs += ns
            numbers += n
            parts += self._parts(layout, rows)
        return DecodedColumns(secs, nanosecs, numbers, parts)

    def _runs(
        self, buf: np.ndarray, starts: Sequence[int], lengths: Sequence[int]
    ) -> list[tuple[_Layout, np.ndarray]]:
        """The messages as runs of one layout each, every run's messages copied into rows."""
        starts_a = np.asarray(starts, dtype=np.int64)
        lengths_a = np.asarray(lengths, dtype=np.int64)
        if starts_a.size and (starts_a.min() < 0 or int((starts_a + lengths_a).max()) > buf.size):
            raise ReplayDecodeError("a message runs past the bytes that hold it")
        starts_l = starts_a.tolist()
        out: list[tuple[_Layout, np.ndarray]] = []
        n, i = len(starts_l), 0
        while i < n:
            layout = self._layout
            if layout is None or lengths_a[i] != layout.length:
                layout = self._build(bytes(buf[starts_l[i] : starts_l[i] + int(lengths_a[i])]))
            other = np.flatnonzero(lengths_a[i:] != layout.length)
            j = i + (int(other[0]) if other.size else n - i)
            rows = _rows(buf, starts_a[i:j], layout.length, layout.padded)
            differs = ((rows.view(_U8)[:, layout.words] ^ layout.template) & layout.mask).any(axis=1)
            if np.count_nonzero(differs):  # (count_nonzero: a fraction of any()'s call cost)
                first_other = int(np.argmax(differs))
                if first_other == 0:  # this message has another structure: walk it
                    self._build(bytes(buf[starts_l[i] : starts_l[i] + layout.length]))
                    continue
                j, rows = i + first_other, rows[:first_other]
            out.append((layout, rows))
            i = j
        return out

    def _parts(self, layout: _Layout, packed: np.ndarray) -> list[Any]:
        """The arrays of every message of a run (rows of one layout). Each message's
        arrays are views of the run's gathered fields, made by list() over their first
        axis: one C loop per field, not one Python indexing per field and message."""
        f, x = layout.fields, layout.extra
        empty = x.get("empty")
        if empty is not None:  # no element at all: one collection serves every message
            return [empty] * packed.shape[0]
        if self.kind == "markers":
            return _marker_rows(packed, f, x["m_names"])
        if self.kind == "rigid_bodies":
            positions, orientations = _columns(packed, f["pose"], 0, 3), _columns(packed, f["pose"], 3, 4)
            ids, valid = _columns(packed, f["ids"]), _columns(packed, f["valid"]).view(bool)
            errors = _columns(packed, f["errors"])
            markers = _marker_rows(packed, f, x["m_names"])
            names, offsets = x["names"], x["offsets"]
            return [
                BodyArrays(i, names, p, q, v, e, offsets, m)
                for i, p, q, v, e, m in zip(
                    list(ids),
                    list(positions),
                    list(orientations),
                    list(valid),
                    list(errors),
                    markers,
                )
            ]
        positions, orientations = _columns(packed, f["pose"], 0, 3), _columns(packed, f["pose"], 3, 4)
        ids, valid = _columns(packed, f["ids"]), _columns(packed, f["valid"]).view(bool)
        seg_ids, parents = _columns(packed, f["seg_ids"]), _columns(packed, f["parents"])
        seg_valid = _columns(packed, f["seg_valid"]).view(bool)
        names, offsets, seg_names = x["names"], x["offsets"], x["seg_names"]
        return [
            SkeletonArrays(i, names, v, offsets, SegmentArrays(si, seg_names, pa, p, q, sv))
            for i, v, si, pa, p, q, sv in zip(
                list(ids),
                list(valid),
                list(seg_ids),
                list(parents),
                list(positions),
                list(orientations),
                list(seg_valid),
            )
        ]

    def _build(self, data: bytes) -> _Layout:
        if len(data) < 8:
            raise ReplayDecodeError(f"{len(data)} bytes: too short for a CDR message")
        walk = walk_message(self.kind, data, ReplayDecodeError)
        extra: dict = {}
        if self.kind != "markers":
            extra.update(names=walk.names, offsets=_offsets(walk.counts))
        if self.kind == "skeletons":
            extra["seg_names"] = walk.item_names
        else:
            extra["m_names"] = walk.item_names
        if walk.count == 0:
            # a collection without elements (most systems send no skeletons): nothing
            # in it can change, so every message of this layout shares one, and its
            # frames are not built of empty arrays sliced per message
            extra["empty"] = {
                "markers": MarkerArrays,
                "rigid_bodies": BodyArrays,
                "skeletons": SkeletonArrays,
            }[self.kind]()
        padded = -(-(_ROW_START + len(data)) // 8) * 8
        row = np.zeros(padded, dtype=np.uint8)
        row[_ROW_START : _ROW_START + len(data)] = np.frombuffer(data, dtype=np.uint8)
        mask = np.zeros(padded, dtype=np.uint8)
        mask[_ROW_START + np.asarray([0, 1, *walk.structure], dtype=np.int64)] = 0xFF
        mask64 = mask.view("<u8")
        words = np.flatnonzero(mask64)
        fields = {}
        for f in walk.fields:
            dtype = np.dtype(f.dtype)
            first = (_ROW_START + np.asarray(f.offsets, dtype=np.int64)) // dtype.itemsize
            fields[f.name] = _Field(dtype, (first[:, None] + np.arange(f.width)).reshape(-1), f.width)
        layout = _Layout(
            len(data),
            padded,
            words,
            row.view("<u8")[words],
            mask64[words],
            walk.number,
            walk.frame_id,
            fields,
            extra,
        )
        self._layout = layout
        self.layouts_built += 1
        return layout


def _rows(buf: np.ndarray, starts: np.ndarray, size: int, padded: int) -> np.ndarray:
    """The ``size`` bytes at each of ``starts`` in ``buf``, copied to byte 4 of rows of
    ``padded`` bytes (see _Layout). Messages written at a regular interval (one topic
    in a session: every frame writes the same messages of the same sizes) are copied by
    one strided assignment instead of one per message."""
    count = starts.shape[0]
    # not zeroed: the bytes around a message are neither compared (the mask leaves them
    # out) nor read by any field
    rows: np.ndarray = np.empty((count, padded), dtype=np.uint8)
    first = int(starts[0])
    step = int(starts[1] - first) if count > 1 else size
    if count > 1 and step >= size and bool((np.diff(starts) == step).all()):
        # within buf: the caller checked that every message lies inside it
        rows[:, _ROW_START : _ROW_START + size] = np.lib.stride_tricks.as_strided(
            buf[first:], shape=(count, size), strides=(step * buf.strides[0], buf.strides[0]), writeable=False
        )
    else:
        for r, start in enumerate(starts.tolist()):
            rows[r, _ROW_START : _ROW_START + size] = buf[start : start + size]
    return rows


def _offsets(counts: list[int]) -> np.ndarray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _marker_rows(packed: np.ndarray, f: dict[str, _Field], names: tuple[str, ...]) -> list[MarkerArrays]:
    ids, positions = _columns(packed, f["m_ids"]), _columns(packed, f["m_positions"])
    occluded, residuals = _columns(packed, f["m_occluded"]).view(bool), _columns(packed, f["m_residuals"])
    return [
        MarkerArrays(i, names, p, o, r)
        for i, p, o, r in zip(list(ids), list(positions), list(occluded), list(residuals))
    ]


def _stamps(layout: _Layout, packed: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """sec, nanosec and frame number of every message of a run: the stamp is the first
    field of every message (int32 sec, uint32 nanosec)."""
    return (
        packed.view(_I4)[:, 2].tolist(),
        packed.view(_U4)[:, 3].tolist(),
        packed.view(_U8)[:, (_ROW_START + layout.number) // 8].tolist(),
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
