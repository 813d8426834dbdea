"""OptiTrack NatNet wire protocol, bitstream 3.0, 3.1, 4.0 and 4.1 (pure Python + numpy).

Every NatNet message is a UDP datagram: ``uint16 message id, uint16 payload size`` then
the payload, little endian. This module encodes and decodes the messages a streaming
client and a Motive-like server exchange: NAT_CONNECT / NAT_SERVERINFO, NAT_REQUEST /
NAT_RESPONSE, NAT_REQUEST_MODELDEF / NAT_MODELDEF and NAT_FRAMEOFDATA.

Differences between the bitstream versions that matter on the wire:
  * 4.0 adds marker names to rigid body descriptions;
  * 4.1 adds a byte count after every dataset count of a frame (and after every dataset
    type of a model definition), asset data and descriptions, and two precision
    timestamp words before the frame parameters.
3.0 and 3.1 share one layout.

Decoding is bounded: every count and length is checked against the bytes left before
anything is allocated, so a truncated or garbage packet raises
:class:`NatNetProtocolError` (never IndexError, MemoryError or a numpy error). Arrays of
fixed-size records (rigid bodies, markers, positions) are read with one
``np.frombuffer`` each, as structured records that view the packet without copying.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple, Sequence

import numpy as np


class NatNetProtocolError(ValueError):
    """A NatNet packet that cannot be decoded (truncated, garbage, wrong version)."""


class MessageId(IntEnum):
    CONNECT = 0
    SERVERINFO = 1
    REQUEST = 2
    RESPONSE = 3
    REQUEST_MODELDEF = 4
    MODELDEF = 5
    REQUEST_FRAMEOFDATA = 6
    FRAMEOFDATA = 7
    MESSAGESTRING = 8
    DISCONNECT = 9
    KEEPALIVE = 10
    DISCONNECTBYTIMEOUT = 11
    ECHOREQUEST = 12
    ECHORESPONSE = 13
    DISCOVERY = 14
    UNRECOGNIZED_REQUEST = 100


class DescriptorType(IntEnum):
    """Dataset types of a NAT_MODELDEF."""

    MARKER_SET = 0
    RIGID_BODY = 1
    SKELETON = 2
    FORCE_PLATE = 3
    DEVICE = 4
    CAMERA = 5
    ASSET = 6


DEFAULT_COMMAND_PORT = 1510
DEFAULT_DATA_PORT = 1511
DEFAULT_MULTICAST_ADDRESS = "239.255.42.99"
# a UDP datagram over IPv4 carries at most 65507 bytes; the size field is 16 bits
MAX_PAYLOAD = 65507 - 4
NAME_FIELD = 256  # fixed-size name field of NAT_CONNECT / NAT_SERVERINFO

# parameter bits
RIGID_BODY_TRACKING_VALID = 0x01
MARKER_OCCLUDED = 0x01
MARKER_POINT_CLOUD_SOLVED = 0x02
MARKER_MODEL_SOLVED = 0x04
MARKER_HAS_MODEL = 0x08
MARKER_UNLABELED = 0x10
MARKER_ACTIVE = 0x20
FRAME_RECORDING = 0x01
FRAME_MODELS_CHANGED = 0x02
FRAME_BITSTREAM_CHANGED = 0x04


class Version(NamedTuple):
    """A NatNet bitstream version (major, minor)."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> "Version":
        try:
            parts = [int(p) for p in str(text).strip().split(".")]
        except ValueError:
            raise NatNetProtocolError(f"not a NatNet version: {text!r}") from None
        if not 1 <= len(parts) <= 4:
            raise NatNetProtocolError(f"not a NatNet version: {text!r}")
        return cls(parts[0], parts[1] if len(parts) > 1 else 0)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def supported(self) -> bool:
        return self in SUPPORTED_VERSIONS

    @property
    def byte_counts(self) -> bool:
        """Datasets are followed by their size in bytes (4.1+)."""
        return self >= (4, 1)

    @property
    def assets(self) -> bool:
        return self >= (4, 1)

    @property
    def precision_timestamps(self) -> bool:
        return self >= (4, 1)

    @property
    def rigid_body_marker_names(self) -> bool:
        return self >= (4, 0)


SUPPORTED_VERSIONS = (Version(3, 0), Version(3, 1), Version(4, 0), Version(4, 1))


def require_supported(version: Version) -> Version:
    version = Version(*version)
    if not version.supported:
        raise NatNetProtocolError(
            f"NatNet bitstream {version} is not supported (supported: "
            f"{', '.join(str(v) for v in SUPPORTED_VERSIONS)}); set the bitstream version in "
            "Motive's streaming settings")
    return version


# ---------------------------------------------------------------------------- records
# Fixed-size records, packed (no alignment), little endian, as on the wire.
RIGID_BODY_DTYPE = np.dtype([("id", "<i4"), ("position", "<f4", (3,)), ("orientation", "<f4", (4,)),
                             ("mean_error", "<f4"), ("params", "<i2")])
MARKER_DTYPE = np.dtype([("id", "<i4"), ("position", "<f4", (3,)), ("size", "<f4"), ("params", "<i2"),
                         ("residual", "<f4")])
POSITION_SIZE = 12
_F4 = np.dtype("<f4")
_I4 = np.dtype("<i4")
assert RIGID_BODY_DTYPE.itemsize == 38 and MARKER_DTYPE.itemsize == 26

_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_F32 = struct.Struct("<f")
_HEADER = struct.Struct("<HH")
_COUNT_AND_SIZE = struct.Struct("<ii")
_SUFFIX_3 = struct.Struct("<IIdQQQ")
_PRECISION = struct.Struct("<II")


def empty_rigid_bodies(count: int = 0) -> np.ndarray:
    return np.zeros(count, dtype=RIGID_BODY_DTYPE)


def empty_markers(count: int = 0) -> np.ndarray:
    return np.zeros(count, dtype=MARKER_DTYPE)


def marker_id(model_id, member_id):
    """NatNet marker id of member ``member_id`` of model ``model_id`` (high/low word)."""
    return (np.asarray(model_id, dtype=np.int64) << 16 | np.asarray(member_id, dtype=np.int64)).astype(np.int32)


def split_marker_id(ids) -> tuple[np.ndarray, np.ndarray]:
    """(model id, member id) of NatNet marker ids: high and low 16-bit words."""
    ids = np.asarray(ids, dtype=np.int32)
    return (ids >> 16) & 0xFFFF, ids & 0xFFFF


# ---------------------------------------------------------------------------- packets
def pack(message_id: int, payload: bytes = b"") -> bytes:
    """A whole NatNet datagram: header then payload."""
    if len(payload) > MAX_PAYLOAD:
        raise NatNetProtocolError(f"payload of {len(payload)} bytes does not fit one datagram (max {MAX_PAYLOAD})")
    return _HEADER.pack(int(message_id), len(payload)) + payload


def unpack(packet: bytes) -> tuple[int, bytes]:
    """(message id, payload) of a datagram. Bytes after the announced payload size are
    ignored (some clients append a NUL), fewer bytes than announced is an error."""
    if len(packet) < 4:
        raise NatNetProtocolError(f"datagram of {len(packet)} bytes is shorter than a NatNet header")
    message_id, size = _HEADER.unpack_from(packet, 0)
    if size > len(packet) - 4:
        raise NatNetProtocolError(
            f"message {message_id} announces {size} payload bytes but only {len(packet) - 4} arrived")
    return message_id, bytes(packet[4:4 + size])


def _name_field(name: str) -> bytes:
    raw = name.encode("utf-8")[:NAME_FIELD - 1]
    return raw + b"\0" * (NAME_FIELD - len(raw))


def _version4(values: Sequence[int]) -> tuple[int, int, int, int]:
    v = tuple(int(x) for x in values)[:4]
    v = v + (0,) * (4 - len(v))
    if any(not 0 <= x <= 255 for x in v):
        raise NatNetProtocolError(f"version numbers must be bytes, got {values!r}")
    return v  # type: ignore[return-value]


@dataclass(frozen=True)
class ConnectRequest:
    """NAT_CONNECT: who the client is and, optionally, which bitstream it would like."""

    client_name: str = "mocap4r2"
    client_version: tuple[int, int, int, int] = (2, 0, 0, 0)
    natnet_version: tuple[int, int, int, int] = (4, 1, 0, 0)
    subscribed_data_only: bool = False
    requested_bitstream: tuple[int, int, int, int] | None = (4, 1, 0, 0)


def encode_connect(request: ConnectRequest = ConnectRequest()) -> bytes:
    payload = (_name_field(request.client_name) + bytes(_version4(request.client_version))
               + bytes(_version4(request.natnet_version)) + bytes([1 if request.subscribed_data_only else 0])
               + bytes(_version4(request.requested_bitstream or (0, 0, 0, 0))))
    return pack(MessageId.CONNECT, payload)


def decode_connect(payload: bytes) -> ConnectRequest:
    """Lenient: clients send anything from ``"Ping\\0"`` to the full 269-byte form."""
    name = payload[:NAME_FIELD].split(b"\0", 1)[0].decode("utf-8", "replace")
    if len(payload) < NAME_FIELD + 13:
        return ConnectRequest(client_name=name, client_version=(0, 0, 0, 0), natnet_version=(0, 0, 0, 0),
                              requested_bitstream=None)
    o = NAME_FIELD
    requested = tuple(payload[o + 9:o + 13])
    return ConnectRequest(
        client_name=name, client_version=tuple(payload[o:o + 4]), natnet_version=tuple(payload[o + 4:o + 8]),
        subscribed_data_only=bool(payload[o + 8]),
        requested_bitstream=requested if any(requested) else None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ServerInfo:
    """NAT_SERVERINFO (sSender_Server): application, versions and connection info."""

    app_name: str = "Motive"
    app_version: tuple[int, int, int, int] = (3, 1, 0, 0)
    natnet_version: tuple[int, int, int, int] = (4, 1, 0, 0)
    clock_frequency: int = 0          # ticks per second of the server's high resolution clock
    data_port: int | None = None      # connection info: None when the server predates NatNet 3
    multicast: bool | None = None
    multicast_address: str | None = None

    @property
    def bitstream(self) -> Version:
        return Version(self.natnet_version[0], self.natnet_version[1])


_SERVER_CONNECTION = struct.Struct("<QHB4s")


def encode_server_info(info: ServerInfo) -> bytes:
    payload = _name_field(info.app_name) + bytes(_version4(info.app_version)) + bytes(_version4(info.natnet_version))
    if info.data_port is not None:
        address = bytes(int(x) for x in (info.multicast_address or "0.0.0.0").split("."))
        payload += _SERVER_CONNECTION.pack(int(info.clock_frequency), int(info.data_port),
                                           1 if info.multicast else 0, address)
    return pack(MessageId.SERVERINFO, payload)


def decode_server_info(payload: bytes) -> ServerInfo:
    if len(payload) < NAME_FIELD + 8:
        raise NatNetProtocolError(f"NAT_SERVERINFO of {len(payload)} bytes, at least {NAME_FIELD + 8} expected")
    name = payload[:NAME_FIELD].split(b"\0", 1)[0].decode("utf-8", "replace")
    o = NAME_FIELD
    app_version = tuple(payload[o:o + 4])
    natnet_version = tuple(payload[o + 4:o + 8])
    o += 8
    if len(payload) >= o + _SERVER_CONNECTION.size:
        freq, port, multicast, address = _SERVER_CONNECTION.unpack_from(payload, o)
        return ServerInfo(name, app_version, natnet_version, freq, port, bool(multicast),  # type: ignore[arg-type]
                          ".".join(str(b) for b in address))
    return ServerInfo(name, app_version, natnet_version)  # type: ignore[arg-type]


def encode_request(command: str) -> bytes:
    """NAT_REQUEST with a command string (e.g. "FrameRate", "Bitstream,4.1")."""
    return pack(MessageId.REQUEST, command.encode("utf-8") + b"\0")


def decode_string(payload: bytes) -> str:
    return payload.split(b"\0", 1)[0].decode("utf-8", "replace")


def encode_response(value: int | float | str) -> bytes:
    """NAT_RESPONSE: a 4-byte int or float, or a NUL-terminated string."""
    if isinstance(value, str):
        return pack(MessageId.RESPONSE, value.encode("utf-8") + b"\0")
    if isinstance(value, float):
        return pack(MessageId.RESPONSE, _F32.pack(value))
    return pack(MessageId.RESPONSE, _I32.pack(int(value)))


def encode_empty(message_id: int) -> bytes:
    """A request without payload (REQUEST_MODELDEF, REQUEST_FRAMEOFDATA, KEEPALIVE, ...)."""
    return pack(message_id)


# ---------------------------------------------------------------------------- reader
class _Reader:
    """A bounded cursor over one payload; every read checks the bytes left."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def fail(self, what: str) -> NatNetProtocolError:
        return NatNetProtocolError(f"{what} at byte {self.pos} of {self.end}")

    def need(self, size: int, what: str) -> int:
        pos = self.pos
        if size < 0 or pos + size > self.end:
            raise self.fail(f"truncated packet: {what} needs {size} bytes, {self.end - pos} left")
        self.pos = pos + size
        return pos

    def scalar(self, fmt: struct.Struct, what: str):
        return fmt.unpack_from(self.buf, self.need(fmt.size, what))[0]

    def int32(self, what: str) -> int:
        return _I32.unpack_from(self.buf, self.need(4, what))[0]

    def count(self, what: str, min_record: int) -> int:
        """A dataset count, refused if negative or if its smallest records cannot fit."""
        n = self.int32(f"{what} count")
        if n < 0 or n * min_record > self.end - self.pos:
            raise self.fail(f"{what} count {n} does not fit the {self.end - self.pos} bytes left")
        return n

    def byte_count(self, what: str) -> int:
        """The 4.1 dataset size; returns the offset where the dataset must end."""
        size = self.int32(f"{what} byte count")
        if size < 0 or size > self.end - self.pos:
            raise self.fail(f"{what} byte count {size} does not fit the {self.end - self.pos} bytes left")
        return self.pos + size

    def check_end(self, end: int | None, what: str) -> None:
        if end is not None and self.pos != end:
            raise NatNetProtocolError(
                f"{what}: the byte count says the dataset ends at byte {end}, its content ends at {self.pos} "
                "(bitstream version mismatch?)")

    def string(self, what: str) -> str:
        nul = self.buf.find(b"\0", self.pos, self.end)
        if nul < 0:
            raise self.fail(f"truncated packet: {what} has no terminating NUL")
        text = self.buf[self.pos:nul].decode("utf-8", "replace")
        self.pos = nul + 1
        return text

    def records(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        pos = self.need(count * dtype.itemsize, what)
        return np.frombuffer(self.buf, dtype=dtype, count=count, offset=pos)

    def floats(self, count: int, what: str) -> np.ndarray:
        pos = self.need(4 * count, what)
        return np.frombuffer(self.buf, dtype=_F4, count=count, offset=pos)


class _Writer:
    __slots__ = ("parts",)

    def __init__(self):
        self.parts: list[bytes] = []

    def int32(self, value: int) -> None:
        self.parts.append(_I32.pack(int(value)))

    def string(self, text: str) -> None:
        raw = text.encode("utf-8")
        if b"\0" in raw:
            raise NatNetProtocolError(f"name {text!r} contains a NUL byte")
        self.parts.append(raw + b"\0")

    def raw(self, data: bytes) -> None:
        self.parts.append(data)

    def floats(self, values, count: int, what: str) -> None:
        array = np.asarray(values, dtype="<f4").reshape(-1)
        if array.shape[0] != count:
            raise NatNetProtocolError(f"{what}: {array.shape[0]} floats, {count} expected")
        self.parts.append(array.tobytes())

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def _records(values: np.ndarray | None, dtype: np.dtype, what: str) -> np.ndarray:
    if values is None:
        return np.zeros(0, dtype=dtype)
    array = np.asarray(values)
    if array.dtype != dtype:
        if array.dtype.names != dtype.names:
            raise NatNetProtocolError(f"{what}: records of fields {array.dtype.names}, {dtype.names} expected")
        array = array.astype(dtype)
    return np.ascontiguousarray(array.reshape(-1))


# ---------------------------------------------------------------------------- model definitions
@dataclass
class MarkerSetDescription:
    name: str
    marker_names: tuple[str, ...] = ()


@dataclass
class RigidBodyDescription:
    """A rigid body, or a bone of a skeleton or asset (then ``id`` is the bone id)."""

    name: str
    id: int
    parent_id: int = -1
    offset: np.ndarray = field(default_factory=lambda: np.zeros(3, dtype=np.float32))   # from the parent
    marker_positions: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.float32))
    marker_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # active labels
    marker_names: tuple[str, ...] = ()   # 4.0+; empty strings when the stream has none


@dataclass
class SkeletonDescription:
    name: str
    id: int
    bones: list[RigidBodyDescription] = field(default_factory=list)


@dataclass
class MarkerDescription:
    name: str
    id: int
    position: np.ndarray = field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    size: float = 0.0
    params: int = 0


@dataclass
class AssetDescription:
    name: str
    asset_type: int
    id: int
    rigid_bodies: list[RigidBodyDescription] = field(default_factory=list)
    markers: list[MarkerDescription] = field(default_factory=list)


@dataclass
class ForcePlateDescription:
    id: int
    serial: str
    width: float = 0.0
    length: float = 0.0
    origin: np.ndarray = field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    calibration: np.ndarray = field(default_factory=lambda: np.zeros((12, 12), dtype=np.float32))
    corners: np.ndarray = field(default_factory=lambda: np.zeros((4, 3), dtype=np.float32))
    plate_type: int = 0
    channel_data_type: int = 0
    channel_names: tuple[str, ...] = ()


@dataclass
class DeviceDescription:
    id: int
    name: str
    serial: str = ""
    device_type: int = 0
    channel_data_type: int = 0
    channel_names: tuple[str, ...] = ()


@dataclass
class CameraDescription:
    name: str
    position: np.ndarray = field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    orientation: np.ndarray = field(default_factory=lambda: np.array([0, 0, 0, 1], dtype=np.float32))


@dataclass
class ModelDefinitions:
    """A NAT_MODELDEF, by dataset type (each list in the order the server sent it)."""

    marker_sets: list[MarkerSetDescription] = field(default_factory=list)
    rigid_bodies: list[RigidBodyDescription] = field(default_factory=list)
    skeletons: list[SkeletonDescription] = field(default_factory=list)
    force_plates: list[ForcePlateDescription] = field(default_factory=list)
    devices: list[DeviceDescription] = field(default_factory=list)
    cameras: list[CameraDescription] = field(default_factory=list)
    assets: list[AssetDescription] = field(default_factory=list)


def _read_rigid_body_description(r: _Reader, version: Version) -> RigidBodyDescription:
    name = r.string("rigid body name")
    body_id = r.int32("rigid body id")
    parent = r.int32("rigid body parent id")
    offset = r.floats(3, "rigid body offset")
    n = r.count("rigid body marker", 16 + (1 if version.rigid_body_marker_names else 0))
    positions = r.floats(3 * n, "rigid body marker positions").reshape(n, 3)
    labels = np.frombuffer(r.buf, dtype=_I4, count=n, offset=r.need(4 * n, "rigid body marker labels"))
    if version.rigid_body_marker_names:
        names = tuple(r.string("rigid body marker name") for _ in range(n))
    else:
        names = ("",) * n
    return RigidBodyDescription(name, body_id, parent, offset, positions, labels, names)


def _write_rigid_body_description(w: _Writer, body: RigidBodyDescription, version: Version) -> None:
    w.string(body.name)
    w.int32(body.id)
    w.int32(body.parent_id)
    w.floats(body.offset, 3, f"rigid body {body.name!r} offset")
    positions = np.asarray(body.marker_positions, dtype="<f4").reshape(-1, 3)
    n = positions.shape[0]
    w.int32(n)
    w.raw(positions.tobytes())
    labels = np.asarray(body.marker_labels, dtype="<i4").reshape(-1)
    if labels.shape[0] != n:
        raise NatNetProtocolError(f"rigid body {body.name!r}: {labels.shape[0]} marker labels for {n} markers")
    w.raw(labels.tobytes())
    if version.rigid_body_marker_names:
        names = tuple(body.marker_names) or ("",) * n
        if len(names) != n:
            raise NatNetProtocolError(f"rigid body {body.name!r}: {len(names)} marker names for {n} markers")
        for name in names:
            w.string(name)


def _read_marker_set_description(r: _Reader, version: Version) -> MarkerSetDescription:
    name = r.string("marker set name")
    n = r.count("marker set marker", 1)
    return MarkerSetDescription(name, tuple(r.string("marker name") for _ in range(n)))


def _read_skeleton_description(r: _Reader, version: Version) -> SkeletonDescription:
    name = r.string("skeleton name")
    skeleton_id = r.int32("skeleton id")
    n = r.count("skeleton bone", 25)
    return SkeletonDescription(name, skeleton_id, [_read_rigid_body_description(r, version) for _ in range(n)])


def _read_force_plate_description(r: _Reader, version: Version) -> ForcePlateDescription:
    plate_id = r.int32("force plate id")
    serial = r.string("force plate serial")
    width, length = (float(v) for v in r.floats(2, "force plate size"))
    origin = r.floats(3, "force plate origin")
    calibration = r.floats(144, "force plate calibration").reshape(12, 12)
    corners = r.floats(12, "force plate corners").reshape(4, 3)
    plate_type = r.int32("force plate type")
    data_type = r.int32("force plate channel data type")
    n = r.count("force plate channel", 1)
    names = tuple(r.string("force plate channel name") for _ in range(n))
    return ForcePlateDescription(plate_id, serial, width, length, origin, calibration, corners, plate_type,
                                 data_type, names)


def _read_device_description(r: _Reader, version: Version) -> DeviceDescription:
    device_id = r.int32("device id")
    name = r.string("device name")
    serial = r.string("device serial")
    device_type = r.int32("device type")
    data_type = r.int32("device channel data type")
    n = r.count("device channel", 1)
    return DeviceDescription(device_id, name, serial, device_type, data_type,
                             tuple(r.string("device channel name") for _ in range(n)))


def _read_camera_description(r: _Reader, version: Version) -> CameraDescription:
    name = r.string("camera name")
    return CameraDescription(name, r.floats(3, "camera position"), r.floats(4, "camera orientation"))


_MARKER_DESCRIPTION = struct.Struct("<i3ffh")


def _read_asset_description(r: _Reader, version: Version) -> AssetDescription:
    name = r.string("asset name")
    asset_type = r.int32("asset type")
    asset_id = r.int32("asset id")
    n = r.count("asset rigid body", 25)
    bodies = [_read_rigid_body_description(r, version) for _ in range(n)]
    m = r.count("asset marker", 1 + _MARKER_DESCRIPTION.size)
    markers = []
    for _ in range(m):
        marker_name = r.string("asset marker name")
        mid, x, y, z, size, params = _MARKER_DESCRIPTION.unpack_from(r.buf, r.need(_MARKER_DESCRIPTION.size,
                                                                                   "asset marker"))
        markers.append(MarkerDescription(marker_name, mid, np.array([x, y, z], dtype=np.float32), size, params))
    return AssetDescription(name, asset_type, asset_id, bodies, markers)


_DESCRIPTION_READERS = {
    DescriptorType.MARKER_SET: ("marker_sets", _read_marker_set_description),
    DescriptorType.RIGID_BODY: ("rigid_bodies", _read_rigid_body_description),
    DescriptorType.SKELETON: ("skeletons", _read_skeleton_description),
    DescriptorType.FORCE_PLATE: ("force_plates", _read_force_plate_description),
    DescriptorType.DEVICE: ("devices", _read_device_description),
    DescriptorType.CAMERA: ("cameras", _read_camera_description),
    DescriptorType.ASSET: ("assets", _read_asset_description),
}


def decode_model_definitions(payload: bytes, version: Version) -> ModelDefinitions:
    """Decode a NAT_MODELDEF payload of bitstream ``version``."""
    version = require_supported(version)
    r = _Reader(bytes(payload))
    defs = ModelDefinitions()
    n = r.count("dataset", 8 if version.byte_counts else 4)
    for i in range(n):
        kind = r.int32("dataset type")
        end = r.byte_count(f"dataset {i}") if version.byte_counts else None
        entry = _DESCRIPTION_READERS.get(kind)
        if entry is None:
            if end is None:  # without a byte count an unknown dataset cannot be skipped
                raise r.fail(f"unknown dataset type {kind} in model definitions")
            r.pos = end
            continue
        attribute, reader = entry
        if end is not None:
            sub = _Reader(r.buf, r.pos, end)
            getattr(defs, attribute).append(reader(sub, version))
            sub.check_end(end, f"dataset {i} ({DescriptorType(kind).name.lower()})")
            r.pos = end
        else:
            getattr(defs, attribute).append(reader(r, version))
    return defs


def encode_model_definitions(defs: ModelDefinitions, version: Version) -> bytes:
    """A NAT_MODELDEF datagram of bitstream ``version``."""
    version = require_supported(version)
    datasets: list[tuple[int, bytes]] = []
    for ms in defs.marker_sets:
        w = _Writer()
        w.string(ms.name)
        w.int32(len(ms.marker_names))
        for name in ms.marker_names:
            w.string(name)
        datasets.append((DescriptorType.MARKER_SET, w.bytes()))
    for body in defs.rigid_bodies:
        w = _Writer()
        _write_rigid_body_description(w, body, version)
        datasets.append((DescriptorType.RIGID_BODY, w.bytes()))
    for skeleton in defs.skeletons:
        w = _Writer()
        w.string(skeleton.name)
        w.int32(skeleton.id)
        w.int32(len(skeleton.bones))
        for bone in skeleton.bones:
            _write_rigid_body_description(w, bone, version)
        datasets.append((DescriptorType.SKELETON, w.bytes()))
    for plate in defs.force_plates:
        w = _Writer()
        w.int32(plate.id)
        w.string(plate.serial)
        w.floats([plate.width, plate.length], 2, "force plate size")
        w.floats(plate.origin, 3, "force plate origin")
        w.floats(plate.calibration, 144, "force plate calibration")
        w.floats(plate.corners, 12, "force plate corners")
        w.int32(plate.plate_type)
        w.int32(plate.channel_data_type)
        w.int32(len(plate.channel_names))
        for name in plate.channel_names:
            w.string(name)
        datasets.append((DescriptorType.FORCE_PLATE, w.bytes()))
    for device in defs.devices:
        w = _Writer()
        w.int32(device.id)
        w.string(device.name)
        w.string(device.serial)
        w.int32(device.device_type)
        w.int32(device.channel_data_type)
        w.int32(len(device.channel_names))
        for name in device.channel_names:
            w.string(name)
        datasets.append((DescriptorType.DEVICE, w.bytes()))
    for camera in defs.cameras:
        w = _Writer()
        w.string(camera.name)
        w.floats(camera.position, 3, "camera position")
        w.floats(camera.orientation, 4, "camera orientation")
        datasets.append((DescriptorType.CAMERA, w.bytes()))
    for asset in defs.assets:
        w = _Writer()
        w.string(asset.name)
        w.int32(asset.asset_type)
        w.int32(asset.id)
        w.int32(len(asset.rigid_bodies))
        for body in asset.rigid_bodies:
            _write_rigid_body_description(w, body, version)
        w.int32(len(asset.markers))
        for marker in asset.markers:
            w.string(marker.name)
            x, y, z = (float(v) for v in np.asarray(marker.position).reshape(3))
            w.raw(_MARKER_DESCRIPTION.pack(marker.id, x, y, z, float(marker.size), int(marker.params)))
        datasets.append((DescriptorType.ASSET, w.bytes()))
    out = [_I32.pack(len(datasets))]
    for kind, data in datasets:
        out.append(_I32.pack(int(kind)))
        if version.byte_counts:
            out.append(_I32.pack(len(data)))
        out.append(data)
    return pack(MessageId.MODELDEF, b"".join(out))


# ---------------------------------------------------------------------------- frame of data
@dataclass
class MarkerSetData:
    name: str
    positions: np.ndarray  # (n, 3) float32


@dataclass
class SkeletonData:
    id: int
    bones: np.ndarray  # RIGID_BODY_DTYPE records; bone id = skeleton id << 16 | bone id


@dataclass
class AssetData:
    id: int
    rigid_bodies: np.ndarray  # RIGID_BODY_DTYPE
    markers: np.ndarray       # MARKER_DTYPE


@dataclass
class AnalogData:
    """A force plate or device: one float32 array (its subframes) per channel."""

    id: int
    channels: list[np.ndarray] = field(default_factory=list)


def _zeros3() -> np.ndarray:
    return np.zeros((0, 3), dtype=np.float32)


@dataclass
class FrameOfData:
    """A NAT_FRAMEOFDATA. Record arrays view the packet (read-only) after decoding."""

    frame_number: int
    marker_sets: list[MarkerSetData] = field(default_factory=list)
    other_markers: np.ndarray = field(default_factory=_zeros3)           # legacy unlabeled positions
    rigid_bodies: np.ndarray = field(default_factory=empty_rigid_bodies)
    skeletons: list[SkeletonData] = field(default_factory=list)
    assets: list[AssetData] = field(default_factory=list)               # 4.1+
    labeled_markers: np.ndarray = field(default_factory=empty_markers)   # every marker, labeled or not
    force_plates: list[AnalogData] = field(default_factory=list)
    devices: list[AnalogData] = field(default_factory=list)
    timecode: int = 0
    timecode_subframe: int = 0
    timestamp: float = 0.0              # seconds since the server started (software clock)
    stamp_camera_mid_exposure: int = 0  # server clock ticks (ServerInfo.clock_frequency)
    stamp_data_received: int = 0
    stamp_transmit: int = 0
    precision_timestamp_secs: int = 0   # 4.1+, 0 when the server has no precision (PTP) clock
    precision_timestamp_frac_secs: int = 0
    params: int = 0

    @property
    def is_recording(self) -> bool:
        return bool(self.params & FRAME_RECORDING)

    @property
    def tracked_models_changed(self) -> bool:
        return bool(self.params & FRAME_MODELS_CHANGED)

    @property
    def bitstream_changed(self) -> bool:
        return bool(self.params & FRAME_BITSTREAM_CHANGED)


def _read_analog(r: _Reader, what: str, counts: bool) -> list[AnalogData]:
    n = r.count(what, 8)
    end = r.byte_count(f"{what}s") if counts else None
    out = []
    for _ in range(n):
        item_id = r.int32(f"{what} id")
        channels = r.count(f"{what} channel", 4)
        values = []
        for _ in range(channels):
            frames = r.count(f"{what} channel frame", 4)
            values.append(r.floats(frames, f"{what} channel values"))
        out.append(AnalogData(item_id, values))
    r.check_end(end, f"{what}s")
    return out


def decode_frame(payload: bytes, version: Version) -> FrameOfData:
    """Decode a NAT_FRAMEOFDATA payload of bitstream ``version``."""
    version = require_supported(version)
    r = _Reader(payload if isinstance(payload, bytes) else bytes(payload))
    counts = version.byte_counts
    frame = FrameOfData(frame_number=r.int32("frame number"))

    n = r.count("marker set", 5)
    end = r.byte_count("marker sets") if counts else None
    sets = []
    for _ in range(n):
        name = r.string("marker set name")
        m = r.count("marker set marker", POSITION_SIZE)
        sets.append(MarkerSetData(name, r.floats(3 * m, "marker set positions").reshape(m, 3)))
    frame.marker_sets = sets
    r.check_end(end, "marker sets")

    n = r.count("other marker", POSITION_SIZE)
    end = r.byte_count("other markers") if counts else None
    frame.other_markers = r.floats(3 * n, "other marker positions").reshape(n, 3)
    r.check_end(end, "other markers")

    n = r.count("rigid body", RIGID_BODY_DTYPE.itemsize)
    end = r.byte_count("rigid bodies") if counts else None
    frame.rigid_bodies = r.records(RIGID_BODY_DTYPE, n, "rigid bodies")
    r.check_end(end, "rigid bodies")

    n = r.count("skeleton", 8)
    end = r.byte_count("skeletons") if counts else None
    skeletons = []
    for _ in range(n):
        skeleton_id = r.int32("skeleton id")
        bones = r.count("skeleton bone", RIGID_BODY_DTYPE.itemsize)
        skeletons.append(SkeletonData(skeleton_id, r.records(RIGID_BODY_DTYPE, bones, "skeleton bones")))
    frame.skeletons = skeletons
    r.check_end(end, "skeletons")

    if version.assets:
        n = r.count("asset", 12)
        end = r.byte_count("assets")
        assets = []
        for _ in range(n):
            asset_id = r.int32("asset id")
            bodies = r.count("asset rigid body", RIGID_BODY_DTYPE.itemsize)
            body_records = r.records(RIGID_BODY_DTYPE, bodies, "asset rigid bodies")
            markers = r.count("asset marker", MARKER_DTYPE.itemsize)
            assets.append(AssetData(asset_id, body_records, r.records(MARKER_DTYPE, markers, "asset markers")))
        frame.assets = assets
        r.check_end(end, "assets")

    n = r.count("labeled marker", MARKER_DTYPE.itemsize)
    end = r.byte_count("labeled markers") if counts else None
    frame.labeled_markers = r.records(MARKER_DTYPE, n, "labeled markers")
    r.check_end(end, "labeled markers")

    frame.force_plates = _read_analog(r, "force plate", counts)
    frame.devices = _read_analog(r, "device", counts)

    (frame.timecode, frame.timecode_subframe, frame.timestamp, frame.stamp_camera_mid_exposure,
     frame.stamp_data_received, frame.stamp_transmit) = _SUFFIX_3.unpack_from(r.buf, r.need(_SUFFIX_3.size,
                                                                                            "frame suffix"))
    if version.precision_timestamps:
        frame.precision_timestamp_secs, frame.precision_timestamp_frac_secs = _PRECISION.unpack_from(
            r.buf, r.need(_PRECISION.size, "precision timestamp"))
    frame.params = r.scalar(_U16, "frame parameters")
    # an end-of-data tag (int32 0) may follow; nothing after the parameters is needed
    return frame


def _dataset(out: list[bytes], count: int, data: bytes, counts: bool) -> None:
    if counts:
        out.append(_COUNT_AND_SIZE.pack(count, len(data)))
    else:
        out.append(_I32.pack(count))
    out.append(data)


def encode_frame_payload(frame: FrameOfData, version: Version) -> bytes:
    """The NAT_FRAMEOFDATA payload of ``frame`` in bitstream ``version``."""
    version = require_supported(version)
    counts = version.byte_counts
    out = [_I32.pack(int(frame.frame_number))]

    w = _Writer()
    for ms in frame.marker_sets:
        positions = np.asarray(ms.positions, dtype="<f4").reshape(-1, 3)
        w.string(ms.name)
        w.int32(positions.shape[0])
        w.raw(positions.tobytes())
    _dataset(out, len(frame.marker_sets), w.bytes(), counts)

    other = np.asarray(frame.other_markers, dtype="<f4").reshape(-1, 3)
    _dataset(out, other.shape[0], other.tobytes(), counts)

    bodies = _records(frame.rigid_bodies, RIGID_BODY_DTYPE, "rigid bodies")
    _dataset(out, bodies.shape[0], bodies.tobytes(), counts)

    w = _Writer()
    for skeleton in frame.skeletons:
        bones = _records(skeleton.bones, RIGID_BODY_DTYPE, "skeleton bones")
        w.int32(skeleton.id)
        w.int32(bones.shape[0])
        w.raw(bones.tobytes())
    _dataset(out, len(frame.skeletons), w.bytes(), counts)

    if version.assets:
        w = _Writer()
        for asset in frame.assets:
            asset_bodies = _records(asset.rigid_bodies, RIGID_BODY_DTYPE, "asset rigid bodies")
            asset_markers = _records(asset.markers, MARKER_DTYPE, "asset markers")
            w.int32(asset.id)
            w.int32(asset_bodies.shape[0])
            w.raw(asset_bodies.tobytes())
            w.int32(asset_markers.shape[0])
            w.raw(asset_markers.tobytes())
        _dataset(out, len(frame.assets), w.bytes(), counts)

    markers = _records(frame.labeled_markers, MARKER_DTYPE, "labeled markers")
    _dataset(out, markers.shape[0], markers.tobytes(), counts)

    for items in (frame.force_plates, frame.devices):
        w = _Writer()
        for item in items:
            w.int32(item.id)
            w.int32(len(item.channels))
            for channel in item.channels:
                values = np.asarray(channel, dtype="<f4").reshape(-1)
                w.int32(values.shape[0])
                w.raw(values.tobytes())
        _dataset(out, len(items), w.bytes(), counts)

    out.append(_SUFFIX_3.pack(int(frame.timecode), int(frame.timecode_subframe), float(frame.timestamp),
                              int(frame.stamp_camera_mid_exposure), int(frame.stamp_data_received),
                              int(frame.stamp_transmit)))
    if version.precision_timestamps:
        out.append(_PRECISION.pack(int(frame.precision_timestamp_secs), int(frame.precision_timestamp_frac_secs)))
    out.append(_U16.pack(int(frame.params) & 0xFFFF))
    out.append(_I32.pack(0))  # end-of-data tag, as Motive sends it
    return b"".join(out)


def encode_frame(frame: FrameOfData, version: Version) -> bytes:
    """A NAT_FRAMEOFDATA datagram."""
    return pack(MessageId.FRAMEOFDATA, encode_frame_payload(frame, version))
