"""QTM's own recording (``Start``, ``Stop``, ``Save``) through a connected :class:`~.client.QtmClient`.

QTM's capture commands need control: a client without a password of its own takes
control for the capture and releases it once the capture is saved. QTM's refusals come
back as QtmConnectionError with QTM's own words.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from .parameters import QtmConnectionError

__all__ = ["CaptureLink", "QtmCapture", "qtm_words"]

LOG = logging.getLogger("mocap4r2.qualisys")


def qtm_words(exc: BaseException) -> str:
    """QTM's own answer inside a qtm-rt exception ("Expected [...] but got b'...'")."""
    text = str(exc)
    marker = "but got "
    if marker in text:
        text = text.split(marker, 1)[1].strip()
        if text[:2] in ("b'", 'b"'):
            text = text[2:-1]
    return text.rstrip("\x00").strip() or type(exc).__name__


class CaptureLink(Protocol):
    """What a capture needs of the client (QtmClient is one): its connection, control,
    and a way to run a coroutine on its loop."""

    @property
    def connected(self) -> bool: ...

    @property
    def connection(self) -> Any: ...

    @property
    def timeout(self) -> float: ...

    password: str | None

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any: ...


class QtmCapture:
    """Starts, stops and saves captures in QTM through ``client``."""

    def __init__(self, client: CaptureLink) -> None:
        self.client = client

    def start(self, password: str) -> str:
        """Start a capture in QTM (``start``), taking control first when this client does
        not hold it; QtmConnectionError with QTM's words when QTM refuses."""
        return self._run(self._start(password))

    def stop_and_save(self, filename: str) -> str:
        """Stop QTM's capture (``stop``) and save it as ``filename`` (``save``)."""
        return self._run(self._stop_and_save(filename))

    def _run(self, coro) -> str:
        if not self.client.connected:
            coro.close()
            raise QtmConnectionError("not connected to QTM")
        try:
            return self.client.call(coro, timeout=3 * self.client.timeout)
        except QtmConnectionError:
            raise
        except Exception as exc:  # qtm-rt's QRTCommandException carries QTM's answer
            raise QtmConnectionError(f"QTM refused: {qtm_words(exc)}") from exc

    async def _start(self, password: str) -> str:
        if self.client.password is None:  # control is needed to start a capture
            await self.client.connection.take_control(password)
        answer = await self.client.connection.start()
        return answer.decode(errors="replace")

    async def _stop_and_save(self, filename: str) -> str:
        await self.client.connection.stop()
        answer = await self.client.connection.save(filename)
        if self.client.password is None:  # control was taken for the capture only
            try:
                await self.client.connection.release_control()
            except Exception as exc:  # noqa: BLE001 - the measurement is saved already
                LOG.debug("release after save: %s", exc)
        return answer.decode(errors="replace")
