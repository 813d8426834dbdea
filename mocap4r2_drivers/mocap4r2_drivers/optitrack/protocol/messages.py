"""NatNet control messages: NAT_CONNECT / NAT_SERVERINFO, NAT_REQUEST / NAT_RESPONSE and
the requests without payload."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .wire import (
    _F32,
    _I32,
    NAME_FIELD,
    MessageId,
    NatNetProtocolError,
    Version,
    _name_field,
    _version4,
    pack,
)


@dataclass(frozen=True)
class ConnectRequest:
    """NAT_CONNECT: who the client is and, optionally, which bitstream it would like."""

    client_name: str = "mocap4r2"
    client_version: tuple[int, int, int, int] = (2, 0, 0, 0)
    natnet_version: tuple[int, int, int, int] = (4, 1, 0, 0)
    subscribed_data_only: bool = False
    requested_bitstream: tuple[int, int, int, int] | None = (4, 1, 0, 0)


def encode_connect(request: ConnectRequest = ConnectRequest()) -> bytes:
    """A NAT_CONNECT packet."""
    payload = (
        _name_field(request.client_name)
        + bytes(_version4(request.client_version))
        + bytes(_version4(request.natnet_version))
        + bytes([1 if request.subscribed_data_only else 0])
        + bytes(_version4(request.requested_bitstream or (0, 0, 0, 0)))
    )
    return pack(MessageId.CONNECT, payload)


def decode_connect(payload: bytes) -> ConnectRequest:
    r"""Lenient: clients send anything from ``"Ping\0"`` to the full 269-byte form."""
    name = payload[:NAME_FIELD].split(b"\0", 1)[0].decode("utf-8", "replace")
    if len(payload) < NAME_FIELD + 13:
        return ConnectRequest(
            client_name=name,
            client_version=(0, 0, 0, 0),
            natnet_version=(0, 0, 0, 0),
            requested_bitstream=None,
        )
    o = NAME_FIELD
    requested = _four_bytes(payload, o + 9)
    return ConnectRequest(
        client_name=name,
        client_version=_four_bytes(payload, o),
        natnet_version=_four_bytes(payload, o + 4),
        subscribed_data_only=bool(payload[o + 8]),
        requested_bitstream=requested if any(requested) else None,
    )


@dataclass(frozen=True)
class ServerInfo:
    """NAT_SERVERINFO (sSender_Server): application, versions and connection info."""

    app_name: str = "Motive"
    app_version: tuple[int, int, int, int] = (3, 1, 0, 0)
    natnet_version: tuple[int, int, int, int] = (4, 1, 0, 0)
    clock_frequency: int = 0  # ticks per second of the server's high resolution clock
    data_port: int | None = None  # connection info: None when the server predates NatNet 3
    multicast: bool | None = None
    multicast_address: str | None = None

    @property
    def bitstream(self) -> Version:
        return Version(self.natnet_version[0], self.natnet_version[1])


_SERVER_CONNECTION = struct.Struct("<QHB4s")


def encode_server_info(info: ServerInfo) -> bytes:
    """A NAT_SERVERINFO packet (with the connection info when ``info`` has it)."""
    payload = (
        _name_field(info.app_name)
        + bytes(_version4(info.app_version))
        + bytes(_version4(info.natnet_version))
    )
    if info.data_port is not None:
        address = bytes(int(x) for x in (info.multicast_address or "0.0.0.0").split("."))
        payload += _SERVER_CONNECTION.pack(
            int(info.clock_frequency), int(info.data_port), 1 if info.multicast else 0, address
        )
    return pack(MessageId.SERVERINFO, payload)


def decode_server_info(payload: bytes) -> ServerInfo:
    """A NAT_SERVERINFO payload; NatNetProtocolError when too short."""
    if len(payload) < NAME_FIELD + 8:
        raise NatNetProtocolError(
            f"NAT_SERVERINFO of {len(payload)} bytes, at least {NAME_FIELD + 8} expected"
        )
    name = payload[:NAME_FIELD].split(b"\0", 1)[0].decode("utf-8", "replace")
    o = NAME_FIELD
    app_version = _four_bytes(payload, o)
    natnet_version = _four_bytes(payload, o + 4)
    o += 8
    if len(payload) >= o + _SERVER_CONNECTION.size:
        freq, port, multicast, address = _SERVER_CONNECTION.unpack_from(payload, o)
        return ServerInfo(
            name,
            app_version,
            natnet_version,
            freq,
            port,
            bool(multicast),
            ".".join(str(b) for b in address),
        )
    return ServerInfo(name, app_version, natnet_version)


def _four_bytes(payload: bytes, at: int) -> tuple[int, int, int, int]:
    """A version as NatNet sends it: four bytes (major, minor, build, revision)."""
    return payload[at], payload[at + 1], payload[at + 2], payload[at + 3]


def encode_request(command: str) -> bytes:
    """NAT_REQUEST with a command string (e.g. "FrameRate", "Bitstream,4.1")."""
    return pack(MessageId.REQUEST, command.encode("utf-8") + b"\0")


def decode_string(payload: bytes) -> str:
    """A NUL-terminated string payload (NAT_MESSAGESTRING, string answers)."""
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
