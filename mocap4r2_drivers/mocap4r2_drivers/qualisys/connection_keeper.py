"""Keeping a QTM connection up without the node's help.

QTM goes away (restarted, its real-time output switched off, the network down) and
comes back; a node streaming from it should then simply carry on. The
:class:`ConnectionKeeper` runs on the client's event loop: after a lost connection it
tries again every ``reconnect_period`` s, reading the parameters again and resuming
streaming. A TCP connection can also stay open while QTM sends nothing (QTM hung, a
cable pulled without a reset); a receive watchdog drops a streaming connection that
has been silent for ``reconnect_after`` s so that the same reconnection follows. It
counts those drops (``watchdog_reconnects`` in diagnostics) and warns once per silence.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .client import QtmClient

__all__ = ["ConnectionKeeper"]

LOG = logging.getLogger("mocap4r2.qualisys")


class ConnectionKeeper:
    """Keeps a client's connection up: after a lost one, tries again every
    ``reconnect_period`` s (0: never) until QTM is back, and resumes streaming; a
    streaming connection QTM has sent nothing on for ``reconnect_after`` s is dropped
    (a receive watchdog), and the reconnection follows as for a lost one."""

    def __init__(self, client: QtmClient) -> None:
        self.client = client
        self.reconnects = 0  # connections the watchdog dropped
        self._task: asyncio.Task | None = None
        self._reconnect_task: asyncio.Task | None = None

    def start(self) -> None:
        """(loop thread) Start watching."""
        self._task = self.client._loop.create_task(self._run())

    async def stop(self) -> None:
        """(loop thread) Stop watching and reconnecting."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._reconnect_task is not None:
            self._reconnect_task.cancel()

    def lost(self) -> None:
        """(loop thread) The connection was lost: reconnect unless told not to."""
        client = self.client
        if client.reconnect_period <= 0 or client._closing:
            return
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = client._loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        """Try again every reconnect_period until QTM is back (or the client closes)."""
        client = self.client
        while not client._closing:
            await asyncio.sleep(client.reconnect_period)
            try:
                await client._open()
                if client._streaming:
                    await client._stream()
                LOG.info("reconnected to QTM at %s:%s", client.host, client.port)
                return
            except Exception as exc:  # noqa: BLE001 - keep trying
                client.stats.last_error = str(exc)

    async def _run(self) -> None:
        client = self.client
        warned = False
        while not client._closing:
            await asyncio.sleep(
                max(min(0.25, client.reconnect_after / 4), 0.02) if client.reconnect_after > 0 else 0.5
            )
            guard = client._guard
            if not (
                client.reconnect_after > 0 and client._streaming and guard is not None and client.connected
            ):
                continue
            silent = time.monotonic() - guard.last_receive
            if silent < client.reconnect_after:
                warned = False
                continue
            reason = (
                f"no data from QTM for {silent:.1f} s while streaming (reconnect_after "
                f"{client.reconnect_after:g} s): reconnecting"
            )
            self.reconnects += 1
            if not warned:
                LOG.warning(reason)
                warned = True
            guard.last_receive = time.monotonic()
            client.drop_connection(reason)
