"""NatNet wire format: datagram framing, versions, constants, fixed-size records and the
bounded reader and writer every message is built on."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray


class NatNetProtocolError(ValueError):
    """A NatNet packet that cannot be decoded (truncated, garbage, wrong version)."""


class MessageId(IntEnum):
    """NatNet message ids (the first two bytes of every packet)."""

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


#: the anchor-marker description of bitstream 4.5 (Motive 3.5): neither its layout nor its
#: type number is public; 7, the next free number, is our assumption. Skipped by its size
#: either way (were the number another, it is skipped as an unknown type, with a warning).
ANCHOR_MARKER_DESCRIPTION = 7


class Skipped(NamedTuple):
    """A sized part of a packet read past without decoding: ``name`` says which
    (``imu``, ``gpio``, ``anchor_marker`` or, for what no known version has, ``description
    type N`` / ``frame section N``), ``items`` the items it said it holds, ``size`` its bytes.
    ``known``: a part of a known version whose layout is not public (not worth a warning).
    A named tuple: 4.5 frames make two per frame, on the decoding's hot path."""

    name: str
    items: int
    size: int
    known: bool


@dataclass(frozen=True)
class Opaque:
    """Bytes sent as a sized part without a layout of ours (the stand-in's IMU and GPIO
    sections, anchor markers, a "future Motive"'s extras): ``kind`` is the description
    type (model definitions) or unused (frame sections), ``count`` the item count."""

    kind: int
    count: int
    data: bytes


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
    def parse(cls, text: str) -> Version:
        try:
            parts = [int(p) for p in str(text).strip().split(".")]
        except ValueError:
            raise NatNetProtocolError(f"not a NatNet version: {text!r}") from None
        if not 1 <= len(parts) <= 4 or any(not 0 <= p <= 255 for p in parts):
            raise NatNetProtocolError(f"not a NatNet version: {text!r}")
        return cls(parts[0], parts[1] if len(parts) > 1 else 0)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def supported(self) -> bool:
        """Readable: 3.0 or later (a version newer than NEWEST_VERSION is read with its layout)."""
        return self >= OLDEST_VERSION

    @property
    def known(self) -> bool:
        """One of the versions whose layout this package knows (not merely newer)."""
        return self in SUPPORTED_VERSIONS

    @property
    def newer_than_known(self) -> bool:
        return self > NEWEST_VERSION

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

    @property
    def description_orientation(self) -> bool:
        """Rigid-body descriptions (and bones, asset bodies) carry a rotational offset (4.2+)."""
        return self >= (4, 2)

    @property
    def imu_gpio(self) -> bool:
        """Frames carry IMU and GPIO sections before the suffix (4.5+; items not public)."""
        return self >= (4, 5)


#: every bitstream whose layout is known: 3.0 and 3.1 share one, 4.3 and 4.4 read as 4.2
#: (no public layout change), 4.5 adds IMU and GPIO sections and anchor-marker descriptions
SUPPORTED_VERSIONS = (
    Version(3, 0),
    Version(3, 1),
    Version(4, 0),
    Version(4, 1),
    Version(4, 2),
    Version(4, 3),
    Version(4, 4),
    Version(4, 5),
)
OLDEST_VERSION = SUPPORTED_VERSIONS[0]
NEWEST_VERSION = SUPPORTED_VERSIONS[-1]


def require_supported(version: Version) -> Version:
    """``version`` if this package reads it: every known version, and any newer one (read
    with the newest layout, extra sized sections skipped); NatNetProtocolError naming the
    version read for anything older than 3.0."""
    if version.__class__ is Version and version >= OLDEST_VERSION:
        return version  # the per-frame case: no new tuple
    version = Version(*version)
    if not version.supported:
        raise NatNetProtocolError(
            f"NatNet bitstream {version} is not supported: this driver reads {OLDEST_VERSION} to "
            f"{NEWEST_VERSION} (and newer ones with the {NEWEST_VERSION} layout); {version} is what "
            "Motive 2.x and older stream: update Motive, or over unicast ask for a newer bitstream "
            "(parameter bitstream_version)"
        )
    return version


# ---------------------------------------------------------------------------- records
# Fixed-size records, packed (no alignment), little endian, as on the wire.
RIGID_BODY_DTYPE = np.dtype(
    [
        ("id", "<i4"),
        ("position", "<f4", (3,)),
        ("orientation", "<f4", (4,)),
        ("mean_error", "<f4"),
        ("params", "<i2"),
    ]
)
MARKER_DTYPE = np.dtype(
    [("id", "<i4"), ("position", "<f4", (3,)), ("size", "<f4"), ("params", "<i2"), ("residual", "<f4")]
)
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


def empty_rigid_bodies(count: int = 0) -> NDArray[Any]:
    """``count`` zeroed rigid-body records (RIGID_BODY_DTYPE)."""
    return np.zeros(count, dtype=RIGID_BODY_DTYPE)


def empty_markers(count: int = 0) -> NDArray[Any]:
    """``count`` zeroed labeled-marker records (MARKER_DTYPE)."""
    return np.zeros(count, dtype=MARKER_DTYPE)


def marker_id(model_id: ArrayLike, member_id: ArrayLike) -> NDArray[np.int32]:
    """NatNet marker id of member ``member_id`` of model ``model_id`` (high/low word)."""
    return (np.asarray(model_id, dtype=np.int64) << 16 | np.asarray(member_id, dtype=np.int64)).astype(
        np.int32
    )


def split_marker_id(ids: ArrayLike) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """(model id, member id) of NatNet marker ids: high and low 16-bit words."""
    words = np.asarray(ids, dtype=np.int32)
    return (words >> 16) & 0xFFFF, words & 0xFFFF


# ---------------------------------------------------------------------------- packets
def pack(message_id: int, payload: bytes = b"") -> bytes:
    """A whole NatNet datagram: header then payload."""
    if len(payload) > MAX_PAYLOAD:
        raise NatNetProtocolError(
            f"payload of {len(payload)} bytes does not fit one datagram (max {MAX_PAYLOAD})"
        )
    return _HEADER.pack(int(message_id), len(payload)) + payload


def unpack(packet: bytes) -> tuple[int, bytes]:
    """(message id, payload) of a datagram. Bytes after the announced payload size are
    ignored (some clients append a NUL), fewer bytes than announced is an error."""
    if len(packet) < 4:
        raise NatNetProtocolError(f"datagram of {len(packet)} bytes is shorter than a NatNet header")
    message_id, size = _HEADER.unpack_from(packet, 0)
    if size > len(packet) - 4:
        raise NatNetProtocolError(
            f"message {message_id} announces {size} payload bytes but only {len(packet) - 4} arrived"
        )
    return message_id, bytes(packet[4 : 4 + size])


def _name_field(name: str) -> bytes:
    raw = name.encode("utf-8")[: NAME_FIELD - 1]
    return raw + b"\0" * (NAME_FIELD - len(raw))


def _version4(values: Sequence[int]) -> tuple[int, int, int, int]:
    v = tuple(int(x) for x in values)[:4]
    v = v + (0,) * (4 - len(v))
    if any(not 0 <= x <= 255 for x in v):
        raise NatNetProtocolError(f"version numbers must be bytes, got {values!r}")
    major, minor, build, revision = v
    return major, minor, build, revision


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

    def scalar(self, fmt: struct.Struct, what: str) -> Any:
        return fmt.unpack_from(self.buf, self.need(fmt.size, what))[0]

    def int32(self, what: str) -> int:
        value: int = _I32.unpack_from(self.buf, self.need(4, what))[0]
        return value

    def count(self, what: str, min_record: int) -> int:
        """A dataset count, refused if negative or if its smallest records cannot fit."""
        # inlined int32(): this runs for every dataset of every frame, and the messages
        # are only formatted when something is wrong
        pos = self.pos + 4
        if pos > self.end:
            self.need(4, f"{what} count")
        n: int = _I32.unpack_from(self.buf, pos - 4)[0]
        self.pos = pos
        if n < 0 or n * min_record > self.end - pos:
            raise self.fail(f"{what} count {n} does not fit the {self.end - pos} bytes left")
        return n

    def byte_count(self, what: str) -> int:
        """The 4.1 dataset size; returns the offset where the dataset must end."""
        pos = self.pos + 4
        if pos > self.end:
            self.need(4, f"{what} byte count")
        size: int = _I32.unpack_from(self.buf, pos - 4)[0]
        self.pos = pos
        if size < 0 or size > self.end - pos:
            raise self.fail(f"{what} byte count {size} does not fit the {self.end - pos} bytes left")
        return pos + size

    def check_end(self, end: int | None, what: str) -> None:
        if end is not None and self.pos != end:
            raise NatNetProtocolError(
                f"{what}: the byte count says the dataset ends at byte {end}, its content ends at {self.pos} "
                "(bitstream version mismatch?)"
            )

    def string(self, what: str) -> str:
        nul = self.buf.find(b"\0", self.pos, self.end)
        if nul < 0:
            raise self.fail(f"truncated packet: {what} has no terminating NUL")
        text = self.buf[self.pos : nul].decode("utf-8", "replace")
        self.pos = nul + 1
        return text

    def records(self, dtype: np.dtype[Any], count: int, what: str) -> NDArray[Any]:
        pos = self.need(count * dtype.itemsize, what)
        return np.frombuffer(self.buf, dtype=dtype, count=count, offset=pos)

    def floats(self, count: int, what: str) -> NDArray[Any]:
        pos = self.need(4 * count, what)
        return np.frombuffer(self.buf, dtype=_F4, count=count, offset=pos)


class _Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
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

    def floats(self, values: ArrayLike, count: int, what: str) -> None:
        array = np.asarray(values, dtype="<f4").reshape(-1)
        if array.shape[0] != count:
            raise NatNetProtocolError(f"{what}: {array.shape[0]} floats, {count} expected")
        self.parts.append(array.tobytes())

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def _records(values: NDArray[Any] | None, dtype: np.dtype[Any], what: str) -> NDArray[Any]:
    if values is None:
        return np.zeros(0, dtype=dtype)
    array = np.asarray(values)
    if array.dtype != dtype:
        if array.dtype.names != dtype.names:
            raise NatNetProtocolError(
                f"{what}: records of fields {array.dtype.names}, {dtype.names} expected"
            )
        array = array.astype(dtype)
    return np.ascontiguousarray(array.reshape(-1))


# ---------------------------------------------------------------------------- model definitions
