"""What a VRPN client keeps of its dialog with the server, apart from the sockets.

:class:`ServerNames` holds the ids the server described (senders and types) and turns
its messages into named deliveries, refusing (counted, logged once per kind) messages
whose ids it never described. :class:`KeepAlive` decides when to ping and when a silent
server is taken as gone. Neither touches a socket: the client (``client.py``) reads and
sends, these say what the bytes mean and what is due.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..common import ClientStats, reject_input
from . import protocol as vp

__all__ = ["Delivered", "KeepAlive", "PoseBlock", "ServerNames"]

LOG = logging.getLogger("mocap4r2.vrpn")
# datagrams' lists of senders remembered by name (see ServerNames.block_senders); more
# distinct lists than this start the memory afresh
MAX_BLOCK_LISTS = 64


class Delivered(NamedTuple):
    """A user message with the server's ids translated to names."""

    sender: str
    type: str
    message: vp.Message


class PoseBlock(NamedTuple):
    """The Pos_Quat reports of one datagram holding nothing else, read as one array of
    :data:`~.protocol.POS_QUAT_RECORD` records, with their senders' names in order."""

    trackers: Sequence[str]
    records: np.ndarray[Any, np.dtype[np.void]]


class ServerNames:
    """The server's sender and type tables, and the sorting of its messages by them."""

    def __init__(self, stats: ClientStats) -> None:
        self.stats = stats
        self.senders = vp.NameTable("sender")
        self.types = vp.NameTable("type")
        self.senders_changed = False  # set when the server describes a sender; the caller clears it
        # a datagram's sender ids (their bytes) -> their names, while the table stands
        self._block_names: dict[bytes, tuple[str, ...] | None] = {}

    def clear(self) -> None:
        """A new connection: the server describes everything again."""
        self.senders.clear()
        self.types.clear()
        self._block_names.clear()

    def trackers(self) -> list[str]:
        """The senders the server announced, in the order of their ids, but VRPN Control."""
        return [name for name in self.senders.names() if name != vp.CONTROL_SENDER]

    def described(self, messages: list[vp.Message]) -> bool:
        """Whether there are messages and every one's type and sender were described."""
        return bool(messages) and all(
            self.types.name(m.type) is not None and self.senders.name(m.sender) is not None for m in messages
        )

    def sender_names(self, ids: list[int]) -> list[str] | None:
        """The names of the server's sender ``ids``; None when one was never described."""
        names = self.senders.by_id
        try:
            return [names[i] for i in ids]
        except KeyError:
            return None

    def block_senders(self, ids: np.ndarray[Any, np.dtype[Any]]) -> tuple[str, ...] | None:
        """:meth:`sender_names` of a datagram's sender id column, remembered while no
        sender is described (a streaming server sends the same few lists of senders in
        every instant's datagrams: a name lookup per report was the reading's largest cost
        after the frame assembly's)."""
        key = ids.tobytes()
        if key in self._block_names:
            return self._block_names[key]
        found = self.sender_names(ids.tolist())
        names = None if found is None else tuple(found)
        if len(self._block_names) >= MAX_BLOCK_LISTS:
            self._block_names.clear()
        self._block_names[key] = names
        return names

    def dispatch(self, messages: list[vp.Message], out: list[Delivered | PoseBlock]) -> None:
        """User messages named into ``out``; system messages update the tables."""
        for m in messages:
            if m.type >= 0:
                type_name = self.types.name(m.type)
                sender_name = self.senders.name(m.sender)
                if type_name is None:
                    self.reject("unknown_type", f"a message of undescribed type {m.type}")
                elif sender_name is None:
                    self.reject("unknown_sender", f"a message from undescribed sender {m.sender}")
                else:
                    out.append(Delivered(sender_name, type_name, m))
                continue
            try:
                self._system(m)
            except vp.VrpnProtocolError as exc:
                self.reject("bad_description", f"a bad system message ({exc})")

    def _system(self, m: vp.Message) -> None:
        if m.type == vp.SENDER_DESCRIPTION:
            if self.senders.describe(m.sender, vp.parse_description(m.payload)):
                self.senders_changed = True
                self._block_names.clear()
        elif m.type == vp.TYPE_DESCRIPTION:
            self.types.describe(m.sender, vp.parse_description(m.payload))
        elif m.type == vp.UDP_DESCRIPTION:
            vp.parse_udp_description(m.sender, m.payload)  # checked; we send nothing time-critical
        elif m.type in vp.SYSTEM_TYPES:
            pass  # log description, disconnect marker: nothing for a client
        else:
            self.reject("unknown_system_type", f"a system message of unknown type {m.type}")

    def reject(self, kind: str, what: str) -> None:
        """Bad input dropped: counted by kind, logged the first time of each kind."""
        self.stats.decode_errors += 1
        reject_input(self.stats, LOG, kind, what)


class KeepAlive:
    """Pings every ``ping_period`` s; a server silent (no report, no pong) for ``silence_timeout`` s is gone.

    A period or timeout of 0 turns that part off.
    """

    def __init__(self, ping_period: float, silence_timeout: float) -> None:
        self.ping_period = ping_period
        self.silence_timeout = silence_timeout
        self.last_receive = 0.0
        self.last_ping = 0.0
        self.pinged_sender: str | None = None  # the device our pings name (described as sender 0)

    def restart(self, now: float) -> None:
        """Count silence and ping period from ``now`` (monotonic)."""
        self.last_receive = self.last_ping = now

    def heard(self, now: float) -> None:
        """The server sent something at ``now``."""
        self.last_receive = now

    def silence(self, now: float) -> str | None:
        """Why the server is taken as gone, or None while it is not."""
        silent = now - self.last_receive
        if self.silence_timeout > 0 and silent > self.silence_timeout:
            return f"nothing from the server for {silent:.1f} s (no report, no pong)"
        return None

    def ping_due(self, now: float) -> bool:
        """Whether a ping is due at ``now``; the period restarts when it is."""
        if self.ping_period > 0 and now - self.last_ping >= self.ping_period:
            self.last_ping = now
            return True
        return False

    def type_descriptions(self, stamp: float) -> list[bytes]:
        """Our descriptions of the ping (type 0) and pong (type 1) types, at Unix time ``stamp``."""
        return [
            vp.pack_message(0, vp.TYPE_DESCRIPTION, vp.pack_description(vp.PING), int(stamp), 0),
            vp.pack_message(1, vp.TYPE_DESCRIPTION, vp.pack_description(vp.PONG), int(stamp), 0),
        ]

    def ping(self, device: str, stamp: float) -> bytes:
        """A ping of ``device`` at Unix time ``stamp``, after our description of it when it changed."""
        out = b""
        if self.pinged_sender != device:
            # our sender 0 is the device we ping: the server answers from the same device
            self.pinged_sender = device
            out += vp.pack_message(0, vp.SENDER_DESCRIPTION, vp.pack_description(device), int(stamp), 0)
        return out + vp.pack_message(0, 0, b"", int(stamp), int(stamp % 1 * 1e6))
