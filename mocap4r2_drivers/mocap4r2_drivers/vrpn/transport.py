"""The sockets of a VRPN client connection: opening the TCP connection (by UDP request
or tcp:// directly), the cookie exchange, the UDP socket for time-critical reports, and
reading both within a budget.

Every byte count a read takes is bounded (``max_read_bytes`` of TCP, ``max_datagrams``
per call) so a flooding server cannot keep a call from returning. Datagrams count only
from the server's address and, once its first datagram of described reports arrived,
from that datagram's port: anyone may send to our port. A stream whose framing breaks
is dropped with the reason (:class:`VrpnConnectionError`): TCP has no way to find the
next message. What the bytes mean (ids, descriptions) is :mod:`.dialog`'s; when to ping
and when to connect is the client's (:mod:`.client`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import select
import socket
import time
from typing import NoReturn

from ..common import TIMESTAMP_SPACE, ClientStats, ask_receive_times, receive_time
from . import protocol as vp
from .dialog import Delivered, KeepAlive, PoseBlock, ServerNames

__all__ = [
    "VrpnConnectionError",
    "VrpnTransport",
    "exchange_cookies",
    "open_by_request",
    "open_direct",
]

LOG = logging.getLogger("mocap4r2.vrpn")

REQUEST_RETRY = 0.5  # s between connection requests while waiting for the call back
UDP_RECV_BUFFER = 4 * 1024 * 1024
#: bytes of report datagrams decoded together (a copy of this size at most per run)
MAX_RUN_BYTES = 256 * 1024


class VrpnConnectionError(ConnectionError):
    """The server cannot be reached, is not VRPN 07, or broke the connection."""


class VrpnTransport:
    """The TCP and UDP sockets of one connection, and the bounded reading of both.

    Kept apart from :class:`~.client.VrpnClient` so that what touches a socket, and
    every budget on it, is in one place; the client decides what to send and when.
    """

    def __init__(
        self,
        stats: ClientStats,
        names: ServerNames,
        keepalive: KeepAlive,
        *,
        max_read_bytes: int,
        max_datagrams: int,
        pose_blocks: bool,
    ) -> None:
        self.stats = stats
        self.names = names
        self.keepalive = keepalive
        self.max_read_bytes = max_read_bytes
        self.max_datagrams = max_datagrams
        self.pose_blocks = pose_blocks
        self.tcp: socket.socket | None = None
        self.udp: socket.socket | None = None
        self._server_ip = ""
        # the server's UDP source port, learned from its first datagram of described reports
        self._server_udp_port: int | None = None
        self._reader = vp.MessageReader()
        self._udp_full = False  # whether the newest datagram was sent full
        # when the newest bytes read reached this host (Unix s): the kernel's receive time
        # of a datagram, the time of the read on TCP
        self.received_at = 0.0

    def restart(self, server_ip: str) -> None:
        """A new connection to the server at ``server_ip``: nothing of the last one counts."""
        self._server_ip = server_ip
        self._server_udp_port = None
        self._udp_full = False
        self._reader = vp.MessageReader()

    def open_udp(self, own_ip: str) -> int:
        """Open the UDP socket the server sends reports to, on ``own_ip``; its port."""
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # room for bursts while the reader is kept from running (4.4 kB per instant of
            # 50 trackers: the default 208 kB holds 50 ms of them); the system limit applies
            with contextlib.suppress(OSError):
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECV_BUFFER)
            ask_receive_times(udp)
            udp.bind((own_ip, 0))
            udp.setblocking(False)
        except OSError:
            udp.close()
            raise
        self.udp = udp
        port: int = udp.getsockname()[1]
        return port

    def attach(self, tcp: socket.socket) -> None:
        """Read from (and send on) ``tcp`` from now on, without blocking."""
        tcp.setblocking(False)
        self.tcp = tcp

    @property
    def continues(self) -> bool:
        """Whether the newest datagram was sent full or the TCP bytes end inside a message."""
        return self._udp_full or self._reader.pending > 0

    def send_nowait(self, data: bytes) -> None:
        """Send ``data`` on TCP if the server reads; a connection that cannot send is failed."""
        tcp = self.tcp
        if tcp is None:
            return
        try:
            tcp.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass  # the server does not read: the silence timeout decides
        except OSError as exc:
            self.fail(f"cannot send to the server: {exc}")

    # ------------------------------------------------------------------ reading
    def read_once(self, timeout: float) -> list[Delivered | PoseBlock]:
        """What one wait of at most ``timeout`` s on both sockets brings, in order."""
        tcp, udp = self.tcp, self.udp
        if tcp is None:
            raise VrpnConnectionError("not connected")
        watched = [tcp] if udp is None else [tcp, udp]
        try:
            ready, _, _ = select.select(watched, [], [], max(timeout, 0.0))
        except (OSError, ValueError) as exc:
            self.fail(f"select failed: {exc}")
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
                self.fail(f"connection lost: {exc}")
            if not data:
                self.fail("the server closed the connection")
            self.received_at = time.time()  # TCP: the time of the read stands in
            taken += len(data)
            self.keepalive.heard(time.monotonic())
            try:
                messages = self._reader.feed(data)
            except vp.VrpnProtocolError as exc:
                self.names.reject("broken_framing", f"a broken message header ({exc})")
                self.fail(f"the server broke the message framing ({exc})")
            self.names.dispatch(messages, out)

    def _read_udp(self, udp: socket.socket, out: list[Delivered | PoseBlock]) -> None:
        # With pose blocks, the server's datagrams that may hold Pos_Quat records only
        # (a whole number of them) are kept in a run and decoded together at its end:
        # a server streaming 50 trackers sends four datagrams an instant, and decoding
        # each with its own array operations was most of the reading's CPU
        pos_quat = self.names.types.id(vp.POS_QUAT) if self.pose_blocks else None
        record_size = vp.POS_QUAT_RECORD.itemsize
        run: list[bytes] = []
        run_bytes = 0
        for _ in range(self.max_datagrams):
            try:
                data, ancillary, _, source = udp.recvmsg(vp.MAX_DATAGRAM, TIMESTAMP_SPACE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # an ICMP error of an earlier send; nothing lost
                LOG.debug("udp: %s", exc)
                break
            if source[0] != self._server_ip or self._server_udp_port not in (None, source[1]):
                self.stats.foreign_packets += 1
                self.names.reject(
                    "foreign_datagram", f"a datagram from {source[0]}:{source[1]}, not the server"
                )
                continue
            self.received_at = receive_time(ancillary)
            self._udp_full = len(data) > vp.UDP_PAYLOAD - vp.POS_QUAT_MESSAGE.size
            from_server = self._server_udp_port is not None
            if pos_quat is not None and from_server and data and not len(data) % record_size:
                run.append(data)
                run_bytes += len(data)
                if run_bytes >= MAX_RUN_BYTES:
                    self._take_run(run, pos_quat, out)
                    run, run_bytes = [], 0
                continue
            if run:  # the reports before this datagram come first
                self._take_run(run, pos_quat, out)
                run, run_bytes = [], 0
            self._take_datagram(data, source[1], None, out)
        if run:
            self._take_run(run, pos_quat, out)

    def _take_run(self, run: list[bytes], pos_quat: int | None, out: list[Delivered | PoseBlock]) -> None:
        """The server's datagrams of ``run``, each a whole number of Pos_Quat records in
        size: one :class:`PoseBlock` when every record is a described sender's Pos_Quat
        report, otherwise each datagram as :meth:`_take_datagram` takes it."""
        data = run[0] if len(run) == 1 else b"".join(run)
        if self._took_block(data, pos_quat, MAX_RUN_BYTES + vp.MAX_DATAGRAM, out):
            return
        for datagram in run:
            self._take_datagram(datagram, self._server_udp_port, pos_quat, out)

    def _took_block(
        self, data: bytes, pos_quat: int | None, max_bytes: int, out: list[Delivered | PoseBlock]
    ) -> bool:
        """Whether ``data`` (at most ``max_bytes``) held described senders' Pos_Quat reports
        only, ``pos_quat`` being their type: then they are in ``out`` as one PoseBlock."""
        if pos_quat is None:
            return False
        records = vp.pos_quat_records(data, pos_quat, max_bytes=max_bytes)
        if records is None:
            return False
        trackers = self.names.block_senders(records["sender"])
        if trackers is None:
            return False
        self.keepalive.heard(time.monotonic())
        out.append(PoseBlock(trackers, records))
        return True

    def _take_datagram(
        self, data: bytes, port: int | None, pos_quat: int | None, out: list[Delivered | PoseBlock]
    ) -> None:
        """One datagram from the server's address (``port``: its source port): a block of
        reports when ``pos_quat`` is given and it is one, otherwise its messages; a
        malformed one, or one before the server's first that names undescribed ids, is
        rejected and counted."""
        if self._took_block(data, pos_quat, vp.MAX_DATAGRAM, out):
            return
        try:
            messages = vp.split_datagram(data)
        except vp.VrpnProtocolError as exc:
            self.names.reject("malformed_datagram", f"a malformed datagram ({exc})")
            return
        if self._server_udp_port is None:
            # the server sends from one socket: the first datagram whose messages all
            # have described ids names it, and datagrams from elsewhere are refused
            if not self.names.described(messages):
                self.names.reject("unknown_sender", "an undescribed datagram before the server's first")
                return
            self._server_udp_port = port
        self.keepalive.heard(time.monotonic())
        # time-critical reports only: descriptions come by TCP, in order with the stream
        self.names.dispatch([m for m in messages if m.type >= 0], out)

    # ------------------------------------------------------------------ errors
    def fail(self, reason: str) -> NoReturn:
        """Give the connection up: counted, closed, and :class:`VrpnConnectionError` with ``reason``."""
        self.stats.last_error = reason
        self.stats.disconnects += 1
        self.close()
        raise VrpnConnectionError(reason)

    def close(self) -> None:
        """Close the sockets; safe to call twice."""
        tcp, udp = self.tcp, self.udp
        self.tcp = self.udp = None
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
