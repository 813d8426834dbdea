"""A VRPN client connection: connect (by UDP request or tcp:// directly), learn the
server's senders and types, and hand over the messages as they arrive.

No thread of its own: :meth:`VrpnClient.read` waits on the sockets (select) for at most
its timeout and returns every message that is there, so the caller's reader thread
turns data into frames the moment it arrives; nothing is polled on a timer.

Both sides of a VRPN connection describe their own ids (:mod:`.protocol`): the client
keeps the server's sender and type tables and describes to the server the ping and
pong types and the trackers it pings. Ping goes out every ``ping_period`` s on TCP; a
server that sends nothing at all (no report, no pong) for ``silence_timeout`` s is
taken as gone.

The parts, each on its own: :mod:`.transport` (the sockets, opening the connection,
reading within a budget, refusing datagrams that are not the server's), :mod:`.dialog`
(what ids mean, when to ping); this module wires them into one connection.
"""

from __future__ import annotations

import logging
import socket
import time

from ..common import ClientStats
from . import protocol as vp
from .dialog import Delivered, KeepAlive, PoseBlock, ServerNames
from .transport import VrpnConnectionError, VrpnTransport, exchange_cookies, open_by_request, open_direct

__all__ = [
    "Delivered",
    "PoseBlock",
    "VrpnClient",
    "VrpnConnectionError",
    "exchange_cookies",
    "open_by_request",
    "open_direct",
]

LOG = logging.getLogger("mocap4r2.vrpn")

SETTLE = 0.2  # s without a new description after which connect() returns


class VrpnClient:
    """One connection to a VRPN server; :meth:`connect` again after an error."""

    def __init__(
        self,
        host: str,
        port: int = vp.DEFAULT_PORT,
        *,
        tcp_only: bool = False,
        timeout: float = 5.0,
        ping_period: float = 1.0,
        silence_timeout: float = 3.0,
        max_read_bytes: int = 1 << 20,
        max_datagrams: int = 1024,
        pose_blocks: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.tcp_only = tcp_only
        self.timeout = timeout
        self.stats = ClientStats()
        self.server_version = ""
        self.names = ServerNames(self.stats)
        self.keepalive = KeepAlive(ping_period, silence_timeout)
        self.transport = VrpnTransport(
            self.stats,
            self.names,
            self.keepalive,
            max_read_bytes=max_read_bytes,
            max_datagrams=max_datagrams,
            pose_blocks=pose_blocks,
        )
        self._early: list[Delivered | PoseBlock] = []  # reports read while connect() read the descriptions

    # ------------------------------------------------------------------ state
    @property
    def connected(self) -> bool:
        return self.transport.tcp is not None

    @property
    def senders(self) -> vp.NameTable:
        """The server's sender ids and names."""
        return self.names.senders

    @property
    def types(self) -> vp.NameTable:
        """The server's type ids and names."""
        return self.names.types

    def trackers(self) -> list[str]:
        """The senders the server announced, in the order of their ids, but VRPN Control."""
        return self.names.trackers()

    # the read budgets live with the sockets; these keep them settable on the client
    @property
    def max_read_bytes(self) -> int:
        return self.transport.max_read_bytes

    @max_read_bytes.setter
    def max_read_bytes(self, value: int) -> None:
        self.transport.max_read_bytes = value

    @property
    def max_datagrams(self) -> int:
        return self.transport.max_datagrams

    @max_datagrams.setter
    def max_datagrams(self, value: int) -> None:
        self.transport.max_datagrams = value

    @property
    def pose_blocks(self) -> bool:
        return self.transport.pose_blocks

    @pose_blocks.setter
    def pose_blocks(self, value: bool) -> None:
        self.transport.pose_blocks = value

    @property
    def _udp(self) -> socket.socket | None:
        """The UDP socket the server sends reports to (tests send strangers' datagrams to it)."""
        return self.transport.udp

    # ------------------------------------------------------------------ connecting
    def connect(self) -> list[str]:
        """Connect, exchange cookies, describe ourselves and read the server's
        descriptions; the announced trackers. VrpnConnectionError with the reason."""
        self.close()
        where = f"{'tcp://' if self.tcp_only else ''}{self.host}:{self.port}"
        deadline = time.monotonic() + self.timeout
        try:
            address = (self.host, self.port)
            tcp = (
                open_direct(address, deadline)
                if self.tcp_only
                else open_by_request(address, deadline, self.timeout)
            )
        except OSError as exc:
            self.stats.last_error = f"cannot connect to VRPN server {where}: {exc}"
            raise VrpnConnectionError(self.stats.last_error) from exc
        try:
            self._handshake(tcp, deadline)
        except (OSError, vp.VrpnProtocolError) as exc:
            tcp.close()
            self.transport.close()  # the UDP socket the handshake opened, too
            self.stats.last_error = f"VRPN server {where}: {exc}"
            raise VrpnConnectionError(self.stats.last_error) from exc
        self.stats.connects += 1
        LOG.info("connected to VRPN %s at %s: %d trackers", self.server_version, where, len(self.trackers()))
        return self.trackers()

    def _handshake(self, tcp: socket.socket, deadline: float) -> None:
        tcp.settimeout(max(deadline - time.monotonic(), 0.01))
        self.server_version = exchange_cookies(tcp)
        self.transport.restart(tcp.getpeername()[0])
        self.names.clear()
        self.keepalive.pinged_sender = None
        now = time.time()
        out = self.keepalive.type_descriptions(now)
        if not self.tcp_only:
            own_ip = tcp.getsockname()[0]
            port, payload = vp.pack_udp_description(own_ip, self.transport.open_udp(own_ip))
            out.append(vp.pack_message(port, vp.UDP_DESCRIPTION, payload, int(now), 0))
        tcp.sendall(b"".join(out))
        self.transport.attach(tcp)
        self.keepalive.restart(time.monotonic())
        # the server describes its senders and types right after its cookie: read them
        pending: list[Delivered | PoseBlock] = []
        last_news = time.monotonic()
        while True:
            now_m = time.monotonic()
            if now_m >= deadline or now_m - last_news >= SETTLE or pending:
                break
            before = (len(self.senders), len(self.types))
            pending += self.transport.read_once(min(SETTLE, deadline - now_m))
            if (len(self.senders), len(self.types)) != before:
                last_news = time.monotonic()
        self._early = pending

    # ------------------------------------------------------------------ reading
    def read(self, timeout: float) -> list[Delivered | PoseBlock]:
        """The user messages that arrived, in order, waiting at most ``timeout`` s for the
        first; VrpnConnectionError when the connection is lost or broken. With
        ``pose_blocks``, a datagram of described Pos_Quat reports only (what a server
        sends while it streams) comes as one :class:`PoseBlock` instead of a Delivered
        per report."""
        if not self.connected:
            raise VrpnConnectionError("not connected")
        early, self._early = self._early, []
        if early:
            return early
        self._ping_if_due()
        out = self.transport.read_once(timeout)
        if not out:
            # checked after waiting on the sockets, not before: a reader that was itself
            # kept from running (a loaded machine) finds the data waiting, not a silence
            self._check_silence()
        return out

    @property
    def continues(self) -> bool:
        """Whether the server was still sending when the data read so far ended: the
        newest datagram was sent full (a server sends one before it is full only at the
        end of its mainloop, so more of that mainloop follows) or the TCP bytes end inside
        a message."""
        return self.transport.continues

    def drain(self, budget: int = 100_000) -> int:
        """Read and drop what the sockets hold (at most ``budget`` messages), and count
        the silence from now: data that waited while nobody read is old news, and the
        time nobody read is not the server's silence. The number of messages dropped."""
        self._early = []
        dropped = 0
        while dropped < budget:
            got = self.transport.read_once(0.0)
            if not got:
                break
            dropped += sum(len(item.records) if isinstance(item, PoseBlock) else 1 for item in got)
        self.keepalive.restart(time.monotonic())
        return dropped

    def _check_silence(self) -> None:
        reason = self.keepalive.silence(time.monotonic())
        if reason is not None:
            self.transport.fail(reason)

    def _ping_if_due(self) -> None:
        if not self.keepalive.ping_due(time.monotonic()):
            return
        trackers = self.trackers()
        if not self.connected or not trackers:
            return
        self.transport.send_nowait(self.keepalive.ping(trackers[0], time.time()))

    def close(self) -> None:
        """Close the sockets; safe to call twice."""
        self.transport.close()
        self._early = []
