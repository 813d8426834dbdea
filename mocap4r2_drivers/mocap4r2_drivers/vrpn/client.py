"""A VRPN client connection: connect (by UDP request or tcp:// directly), learn the
server's senders and types, and hand over the messages as they arrive.

No thread of its own: :meth:`VrpnClient.read` waits on the sockets (select) for at most
its timeout and returns every message that is there, so the caller's reader thread
turns data into frames the moment it arrives; nothing is polled on a timer.

Both sides of a VRPN connection describe their own ids (:mod:`.protocol`): the client
keeps the server's sender and type tables and describes to the server the ping and
pong types and the trackers it pings. Ping goes out every ``ping_period`` s on TCP; a
server that sends nothing at all (no report, no pong) for ``silence_timeout`` s is
taken as gone. Every byte count a read takes is bounded (``max_read_bytes`` of TCP,
``max_datagrams`` per call) so a flooding server cannot keep a call from returning;
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
from typing import NamedTuple, NoReturn

from ..common import ClientStats, reject_input
from . import protocol as vp

LOG = logging.getLogger("mocap4r2.vrpn")

REQUEST_RETRY = 0.5  # s between connection requests while waiting for the call back
SETTLE = 0.2  # s without a new description after which connect() returns


class VrpnConnectionError(ConnectionError):
    """The server cannot be reached, is not VRPN 07, or broke the connection."""


class Delivered(NamedTuple):
    """A user message with the server's ids translated to names."""

    sender: str
    type: str
    message: vp.Message


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
    ) -> None:
        self.host = host
        self.port = port
        self.tcp_only = tcp_only
        self.timeout = timeout
        self.ping_period = ping_period
        self.silence_timeout = silence_timeout
        self.max_read_bytes = max_read_bytes
        self.max_datagrams = max_datagrams
        self.stats = ClientStats()
        self.server_version = ""
        self.senders = vp.NameTable("sender")
        self.types = vp.NameTable("type")
        self.senders_changed = False  # set when the server describes a sender; the caller clears it
        self._tcp: socket.socket | None = None
        self._udp: socket.socket | None = None
        self._server_ip = ""
        # the server's UDP source port, learned from its first datagram of described reports
        self._server_udp_port: int | None = None
        self._reader = vp.MessageReader()
        self._last_receive = 0.0
        self._last_ping = 0.0
        self._pinged_sender: str | None = None  # the device our pings name (described as sender 0)
        self._early: list[Delivered] = []  # reports read while connect() read the descriptions

    # ------------------------------------------------------------------ state
    @property
    def connected(self) -> bool:
        return self._tcp is not None

    def trackers(self) -> list[str]:
        """The senders the server announced, in the order of their ids, but VRPN Control."""
        return [name for name in self.senders.names() if name != vp.CONTROL_SENDER]

    # ------------------------------------------------------------------ connecting
    def connect(self) -> list[str]:
        """Connect, exchange cookies, describe ourselves and read the server's
        descriptions; the announced trackers. VrpnConnectionError with the reason."""
        self.close()
        where = f"{'tcp://' if self.tcp_only else ''}{self.host}:{self.port}"
        deadline = time.monotonic() + self.timeout
        try:
            tcp = self._open_direct(deadline) if self.tcp_only else self._open_by_request(deadline)
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

    def _open_direct(self, deadline: float) -> socket.socket:
        tcp = socket.create_connection((self.host, self.port), timeout=max(deadline - time.monotonic(), 0.01))
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return tcp

    def _open_by_request(self, deadline: float) -> socket.socket:
        """The default way: listen on a TCP port, ask the server by UDP to call it back."""
        lob = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            lob.connect((self.host, self.port))  # also picks our address towards the server
            own_ip = lob.getsockname()[0]
            listener.bind((own_ip, 0))
            listener.listen(1)
            request = vp.connect_request(own_ip, listener.getsockname()[1])
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no call back within {self.timeout:g} s (is a VRPN server running?)")
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

    def _handshake(self, tcp: socket.socket, deadline: float) -> None:
        tcp.settimeout(max(deadline - time.monotonic(), 0.01))
        tcp.sendall(vp.cookie())
        answer = b""
        while len(answer) < vp.COOKIE_SIZE:
            chunk = tcp.recv(vp.COOKIE_SIZE - len(answer))
            if not chunk:
                raise vp.VrpnProtocolError("closed the connection before sending its cookie")
            answer += chunk
        self.server_version = vp.check_cookie(answer)
        self._server_ip = tcp.getpeername()[0]
        self._server_udp_port = None
        self.senders.clear()
        self.types.clear()
        self._reader = vp.MessageReader()
        self._pinged_sender = None
        now = time.time()
        out = [
            vp.pack_message(0, vp.TYPE_DESCRIPTION, vp.pack_description(vp.PING), int(now), 0),
            vp.pack_message(1, vp.TYPE_DESCRIPTION, vp.pack_description(vp.PONG), int(now), 0),
        ]
        if not self.tcp_only:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            own_ip = tcp.getsockname()[0]
            udp.bind((own_ip, 0))
            udp.setblocking(False)
            self._udp = udp
            port, payload = vp.pack_udp_description(own_ip, udp.getsockname()[1])
            out.append(vp.pack_message(port, vp.UDP_DESCRIPTION, payload, int(now), 0))
        tcp.sendall(b"".join(out))
        tcp.setblocking(False)
        self._tcp = tcp
        self._last_receive = self._last_ping = time.monotonic()
        # the server describes its senders and types right after its cookie: read them
        pending: list[Delivered] = []
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
    def read(self, timeout: float) -> list[Delivered]:
        """The user messages that arrived, waiting at most ``timeout`` s for the first;
        VrpnConnectionError when the connection is lost or broken."""
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
            dropped += len(got)
        self._last_receive = self._last_ping = time.monotonic()
        return dropped

    def _check_silence(self) -> None:
        silent = time.monotonic() - self._last_receive
        if self.silence_timeout > 0 and silent > self.silence_timeout:
            self._fail(f"nothing from the server for {silent:.1f} s (no report, no pong)")

    def _ping_if_due(self) -> None:
        now = time.monotonic()
        if self.ping_period > 0 and now - self._last_ping >= self.ping_period:
            self._last_ping = now
            self._ping()

    def _ping(self) -> None:
        tcp = self._tcp
        trackers = self.trackers()
        if tcp is None or not trackers:
            return
        stamp = time.time()
        out = b""
        if self._pinged_sender != trackers[0]:
            # our sender 0 is the device we ping: the server answers from the same device
            self._pinged_sender = trackers[0]
            description = vp.pack_description(trackers[0])
            out += vp.pack_message(0, vp.SENDER_DESCRIPTION, description, int(stamp), 0)
        out += vp.pack_message(0, 0, b"", int(stamp), int(stamp % 1 * 1e6))
        try:
            tcp.send(out, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass  # the server does not read: the silence timeout decides
        except OSError as exc:
            self._fail(f"cannot send to the server: {exc}")

    def _read_once(self, timeout: float) -> list[Delivered]:
        tcp, udp = self._tcp, self._udp
        if tcp is None:
            raise VrpnConnectionError("not connected")
        watched = [tcp] if udp is None else [tcp, udp]
        try:
            ready, _, _ = select.select(watched, [], [], max(timeout, 0.0))
        except (OSError, ValueError) as exc:
            self._fail(f"select failed: {exc}")
        out: list[Delivered] = []
        if tcp in ready:
            self._read_tcp(tcp, out)
        if udp is not None and (udp in ready or out):
            self._read_udp(udp, out)
        return out

    def _read_tcp(self, tcp: socket.socket, out: list[Delivered]) -> None:
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
            self._last_receive = time.monotonic()
            try:
                messages = self._reader.feed(data)
            except vp.VrpnProtocolError as exc:
                self._reject("broken_framing", f"a broken message header ({exc})")
                self._fail(f"the server broke the message framing ({exc})")
            self._dispatch(messages, out)

    def _read_udp(self, udp: socket.socket, out: list[Delivered]) -> None:
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
                self._reject("foreign_datagram", f"a datagram from {source[0]}:{source[1]}, not the server")
                continue
            try:
                messages = vp.split_datagram(data)
            except vp.VrpnProtocolError as exc:
                self._reject("malformed_datagram", f"a malformed datagram ({exc})")
                continue
            if self._server_udp_port is None:
                # the server sends from one socket: the first datagram whose messages all
                # have described ids names it, and datagrams from elsewhere are refused
                if not messages or not all(
                    self.types.name(m.type) is not None and self.senders.name(m.sender) is not None
                    for m in messages
                ):
                    self._reject("unknown_sender", "an undescribed datagram before the server's first")
                    continue
                self._server_udp_port = source[1]
            self._last_receive = time.monotonic()
            # time-critical reports only: descriptions come by TCP, in order with the stream
            self._dispatch([m for m in messages if m.type >= 0], out)

    def _dispatch(self, messages: list[vp.Message], out: list[Delivered]) -> None:
        for m in messages:
            if m.type >= 0:
                type_name = self.types.name(m.type)
                sender_name = self.senders.name(m.sender)
                if type_name is None:
                    self._reject("unknown_type", f"a message of undescribed type {m.type}")
                elif sender_name is None:
                    self._reject("unknown_sender", f"a message from undescribed sender {m.sender}")
                else:
                    out.append(Delivered(sender_name, type_name, m))
                continue
            try:
                self._system(m)
            except vp.VrpnProtocolError as exc:
                self._reject("bad_description", f"a bad system message ({exc})")

    def _system(self, m: vp.Message) -> None:
        if m.type == vp.SENDER_DESCRIPTION:
            if self.senders.describe(m.sender, vp.parse_description(m.payload)):
                self.senders_changed = True
        elif m.type == vp.TYPE_DESCRIPTION:
            self.types.describe(m.sender, vp.parse_description(m.payload))
        elif m.type == vp.UDP_DESCRIPTION:
            vp.parse_udp_description(m.sender, m.payload)  # checked; we send nothing time-critical
        elif m.type in vp.SYSTEM_TYPES:
            pass  # log description, disconnect marker: nothing for a client
        else:
            self._reject("unknown_system_type", f"a system message of unknown type {m.type}")

    # ------------------------------------------------------------------ errors
    def _reject(self, kind: str, what: str) -> None:
        """Bad input dropped: counted by kind, logged the first time of each kind."""
        self.stats.decode_errors += 1
        reject_input(self.stats, LOG, kind, what)

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
