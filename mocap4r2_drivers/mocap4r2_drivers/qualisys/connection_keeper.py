"""Keeping a QTM connection up without the node's help.

QTM goes away (restarted, its real-time output switched off, the network down) and
comes back; a node streaming from it should then simply carry on. The
:class:`ConnectionKeeper` runs on the client's event loop, given the client's
:class:`~.session.QtmSession` and the three actions it needs (no back-reference): after
a lost connection it tries again every ``reconnect_period`` s, reading the parameters
again and resuming streaming. A TCP connection can also stay open while QTM sends nothing (QTM hung, a
cable pulled without a reset); a receive watchdog drops a streaming connection that
has been silent for ``reconnect_after`` s so that the same reconnection follows. It
counts those drops (``watchdog_reconnects`` in diagnostics) and warns once per silence.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from .session import QtmSession

__all__ = ["ConnectionKeeper"]

LOG = logging.getLogger("mocap4r2.qualisys")


class ConnectionKeeper:
    """Keeps a client's connection up: after a lost one, tries again every
    ``reconnect_period`` s (0: never) until QTM is back, and resumes streaming; a
    streaming connection QTM has sent nothing on for ``reconnect_after`` s is dropped
    (a receive watchdog), and the reconnection follows as for a lost one."""

    def __init__(
        self,
        session: QtmSession,
        *,
        connected: Callable[[], bool],
        reopen: Callable[[], Awaitable[None]],
        drop_connection: Callable[[str], None],
    ) -> None:
        """``reopen`` connects again and resumes streaming when the session streams;
        ``drop_connection`` closes a silent connection with the reason."""
        self.session = session
        self._connected = connected
        self._reopen = reopen
        self._drop_connection = drop_connection
        self.reconnects = 0  # connections the watchdog dropped
        self._task: asyncio.Task | None = None
        self._reconnect_task: asyncio.Task | None = None

    def start(self) -> None:
        """(loop thread) Start watching."""
        self._task = self.session.loop.create_task(self._run())

    async def stop(self) -> None:
        """(loop thread) Stop watching and reconnecting."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()

    def lost(self) -> None:
        """(loop thread) The connection was lost: reconnect unless told not to."""
        session = self.session
        if session.reconnect_period <= 0 or session.closing:
            return
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = session.loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Try again every reconnect_period until QTM is back (or the client closes)."""
        session = self.session
        while not session.closing:
            await asyncio.sleep(session.reconnect_period)
            try:
                await self._reopen()
                LOG.info("reconnected to QTM at %s:%s", session.host, session.port)
                return
            except Exception as exc:  # noqa: BLE001 - keep trying
                session.stats.last_error = str(exc)

    async def _run(self) -> None:
        session = self.session
        warned = False
        while not session.closing:
            after = session.reconnect_after
            await asyncio.sleep(max(min(0.25, after / 4), 0.02) if after > 0 else 0.5)
            if not (session.reconnect_after > 0 and session.streaming and self._connected()):
                continue
            silent = time.monotonic() - session.last_receive
            if silent < session.reconnect_after:
                warned = False
                continue
            reason = (
                f"no data from QTM for {silent:.1f} s while streaming (reconnect_after "
                f"{session.reconnect_after:g} s): reconnecting"
            )
            self.reconnects += 1
            if not warned:
                LOG.warning(reason)
                warned = True
            session.last_receive = time.monotonic()
            self._drop_connection(reason)
