"""A VRPN client connection: connect (by UDP request or tcp:// directly), learn the
server's senders and types, and hand over the messages as they arrive.

No thread of its own: :meth:`VrpnClient.read` waits on the sockets (select) for at most
its timeout and returns every message that is there, so the caller's reader thread
turns data into frames the moment it arrives; nothing is polled on a timer.

Both sides of a VRPN connection describe their own ids (:mod:`.protocol`): the client
keeps the server's sender and type tables and describes to the server the ping and
pong types and the trackers it pings. Ping goes out every ``ping_period`` s on TCP; a
server that sends nothing at all (no report, no pong) for ``silence_timeout`` s is
taken as gone (what ids mean, when to ping: :mod:`.dialog`). Every byte count a read
takes is bounded (``max_read_bytes`` of TCP, ``max_datagrams`` per call) so a flooding
server cannot keep a call from returning;
datagrams count only from the server's address and, once its first datagram of
described reports arrived, from that datagram's port (anyone may send to our port);
and a stream whose framing breaks is dropped with the reason
(:class:`VrpnConnectionError`): TCP has no way to find the next message.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import select
import socket
import time
from typing import NoReturn

from ..common import ClientStats
from . import protocol as vp
from .dialog import Delivered, KeepAlive, PoseBlock, ServerNames

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

REQUEST_RETRY = 0.5  # s between connection requests while waiting for the call back
SETTLE = 0.2  # s without a new description after which connect() returns
UDP_RECV_BUFFER = 4 * 1024 * 1024


class VrpnConnectionError(ConnectionError):
    """The server cannot be reached, is not VRPN 07, or broke the connection."""


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
        self.max_read_bytes = max_read_bytes
        self.max_datagrams = max_datagrams
        self.pose_blocks = pose_blocks
        self.stats = ClientStats()
        self.server_version = ""
        self.names = ServerNames(self.stats)
        self.keepalive = KeepAlive(ping_period, silence_timeout)
        self._tcp: socket.socket | None = None
        self._udp: socket.socket | None = None
        self._server_ip = ""
        # the server's UDP source port, learned from its first datagram of described reports
        self._server_udp_port: int | None = None
        self._reader = vp.MessageReader()
        self._early: list[Delivered | PoseBlock] = []  # reports read while connect() read the descriptions
        self._udp_full = False  # whether the newest datagram was sent full

    # ------------------------------------------------------------------ state
    @property
    def connected(self) -> bool:
        return self._tcp is not None

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
            self.stats.last_error = f"VRPN server {where}: {exc}"
            raise VrpnConnectionError(self.stats.last_error) from exc
        self.stats.connects += 1
        LOG.info("connected to VRPN %s at %s: %d trackers", self.server_version, where, len(self.trackers()))
        return self.trackers()

    def _handshake(self, tcp: socket.socket, deadline: float) -> None:
        tcp.settimeout(max(deadline - time.monotonic(), 0.01))
        self.server_version = exchange_cookies(tcp)
        self._server_ip = tcp.getpeername()[0]
        self._server_udp_port = None
        self._udp_full = False
        self.names.clear()
        self._reader = vp.MessageReader()
        self.keepalive.pinged_sender = None
        now = time.time()
        out = self.keepalive.type_descriptions(now)
        if not self.tcp_only:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            # room for bursts while the reader is kept from running (4.4 kB per instant of
            # 50 trackers: the default 208 kB holds 50 ms of them); the system limit applies
            with contextlib.suppress(OSError):
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECV_BUFFER)
            own_ip = tcp.getsockname()[0]
            udp.bind((own_ip, 0))
            udp.setblocking(False)
            self._udp = udp
            port, payload = vp.pack_udp_description(own_ip, udp.getsockname()[1])
            out.append(vp.pack_message(port, vp.UDP_DESCRIPTION, payload, int(now), 0))
        tcp.sendall(b"".join(out))
        tcp.setblocking(False)
        self._tcp = tcp
        self.keepalive.restart(time.monotonic())
        # the server describes its senders and types right after its cookie: read them
        pending: list[Delivered | PoseBlock] = []
        last_news = time.monotonic()
        while True:
            now_m = time.monotonic()
            if now_m >= deadline or now_m - last_news >= SETTLE or pending:
                break
            before = (len(self.senders), len(self.types))
            pending += self._read_once(min(SETTLE, deadline - now_m))
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
        if self._tcp is None:
            raise VrpnConnectionError("not connected")
        early, self._early = self._early, []
        if early:
            return early
        self._ping_if_due()
        out = self._read_once(timeout)
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
        return self._udp_full or self._reader.pending > 0

    def drain(self, budget: int = 100_000) -> int:
        """Read and drop what the sockets hold (at most ``budget`` messages), and count
        the silence from now: data that waited while nobody read is old news, and the
        time nobody read is not the server's silence. The number of messages dropped."""
        self._early = []
        dropped = 0
        while dropped < budget:
            got = self._read_once(0.0)
            if not got:
                break
            dropped += sum(len(item.records) if isinstance(item, PoseBlock) else 1 for item in got)
        self.keepalive.restart(time.monotonic())
        return dropped

    def _check_silence(self) -> None:
        reason = self.keepalive.silence(time.monotonic())
        if reason is not None:
            self._fail(reason)

    def _ping_if_due(self) -> None:
        if not self.keepalive.ping_due(time.monotonic()):
            return
        tcp = self._tcp
        trackers = self.trackers()
        if tcp is None or not trackers:
            return
        try:
            tcp.send(self.keepalive.ping(trackers[0], time.time()), socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass  # the server does not read: the silence timeout decides
        except OSError as exc:
            self._fail(f"cannot send to the server: {exc}")

    def _read_once(self, timeout: float) -> list[Delivered | PoseBlock]:
        tcp, udp = self._tcp, self._udp
        if tcp is None:
            raise VrpnConnectionError("not connected")
        watched = [tcp] if udp is None else [tcp, udp]
        try:
            ready, _, _ = select.select(watched, [], [], max(timeout, 0.0))
        except (OSError, ValueError) as exc:
            self._fail(f"select failed: {exc}")
        out: list[Delivered | PoseBlock] = []
        if tcp in ready:
            self._read_tcp(tcp, out)
        if udp is not None and (udp in ready or out):
            self._read_udp(udp, out)
        return out

    def _read_tcp(self, tcp: socket.socket, out: list[Delivered | PoseBlock]) -> None:
        taken = 0
        while taken < self.max_read_bytes:
            try:
                data = tcp.recv(256 * 1024)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._fail(f"connection lost: {exc}")
            if not data:
                self._fail("the server closed the connection")
            taken += len(data)
            self.keepalive.heard(time.monotonic())
            try:
                messages = self._reader.feed(data)
            except vp.VrpnProtocolError as exc:
                self.names.reject("broken_framing", f"a broken message header ({exc})")
                self._fail(f"the server broke the message framing ({exc})")
            self.names.dispatch(messages, out)

    def _read_udp(self, udp: socket.socket, out: list[Delivered | PoseBlock]) -> None:
        pos_quat = self.types.id(vp.POS_QUAT) if self.pose_blocks else None
        for _ in range(self.max_datagrams):
            try:
                data, source = udp.recvfrom(vp.MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # an ICMP error of an earlier send; nothing lost
                LOG.debug("udp: %s", exc)
                return
            if source[0] != self._server_ip or self._server_udp_port not in (None, source[1]):
                self.stats.foreign_packets += 1
                self.names.reject(
                    "foreign_datagram", f"a datagram from {source[0]}:{source[1]}, not the server"
                )
                continue
            self._udp_full = len(data) > vp.UDP_PAYLOAD - vp.POS_QUAT_MESSAGE.size
            if pos_quat is not None and self._server_udp_port is not None:
                records = vp.pos_quat_records(data, pos_quat)
                if records is not None:
                    trackers = self.names.sender_names(records["sender"].tolist())
                    if trackers is not None:
                        self.keepalive.heard(time.monotonic())
                        out.append(PoseBlock(trackers, records))
                        continue
            try:
                messages = vp.split_datagram(data)
            except vp.VrpnProtocolError as exc:
                self.names.reject("malformed_datagram", f"a malformed datagram ({exc})")
                continue
            if self._server_udp_port is None:
                # the server sends from one socket: the first datagram whose messages all
                # have described ids names it, and datagrams from elsewhere are refused
                if not self.names.described(messages):
                    self.names.reject("unknown_sender", "an undescribed datagram before the server's first")
                    continue
                self._server_udp_port = source[1]
            self.keepalive.heard(time.monotonic())
            # time-critical reports only: descriptions come by TCP, in order with the stream
            self.names.dispatch([m for m in messages if m.type >= 0], out)

    # ------------------------------------------------------------------ errors
    def _fail(self, reason: str) -> NoReturn:
        self.stats.last_error = reason
        self.stats.disconnects += 1
        self.close()
        raise VrpnConnectionError(reason)

    def close(self) -> None:
        """Close the sockets; safe to call twice."""
        tcp, udp = self._tcp, self._udp
        self._tcp = self._udp = None
        self._early = []
        for sock in (tcp, udp):
            if sock is not None:
                try:
                    sock.close()
                except OSError as exc:  # already gone
                    if exc.errno != errno.EBADF:
                        LOG.debug("close: %s", exc)


def open_direct(address: tuple[str, int], deadline: float) -> socket.socket:
    """A TCP connection to the server (tcp://), opened by ``deadline`` (monotonic)."""
    tcp = socket.create_connection(address, timeout=max(deadline - time.monotonic(), 0.01))
    tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return tcp


def open_by_request(address: tuple[str, int], deadline: float, timeout: float) -> socket.socket:
    """The default way: listen on a TCP port, ask the server by UDP to call it back by
    ``deadline`` (monotonic; ``timeout`` s after the start, for the error)."""
    lob = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        lob.connect(address)  # also picks our address towards the server
        own_ip = lob.getsockname()[0]
        listener.bind((own_ip, 0))
        listener.listen(1)
        request = vp.connect_request(own_ip, listener.getsockname()[1])
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no call back within {timeout:g} s (is a VRPN server running?)")
            # refused: an ICMP answer to an earlier request (nobody listens yet): ask again
            with contextlib.suppress(ConnectionRefusedError):
                lob.send(request)
            ready, _, _ = select.select([listener], [], [], min(REQUEST_RETRY, left))
            if ready:
                tcp, _ = listener.accept()
                tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return tcp
    finally:
        lob.close()
        listener.close()


def exchange_cookies(tcp: socket.socket) -> str:
    """Send our cookie, read the server's (blocking); the server's VRPN version."""
    tcp.sendall(vp.cookie())
    answer = b""
    while len(answer) < vp.COOKIE_SIZE:
        chunk = tcp.recv(vp.COOKIE_SIZE - len(answer))
        if not chunk:
            raise vp.VrpnProtocolError("closed the connection before sending its cookie")
        answer += chunk
    return vp.check_cookie(answer)
