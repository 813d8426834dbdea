"""A NatNet streaming client in pure Python: sockets, keep-alive and reconnection; each
frame is converted to a :class:`~mocap4r2_control.frame.MocapFrame` by :mod:`.convert`.

No threads: :meth:`NatNetClient.read` multiplexes the command and data sockets with
``select`` in the caller's thread (the node's reader thread), sends keep-alives and
reconnection requests when they are due, and returns the next frame of data.

How Motive streams, and therefore what this client does:
  * multicast: frames go to ``multicast_address:data_port``; the client joins the group
    on the interface of ``local_address``. Commands (connect, model definitions) are
    unicast to ``server_address:command_port`` and answered to the sender.
  * unicast: as long as the client sends NAT_KEEPALIVE now and then, frames go either to
    the address and port its NAT_CONNECT came from (its command socket; OptiTrack's
    Python sample relies on this) or to the data port on the client's address (clients
    that bind ``local_address:data_port`` wait there), depending on the Motive version.
    This client listens on both and hands out each frame once.
  * NAT_SERVERINFO tells the bitstream version (which decides the frame layout), the
    server's clock frequency (for latency), and how it streams (data port, multicast or
    not, group address). When that disagrees with the configuration, the server wins
    and a warning names the parameter to fix, rather than receiving nothing.

What is refused, so that nobody but the server shapes what is published:
  * every packet whose source is not ``server_address`` (on every socket);
  * on the data socket anything but frames; NAT_SERVERINFO, NAT_MODELDEF and
    NAT_RESPONSE that answer no request of ours;
  * frames whose number does not advance, or jumps further ahead than the frame rate
    allows; a server that really restarted its numbering is followed after a few frames
    that advance among themselves (or at once after a silence);
  * undecodable packets.
Each kind is logged once and then counted (``ClientStats.rejected``, in /diagnostics).
"""

from __future__ import annotations

import errno
import logging
import select
import socket
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from mocap4r2_control.frame import MocapFrame

from ..common import ClientStats, ipv4_problem
from . import protocol as nn
from .convert import FrameConverter, ModelIndex
from .protocol import FrameOfData, MessageId, ModelDefinitions, NatNetProtocolError, ServerInfo, Version

CONNECTION_TYPES = ("multicast", "unicast")
UP_AXES = ("y", "z")
SKELETON_COORDINATES = ("global", "local")
_FRAME_ID = int(MessageId.FRAMEOFDATA).to_bytes(2, "little")
_RECV_BUFFER = 4 * 1024 * 1024
_MAX_DATAGRAM = 65536
_SERVER_MESSAGES_LOGGED = 20  # NAT_MESSAGESTRING lines logged; later ones are counted
_RESYNC_FRAMES = 5  # frames advancing among themselves that restart the numbering
_LATE_WINDOW = 1000  # frames behind the last one that are late repeats, not a restart
_MIN_FRAME_JUMP = 10  # frames a number may advance beyond what the rate explains
_ASSUMED_RATE = 1000.0  # Hz, for the jump bound before the rate is known
_ANSWER_WINDOW = 5.0  # s an answer may take after its request


class NatNetConnectionError(ConnectionError):
    """The client cannot reach or set up the stream; the message says what to check."""


@dataclass
class ClientConfig:
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

    def check(self) -> None:
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
        for name in ("command_port", "data_port"):
            if not 1 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be in 1..65535, got {getattr(self, name)}")


def local_address_towards(server: str, port: int) -> str:
    """The address of the interface this host would use to reach ``server``."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((server, port))  # UDP: picks a route, sends nothing
        return probe.getsockname()[0]
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
    except Exception:  # noqa: BLE001 - a hint only
        return ""


# ---------------------------------------------------------------------------- client
class NatNetClient:
    """One connection to a NatNet server (Motive or the stand-in)."""

    def __init__(self, config: ClientConfig, log: logging.Logger | None = None):
        config.check()
        self.config = config
        self.log = log or logging.getLogger("mocap4r2.natnet")
        self.converter = FrameConverter(config.up_axis, config.skeleton_coordinates)
        self.stats = ClientStats()
        self.server_info: ServerInfo | None = None
        self.version: Version | None = None
        self.models: ModelDefinitions | None = None
        self.frame_rate = 0.0
        self.multicast = config.connection_type == "multicast"
        self.multicast_address = config.multicast_address
        self.data_port = config.data_port
        self.local_address = ""
        self._server = (config.server_address, config.command_port)
        self._command: socket.socket | None = None
        self._data: socket.socket | None = None
        self._responses: list[bytes | None] = []  # the answer to the pending request (at most one)
        self._request_lock = threading.Lock()  # one request in flight from other threads
        self._request_pending = False
        self._connect_until = 0.0  # NAT_SERVERINFO is accepted until then (after a NAT_CONNECT)
        self._models_until = 0.0  # NAT_MODELDEF is accepted until then (after a request)
        self._last_number: int | None = None  # frame number of the last frame handed out
        self._last_number_time = 0.0
        self._last_timestamp = 0.0
        self._resync: list[int] = []  # frame numbers out of sequence that advance among themselves
        self.duplicates = 0  # frames received twice (unicast on both sockets)
        self._server_messages = 0
        self._answered_at = 0.0
        self._got_models = False
        self._last_frame = 0.0
        self._last_keepalive = 0.0
        self._last_connect = 0.0
        self._last_model_request = 0.0
        self._silent_reason = ""  # why no frames arrive, logged once per change
        self._reconnecting = False
        self._silence_episode = 0.0
        self._bad_frames_in_row = 0
        self._rate_reference: tuple[int, float] | None = None
        self._answered_while_silent = False
        self._models_stale = False
        self._fatal = ""
        self._error_log_time = 0.0
        self._errors_since_log = 0

    # ------------------------------------------------------------------ sockets
    def _open_sockets(self) -> None:
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
        self._command = command
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
        self._data = data

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
        self._data = data

    def _close_data_socket(self) -> None:
        if self._data is not None:
            self._data.close()
            self._data = None

    def close(self) -> None:
        if self._command is not None:
            try:
                if not self.multicast and self.server_info is not None:
                    self._send(nn.encode_empty(MessageId.DISCONNECT))
            except OSError:
                pass
            self._command.close()
            self._command = None
        self._close_data_socket()

    def _send(self, packet: bytes) -> None:
        if self._command is None:  # closed: nothing to send with (read() says so to callers)
            self.stats.last_error = "the client is closed"
            return
        try:
            self._command.sendto(packet, self._server)
        except OSError as exc:  # e.g. no route: reported as "no answer" by the caller
            self.stats.last_error = f"cannot send to {self._server[0]}:{self._server[1]}: {exc.strerror}"

    # ------------------------------------------------------------------ connecting
    def connect(self, timeout: float = 3.0) -> ModelDefinitions:
        """Open the sockets, learn the server (NAT_SERVERINFO) and its models (NAT_MODELDEF).

        Raises NatNetConnectionError with what to check when the server does not answer."""
        if self._command is None:
            self._open_sockets()
        deadline = time.monotonic() + timeout
        self.server_info = None
        self._got_models = False
        self._fatal = ""
        while self.server_info is None:
            if self._fatal:
                raise NatNetConnectionError(self._fatal)
            if time.monotonic() >= deadline:
                raise NatNetConnectionError(
                    f"no answer (NAT_SERVERINFO) from {self._server[0]}:{self._server[1]} within {timeout:g} s "
                    f"({self.stats.last_error or 'nothing received'}): is Motive running with streaming "
                    "enabled, and are server_address and command_port right?"
                )
            self._send_connect()
            self._wait(
                min(self.config.retry_period, deadline - time.monotonic()),
                lambda: self.server_info is not None or bool(self._fatal),
            )
        while not self._got_models:
            if time.monotonic() >= deadline:
                raise NatNetConnectionError(
                    f"{self.server_info.app_name} answered but sent no model definitions (NAT_MODELDEF) within "
                    f"{timeout:g} s ({self.stats.last_error or 'nothing received'})"
                )
            self._request_models(force=True)
            self._wait(min(self.config.retry_period, deadline - time.monotonic()), lambda: self._got_models)
        rate = self.request("FrameRate", timeout=min(0.5, max(deadline - time.monotonic(), 0.1)))
        if isinstance(rate, float) and 0 < rate < 100000:
            self.frame_rate = rate
        self._last_frame = time.monotonic()
        return self.models  # type: ignore[return-value]

    def _send_connect(self) -> None:
        self._last_connect = time.monotonic()
        self._connect_until = self._last_connect + _ANSWER_WINDOW
        self._send(nn.encode_connect())

    def _request_models(self, force: bool = False, period: float | None = None) -> None:
        now = time.monotonic()
        if force or now - self._last_model_request >= (period or self.config.retry_period):
            self._last_model_request = now
            self._models_until = now + _ANSWER_WINDOW
            self.stats.model_requests += 1
            self._send(nn.encode_empty(MessageId.REQUEST_MODELDEF))

    def request(self, command: str, timeout: float = 1.0) -> int | float | str | None:
        """Send a NAT_REQUEST; its NAT_RESPONSE (int, float for FrameRate, or string), or
        None without an answer in time (or when the server does not know the command)."""
        self._responses.clear()
        self._request_pending = True
        try:
            self._send(nn.encode_request(command))
            self._wait(timeout, lambda: bool(self._responses))
        finally:
            self._request_pending = False
        if not self._responses:
            return None
        payload = self._responses.pop(0)
        self._responses.clear()
        return self._decode_response(command, payload)

    @staticmethod
    def _decode_response(command: str, payload: bytes | None) -> int | float | str | None:
        if payload is None:
            return None
        if len(payload) == 4 and command.lower() == "framerate":
            return float(np.frombuffer(payload, "<f4")[0])
        if len(payload) == 4:
            return int(np.frombuffer(payload, "<i4")[0])
        return nn.decode_string(payload)

    def request_while_streaming(self, command: str, timeout: float = 2.0) -> int | float | str | None:
        """:meth:`request` from another thread while the reader thread is in :meth:`read`.

        Sending from a second thread is safe; receiving is not, so this thread only sends
        and waits: the reader thread receives the answer with the frames (it appends
        every NAT_RESPONSE to the response list) and never loses a frame to it. Used for
        Motive's recording commands, which arrive from the control plane while streaming."""
        with self._request_lock:
            self._responses.clear()
            self._request_pending = True
            try:
                self._send(nn.encode_request(command))
                deadline = time.monotonic() + timeout
                while not self._responses and time.monotonic() < deadline:
                    time.sleep(0.005)
            finally:
                self._request_pending = False
            if not self._responses:
                return None
            payload = self._responses.pop(0)
            self._responses.clear()
            return self._decode_response(command, payload)

    def _sockets(self) -> list[socket.socket]:
        return [s for s in (self._command, self._data) if s is not None]

    def _wait(self, timeout: float, done) -> None:
        """Handle packets (frames are dropped) until ``done()`` or ``timeout`` s."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            for sock in self._sockets():
                self._drain(sock, stop_on_frame=False)
            remaining = deadline - time.monotonic()
            if done() or remaining <= 0:
                return
            try:
                select.select(self._sockets(), [], [], remaining)
            except (OSError, ValueError):  # a socket closed under us
                return

    # ------------------------------------------------------------------ reading
    def read(self, timeout: float) -> FrameOfData | None:
        """The next decoded frame within ``timeout`` s, or None. Never raises for bad
        packets or a silent server: it counts, logs and reconnects instead."""
        if self._command is None:
            raise NatNetConnectionError("the client is not connected")
        deadline = time.monotonic() + max(timeout, 0.0)
        ready = self._sockets()  # first look at every socket, then only at those select() names
        while True:
            self._housekeeping(time.monotonic())
            for sock in ready:
                frame = self._drain(sock, stop_on_frame=True)
                if frame is not None:
                    return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                ready = select.select(self._sockets(), [], [], min(remaining, self.config.retry_period / 2))[
                    0
                ]
            except (OSError, ValueError):
                return None

    def read_mocap_frame(self, timeout: float) -> MocapFrame | None:
        frame = self.read(timeout)
        return None if frame is None else self.converter.convert(frame)

    def _drain(self, sock: socket.socket, stop_on_frame: bool) -> FrameOfData | None:
        for _ in range(256):  # bounded so that one call never starves the caller
            try:
                packet, source = sock.recvfrom(_MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return None
            except ConnectionRefusedError:
                self.stats.last_error = f"{self._server[0]}:{self._server[1]} refused (port unreachable)"
                continue
            except OSError as exc:
                self.stats.last_error = f"receive failed: {exc.strerror}"
                return None
            if source[0] != self._server[0]:
                self.stats.foreign_packets += 1
                self._reject(
                    "foreign_packet",
                    f"a packet from {source[0]}:{source[1]}, which is not server_address {self._server[0]}",
                )
                continue
            if sock is self._data and packet[:2] != _FRAME_ID:
                self._reject("non_frame_on_data_socket", "a packet other than a frame on the data socket")
                continue
            frame = self._handle(packet)
            if frame is not None and stop_on_frame:
                return frame
        return None

    def _handle(self, packet: bytes) -> FrameOfData | None:
        try:
            message_id, payload = nn.unpack(packet)
            if message_id == MessageId.FRAMEOFDATA:
                return self._on_frame(payload)
            now = time.monotonic()
            if message_id == MessageId.SERVERINFO:
                if now > self._connect_until:
                    self._reject("unsolicited_server_info", "a NAT_SERVERINFO without a NAT_CONNECT of ours")
                else:
                    self._on_server_info(nn.decode_server_info(payload))
            elif message_id == MessageId.MODELDEF:
                if now > self._models_until:
                    self._reject("unsolicited_models", "a NAT_MODELDEF without a request of ours")
                else:
                    self._on_models(payload)
            elif message_id in (MessageId.RESPONSE, MessageId.UNRECOGNIZED_REQUEST):
                if not self._request_pending or self._responses:
                    self._reject("unsolicited_response", "a NAT_RESPONSE to no pending request")
                else:
                    self._responses.append(payload if message_id == MessageId.RESPONSE else None)
            elif message_id == MessageId.MESSAGESTRING:
                self._server_messages += 1
                if self._server_messages <= _SERVER_MESSAGES_LOGGED:
                    self.log.info(
                        f"server message: {nn.decode_string(payload)[:200]}"
                        + (
                            " (further ones are counted)"
                            if self._server_messages == _SERVER_MESSAGES_LOGGED
                            else ""
                        )
                    )
                else:
                    self.stats.events["server_messages"] = self._server_messages
        except NatNetProtocolError as exc:
            self._decode_error(exc)
        return None

    def _reject(self, kind: str, what: str) -> None:
        """Bad input of one kind: logged the first time, then only counted."""
        seen = self.stats.rejected.get(kind, 0)
        self.stats.rejected[kind] = seen + 1
        if seen == 0:
            self.log.warning(f"ignored {what}; further ones are counted (diagnostics: rejected_{kind})")

    def _decode_error(self, exc: Exception) -> None:
        self.stats.decode_errors += 1
        self.stats.last_error = f"undecodable packet: {exc}"
        now = time.monotonic()
        if self.stats.decode_errors == 1:
            self.log.error(
                f"dropped an undecodable NatNet packet ({exc}); further ones are counted "
                "(diagnostics: decode_errors) and summarised every 30 s"
            )
            self._error_log_time = now
        else:
            self._errors_since_log += 1
            if now - self._error_log_time >= 30.0:
                self.log.warning(
                    f"{self._errors_since_log} more undecodable NatNet packets in the last "
                    f"{now - self._error_log_time:.0f} s; last: {exc}"
                )
                self._error_log_time = now
                self._errors_since_log = 0

    def _on_server_info(self, info: ServerInfo) -> None:
        previous = self.server_info
        version = info.bitstream
        if not version.supported:
            fatal = (
                f"{info.app_name} streams NatNet {version}; supported: "
                f"{', '.join(str(v) for v in nn.SUPPORTED_VERSIONS)} (set the bitstream version in Motive's "
                "streaming settings)"
            )
            if fatal != self._fatal:
                self.log.error(fatal)
            self._fatal = self.stats.last_error = fatal
            return
        self.server_info = info
        self.converter.clock_frequency = info.clock_frequency
        if info != previous:
            self.log.info(
                f"connected to {info.app_name} {'.'.join(map(str, info.app_version))} at "
                f"{self._server[0]}:{self._server[1]}, NatNet {version}, "
                f"{'multicast ' + str(info.multicast_address) if info.multicast else 'unicast'}"
                f", data port {info.data_port}"
            )
        if self.version is not None and self.version != version:
            self.log.warning(f"the server now streams NatNet {version} (was {self.version})")
            self._got_models = False  # the layout changed: read the models again
        self.version = version
        self._follow_server_mode(info)
        if self._reconnecting and not self._answered_while_silent:
            # the first answer after a silence: a restarted server may have other models
            self._answered_while_silent = True
            self._answered_at = time.monotonic()
            self._request_models(force=True)

    def _follow_server_mode(self, info: ServerInfo) -> None:
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

    def _on_models(self, payload: bytes) -> None:
        if self.version is None:
            return  # cannot decode before NAT_SERVERINFO tells the layout; asked again later
        models = nn.decode_model_definitions(payload, self.version)
        self.models = models
        self.stats.model_updates += 1
        self.converter.set_models(ModelIndex.build(models, self.stats.model_updates))
        self._got_models = True
        self._models_stale = False
        names = ", ".join(b.name for b in models.rigid_bodies[:8])
        more = ", ..." if len(models.rigid_bodies) > 8 else ""
        self.log.info(
            f"model definitions: {len(models.rigid_bodies)} rigid bodies"
            f"{' (' + names + more + ')' if names else ''}, {len(models.skeletons)} skeletons, "
            f"{len(models.marker_sets)} marker sets"
            f"{', ' + str(len(models.assets)) + ' assets' if models.assets else ''}"
        )

    def _on_frame(self, payload: bytes) -> FrameOfData | None:
        if self.version is None:
            return None  # layout unknown until NAT_SERVERINFO (multicast data can come first)
        try:
            frame = nn.decode_frame(payload, self.version)
        except NatNetProtocolError:
            # several undecodable frames in a row: the bitstream version may have changed
            # (another client can switch it in Motive), so ask the server which it is
            self._bad_frames_in_row += 1
            if (
                self._bad_frames_in_row >= 3
                and time.monotonic() - self._last_connect >= self.config.retry_period
            ):
                self._send_connect()
            raise
        self._bad_frames_in_row = 0
        now = time.monotonic()
        if not self._in_sequence(frame, now):
            return None
        if self.frame_rate <= 0:
            self._estimate_rate(frame)
        self.stats.frames += 1
        self._last_frame = now
        if self._silent_reason:
            self.log.info(f"frames arriving again (frame {frame.frame_number})")
            self._silent_reason = ""
        if self._reconnecting:
            self._reconnecting = False
            if not self._answered_while_silent:  # multicast frames from a restarted server
                self._request_models(force=True)
        if frame.tracked_models_changed and not self._models_stale:
            # asked until a NAT_MODELDEF arrives: the flag is on one frame only, an answer may be lost
            self.log.info("the server says its models changed: requesting model definitions")
            self._models_stale = True
            self._request_models(force=True)
        elif self._models_stale or not self._got_models:
            self._request_models()
        elif self.converter.unknown_ids:
            self._request_models(period=5.0)  # ids without a description: ask now and then
        return frame

    def _in_sequence(self, frame: FrameOfData, now: float) -> bool:
        """Whether a decoded frame is the server's next one: its number advances, by no
        more than the frame rate explains. A repeat (the same frame on both unicast
        sockets) is dropped quietly; anything else out of sequence is rejected, unless
        several such frames far behind or ahead advance among themselves (a server that
        restarted its numbering without a silence long enough to reconnect; within the
        first frames of a stream, the silence that follows the reconnection does it)."""
        number = frame.frame_number
        last = self._last_number
        if last is None:
            # the first frames of a connection: nothing to compare with, so a decodable
            # garbage frame could come first; take the numbering from frames that agree
            chain = self._resync
            if chain and chain[-1] < number <= chain[-1] + _MIN_FRAME_JUMP:
                chain.append(number)
            elif not chain or number != chain[-1]:
                self._resync = chain = [number]
            if len(chain) < _RESYNC_FRAMES:
                return False
        else:
            rate = self.frame_rate if self.frame_rate > 0 else _ASSUMED_RATE
            ahead = _MIN_FRAME_JUMP + 2.0 * rate * (now - self._last_number_time)
            if last - _LATE_WINDOW <= number <= last:
                # a repeat, or late: the same frame through the other unicast socket
                # (the two sockets are read in turns), or a reordered datagram
                self.duplicates += 1
                return False
            if number > last + ahead and self._server_time_agrees(frame, number - last):
                ahead = number - last  # the server skipped frames: its clock says so too
            if not last < number <= last + ahead:
                chain = self._resync
                if chain and number == chain[-1]:
                    self.duplicates += 1
                    return False
                if chain and chain[-1] < number <= chain[-1] + _MIN_FRAME_JUMP:
                    chain.append(number)
                else:
                    self._resync = chain = [number]
                if len(chain) < _RESYNC_FRAMES:
                    self._reject(
                        "frame_out_of_sequence",
                        f"frame {number} out of sequence (last {last}): garbage or a replay",
                    )
                    return False
                self._reject(
                    "numbering_restart",
                    f"the server's frame numbers jumping (frame {number}, was "
                    f"{last}; following after {_RESYNC_FRAMES} frames that agree)",
                )
        self._resync = []
        self._last_number = number
        self._last_number_time = now
        self._last_timestamp = frame.timestamp
        return True

    def _server_time_agrees(self, frame: FrameOfData, advance: int) -> bool:
        """A jump ahead that the server's own frame timestamps confirm (a server that
        skipped frames to catch up, or frames lost on the way): its timestamp advanced
        by the same number of periods."""
        rate = self.frame_rate
        if rate <= 0 or advance > 60 * rate:
            return False
        expected = advance / rate
        return abs((frame.timestamp - self._last_timestamp) - expected) <= 0.25 / rate + 1e-3 * expected

    def _estimate_rate(self, frame: FrameOfData) -> None:
        """Without an answer to "FrameRate" (older servers), the rate from Motive's frame
        timestamps, which advance by exactly one period per frame."""
        first = self._rate_reference
        if first is None or frame.frame_number <= first[0] or frame.timestamp <= first[1]:
            self._rate_reference = (frame.frame_number, frame.timestamp)
        elif frame.frame_number - first[0] >= 10:
            self.frame_rate = (frame.frame_number - first[0]) / (frame.timestamp - first[1])

    def _housekeeping(self, now: float) -> None:
        cfg = self.config
        if not self.multicast and now - self._last_keepalive >= cfg.keepalive_period:
            self._last_keepalive = now
            self._send(nn.encode_empty(MessageId.KEEPALIVE))
        silent = now - self._last_frame
        if silent < cfg.reconnect_after:
            return
        # no frames: ask the server again until frames come back, and say why once
        if not self._reconnecting:
            self._reconnecting = True
            self._answered_while_silent = False
            self._silence_episode = now
            self._last_number = None  # a restarted server numbers its frames anew
            self.stats.reconnects += 1
        if now - self._last_connect >= cfg.retry_period:
            self._send_connect()
        if not self._answered_while_silent and now - self._silence_episode < 2 * cfg.retry_period:
            return  # give the server a chance to answer before concluding anything
        if self._answered_while_silent and now - self._answered_at < max(
            2 * cfg.retry_period, cfg.reconnect_after
        ):
            return  # it just answered: its frames follow within a few periods
        if not self._answered_while_silent:
            kind, reason = (
                "silent",
                (
                    f"no frames for {silent:.1f} s and no answer from {cfg.server_address}:{cfg.command_port}: "
                    "the server is not running or not streaming, or server_address/command_port are wrong; "
                    "reconnecting"
                ),
            )
        elif self.multicast:
            kind, reason = (
                "no-multicast",
                (
                    f"the server answers but no frames reach multicast {self.multicast_address}:{self.data_port} on "
                    f"interface {self.local_address}: check local_address (the interface facing Motive), Motive's "
                    "streaming interface, multicast routing or a firewall"
                ),
            )
        else:
            kind, reason = (
                "no-unicast",
                (
                    "the server answers but sends no unicast frames: check that streaming is enabled in Motive "
                    "and that no firewall blocks UDP from the server"
                ),
            )
        if kind != self._silent_reason:
            self.log.warning(reason)
            self._silent_reason = kind
        self.stats.last_error = reason


def _set_recv_buffer(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECV_BUFFER)
    except OSError:  # the system limit applies; bursts may then drop sooner
        pass
