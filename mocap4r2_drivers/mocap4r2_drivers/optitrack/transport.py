"""The sockets of a NatNet client and the addresses they use.

Commands (connect, model definitions, requests) go from the command socket to
``server_address:command_port`` and are answered to it. Frames arrive on the data
socket: multicast, bound to ``multicast_address:data_port`` and joined on the interface
of ``local_address``; unicast, on the command socket or on ``local_address:data_port``
(Motive versions differ, so both are read). When the server says it streams otherwise
than configured, :meth:`NatNetTransport.follow_server` follows it and names the
parameter to fix.

Only packets whose source is ``server_address`` get through, and on the data socket
only frames: everything else is counted, logged once and dropped.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import sys
from dataclasses import dataclass

from ..common import TIMESTAMP_SPACE, ClientStats, ask_receive_times, ipv4_problem, receive_time, reject_input
from . import protocol as nn
from .protocol import MessageId, ServerInfo

CONNECTION_TYPES = ("multicast", "unicast")
UP_AXES = ("y", "z")
SKELETON_COORDINATES = ("global", "local")
FRAME_ID = int(MessageId.FRAMEOFDATA).to_bytes(2, "little")
RECV_BUFFER = 4 * 1024 * 1024
MAX_DATAGRAM = 65536
PACKETS_PER_DRAIN = 256  # packets read from one socket in a row, so that one call never starves the caller


class NatNetConnectionError(ConnectionError):
    """The client cannot reach or set up the stream; the message says what to check."""


@dataclass
class ClientConfig:
    """Where the NatNet server is, how it streams, and the client's timing."""

    server_address: str = "127.0.0.1"
    local_address: str = "auto"  # "auto": the interface that routes to the server
    connection_type: str = "multicast"
    multicast_address: str = nn.DEFAULT_MULTICAST_ADDRESS
    command_port: int = nn.DEFAULT_COMMAND_PORT
    data_port: int = nn.DEFAULT_DATA_PORT
    up_axis: str = "y"  # the up axis of the stream (Motive: Y by default)
    skeleton_coordinates: str = "global"  # bones relative to the world, or to their parent
    keepalive_period: float = 1.0  # unicast keep-alive period, s
    reconnect_after: float = 1.0  # silence, s, after which the client reconnects
    retry_period: float = 0.5  # between NAT_CONNECT / model requests, s
    # the bitstream to ask a unicast server for ("auto": the server's own); over multicast
    # Motive streams its own, whatever a client asks
    bitstream_version: str = "auto"

    @property
    def requested_bitstream(self) -> nn.Version | None:
        """The bitstream to ask for, None for the server's own."""
        if self.bitstream_version in ("auto", ""):
            return None
        return nn.Version.parse(self.bitstream_version)

    def check(self) -> None:
        """ValueError naming the first value that cannot be used."""
        if self.connection_type not in CONNECTION_TYPES:
            raise ValueError(
                f"connection_type must be one of {CONNECTION_TYPES}, got {self.connection_type!r}"
            )
        if self.up_axis not in UP_AXES:
            raise ValueError(f"up_axis must be one of {UP_AXES}, got {self.up_axis!r}")
        if self.skeleton_coordinates not in SKELETON_COORDINATES:
            raise ValueError(
                f"skeleton_coordinates must be one of {SKELETON_COORDINATES}, "
                f"got {self.skeleton_coordinates!r}"
            )
        for problem in (
            ipv4_problem(self.server_address, "server_address"),
            ipv4_problem(self.local_address, "local_address", allow_auto=True),
            ipv4_problem(self.multicast_address, "multicast_address", multicast=True),
        ):
            if problem:
                raise ValueError(problem)
        try:
            requested = self.requested_bitstream
        except nn.NatNetProtocolError:
            requested = nn.Version(-1, -1)
        if requested is not None and not requested.known:
            raise ValueError(
                f"bitstream_version must be auto or one of "
                f"{', '.join(str(v) for v in nn.SUPPORTED_VERSIONS)}, got {self.bitstream_version!r}"
            )
        for name in ("command_port", "data_port"):
            if not 1 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be in 1..65535, got {getattr(self, name)}")


def local_address_towards(server: str, port: int) -> str:
    """The address of the interface this host would use to reach ``server``."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((server, port))  # UDP: picks a route, sends nothing
        return str(probe.getsockname()[0])
    except OSError as exc:
        raise NatNetConnectionError(
            f"no route from this machine to server_address {server}: {exc.strerror}"
        ) from exc
    finally:
        probe.close()


def _interfaces_hint() -> str:
    try:
        import psutil  # optional: only to list the addresses a user could choose from

        addresses = sorted(
            {
                a.address
                for addrs in psutil.net_if_addrs().values()
                for a in addrs
                if a.family == socket.AF_INET
            }
        )
        return f" (this machine's IPv4 addresses: {', '.join(addresses)})"
    except Exception:  # a hint only: without psutil, or if it fails, say nothing
        return ""


def _set_recv_buffer(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the system limit applies; bursts may then drop sooner
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
    ask_receive_times(sock)


class NatNetTransport:
    """The command and data sockets of one client, and the stream's addresses (which the
    server's NAT_SERVERINFO may correct)."""

    def __init__(self, config: ClientConfig, stats: ClientStats, log: logging.Logger):
        self.config = config
        self.stats = stats
        self.log = log
        self.server = (config.server_address, config.command_port)
        self.multicast = config.connection_type == "multicast"
        self.multicast_address = config.multicast_address
        self.data_port = config.data_port
        self.local_address = ""
        self.command: socket.socket | None = None
        self.data: socket.socket | None = None
        self.received_at = 0.0  # the kernel's receive time of the last packet receive() gave

    # ------------------------------------------------------------------ opening
    def open(self) -> None:
        """Bind the command socket on ``local_address`` (or the interface towards the
        server) and open the data socket; NatNetConnectionError saying what to check."""
        cfg = self.config
        local = cfg.local_address
        if local in ("auto", ""):
            local = local_address_towards(cfg.server_address, cfg.command_port)
        self.local_address = local
        command = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            command.bind((local, 0))
        except OSError as exc:
            command.close()
            if exc.errno == errno.EADDRNOTAVAIL:
                raise NatNetConnectionError(
                    f"local_address {local} is not an address of this machine{_interfaces_hint()}"
                ) from exc
            raise NatNetConnectionError(f"cannot open the command socket on {local}: {exc.strerror}") from exc
        _set_recv_buffer(command)
        command.setblocking(False)
        self.command = command
        self._open_data_socket()

    def _open_data_socket(self) -> None:
        self._close_data_socket()
        if not self.multicast:
            self._open_unicast_data_socket()
            return
        group, port, local = self.multicast_address, self.data_port, self.local_address
        data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            data.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                data.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # other clients on this host
            # POSIX delivers a multicast datagram to sockets bound to the group (or any);
            # Windows wants the local interface address instead
            data.bind((local if sys.platform == "win32" else group, port))
            data.setsockopt(
                socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(local)
            )
        except OSError as exc:
            data.close()
            if exc.errno == errno.EADDRNOTAVAIL or exc.errno == errno.ENODEV:
                raise NatNetConnectionError(
                    f"cannot join multicast group {group} on interface {local}: {exc.strerror}; "
                    f"check local_address{_interfaces_hint()}"
                ) from exc
            raise NatNetConnectionError(
                f"cannot receive multicast {group}:{port} on {local}: {exc.strerror}"
            ) from exc
        _set_recv_buffer(data)
        data.setblocking(False)
        self.data = data

    def _open_unicast_data_socket(self) -> None:
        """Unicast frames may come to the data port of our address instead of the command
        socket (Motive versions differ): listen there too. Without it (the port is taken
        by a program that did not allow sharing) the command socket still works."""
        data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            data.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            data.bind((self.local_address, self.data_port))
        except OSError as exc:
            data.close()
            self.log.warning(
                f"cannot listen for unicast frames on {self.local_address}:{self.data_port} "
                f"({exc.strerror}); receiving them on the command socket only"
            )
            return
        _set_recv_buffer(data)
        data.setblocking(False)
        self.data = data

    def _close_data_socket(self) -> None:
        if self.data is not None:
            self.data.close()
            self.data = None

    def close(self) -> None:
        """Close both sockets; idempotent."""
        if self.command is not None:
            self.command.close()
            self.command = None
        self._close_data_socket()

    # ------------------------------------------------------------------ following the server
    def follow_server(self, info: ServerInfo) -> None:
        """Stream as NAT_SERVERINFO says (multicast or not, data port, group) where the
        configuration disagrees, with a warning naming the parameter to fix."""
        if info.multicast is None:
            return
        group = (info.multicast_address or "0.0.0.0").split(".")
        if info.multicast and not (224 <= int(group[0]) <= 239 and (info.data_port or 0) > 0):
            self.log.warning(
                f"ignoring the server's connection info (multicast to {info.multicast_address}:"
                f"{info.data_port} is not a usable group and port)"
            )
            return
        reopen = False
        if info.multicast != self.multicast:
            wanted = "multicast" if info.multicast else "unicast"
            self.log.warning(
                f"connection_type is {self.config.connection_type} but the server streams {wanted}: "
                f"following the server (set connection_type: {wanted})"
            )
            self.multicast = info.multicast
            reopen = True
        if info.multicast and info.data_port and info.data_port != self.data_port:
            self.log.warning(
                f"data_port is {self.data_port} but the server streams to port {info.data_port}: "
                f"following the server (set data_port: {info.data_port})"
            )
            self.data_port = info.data_port
            reopen = True
        if info.multicast and info.multicast_address not in (None, "0.0.0.0", self.multicast_address):
            self.log.warning(
                f"multicast_address is {self.multicast_address} but the server streams to "
                f"{info.multicast_address}: following the server (set multicast_address: "
                f"{info.multicast_address})"
            )
            self.multicast_address = info.multicast_address
            reopen = True
        if not info.multicast and info.data_port and info.data_port != self.data_port:
            self.data_port = info.data_port  # unicast to the data port: the server says which one
            reopen = True
        if reopen:
            try:
                self._open_data_socket()
            except NatNetConnectionError as exc:  # reported; the next NAT_SERVERINFO tries again
                self.stats.last_error = str(exc)
                self.log.error(str(exc))

    # ------------------------------------------------------------------ traffic
    def sockets(self) -> list[socket.socket]:
        """The open sockets, for select()."""
        return [s for s in (self.command, self.data) if s is not None]

    def send(self, packet: bytes) -> None:
        """Send a command to the server; a failure is kept in ``stats.last_error`` (the
        caller reports it as "no answer")."""
        if self.command is None:  # closed: nothing to send with (read() says so to callers)
            self.stats.last_error = "the client is closed"
            return
        try:
            self.command.sendto(packet, self.server)
        except OSError as exc:  # e.g. no route
            self.stats.last_error = f"cannot send to {self.server[0]}:{self.server[1]}: {exc.strerror}"

    def receive(self, sock: socket.socket) -> bytes | None:
        """The next packet waiting on ``sock`` that comes from the server (on the data
        socket: a frame), or None when none is waiting. Packets from others are dropped on
        the way, at most PACKETS_PER_DRAIN in one call (None then too)."""
        server = self.server[0]
        for _ in range(PACKETS_PER_DRAIN):
            try:
                packet, ancillary, _, source = sock.recvmsg(MAX_DATAGRAM, TIMESTAMP_SPACE)
            except (BlockingIOError, InterruptedError):
                return None
            except ConnectionRefusedError:
                self.stats.last_error = f"{server}:{self.server[1]} refused (port unreachable)"
                continue
            except OSError as exc:
                self.stats.last_error = f"receive failed: {exc.strerror}"
                return None
            if source[0] != server:
                self.stats.foreign_packets += 1
                reject_input(
                    self.stats,
                    self.log,
                    "foreign_packet",
                    f"a packet from {source[0]}:{source[1]}, which is not server_address {server}",
                )
                continue
            if sock is self.data and packet[:2] != FRAME_ID:
                reject_input(
                    self.stats,
                    self.log,
                    "non_frame_on_data_socket",
                    "a packet other than a frame on the data socket",
                )
                continue
            self.received_at = receive_time(ancillary)
            return packet
        return None
