"""QTM RT protocol, little-endian (QTM's base port + 1), version 1.2x: packets and data.

Pure Python and numpy, no ROS. Everything a peer sends is bounded-checked: a packet
whose sizes or counts do not fit raises :class:`QtmProtocolError`, never an IndexError or
a huge allocation.

Facts of the protocol used here (from the public QTM RT protocol documentation):

* every packet: ``uint32 size`` (including the 8-byte header), ``uint32 type``;
* strings (commands, responses, errors, XML) are NUL-terminated;
* a data packet: ``int64 timestamp`` (microseconds since the measurement started),
  ``uint32 frame number``, ``uint32 component count``, then components, each with the
  same 8-byte size/type header;
* 3D and 6D components start with ``int32 count, int16 2D drop rate, int16 2D
  out-of-sync rate``; the skeleton component with ``int32 skeleton count`` and each
  skeleton with ``int32 segment count`` (0 when the skeleton is not seen);
* positions are millimetres, float32; a missing marker or untracked body has all
  32 bits set in its floats (a NaN); a 6DOF rotation is a 3x3 matrix of 9 floats in
  column-major order; skeleton rotations are quaternions x, y, z, w.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
from numpy.typing import NDArray

HEADER = struct.Struct("<II")  # size including the header, packet type
DATA_HEADER = struct.Struct("<qII")  # timestamp (us), frame number, component count
COMPONENT_HEADER = struct.Struct("<II")  # size including the header, component type
COUNT_AND_RATES = struct.Struct("<ihh")  # 3D/6D: count, 2D drop rate, 2D out-of-sync rate
COUNT = struct.Struct("<i")  # skeleton and segment counts

# Bounds: QTM's own packets stay far below this; anything larger is a broken peer.
MAX_PACKET_SIZE = 16 * 1024 * 1024
MAX_COMMAND_SIZE = 64 * 1024


class QtmProtocolError(ValueError):
    """Bytes that are not a valid QTM RT packet or component."""


class PacketType(IntEnum):
    """QTM RT packet types (the header's second word)."""

    ERROR = 0
    COMMAND = 1
    XML = 2
    DATA = 3
    NO_MORE_DATA = 4
    C3D_FILE = 5
    EVENT = 6
    DISCOVER = 7
    QTM_FILE = 8


_LAST_PACKET_TYPE = max(PacketType)  # max() walks the enum: once, not per header


class ComponentType(IntEnum):
    """QTM RT data component types."""

    MARKERS_3D = 1
    MARKERS_3D_NO_LABELS = 2
    ANALOG = 3
    FORCE = 4
    BODIES_6D = 5
    BODIES_6D_EULER = 6
    IMAGE_2D = 7
    IMAGE_2D_LINEARIZED = 8
    MARKERS_3D_RESIDUALS = 9
    MARKERS_3D_NO_LABELS_RESIDUALS = 10
    BODIES_6D_RESIDUALS = 11
    BODIES_6D_EULER_RESIDUALS = 12
    ANALOG_SINGLE = 13
    IMAGE = 14
    FORCE_SINGLE = 15
    GAZE_VECTOR = 16
    TIMECODE = 17
    SKELETON = 18
    EYE_TRACKER = 19


class Event(IntEnum):
    """QTM RT event numbers (the byte of an event packet)."""

    CONNECTED = 1
    CONNECTION_CLOSED = 2
    CAPTURE_STARTED = 3
    CAPTURE_STOPPED = 4
    CALIBRATION_STARTED = 6
    CALIBRATION_STOPPED = 7
    RT_FROM_FILE_STARTED = 8
    RT_FROM_FILE_STOPPED = 9
    WAITING_FOR_TRIGGER = 10
    CAMERA_SETTINGS_CHANGED = 11
    QTM_SHUTTING_DOWN = 12
    CAPTURE_SAVED = 13
    TRIGGER = 16


# Component names as written in GetCurrentFrame / StreamFrames (case-insensitive).
# "skeleton" and "skeleton:global" are the same component type; only the coordinates
# of the segments differ (local to the parent, or global).
COMPONENT_NAMES: dict[str, ComponentType] = {
    "3d": ComponentType.MARKERS_3D,
    "3dres": ComponentType.MARKERS_3D_RESIDUALS,
    "3dnolabels": ComponentType.MARKERS_3D_NO_LABELS,
    "3dnolabelsres": ComponentType.MARKERS_3D_NO_LABELS_RESIDUALS,
    "6d": ComponentType.BODIES_6D,
    "6dres": ComponentType.BODIES_6D_RESIDUALS,
    "skeleton": ComponentType.SKELETON,
    "skeleton:global": ComponentType.SKELETON,
}

# Record layouts of the components handled here.
_XYZ = ("<f4", (3,))
MARKER_DTYPES: dict[int, np.dtype[Any]] = {
    ComponentType.MARKERS_3D: np.dtype([("position", *_XYZ)]),
    ComponentType.MARKERS_3D_RESIDUALS: np.dtype([("position", *_XYZ), ("residual", "<f4")]),
    ComponentType.MARKERS_3D_NO_LABELS: np.dtype([("position", *_XYZ), ("id", "<i4")]),
    ComponentType.MARKERS_3D_NO_LABELS_RESIDUALS: np.dtype(
        [("position", *_XYZ), ("id", "<i4"), ("residual", "<f4")]
    ),
}
BODY_DTYPES: dict[int, np.dtype[Any]] = {
    ComponentType.BODIES_6D: np.dtype([("position", *_XYZ), ("rotation", "<f4", (9,))]),
    ComponentType.BODIES_6D_RESIDUALS: np.dtype(
        [("position", *_XYZ), ("rotation", "<f4", (9,)), ("residual", "<f4")]
    ),
}
SEGMENT_DTYPE = np.dtype([("id", "<i4"), ("position", *_XYZ), ("rotation", "<f4", (4,))])

# The "missing" float QTM writes: all 32 bits set (a negative quiet NaN).
MISSING_BITS = np.uint32(0xFFFFFFFF)


# ---------------------------------------------------------------------- packets
def pack(packet_type: int, payload: bytes = b"") -> bytes:
    """One packet: header and payload."""
    return HEADER.pack(HEADER.size + len(payload), int(packet_type)) + payload


def pack_text(packet_type: int, text: str) -> bytes:
    """A command, response, error or XML packet (NUL-terminated string)."""
    return pack(packet_type, text.encode("utf-8") + b"\0")


def pack_event(event: int) -> bytes:
    """An event packet."""
    return pack(PacketType.EVENT, bytes((int(event),)))


def parse_header(header: bytes, max_size: int = MAX_PACKET_SIZE) -> tuple[int, int]:
    """(payload size, packet type) of an 8-byte header; QtmProtocolError if out of bounds."""
    if len(header) != HEADER.size:
        raise QtmProtocolError(f"a packet header is {HEADER.size} bytes, got {len(header)}")
    size, packet_type = HEADER.unpack(header)
    if size < HEADER.size or size > max_size:
        raise QtmProtocolError(f"packet size {size} outside [{HEADER.size}, {max_size}]")
    if packet_type > _LAST_PACKET_TYPE:
        raise QtmProtocolError(f"unknown packet type {packet_type}")
    return size - HEADER.size, packet_type


def unpack_text(payload: bytes) -> str:
    """The string of a command/response/error/XML payload (the NUL is optional)."""
    end = payload.find(b"\0")
    return (payload if end < 0 else payload[:end]).decode("utf-8", errors="replace")


def parse_command(text: str) -> tuple[str, list[str]]:
    """(lower-case command name, arguments); commands never contain spaces in their
    parameters, so whitespace separates them."""
    words = text.split()
    if not words:
        return "", []
    return words[0].lower(), words[1:]


class PacketReader:
    """Splits a TCP byte stream into (packet type, payload) pairs, bounded: a header
    announcing a size outside [8, max_size] is refused before anything is buffered for
    it, so the buffer never holds more than one packet of at most ``max_size`` bytes
    plus the last chunk received."""

    def __init__(self, max_size: int = MAX_PACKET_SIZE):
        self.max_size = max_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        packets, problem = self.split(data)
        if problem is not None:
            raise problem
        return packets

    def split(self, data: bytes) -> tuple[list[tuple[int, bytes]], QtmProtocolError | None]:
        """The complete packets in the stream so far, and the error that ends the
        stream, if any: after a bad header the framing is lost (TCP has no markers to
        find the next packet), the buffer is dropped and the caller must reconnect."""
        self._buffer += data
        out: list[tuple[int, bytes]] = []
        while len(self._buffer) >= HEADER.size:
            try:
                payload_size, packet_type = parse_header(bytes(self._buffer[: HEADER.size]), self.max_size)
            except QtmProtocolError as exc:
                self._buffer = bytearray()
                return out, exc
            end = HEADER.size + payload_size
            if len(self._buffer) < end:
                break
            out.append((packet_type, bytes(self._buffer[HEADER.size : end])))
            del self._buffer[:end]
        return out, None


# the component types and events a client may meet (anything else is a broken peer)
KNOWN_COMPONENT_TYPES = frozenset(int(c) for c in ComponentType)
KNOWN_EVENTS = frozenset(range(1, 18))  # 1..16 plus "none" (17), as QTM's documentation lists


def check_packet(packet_type: int, payload: bytes | memoryview) -> None:
    """Raise QtmProtocolError unless a framed packet is well formed enough for any
    client to read: a data packet's component table fits (at most one component per 8
    bytes, each at least its header, of a known type), an event is one known byte,
    and the packet type is one a real-time client receives."""
    if packet_type == PacketType.DATA:
        packet = decode_frame(payload)
        unknown = [c for c in packet.components if c not in KNOWN_COMPONENT_TYPES]
        if unknown:
            raise QtmProtocolError(f"data packet with unknown component type {unknown[0]}")
    elif packet_type == PacketType.EVENT:
        if len(payload) != 1 or payload[0] not in KNOWN_EVENTS:
            raise QtmProtocolError(
                f"event packet of {len(payload)} bytes"
                f"{' with unknown event ' + str(payload[0]) if len(payload) else ''}"
            )
    elif packet_type not in (PacketType.ERROR, PacketType.COMMAND, PacketType.XML, PacketType.NO_MORE_DATA):
        raise QtmProtocolError(f"packet type {packet_type} is not sent to a real-time client")


# ---------------------------------------------------------------------- data packets
@dataclass(frozen=True)
class DataPacket:
    """A parsed data packet: components map to their bytes (after the component header)."""

    timestamp: int  # microseconds since the measurement started
    frame_number: int
    components: dict[int, memoryview]


def decode_frame(payload: bytes | memoryview) -> DataPacket:
    """The component table of a data packet payload (what follows the packet header)."""
    view = memoryview(payload)
    if len(view) < DATA_HEADER.size:
        raise QtmProtocolError(f"data packet of {len(view)} bytes is shorter than its header")
    timestamp, frame_number, count = DATA_HEADER.unpack_from(view, 0)
    position = DATA_HEADER.size
    components: dict[int, memoryview] = {}
    for _ in range(count):
        if position + COMPONENT_HEADER.size > len(view):
            raise QtmProtocolError(f"component table says {count} components, the packet ends first")
        size, component_type = COMPONENT_HEADER.unpack_from(view, position)
        if size < COMPONENT_HEADER.size or position + size > len(view):
            raise QtmProtocolError(f"component of type {component_type} has size {size} beyond the packet")
        components[component_type] = view[position + COMPONENT_HEADER.size : position + size]
        position += size
    return DataPacket(timestamp, frame_number, components)


def encode_frame(timestamp: int, frame_number: int, components: Sequence[bytes]) -> bytes:
    """A whole data packet (header included) from packed components."""
    body = b"".join(components)
    return pack(PacketType.DATA, DATA_HEADER.pack(int(timestamp), int(frame_number), len(components)) + body)


def pack_component(component_type: int, data: bytes) -> bytes:
    """A data component: its size and type, then ``data``."""
    return COMPONENT_HEADER.pack(COMPONENT_HEADER.size + len(data), int(component_type)) + data


def _records(dtype: np.dtype[Any], data: memoryview, offset: int, count: int, what: str) -> NDArray[Any]:
    if count < 0:
        raise QtmProtocolError(f"{what}: negative count {count}")
    end = offset + count * dtype.itemsize
    if end > len(data):
        raise QtmProtocolError(
            f"{what}: {count} records of {dtype.itemsize} bytes do not fit in {len(data) - offset}"
        )
    return np.frombuffer(data, dtype=dtype, count=count, offset=offset)


def _mark_missing(records: NDArray[Any], rows: NDArray[np.bool_] | np.bool_, fields: Sequence[str]) -> None:
    """Write QTM's all-bits-set NaN into the float fields of the missing rows."""
    if not rows.any():
        return
    for name in fields:
        column = records[name]
        bits = column.view(np.uint32)
        bits[rows] = MISSING_BITS


# ---------------------------------------------------------------------- 3D markers
def pack_markers(
    component_type: ComponentType,
    positions_mm: NDArray[Any],
    *,
    residuals_mm: NDArray[Any] | None = None,
    ids: NDArray[Any] | None = None,
    drop_rate: int = 0,
    out_of_sync_rate: int = 0,
) -> bytes:
    """A 3D component. Rows with a non-finite position are sent as missing."""
    dtype = MARKER_DTYPES[component_type]
    names = dtype.names or ()
    positions_mm = np.asarray(positions_mm, dtype=np.float32).reshape(-1, 3)
    n = positions_mm.shape[0]
    records = np.zeros(n, dtype=dtype)
    records["position"] = positions_mm
    if "residual" in names:
        records["residual"] = 0.0 if residuals_mm is None else np.asarray(residuals_mm, dtype=np.float32)
    if "id" in names:
        records["id"] = np.arange(1, n + 1) if ids is None else np.asarray(ids, dtype=np.int32)
    missing = ~np.isfinite(positions_mm).all(axis=1)
    _mark_missing(records, missing, [f for f in ("position", "residual") if f in names])
    return pack_component(
        component_type, COUNT_AND_RATES.pack(n, drop_rate, out_of_sync_rate) + records.tobytes()
    )


def unpack_markers(component_type: int, data: memoryview) -> NDArray[Any]:
    """Records of a 3D component (fields position, [id], [residual]); read-only view."""
    dtype = MARKER_DTYPES.get(component_type)  # IntEnum keys match plain ints
    if dtype is None:
        raise QtmProtocolError(f"component type {component_type} is not a 3D marker component")
    if len(data) < COUNT_AND_RATES.size:
        raise QtmProtocolError("3D component shorter than its count")
    count, _, _ = COUNT_AND_RATES.unpack_from(data, 0)
    return _records(dtype, data, COUNT_AND_RATES.size, count, "3D component")


# ---------------------------------------------------------------------- 6DOF bodies
def matrices_to_qtm(matrices: NDArray[Any]) -> NDArray[Any]:
    """(n, 3, 3) rotation matrices -> (n, 9) in QTM's column-major order."""
    return np.ascontiguousarray(np.asarray(matrices).transpose(0, 2, 1)).reshape(-1, 9)


def qtm_to_matrices(flat: NDArray[Any]) -> NDArray[Any]:
    """(n, 9) QTM rotations (column-major) -> (n, 3, 3) matrices (rows are rows)."""
    return np.asarray(flat).reshape(-1, 3, 3).transpose(0, 2, 1)


def pack_bodies(
    component_type: ComponentType,
    positions_mm: NDArray[Any],
    rotations: NDArray[Any],
    *,
    residuals_mm: NDArray[Any] | None = None,
    drop_rate: int = 0,
    out_of_sync_rate: int = 0,
) -> bytes:
    """A 6D component; ``rotations`` are (n, 9) column-major. Non-finite rows are sent
    as untracked (every float missing)."""
    dtype = BODY_DTYPES[component_type]
    positions_mm = np.asarray(positions_mm, dtype=np.float32).reshape(-1, 3)
    n = positions_mm.shape[0]
    records = np.zeros(n, dtype=dtype)
    records["position"] = positions_mm
    records["rotation"] = np.asarray(rotations, dtype=np.float32).reshape(n, 9)
    fields = ["position", "rotation"]
    if "residual" in (dtype.names or ()):
        records["residual"] = 0.0 if residuals_mm is None else np.asarray(residuals_mm, dtype=np.float32)
        fields.append("residual")
    missing = ~(np.isfinite(records["position"]).all(axis=1) & np.isfinite(records["rotation"]).all(axis=1))
    _mark_missing(records, missing, fields)
    return pack_component(
        component_type, COUNT_AND_RATES.pack(n, drop_rate, out_of_sync_rate) + records.tobytes()
    )


def unpack_bodies(component_type: int, data: memoryview) -> NDArray[Any]:
    """Records of a 6D component (fields position, rotation (9, column-major), [residual])."""
    dtype = BODY_DTYPES.get(component_type)
    if dtype is None:
        raise QtmProtocolError(f"component type {component_type} is not a 6D component handled here")
    if len(data) < COUNT_AND_RATES.size:
        raise QtmProtocolError("6D component shorter than its count")
    count, _, _ = COUNT_AND_RATES.unpack_from(data, 0)
    return _records(dtype, data, COUNT_AND_RATES.size, count, "6D component")


# ---------------------------------------------------------------------- skeletons
def pack_skeletons(skeletons: Sequence[NDArray[Any] | None]) -> bytes:
    """A skeleton component from one SEGMENT_DTYPE array per skeleton (None or an
    empty array: the skeleton is not seen, sent with 0 segments)."""
    parts = [COUNT.pack(len(skeletons))]
    for segments in skeletons:
        if segments is None or len(segments) == 0:
            parts.append(COUNT.pack(0))
        else:
            parts.append(COUNT.pack(len(segments)))
            parts.append(np.ascontiguousarray(segments, dtype=SEGMENT_DTYPE).tobytes())
    return pack_component(ComponentType.SKELETON, b"".join(parts))


def unpack_skeletons(data: memoryview) -> list[NDArray[Any]]:
    """One SEGMENT_DTYPE array per skeleton (empty when the skeleton is not seen)."""
    if len(data) < COUNT.size:
        raise QtmProtocolError("skeleton component shorter than its count")
    (count,) = COUNT.unpack_from(data, 0)
    # every skeleton takes at least its 4-byte segment count
    if count < 0 or COUNT.size * (count + 1) > len(data):
        raise QtmProtocolError(f"skeleton component: {count} skeletons do not fit in {len(data)} bytes")
    position = COUNT.size
    out = []
    for _ in range(count):
        if position + COUNT.size > len(data):
            raise QtmProtocolError("skeleton component ends inside a skeleton")
        (segments,) = COUNT.unpack_from(data, position)
        position += COUNT.size
        out.append(_records(SEGMENT_DTYPE, data, position, segments, "skeleton"))
        position += segments * SEGMENT_DTYPE.itemsize
    return out
