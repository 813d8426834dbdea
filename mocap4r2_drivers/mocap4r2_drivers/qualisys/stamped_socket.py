"""A TCP socket that reads when its bytes reached this host (the kernel's receive time).

Its own module: the client opens it, and the guard reads its stamps, without either
importing the other.
"""

from __future__ import annotations

import asyncio
import socket
import time

from ..common import TIMESTAMP_SPACE, ask_receive_times, receive_time

__all__ = ["StampedSocket", "open_stamped_socket"]


class StampedSocket(socket.socket):
    """A TCP socket whose ``recv`` also reads when the bytes reached this host.

    The arrival of a QTM frame is the reference of its stamp: the node's clock model
    takes the least ``arrival - latency`` as the transport's floor. qtm-rt parses on
    its own asyncio loop, which may be busy when bytes come in (the packets of a burst
    parsed one after the other, a GIL held by the node's reader), so the time its
    callback runs carries that wait. The kernel stamps every segment it receives
    (``SO_TIMESTAMPNS``, also on TCP); the loop's transport reads through ``recv``, so
    this is where the stamp is taken: the receive time of the newest segment the read
    took (``received_at``, Unix s; the time of the read where the kernel gives none).
    Packets that came in one read all get it: the newest of them its own arrival, the
    older ones a time at or after theirs, never before.
    """

    received_at: float | None = None

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if not TIMESTAMP_SPACE:  # no kernel stamps here (nor, on some systems, recvmsg)
            data = super().recv(bufsize, flags)
            self.received_at = time.time()
            return data
        data, ancillary, _, _ = self.recvmsg(bufsize, TIMESTAMP_SPACE, flags)
        self.received_at = receive_time(ancillary)
        return data


async def open_stamped_socket(loop: asyncio.AbstractEventLoop, host: str, port: int) -> StampedSocket:
    """A connected non-blocking :class:`StampedSocket` to ``host:port`` (each address
    ``host`` resolves to, in turn); OSError of the last address otherwise."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"{host} resolves to no address")
    for family, kind, proto, _, address in infos:
        sock = StampedSocket(family, kind, proto)
        try:
            sock.setblocking(False)
            ask_receive_times(sock)  # TCP too: the time the newest bytes read came
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:  # cancelled (a timeout): the socket must not leak
            sock.close()
            raise
        return sock
    raise error
