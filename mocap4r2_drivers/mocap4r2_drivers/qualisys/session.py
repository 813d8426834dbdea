"""The state of one QTM link that a :class:`~.client.QtmClient` shares with its helpers.

The client hands this object, and only the actions each helper needs, to the
:class:`~.connection_keeper.ConnectionKeeper` (reconnection and receive watchdog) and
to each :class:`~.guarded_stream.GuardedStream` (what stands before qtm-rt's parser),
as the NatNet client does with its helpers: none of them reaches into the client, and
none imports it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ..common import ClientStats

__all__ = ["QtmSession"]


@dataclass
class QtmSession:
    """Where QTM is, how to talk to it, and what the client's helpers read and write
    about the link: whether the user asked for frames (``streaming``, kept across
    reconnects), whether the client is closing, and when bytes last came in."""

    loop: asyncio.AbstractEventLoop
    host: str
    port: int
    version: str
    timeout: float
    #: 0: never reconnect
    reconnect_period: float
    #: silence while streaming, s, that drops the connection (0: no watchdog)
    reconnect_after: float
    stats: ClientStats = field(default_factory=ClientStats)
    streaming: bool = False
    closing: bool = False
    #: time.monotonic() of the last bytes received (the guard writes it; the watchdog reads it)
    last_receive: float = field(default_factory=time.monotonic)

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"
