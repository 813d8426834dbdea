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

The parts, each on its own: :mod:`.transport` (sockets and addresses), :mod:`.sequencer`
(frame order, server clock, rate; pure), :mod:`.dialog` (requests and model
definitions), :mod:`.housekeeping` (keep-alive, reconnection, log throttling); this
module wires them to the packets.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections.abc import Callable

from mocap4r2_control.frame import MocapFrame

from ..common import ClientStats, reject_input
from . import protocol as nn
from .convert import FrameConverter, ModelIndex
from .dialog import Response, ServerDialog
from .housekeeping import Housekeeping
from .protocol import FrameOfData, MessageId, ModelDefinitions, NatNetProtocolError, ServerInfo, Version
from .sequencer import FrameSequencer
from .transport import (
    CONNECTION_TYPES,
    PACKETS_PER_DRAIN,
    SKELETON_COORDINATES,
    UP_AXES,
    ClientConfig,
    NatNetConnectionError,
    NatNetTransport,
    local_address_towards,
)

__all__ = [
    "CONNECTION_TYPES",
    "SKELETON_COORDINATES",
    "UP_AXES",
    "ClientConfig",
    "NatNetClient",
    "NatNetConnectionError",
    "local_address_towards",
]

BAD_FRAMES_BEFORE_RECONNECT = 3  # undecodable frames in a row that make us ask for the version


class NatNetClient:
    """One connection to a NatNet server (Motive or the stand-in)."""

    def __init__(
        self, config: ClientConfig, log: logging.Logger | None = None, converter: FrameConverter | None = None
    ):
        config.check()
        self.config = config
        self.log = log or logging.getLogger("mocap4r2.natnet")
        # the adapter's converter: this client keeps its models and clock up to date
        self.converter = converter or FrameConverter(config.up_axis, config.skeleton_coordinates)
        self.stats = ClientStats()
        self.transport = NatNetTransport(config, self.stats, self.log)
        self.sequencer = FrameSequencer()
        self.dialog = ServerDialog(self.transport, self.stats, self.log, config.retry_period)
        self.housekeeping = Housekeeping(
            config,
            stats=self.stats,
            log=self.log,
            transport=self.transport,
            dialog=self.dialog,
            sequencer=self.sequencer,
        )
        self._bad_frames_in_row = 0

    # ------------------------------------------------------------------ what it learned
    @property
    def server_info(self) -> ServerInfo | None:
        return self.dialog.server_info

    @property
    def version(self) -> Version | None:
        return self.dialog.version

    @property
    def models(self) -> ModelDefinitions | None:
        return self.dialog.models

    @property
    def frame_rate(self) -> float:
        """The server's frame rate (Hz): its answer to "FrameRate", else estimated from the
        frames' timestamps; 0 while unknown (set 0 to estimate it again)."""
        return self.sequencer.rate

    @frame_rate.setter
    def frame_rate(self, rate: float) -> None:
        self.sequencer.rate = rate

    @property
    def duplicates(self) -> int:
        return self.sequencer.duplicates

    @property
    def multicast(self) -> bool:
        return self.transport.multicast

    @property
    def multicast_address(self) -> str:
        return self.transport.multicast_address

    @property
    def data_port(self) -> int:
        return self.transport.data_port

    @property
    def local_address(self) -> str:
        return self.transport.local_address

    # ------------------------------------------------------------------ connecting
    def connect(self, timeout: float = 3.0) -> ModelDefinitions:
        """Open the sockets, learn the server (NAT_SERVERINFO) and its models (NAT_MODELDEF).

        Raises NatNetConnectionError with what to check when the server does not answer."""
        dialog = self.dialog
        if self.transport.command is None:
            self.transport.open()
        deadline = time.monotonic() + timeout
        dialog.server_info = None
        dialog.got_models = False
        dialog.fatal = ""
        while dialog.server_info is None:
            if dialog.fatal:
                raise NatNetConnectionError(dialog.fatal)
            if time.monotonic() >= deadline:
                server = self.transport.server
                raise NatNetConnectionError(
                    f"no answer (NAT_SERVERINFO) from {server[0]}:{server[1]} within {timeout:g} s "
                    f"({self.stats.last_error or 'nothing received'}): is Motive running with streaming "
                    "enabled, and are server_address and command_port right?"
                )
            dialog.send_connect()
            self._wait(
                min(self.config.retry_period, deadline - time.monotonic()),
                lambda: dialog.server_info is not None or bool(dialog.fatal),
            )
        if dialog.asking_bitstream:  # the layout of what follows depends on its answer
            self._wait(max(min(1.0, deadline - time.monotonic()), 0.0), lambda: not dialog.asking_bitstream)
        if self.transport.multicast and self.config.requested_bitstream is not None:
            self.log.warning(
                f"bitstream_version {self.config.bitstream_version} is not asked for over multicast: Motive "
                f"streams its own bitstream to the group (NatNet {dialog.version} now); only unicast clients "
                "can ask for another"
            )
        while not dialog.got_models:
            if time.monotonic() >= deadline:
                raise NatNetConnectionError(
                    f"{dialog.server_info.app_name} answered but sent no model definitions (NAT_MODELDEF) "
                    f"within {timeout:g} s ({self.stats.last_error or 'nothing received'})"
                )
            dialog.request_models(force=True)
            self._wait(min(self.config.retry_period, deadline - time.monotonic()), lambda: dialog.got_models)
        rate = self.request("FrameRate", timeout=min(0.5, max(deadline - time.monotonic(), 0.1)))
        if isinstance(rate, float) and 0 < rate < 100000:
            self.sequencer.rate = rate
        self.housekeeping.last_frame = time.monotonic()
        assert dialog.models is not None  # got_models
        return dialog.models

    def close(self) -> None:
        """Say goodbye to a unicast server and close the sockets; idempotent."""
        if (
            self.transport.command is not None
            and not self.transport.multicast
            and self.server_info is not None
        ):
            self.transport.send(nn.encode_empty(MessageId.DISCONNECT))
        self.transport.close()

    def request(self, command: str, timeout: float = 1.0) -> Response:
        """Send a NAT_REQUEST; its NAT_RESPONSE (int, float for FrameRate, or string), or
        None without an answer in time (or when the server does not know the command)."""
        return self.dialog.request(command, timeout, self._wait)

    def request_while_streaming(self, command: str, timeout: float = 2.0) -> Response:
        """:meth:`request` from another thread while the reader thread is in :meth:`read`
        (Motive's recording commands, which arrive from the control plane while streaming)."""
        return self.dialog.request_while_streaming(command, timeout)

    def _wait(self, timeout: float, done: Callable[[], bool]) -> None:
        """Handle packets (frames are dropped) until ``done()`` or ``timeout`` s."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            for sock in self.transport.sockets():
                self._drain(sock, stop_on_frame=False)
            remaining = deadline - time.monotonic()
            if done() or remaining <= 0:
                return
            try:
                select.select(self.transport.sockets(), [], [], remaining)
            except (OSError, ValueError):  # a socket closed under us
                return

    # ------------------------------------------------------------------ reading
    def read(self, timeout: float) -> FrameOfData | None:
        """The next decoded frame within ``timeout`` s, or None. Never raises for bad
        packets or a silent server: it counts, logs and reconnects instead."""
        transport = self.transport
        if transport.command is None:
            raise NatNetConnectionError("the client is not connected")
        deadline = time.monotonic() + max(timeout, 0.0)
        ready = transport.sockets()  # first look at every socket, then only at those select() names
        while True:
            # what waits in the sockets first, then the housekeeping: a reader that comes
            # back late (a loaded machine) finds the frames the server sent meanwhile, and
            # must not take the time it was away for a silent server (reconnecting, and
            # holding the waiting frames back to take up their numbering anew)
            for sock in ready:
                frame = self._drain(sock, stop_on_frame=True)
                if frame is not None:
                    self.housekeeping.tick(time.monotonic())  # keep-alives while frames flow
                    return frame
            self.housekeeping.tick(time.monotonic())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                ready = select.select(
                    transport.sockets(), [], [], min(remaining, self.config.retry_period / 2)
                )[0]
            except (OSError, ValueError):
                return None

    def read_mocap_frame(self, timeout: float) -> MocapFrame | None:
        """:meth:`read`, converted."""
        frame = self.read(timeout)
        return None if frame is None else self.converter.convert(frame)

    def _drain(self, sock: socket.socket, stop_on_frame: bool) -> FrameOfData | None:
        receive = self.transport.receive
        for _ in range(PACKETS_PER_DRAIN):  # bounded so that one call never starves the caller
            packet = receive(sock)
            if packet is None:
                return None
            frame = self._handle(packet)
            if frame is not None and stop_on_frame:
                return frame
        return None

    def _handle(self, packet: bytes) -> FrameOfData | None:
        """One packet from the server: a frame to hand out, or None."""
        try:
            message_id, payload = nn.unpack(packet)
            if message_id == MessageId.FRAMEOFDATA:
                return self._on_frame(payload)
            if message_id == MessageId.MESSAGESTRING:
                self.housekeeping.server_message(payload)
            elif message_id in _UNSOLICITED:
                self._on_answer(message_id, payload)
        except NatNetProtocolError as exc:
            kind = (
                _KINDS.get(int.from_bytes(packet[:2], "little"), "packet") if len(packet) >= 4 else "packet"
            )
            self.housekeeping.decode_error(exc, kind)
        return None

    def _on_answer(self, message_id: int, payload: bytes) -> None:
        dialog = self.dialog
        if not dialog.awaits(message_id, time.monotonic()):
            kind, what = _UNSOLICITED[message_id]
            reject_input(self.stats, self.log, kind, what)
        elif message_id == MessageId.SERVERINFO:
            info = nn.decode_server_info(payload)
            if dialog.take_server_info(info):
                self.converter.clock_frequency = info.clock_frequency
                self.transport.follow_server(info)
                if self.housekeeping.first_answer_while_silent(time.monotonic()):
                    dialog.request_models(force=True)
        elif message_id == MessageId.MODELDEF:
            models = dialog.take_models(payload)
            if models is not None:
                self.converter.set_models(ModelIndex.build(models, self.stats.model_updates))
        else:  # the server's answer, or that it does not know the command
            dialog.take_answer(payload if message_id == MessageId.RESPONSE else None)

    def _on_frame(self, payload: bytes) -> FrameOfData | None:
        dialog = self.dialog
        if dialog.version is None:
            return None  # layout unknown until NAT_SERVERINFO (multicast data can come first)
        try:
            frame = nn.decode_frame(payload, dialog.version)
        except NatNetProtocolError:
            # several undecodable frames in a row: the bitstream version may have changed
            # (another client can switch it in Motive), so ask the server which it is
            self._bad_frames_in_row += 1
            if (
                self._bad_frames_in_row >= BAD_FRAMES_BEFORE_RECONNECT
                and time.monotonic() - dialog.last_connect >= self.config.retry_period
            ):
                dialog.send_connect()
            raise
        self._bad_frames_in_row = 0
        if frame.skipped:
            self.housekeeping.skipped(frame.skipped, "frames")
        now = time.monotonic()
        placement = self.sequencer.place(frame.frame_number, frame.timestamp, now)
        if placement.rejected is not None:
            reject_input(self.stats, self.log, *placement.rejected)
        if not placement.accepted:
            if self.sequencer.last_number is None:
                self.housekeeping.frame_held(now)  # the server streams; its numbering is being taken up
            return None
        if self.housekeeping.frame_arrived(frame.frame_number, now):
            dialog.request_models(force=True)
        if frame.params & nn.FRAME_BITSTREAM_CHANGED and time.monotonic() - dialog.last_connect >= 0.05:
            # Motive's bit: another bitstream from the next frames on (4.1 to 4.4 frames look
            # alike, their models do not): ask which, and read the models again
            self.log.info("the server says its bitstream changed: asking it which, and for its models")
            dialog.send_connect()
            dialog.models_stale = True
            dialog.request_models(force=True)
        elif frame.tracked_models_changed and not dialog.models_stale:
            # asked until a NAT_MODELDEF arrives: the flag is on one frame only, an answer may be lost
            self.log.info("the server says its models changed: requesting model definitions")
            dialog.models_stale = True
            dialog.request_models(force=True)
        elif dialog.models_stale or not dialog.got_models:
            dialog.request_models()
        elif self.converter.unknown_ids:
            dialog.request_models(period=5.0)  # ids without a description: ask now and then
        return frame


#: undecodable packets are counted by what they were (rejected_undecodable_<kind>)
_KINDS: dict[int, str] = {
    MessageId.FRAMEOFDATA: "frame",
    MessageId.MODELDEF: "model_definitions",
    MessageId.SERVERINFO: "server_info",
    MessageId.RESPONSE: "response",
}

_UNSOLICITED: dict[int, tuple[str, str]] = {
    MessageId.SERVERINFO: ("unsolicited_server_info", "a NAT_SERVERINFO without a NAT_CONNECT of ours"),
    MessageId.MODELDEF: ("unsolicited_models", "a NAT_MODELDEF without a request of ours"),
    MessageId.RESPONSE: ("unsolicited_response", "a NAT_RESPONSE to no pending request"),
    MessageId.UNRECOGNIZED_REQUEST: ("unsolicited_response", "a NAT_RESPONSE to no pending request"),
}
