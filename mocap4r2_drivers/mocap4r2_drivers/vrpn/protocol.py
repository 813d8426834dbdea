"""The VRPN connection protocol (vrpn 07.xx) and vrpn_Tracker's reports: bytes only.

Pure Python, no sockets, no ROS. Every length, count and id a peer sends is checked
before it is used: bytes that do not fit raise :class:`VrpnProtocolError`, never an
IndexError or a large allocation.

Facts of the protocol used here (vrpn's public ``Format_Of_Protocol.txt`` and the
behaviour of ``vrpn_Connection.C`` / ``vrpn_Tracker.C``):

* a connection starts with both sides writing a 24-byte cookie,
  ``"vrpn: ver. 07.38"`` + two spaces + the remote log mode as an ASCII digit, padded
  with NUL; a peer accepts any cookie whose text up to the last ``.`` (the major
  version) matches, and a log mode 0-3;
* a message is a header of five big-endian int32 (total length, time seconds, time
  microseconds, sender id, type id), padded to 24 bytes (vrpn writes a sequence
  number into the padding; nobody reads it), then the payload padded to a multiple of
  8 bytes. The length field counts the 24 header bytes and the payload *without* its
  padding; a TCP stream and a UDP datagram carry any number of messages back to back;
* negative types are system messages: -1 sender description and -2 type description
  (the message's sender field is the id being described; the payload is a big-endian
  int32 ``len(name) + 1`` followed by the NUL-terminated name, at most 100 bytes),
  -3 UDP description (sender field: the UDP port to send time-critical messages to;
  payload: the NUL-terminated IP address), -4 log description, -5 disconnect (never on
  the wire);
* ids are each side's own: a message carries the *sender's* ids, and each receiver
  translates them through the descriptions it received (at most 2000 of each);
* the default way to connect: the client listens on a TCP port and sends a UDP
  datagram ``"<its IP> <that port>"`` ending in NUL to the server's port (3883); the server
  connects back. ``tcp://host:port`` connects directly;
* ``vrpn_Base ping_message`` (client to server, empty, sender = the device) is
  answered by ``vrpn_Base pong_message`` from the same device;
* messages for UDP are packed into datagrams of at most 1472 bytes: one is sent when
  the next message does not fit, the last at the end of the server's mainloop;
* ``vrpn_Tracker Pos_Quat``: int32 sensor, int32 padding, float64 position x y z,
  float64 quaternion x y z w, all big-endian (64 bytes); ``Velocity`` and
  ``Acceleration`` are the same followed by a float64 dt (72 bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

ALIGN = 8
HEADER = struct.Struct(">iiiii")  # length, seconds, microseconds, sender, type
HEADER_SIZE = 24  # the header padded to ALIGN
COOKIE_SIZE = 24
MAGIC = b"vrpn: ver. 07.38"
MAGIC_MAJOR = MAGIC[: MAGIC.rindex(b".") + 1]  # what must match: "vrpn: ver. 07."
MAX_NAME = 100  # vrpn_CNAME: a sender or type name with its NUL
MAX_IDS = 2000  # senders, and types, one side may describe
# vrpn's own reader refuses a TCP message whose padded payload exceeds its 64000-byte
# buffer, so no conforming server sends one; a datagram is at most 64 KiB anyway
MAX_PAYLOAD = 64000
MAX_DATAGRAM = 65536
# vrpn_CONNECTION_UDP_BUFLEN, one Ethernet MTU less the IP and UDP headers: a server packs
# a mainloop's time-critical messages into datagrams of at most this size, sending one
# when the next message does not fit and the last at the end of the mainloop
UDP_PAYLOAD = 1472
DEFAULT_PORT = 3883

SENDER_DESCRIPTION = -1
TYPE_DESCRIPTION = -2
UDP_DESCRIPTION = -3
LOG_DESCRIPTION = -4
DISCONNECT_MESSAGE = -5
SYSTEM_TYPES = frozenset(
    {SENDER_DESCRIPTION, TYPE_DESCRIPTION, UDP_DESCRIPTION, LOG_DESCRIPTION, DISCONNECT_MESSAGE}
)

CONTROL_SENDER = "VRPN Control"
PING = "vrpn_Base ping_message"
PONG = "vrpn_Base pong_message"
TEXT = "vrpn_Base text_message"
POS_QUAT = "vrpn_Tracker Pos_Quat"
VELOCITY = "vrpn_Tracker Velocity"
ACCELERATION = "vrpn_Tracker Acceleration"

_INT = struct.Struct(">i")
POS_QUAT_REPORT = struct.Struct(">ii3d4d")  # sensor, padding, position, quaternion
MOTION_REPORT = struct.Struct(">ii3d4dd")  # sensor, padding, vector, quaternion, dt
POS_QUAT_SIZE = POS_QUAT_REPORT.size  # 64
# a whole Pos_Quat message: the padded header and the report, in one pack
POS_QUAT_MESSAGE = struct.Struct(">iiiii4xii3d4d")
MOTION_SIZE = MOTION_REPORT.size  # 72
# the same whole message as a numpy record: a datagram of Pos_Quat messages only is read
# as one array, without a Python object per message
POS_QUAT_RECORD = np.dtype(
    [
        ("length", ">i4"),
        ("seconds", ">i4"),
        ("microseconds", ">i4"),
        ("sender", ">i4"),
        ("type", ">i4"),
        ("sequence", ">i4"),
        ("sensor", ">i4"),
        ("padding", ">i4"),
        ("position", ">f8", (3,)),
        ("orientation", ">f8", (4,)),
    ]
)
assert POS_QUAT_RECORD.itemsize == POS_QUAT_MESSAGE.size


class VrpnProtocolError(ValueError):
    """Bytes that are not valid VRPN."""


def padded(length: int) -> int:
    """``length`` rounded up to a multiple of 8 (vrpn_ALIGN)."""
    return (length + ALIGN - 1) // ALIGN * ALIGN


# ====================================================================== cookie
def cookie(log_mode: int = 0) -> bytes:
    """The 24 bytes a side writes first: the magic text, two spaces, the log mode."""
    if not 0 <= log_mode <= 3:
        raise ValueError(f"log mode must be 0-3, got {log_mode}")
    text = MAGIC + b"  " + bytes([ord("0") + log_mode])
    return text + b"\0" * (COOKIE_SIZE - len(text))


def check_cookie(data: bytes) -> str:
    """The peer's version ("07.38") when its cookie is acceptable (same major version,
    a log mode 0-3); VrpnProtocolError saying what is wrong otherwise."""
    if len(data) != COOKIE_SIZE:
        raise VrpnProtocolError(f"a VRPN cookie has {COOKIE_SIZE} bytes, got {len(data)}")
    text = bytes(data[: len(MAGIC)])
    if not text.startswith(MAGIC_MAJOR):
        shown = text.split(b"\0", 1)[0].decode("ascii", "replace")
        expected, major = MAGIC.decode(), MAGIC_MAJOR[11:].decode()
        raise VrpnProtocolError(
            f"not a VRPN {major}xx peer: its cookie says {shown!r} (expected {expected!r})"
        )
    mode = data[len(MAGIC) + 2] - ord("0")
    if not 0 <= mode <= 3:
        raise VrpnProtocolError(f"VRPN cookie with an invalid log mode byte {data[len(MAGIC) + 2]!r}")
    return text[len(MAGIC_MAJOR) - 3 :].decode("ascii", "replace")


# ====================================================================== messages
class Message(NamedTuple):
    """One VRPN message as sent: ids are the sender's, time is the sender's clock. (A
    named tuple: tens of thousands are made per second, and a tuple is made fastest.)"""

    seconds: int
    microseconds: int
    sender: int
    type: int
    payload: bytes

    @property
    def time(self) -> float:
        """The message time in seconds (the server's clock: Unix time on most servers)."""
        return self.seconds + self.microseconds * 1e-6


def pack_message(sender: int, type_id: int, payload: bytes, seconds: int, microseconds: int) -> bytes:
    """One message: the padded header, the payload, the payload's padding."""
    length = len(payload)
    if length > MAX_PAYLOAD:
        raise ValueError(f"a VRPN payload is at most {MAX_PAYLOAD} bytes, got {length}")
    header = HEADER.pack(HEADER_SIZE + length, seconds, microseconds, sender, type_id)
    return header + b"\0" * (HEADER_SIZE - HEADER.size) + payload + b"\0" * (padded(length) - length)


def _message_size(length: int) -> int:
    """Bytes the message with header length field ``length`` takes, padding included."""
    if length < HEADER_SIZE:
        raise VrpnProtocolError(f"message length {length} is shorter than the {HEADER_SIZE}-byte header")
    if length - HEADER_SIZE > MAX_PAYLOAD:
        raise VrpnProtocolError(f"message length {length} exceeds VRPN's {MAX_PAYLOAD}-byte payload limit")
    return HEADER_SIZE + padded(length - HEADER_SIZE)


def _split(data: bytes, out: list[Message]) -> int:
    """Append the complete messages at the start of ``data`` to ``out``; the bytes used."""
    at = 0
    end = len(data)
    unpack = HEADER.unpack_from
    append = out.append
    while end - at >= HEADER_SIZE:
        length, seconds, microseconds, sender, type_id = unpack(data, at)
        if not HEADER_SIZE <= length <= HEADER_SIZE + MAX_PAYLOAD:
            _message_size(length)  # raises, saying what is wrong
        size = HEADER_SIZE + ((length - HEADER_SIZE + ALIGN - 1) & -ALIGN)
        if end - at < size:
            break
        append(Message(seconds, microseconds, sender, type_id, data[at + HEADER_SIZE : at + length]))
        at += size
    return at


def split_datagram(data: bytes) -> list[Message]:
    """Every message of one UDP datagram; VrpnProtocolError when one does not fit."""
    if len(data) > MAX_DATAGRAM:
        raise VrpnProtocolError(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM}")
    out: list[Message] = []
    used = _split(bytes(data), out)
    if used != len(data):
        left = len(data) - used
        raise VrpnProtocolError(f"{left} bytes at the end of the datagram do not hold a whole message")
    return out


def pos_quat_records(
    data: bytes, type_id: int, max_bytes: int = MAX_DATAGRAM
) -> np.ndarray[Any, np.dtype[np.void]] | None:
    """The messages of ``data`` (a datagram, or datagrams one after the other, at most
    ``max_bytes``) as POS_QUAT_RECORD records when every one is a Pos_Quat report of the
    sender's type ``type_id`` for a sensor >= 0 with the exact length; None otherwise
    (:func:`split_datagram` then says what a datagram holds). The records are a read-only
    view of ``data``."""
    size = POS_QUAT_RECORD.itemsize
    if not data or len(data) % size or len(data) > max_bytes:
        return None
    # the int32 columns length and type (0 and 4) in one comparison, sensor (6) in another
    ints = np.frombuffer(data, dtype=">i4").reshape(-1, size // 4)
    if not ((ints[:, 0:5:4] == (HEADER_SIZE + POS_QUAT_SIZE, type_id)).all() and ints[:, 6].min() >= 0):
        return None
    return np.frombuffer(data, dtype=POS_QUAT_RECORD)


class MessageReader:
    """Frames the TCP stream into messages. Holds at most one incomplete message (at
    most ``HEADER_SIZE + MAX_PAYLOAD`` bytes) between calls."""

    def __init__(self) -> None:
        self._rest = b""

    @property
    def pending(self) -> int:
        """Bytes held for an incomplete message."""
        return len(self._rest)

    def feed(self, data: bytes) -> list[Message]:
        """The complete messages ``data`` finishes. A header with an impossible length
        raises VrpnProtocolError: TCP has no way to find the next message, so the
        connection must be dropped."""
        if self._rest:
            data = self._rest + data
            self._rest = b""
        out: list[Message] = []
        used = _split(bytes(data), out)
        self._rest = bytes(data[used:])
        return out


# ====================================================================== descriptions
def pack_description(name: str) -> bytes:
    """The payload of a sender or type description: int32 len(name)+1, name, NUL."""
    raw = name.encode("utf-8") + b"\0"
    if len(raw) > MAX_NAME:
        raise ValueError(f"a VRPN name is at most {MAX_NAME - 1} bytes, got {name!r}")
    return _INT.pack(len(raw)) + raw


def parse_description(payload: bytes) -> str:
    """The name a sender or type description carries."""
    if len(payload) < _INT.size + 1:
        raise VrpnProtocolError(f"a name description of {len(payload)} bytes")
    if len(payload) > _INT.size + MAX_NAME:
        raise VrpnProtocolError(f"a name description of {len(payload)} bytes (names are < {MAX_NAME})")
    declared = _INT.unpack_from(payload)[0]
    if not 1 <= declared <= len(payload) - _INT.size:
        raise VrpnProtocolError(f"a name description declaring {declared} bytes in {len(payload)}")
    raw = payload[_INT.size : _INT.size + declared].split(b"\0", 1)[0]
    if not raw:
        raise VrpnProtocolError("an empty name in a description")
    return raw.decode("utf-8", "replace")


def check_id(kind: str, value: int) -> None:
    """Ids index the describing side's tables: 0 <= id < MAX_IDS."""
    if not 0 <= value < MAX_IDS:
        raise VrpnProtocolError(f"{kind} id {value} outside 0..{MAX_IDS - 1}")


def pack_udp_description(address: str, port: int) -> tuple[int, bytes]:
    """(sender field, payload) of a UDP description: the port, and the NUL-terminated IP."""
    return port, address.encode("ascii") + b"\0"


def parse_udp_description(sender: int, payload: bytes) -> tuple[str, int]:
    """(address, port) from a UDP description message."""
    if not 0 < sender < 65536:
        raise VrpnProtocolError(f"UDP description with port {sender}")
    raw = payload[:64].split(b"\0", 1)[0]
    try:
        address = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise VrpnProtocolError("UDP description with a non-ASCII address") from exc
    if not address or not all(c.isalnum() or c in ".-:" for c in address):
        raise VrpnProtocolError(f"UDP description with address {address!r}")
    return address, sender


# ====================================================================== connecting by UDP request
def connect_request(address: str, port: int) -> bytes:
    """The datagram asking a server to connect back to ``address``:``port`` by TCP."""
    return f"{address} {port}".encode("ascii") + b"\0"


def parse_connect_request(data: bytes) -> tuple[str, int]:
    """(host, port) of a connection request, with the checks vrpn's server makes (a
    host of letters, digits and dots, a port of 1024 or above); VrpnProtocolError
    otherwise."""
    text = data[:199].split(b"\0", 1)[0].decode("ascii", "replace").split()
    if len(text) < 2:
        raise VrpnProtocolError("malformed connection request (expected '<host> <port>')")
    host, port_text = text[0], text[1]
    if not host or not all(c.isalnum() or c == "." for c in host):
        raise VrpnProtocolError(f"connection request with a bad host {host[:40]!r}")
    if not port_text.isdigit() or not 1024 <= int(port_text) <= 65535:
        raise VrpnProtocolError(f"connection request with a bad port {port_text[:12]!r}")
    return host, int(port_text)


# ====================================================================== tracker reports
class PoseReport(NamedTuple):
    """A vrpn_Tracker Pos_Quat report: one sensor's position and quaternion x y z w."""

    sensor: int
    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]


@dataclass(frozen=True, slots=True)
class MotionReport:
    """A Velocity or Acceleration report: a vector, a quaternion and its dt."""

    sensor: int
    vector: tuple[float, float, float]
    orientation: tuple[float, float, float, float]
    dt: float


def pack_pos_quat(
    sensor: int, position: tuple[float, float, float], orientation: tuple[float, float, float, float]
) -> bytes:
    """The payload of a Pos_Quat report."""
    return POS_QUAT_REPORT.pack(sensor, sensor, *position, *orientation)


def pack_pos_quat_message(
    sender: int,
    type_id: int,
    sensor: int,
    *,
    position: Sequence[float],
    orientation: Sequence[float],
    seconds: int,
    microseconds: int,
) -> bytes:
    """A whole Pos_Quat message (what :func:`pack_message` makes of :func:`pack_pos_quat`)."""
    return POS_QUAT_MESSAGE.pack(
        HEADER_SIZE + POS_QUAT_SIZE,
        seconds,
        microseconds,
        sender,
        type_id,
        sensor,
        sensor,
        *position,
        *orientation,
    )


def unpack_pos_quat(payload: bytes) -> PoseReport:
    """A Pos_Quat payload; it must be exactly 64 bytes, as vrpn_Tracker_Remote requires."""
    if len(payload) != POS_QUAT_SIZE:
        raise VrpnProtocolError(f"a Pos_Quat report has {POS_QUAT_SIZE} bytes, got {len(payload)}")
    sensor, _, x, y, z, qx, qy, qz, qw = POS_QUAT_REPORT.unpack(payload)
    if sensor < 0:
        raise VrpnProtocolError(f"a Pos_Quat report for sensor {sensor}")
    return PoseReport(sensor, (x, y, z), (qx, qy, qz, qw))


def pack_motion(
    sensor: int,
    vector: tuple[float, float, float],
    orientation: tuple[float, float, float, float],
    dt: float,
) -> bytes:
    """The payload of a Velocity or Acceleration report."""
    return MOTION_REPORT.pack(sensor, sensor, *vector, *orientation, dt)


def unpack_motion(payload: bytes) -> MotionReport:
    """A Velocity or Acceleration payload (exactly 72 bytes)."""
    if len(payload) != MOTION_SIZE:
        raise VrpnProtocolError(f"a velocity/acceleration report has {MOTION_SIZE} bytes, got {len(payload)}")
    sensor, _, x, y, z, qx, qy, qz, qw, dt = MOTION_REPORT.unpack(payload)
    if sensor < 0:
        raise VrpnProtocolError(f"a velocity/acceleration report for sensor {sensor}")
    return MotionReport(sensor, (x, y, z), (qx, qy, qz, qw), dt)


# ====================================================================== id translation
class NameTable:
    """One side's ids for senders or types, as its descriptions announced them.

    Ids are the describing side's indices (0..MAX_IDS-1); a second description of an
    id replaces its name (vrpn does the same when a peer reconnects)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._names: dict[int, str] = {}
        self._ids: dict[str, int] = {}

    def describe(self, remote_id: int, name: str) -> bool:
        """Record a description; True when it is new or renames the id."""
        check_id(self.kind, remote_id)
        old = self._names.get(remote_id)
        if old == name:
            return False
        if old is not None:
            self._ids.pop(old, None)
        self._names[remote_id] = name
        self._ids[name] = remote_id
        return True

    def name(self, remote_id: int) -> str | None:
        return self._names.get(remote_id)

    @property
    def by_id(self) -> Mapping[int, str]:
        """Every described id's name (read only)."""
        return self._names

    def id(self, name: str) -> int | None:
        return self._ids.get(name)

    def names(self) -> list[str]:
        """Names in the order of their ids."""
        return [self._names[i] for i in sorted(self._names)]

    def __len__(self) -> int:
        return len(self._names)

    def clear(self) -> None:
        self._names.clear()
        self._ids.clear()
