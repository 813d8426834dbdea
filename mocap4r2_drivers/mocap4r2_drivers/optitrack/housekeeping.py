"""What a NatNet client does between frames: keep-alives to a unicast server, reconnection
when frames stop (asking the server again, and saying once why no frames arrive), and
keeping its log readable under bad input (an undecodable packet is logged once, then
summarised every LOG_SUMMARY_PERIOD s; server messages are logged up to
SERVER_MESSAGES_LOGGED, then counted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..common import ClientStats
from . import protocol as nn
from .dialog import ServerDialog
from .protocol import MessageId
from .sequencer import FrameSequencer
from .transport import ClientConfig, NatNetTransport

SERVER_MESSAGES_LOGGED = 20  # NAT_MESSAGESTRING lines logged; later ones are counted
SKIPPED_KINDS_KEPT = 32  # kinds of skipped parts counted by name; more are counted as "other"
LOG_SUMMARY_PERIOD = 30.0  # s between two summaries of undecodable packets


@dataclass
class SkippedCount:
    """How often a part of the stream was read past by its size, and its last size."""

    times: int = 0
    last_size: int = 0
    known: bool = True


class Housekeeping:
    """Keep-alive, reconnection and log throttling of one client."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        stats: ClientStats,
        log: logging.Logger,
        transport: NatNetTransport,
        dialog: ServerDialog,
        sequencer: FrameSequencer,
    ):
        self.config = config
        self.stats = stats
        self.log = log
        self.transport = transport
        self.dialog = dialog
        self.sequencer = sequencer
        self.last_frame = 0.0  # when the last frame was handed out (monotonic)
        self.reconnecting = False
        self._last_keepalive = 0.0
        self._silent_reason = ""  # why no frames arrive, logged once per change
        self._silence_episode = 0.0
        self._answered_while_silent = False
        self._answered_at = 0.0
        self._held_at = -1e9  # when a frame last arrived that the sequencer holds back (monotonic)
        self._server_messages = 0
        self._error_log_time = 0.0
        self._errors_since_log = 0
        # parts read past by their size (4.5 IMU/GPIO sections, anchor markers, a newer
        # Motive's sections and descriptions), by name: /diagnostics skipped_<name>
        self.skipped_parts: dict[str, SkippedCount] = {}
        dialog.on_skipped = self.skipped

    # ------------------------------------------------------------------ keep-alive, reconnection
    def tick(self, now: float) -> None:
        """Send what is due: a keep-alive (unicast), NAT_CONNECT while no frames come."""
        cfg = self.config
        transport = self.transport
        if not transport.multicast and now - self._last_keepalive >= cfg.keepalive_period:
            self._last_keepalive = now
            transport.send(nn.encode_empty(MessageId.KEEPALIVE))
        silent = now - self.last_frame
        if silent < cfg.reconnect_after:
            return
        # no frames: ask the server again until frames come back, and say why once
        if not self.reconnecting:
            self.reconnecting = True
            self._answered_while_silent = False
            self._silence_episode = now
            self.sequencer.restart()  # a restarted server numbers its frames anew
            self.stats.reconnects += 1
        if now - self.dialog.last_connect >= cfg.retry_period:
            self.dialog.send_connect()
        if now - self._held_at < cfg.reconnect_after:
            # frames arrive, held back until RESYNC_FRAMES of them agree on the (restarted)
            # numbering: at a low frame rate that outlasts the waits below, and a warning
            # that no frames come would be false
            return
        if not self._answered_while_silent and now - self._silence_episode < 2 * cfg.retry_period:
            return  # give the server a chance to answer before concluding anything
        if self._answered_while_silent and now - self._answered_at < max(
            2 * cfg.retry_period, cfg.reconnect_after
        ):
            return  # it just answered: its frames follow within a few periods
        if not self._answered_while_silent:
            kind = "silent"
            reason = (
                f"no frames for {silent:.1f} s and no answer from {cfg.server_address}:{cfg.command_port}: "
                "the server is not running or not streaming, or server_address/command_port are wrong; "
                "reconnecting"
            )
        elif transport.multicast:
            kind = "no-multicast"
            reason = (
                f"the server answers but no frames reach multicast {transport.multicast_address}:"
                f"{transport.data_port} on interface {transport.local_address}: check local_address "
                "(the interface facing Motive), Motive's streaming interface, multicast routing or a firewall"
            )
        else:
            kind = "no-unicast"
            reason = (
                "the server answers but sends no unicast frames: check that streaming is enabled in Motive "
                "and that no firewall blocks UDP from the server"
            )
        if kind != self._silent_reason:
            self.log.warning(reason)
            self._silent_reason = kind
        self.stats.last_error = reason

    def first_answer_while_silent(self, now: float) -> bool:
        """The server answered NAT_CONNECT: True the first time while no frames come (a
        restarted server may have other models: ask for them)."""
        if not self.reconnecting or self._answered_while_silent:
            return False
        self._answered_while_silent = True
        self._answered_at = now
        return True

    def frame_held(self, now: float) -> None:
        """A frame of the server arrived that is not handed out yet: the sequencer takes up
        the numbering from several frames that agree (after a reconnection, a restart)."""
        self._held_at = now

    def frame_arrived(self, number: int, now: float) -> bool:
        """A frame was handed out; True when frames came back from a server that did not
        answer in between (multicast frames from a restarted server: ask for its models)."""
        self.stats.frames += 1
        self.last_frame = now
        if self._silent_reason:
            self.log.info(f"frames arriving again (frame {number})")
            self._silent_reason = ""
        if not self.reconnecting:
            return False
        self.reconnecting = False
        return not self._answered_while_silent

    # ------------------------------------------------------------------ log throttling
    def skipped(self, parts: Iterable[nn.Skipped], where: str) -> None:
        """Parts of a packet read past by their size: counted by name; the first of each
        name logged (a warning for what no known NatNet version has: a newer Motive)."""
        table = self.skipped_parts
        for part in parts:
            name = part.name if part.name in table or len(table) < SKIPPED_KINDS_KEPT else "other"
            count = table.get(name)
            if count is None:
                count = table[name] = SkippedCount(known=part.known)
                if part.known:
                    self.log.info(
                        f"skipping the {part.name} parts of the {where} by their size ({part.size} bytes): "
                        "their layout is not public (counted in diagnostics: skipped_*)"
                    )
                else:
                    self.log.warning(
                        f"skipping {part.name} of the {where} ({part.size} bytes) by its size: no NatNet "
                        "version this driver knows has it (a newer Motive?); the rest is read as usual"
                    )
            count.times += 1
            count.last_size = part.size

    def decode_error(self, exc: Exception, kind: str = "packet") -> None:
        """An undecodable packet, dropped: counted by kind, logged the first time of each
        kind, then summarised."""
        self.stats.decode_errors += 1
        self.stats.last_error = f"undecodable packet: {exc}"
        key = f"undecodable_{kind}"
        seen = self.stats.rejected.get(key, 0)
        self.stats.rejected[key] = seen + 1
        now = time.monotonic()
        if seen == 0:
            self.log.error(
                f"dropped an undecodable NatNet {kind.replace('_', ' ')} packet ({exc}); further ones are "
                f"counted (diagnostics: rejected_{key}) and summarised every {LOG_SUMMARY_PERIOD:.0f} s"
            )
            self._error_log_time = now
        else:
            self._errors_since_log += 1
            if now - self._error_log_time >= LOG_SUMMARY_PERIOD:
                self.log.warning(
                    f"{self._errors_since_log} more undecodable NatNet packets in the last "
                    f"{now - self._error_log_time:.0f} s; last: {exc}"
                )
                self._error_log_time = now
                self._errors_since_log = 0

    def server_message(self, payload: bytes) -> None:
        """A NAT_MESSAGESTRING: logged while few, then counted (and no longer decoded)."""
        self._server_messages += 1
        if self._server_messages <= SERVER_MESSAGES_LOGGED:
            self.log.info(
                f"server message: {nn.decode_string(payload)[:200]}"
                + (" (further ones are counted)" if self._server_messages == SERVER_MESSAGES_LOGGED else "")
            )
        else:
            self.stats.events["server_messages"] = self._server_messages
