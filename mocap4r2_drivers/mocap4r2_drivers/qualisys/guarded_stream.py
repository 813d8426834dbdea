"""What stands between QTM's TCP stream and qtm-rt's parser.

qtm-rt reads whatever the peer sends: a header announcing size 0 or a component table
of 4 billion empty components makes it loop forever, a size of 2 GB is buffered, and
an unknown component type or event raises inside its callback. So qtm-rt never sees
the raw stream: :class:`GuardedStream` frames it with the project's bounded reader
(:class:`~.protocol.PacketReader`), checks each packet (:func:`~.protocol.check_packet`)
and hands qtm-rt only packets that are well formed. A malformed packet is dropped and
counted (the client's ``bad_input``); a broken header (the framing is lost, TCP has no
way to find the next packet) closes the connection (the client's ``drop_connection``),
and the client reconnects. The guard is given those two actions and the client's
:class:`~.session.QtmSession`, where it notes when bytes last came in (the watchdog's
clue); it knows nothing else of the client.

The guard also takes each read's arrival from the :class:`~.stamped_socket.StampedSocket`
before qtm-rt parses anything, so the packets handed to the client carry the time their
bytes reached this host. :func:`connect_through_guard` builds qtm-rt's connection on
such a socket, the way ``qtm_rt.connect`` would on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import protocol as qp
from .session import QtmSession
from .stamped_socket import StampedSocket

__all__ = ["GuardedStream", "connect_through_guard", "guarded_protocol"]


class GuardedStream:
    """What stands between the socket and qtm-rt's reader: bounded framing, a check of
    every packet, the time of the last byte received (for the watchdog) and the arrival
    of the packets being handed to qtm-rt (:meth:`arrival`)."""

    def __init__(
        self,
        session: QtmSession,
        sock: StampedSocket | None = None,
        *,
        bad_input: Callable[[str, str], None],
        drop_connection: Callable[[str], None],
    ):
        """``bad_input(kind, what)`` counts and logs a dropped packet;
        ``drop_connection(reason)`` closes the connection (the client's)."""
        self.session = session
        self.sock = sock
        self.bad_input = bad_input
        self.drop_connection = drop_connection
        self.reader = qp.PacketReader(qp.MAX_PACKET_SIZE)
        session.last_receive = time.monotonic()
        # the arrival (Unix s) of the packets qtm-rt is handling now; None between reads
        self.current_arrival: float | None = None

    def arrival(self) -> float:
        """When the bytes just received reached this host: the socket's stamp of its
        last read, taken once (a read that did not go through it: now)."""
        sock = self.sock
        stamp = sock.received_at if sock is not None else None
        if sock is not None:
            sock.received_at = None
        now = time.time()
        # a kernel stamp is never later than now; one that is (a clock stepped between
        # the read and here) is not trusted
        return stamp if stamp is not None and stamp <= now else now

    def packets(self, data: bytes) -> tuple[list[bytes], str | None]:
        """The well-formed packets (re-framed, for qtm-rt), and why the stream must be
        dropped (or None)."""
        self.session.last_receive = time.monotonic()
        framed, problem = self.reader.split(data)
        out = []
        for packet_type, payload in framed:
            try:
                qp.check_packet(packet_type, payload)
            except qp.QtmProtocolError as exc:
                self.bad_input("malformed_packet", f"a malformed packet ({exc})")
                continue
            out.append(qp.pack(packet_type, payload))
        if problem is not None:
            self.bad_input("broken_framing", f"a broken packet header ({problem})")
            return out, f"QTM sent a broken packet header ({problem}): reconnecting"
        return out, None


def guarded_protocol(guard: GuardedStream, **kwargs):
    """qtm-rt's protocol object, reading through ``guard``."""
    from qtm_rt.protocol import QTMProtocol

    class GuardedProtocol(QTMProtocol):
        def data_received(self, data):
            # first, before any parsing: when these bytes reached this host
            guard.current_arrival = guard.arrival()
            packets, problem = guard.packets(data)
            try:
                for packet in packets:
                    try:
                        super().data_received(packet)
                    except Exception as exc:  # noqa: BLE001 - qtm-rt must never take the connection down
                        guard.bad_input("sdk_error", f"a packet qtm-rt could not handle ({exc!r})")
            finally:
                guard.current_arrival = None
            if problem is not None and self.transport is not None:
                guard.drop_connection(problem)

    return GuardedProtocol(**kwargs)


async def connect_through_guard(
    session: QtmSession,
    qtm_rt: ModuleType,
    sock: StampedSocket,
    *,
    guard: GuardedStream,
    on_event: Callable[[Any], None],
    on_disconnect: Callable[[Any], None],
) -> Any:
    """qtm-rt's QRTConnection on the connected ``sock``, with qtm-rt's protocol reading
    through ``guard``; None when QTM refuses the session's protocol version (as
    ``qtm_rt.connect``)."""
    loop = session.loop
    try:
        _, protocol = await loop.create_connection(
            lambda: guarded_protocol(guard, loop=loop, on_event=on_event, on_disconnect=on_disconnect),
            sock=sock,
        )
    except BaseException:
        sock.close()
        raise
    try:
        await protocol.set_version(session.version)
    except qtm_rt.QRTCommandException as exc:
        session.stats.last_error = f"QTM refused protocol {session.version}: {exc}"
        protocol.transport.close()
        return None
    return qtm_rt.QRTConnection(protocol, timeout=session.timeout)
