"""What stands between QTM's TCP stream and qtm-rt's parser.

qtm-rt reads whatever the peer sends: a header announcing size 0 or a component table
of 4 billion empty components makes it loop forever, a size of 2 GB is buffered, and
an unknown component type or event raises inside its callback. So qtm-rt never sees
the raw stream: :class:`GuardedStream` frames it with the project's bounded reader
(:class:`~.protocol.PacketReader`), checks each packet (:func:`~.protocol.check_packet`)
and hands qtm-rt only packets that are well formed. A malformed packet is dropped and
counted (:meth:`~.client.QtmClient.bad_input`); a broken header (the framing is lost,
TCP has no way to find the next packet) closes the connection
(:meth:`~.client.QtmClient.drop_connection`), and the client reconnects.

The guard also takes each read's arrival from the :class:`~.client.StampedSocket`
before qtm-rt parses anything, so the packets handed to the client carry the time their
bytes reached this host. :func:`connect_through_guard` builds qtm-rt's connection on
such a socket, the way ``qtm_rt.connect`` would on its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import protocol as qp

if TYPE_CHECKING:
    from types import ModuleType

    from .client import QtmClient, StampedSocket

__all__ = ["GuardedStream", "connect_through_guard", "guarded_protocol"]


class GuardedStream:
    """What stands between the socket and qtm-rt's reader: bounded framing, a check of
    every packet, the time of the last byte received (for the watchdog) and the arrival
    of the packets being handed to qtm-rt (:meth:`arrival`)."""

    def __init__(self, client: QtmClient, sock: StampedSocket | None = None):
        self.client = client
        self.sock = sock
        self.reader = qp.PacketReader(qp.MAX_PACKET_SIZE)
        self.last_receive = time.monotonic()
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
        self.last_receive = time.monotonic()
        framed, problem = self.reader.split(data)
        out = []
        for packet_type, payload in framed:
            try:
                qp.check_packet(packet_type, payload)
            except qp.QtmProtocolError as exc:
                self.client.bad_input("malformed_packet", f"a malformed packet ({exc})")
                continue
            out.append(qp.pack(packet_type, payload))
        if problem is not None:
            self.client.bad_input("broken_framing", f"a broken packet header ({problem})")
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
                        guard.client.bad_input("sdk_error", f"a packet qtm-rt could not handle ({exc!r})")
            finally:
                guard.current_arrival = None
            if problem is not None and self.transport is not None:
                guard.client.drop_connection(problem)

    return GuardedProtocol(**kwargs)


async def connect_through_guard(client: QtmClient, qtm_rt: ModuleType, sock: StampedSocket) -> Any:
    """qtm-rt's QRTConnection on the connected ``sock``, with qtm-rt's protocol reading
    through a new GuardedStream (``client._guard``); None when QTM refuses the client's
    protocol version (as ``qtm_rt.connect``)."""
    loop = client._loop
    guard = GuardedStream(client, sock)
    try:
        _, protocol = await loop.create_connection(
            lambda: guarded_protocol(
                guard, loop=loop, on_event=client._on_event, on_disconnect=client._on_disconnect
            ),
            sock=sock,
        )
    except BaseException:
        sock.close()
        raise
    try:
        await protocol.set_version(client.version)
    except qtm_rt.QRTCommandException as exc:
        client.stats.last_error = f"QTM refused protocol {client.version}: {exc}"
        protocol.transport.close()
        return None
    client._guard = guard
    return qtm_rt.QRTConnection(protocol, timeout=client.timeout)
