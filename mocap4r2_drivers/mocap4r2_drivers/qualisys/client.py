"""A QTM connection through Qualisys' Python SDK (qtm-rt), usable from plain threads.

qtm-rt is asyncio-only; :class:`QtmClient` runs its own event loop in a thread and
offers blocking calls (connect, start/stop streaming, close) plus a bounded queue of
streamed packets for the adapter's reader thread. When QTM goes away it reconnects by
itself, reads the parameters again and resumes streaming.

qtm-rt never reads the raw stream: it loops forever or buffers gigabytes on hostile
headers, so every packet first passes :class:`~.guarded_stream.GuardedStream` (bounded
framing, a check of each packet; a malformed packet is dropped and counted, a broken
header closes the connection with the reason in diagnostics).
:class:`~.connection_keeper.ConnectionKeeper` reconnects after a lost connection, and
its receive watchdog when a streaming QTM sends nothing for ``reconnect_after`` s.

Each packet is handed over with its arrival: the kernel's receive time of its bytes
(:class:`StampedSocket`), not the time qtm-rt's callback got to it on a loop that may
have been busy meanwhile.

Also here: :class:`TimestampMapper` (QTM's measurement clock to Unix time). QTM's
parameter XML is read by :mod:`.parameters`; its public names (:func:`parse_parameters`,
:class:`QtmParameters`, :class:`QtmConnectionError`, ...) are re-exported here, with
those of the guard and the keeper, so that callers need only this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..common import (
    SO_TIMESTAMPNS,
    TIMESTAMP_SPACE,
    ClientStats,
    reject_input,
)
from .capture import QtmCapture
from .connection_keeper import ConnectionKeeper
from .guarded_stream import GuardedStream, connect_through_guard
from .parameters import (
    STREAMABLE,
    BodySetup,
    QtmConnectionError,
    QtmParameters,
    SkeletonSetup,
    parameter_parts,
    parse_parameters,
)
from .session import QtmSession
from .stamped_socket import StampedSocket, open_stamped_socket

__all__ = [
    "DISCONNECTED",
    "SO_TIMESTAMPNS",
    "STREAMABLE",
    "TIMESTAMP_SPACE",
    "BodySetup",
    "ConnectionKeeper",
    "GuardedStream",
    "QtmClient",
    "QtmConnectionError",
    "QtmParameters",
    "QtmSession",
    "SkeletonSetup",
    "StampedSocket",
    "TimestampMapper",
    "open_stamped_socket",
    "parameter_parts",
    "parse_parameters",
]

LOG = logging.getLogger("mocap4r2.qualisys")


# ====================================================================== time
class TimestampMapper:
    """QTM timestamps (microseconds since the measurement started, on QTM's clock) to
    Unix time.

    The offset is the smallest ``arrival - timestamp`` seen over a sliding window: the
    least delayed frame defines the mapping (so a stamp is never later than its
    arrival) and the window follows the drift between QTM's clock and ours. A
    timestamp going backwards means a new measurement: the mapping starts again.
    """

    def __init__(self, window: float = 10.0):
        self.window = window
        self._offsets: deque[tuple[float, float]] = deque()  # (arrival, offset), offsets increasing
        self._last: float | None = None  # the last timestamp, s

    def capture_time(self, timestamp_us: int, arrival: float) -> float:
        t = timestamp_us * 1e-6
        if self._last is not None and t < self._last:
            self._offsets.clear()
        self._last = t
        offset = arrival - t
        while self._offsets and self._offsets[-1][1] >= offset:
            self._offsets.pop()
        self._offsets.append((arrival, offset))
        while self._offsets[0][0] < arrival - self.window:
            self._offsets.popleft()
        return t + self._offsets[0][1]


# ====================================================================== connection
DISCONNECTED = object()  # queued when the connection drops, to wake the reader


class QtmClient:
    """A qtm-rt connection in its own event-loop thread, with blocking methods."""

    def __init__(
        self,
        host: str,
        port: int,
        version: str,
        components: list[str],
        *,
        password: str | None = None,
        timeout: float = 5.0,
        reconnect_period: float = 1.0,
        reconnect_after: float = 2.0,
        queue_size: int = 256,
        on_parameters: Callable[[QtmParameters], None] | None = None,
    ):
        self.components = list(components)
        self.password = password
        self.on_parameters = on_parameters
        self.parameters = QtmParameters()
        self.qtm_version = ""
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._loop = asyncio.new_event_loop()
        #: what the keeper and the guards share with the client (handed to them, with
        #: only the actions each needs: neither reaches into the client)
        self.session = QtmSession(
            self._loop, host, port, version, timeout, reconnect_period, reconnect_after, ClientStats()
        )
        self._thread = threading.Thread(target=self._loop.run_forever, name="qtm-rt", daemon=True)
        self._thread.start()
        self._connection: Any = None
        self._guard: GuardedStream | None = None
        self._drop_reason = ""
        self.keeper = ConnectionKeeper(
            self.session,
            connected=lambda: self.connected,
            reopen=self._reopen,
            drop_connection=self.drop_connection,
        )
        self.capture = QtmCapture(self)  # QTM's own recording
        self._loop.call_soon_threadsafe(self.keeper.start)

    # ------------------------------------------------------------------ settings
    @property
    def host(self) -> str:
        return self.session.host

    @property
    def port(self) -> int:
        return self.session.port

    @property
    def version(self) -> str:
        return self.session.version

    @property
    def timeout(self) -> float:
        return self.session.timeout

    @property
    def reconnect_period(self) -> float:
        """Seconds between tries after a lost connection; 0: never reconnect."""
        return self.session.reconnect_period

    @property
    def reconnect_after(self) -> float:
        """Silence while streaming, s, that drops the connection."""
        return self.session.reconnect_after

    @property
    def stats(self) -> ClientStats:
        return self.session.stats

    # ------------------------------------------------------------------ blocking API
    @property
    def connected(self) -> bool:
        connection = self._connection
        return connection is not None and connection.has_transport()

    @property
    def connection(self) -> Any:
        """qtm-rt's QRTConnection (None while not connected), for coroutines run by :meth:`call`."""
        return self._connection

    @property
    def watchdog_reconnects(self) -> int:
        """Connections dropped because a streaming QTM sent nothing for ``reconnect_after`` s."""
        return self.keeper.reconnects

    def call(self, coro, timeout: float | None = None):
        """Run ``coro`` on the client's loop and wait for its result; QtmConnectionError
        after ``timeout`` s."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout if timeout is not None else 3 * self.timeout + 1.0)
        except TimeoutError as exc:
            future.cancel()
            raise QtmConnectionError(f"QTM at {self.host}:{self.port} did not answer in time") from exc

    def connect(self) -> QtmParameters:
        """Connect, set the protocol version, read the parameters and take control if
        a password was given; QtmConnectionError with the reason otherwise."""
        self.call(self._open())
        return self.parameters

    def start_streaming(self) -> None:
        # frames left from an earlier activation are old news
        while self.get(0.0) is not None:
            pass
        self.session.streaming = True
        if self.connected:
            self.call(self._stream())

    def stop_streaming(self) -> None:
        self.session.streaming = False
        if self.connected:
            try:
                self.call(self._connection.stream_frames_stop(), timeout=self.timeout)
            except Exception as exc:  # noqa: BLE001 - the connection may be gone meanwhile
                LOG.debug("stream stop failed: %s", exc)

    def get(self, timeout: float):
        """(packet, arrival Unix time), DISCONNECTED, or None after ``timeout`` s."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop streaming, release control, disconnect and stop the loop; idempotent."""
        if self.session.closing:
            return
        self.session.closing = True
        if self._loop.is_running():
            try:
                self.call(self._shutdown(), timeout=self.timeout + 1.0)
            except Exception as exc:  # noqa: BLE001 - closing goes on regardless
                LOG.debug("close: %s", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()

    # ------------------------------------------------------------------ loop side
    async def _open(self) -> None:
        import qtm_rt  # the SDK; installed with the project's requirements

        where = f"{self.host}:{self.port}"
        try:
            connection = await asyncio.wait_for(self._connect_guarded(qtm_rt), self.timeout)
        except TimeoutError as exc:
            raise QtmConnectionError(f"no answer from QTM at {where} within {self.timeout} s") from exc
        if connection is None:
            raise QtmConnectionError(
                f"cannot connect to QTM at {where} with protocol {self.version}: is QTM running, "
                "is its real-time output enabled, and is the port the little-endian one (base + 1)?"
            )
        try:
            self.qtm_version = (await connection.qtm_version()).decode(errors="replace")
            await self._read_parameters(connection)
            if self.password is not None:
                try:
                    await connection.take_control(self.password)
                except Exception as exc:  # QRTCommandException with QTM's answer
                    raise QtmConnectionError(f"QTM refused control: {exc}") from exc
        except BaseException:
            connection.disconnect()
            raise
        self._connection = connection
        self.stats.connects += 1
        LOG.info("connected to %s (%s)", where, self.qtm_version)

    async def _connect_guarded(self, qtm_rt):
        """qtm_rt.connect, with qtm-rt's protocol reading through a GuardedStream; None
        when QTM cannot be reached or refuses the protocol version (as qtm_rt.connect)."""
        try:
            sock = await open_stamped_socket(self._loop, self.host, self.port)
        except OSError as exc:
            self.stats.last_error = f"cannot connect to {self.host}:{self.port}: {exc}"
            return None
        guard = GuardedStream(
            self.session, sock, bad_input=self.bad_input, drop_connection=self.drop_connection
        )
        connection = await connect_through_guard(
            self.session,
            qtm_rt,
            sock,
            guard=guard,
            on_event=self._on_event,
            on_disconnect=self._on_disconnect,
        )
        if connection is not None:
            self._guard = guard
        return connection

    async def _reopen(self) -> None:
        """Connect again and resume streaming when the user asked for frames (the keeper's)."""
        await self._open()
        if self.session.streaming:
            await self._stream()

    # ------------------------------------------------------------------ bad input, watchdog
    def bad_input(self, kind: str, what: str) -> None:
        """A packet dropped before qtm-rt: one that could not be decoded, so a decode error
        too; logged the first time of each kind, then counted."""
        self.stats.decode_errors += 1
        reject_input(self.stats, LOG, kind, what)

    def drop_connection(self, reason: str) -> None:
        """Close the connection (loop thread); the reconnection follows, as for a lost one."""
        connection = self._connection
        self._drop_reason = reason
        self.stats.last_error = reason
        if connection is not None and connection.has_transport():
            connection.disconnect()

    async def _read_parameters(self, connection) -> None:
        parts = parameter_parts(self.components)
        for _attempt in range(3):
            answer = await connection.get_parameters(parts)
            # a data packet still in flight after a stream stop can take a command's
            # answer slot in qtm-rt: ask again
            if isinstance(answer, (bytes, bytearray)) and answer.lstrip().startswith(b"<"):
                self.parameters = parse_parameters(bytes(answer))
                if self.on_parameters is not None:
                    self.on_parameters(self.parameters)
                return
        raise QtmConnectionError("QTM did not answer GetParameters with XML")

    async def _stream(self) -> None:
        self.session.last_receive = time.monotonic()
        await self._connection.stream_frames(
            frames="allframes", components=self.components, on_packet=self._on_packet
        )

    async def _shutdown(self) -> None:
        await self.keeper.stop()
        connection, self._connection = self._connection, None
        if connection is None or not connection.has_transport():
            return
        try:
            await connection.stream_frames_stop()
            if self.password is not None:
                await asyncio.wait_for(connection.release_control(), self.timeout)
        except Exception as exc:  # noqa: BLE001 - disconnecting anyway
            LOG.debug("release: %s", exc)
        connection.disconnect()

    def _on_packet(self, packet) -> None:
        # qtm-rt calls this from within the guard's data_received, which took the arrival
        guard = self._guard
        arrival = guard.current_arrival if guard is not None else None
        item = (packet, arrival if arrival is not None else time.time())
        self.stats.frames += 1
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            # the reader is behind: the oldest frame goes, as a real-time stream must
            with contextlib.suppress(queue.Empty):
                self._queue.get_nowait()
            self.stats.dropped += 1
            self._queue.put_nowait(item)

    def _on_event(self, event) -> None:
        name = getattr(event, "name", str(event))
        self.stats.events[name] = self.stats.events.get(name, 0) + 1
        if name == "EventCameraSettingsChanged" and self.connected:
            # labels or bodies may have changed: read them again
            self._loop.create_task(self._refresh_parameters())

    async def _refresh_parameters(self) -> None:
        try:
            await self._read_parameters(self._connection)
        except Exception as exc:  # noqa: BLE001 - keep the old names until the next try
            self.stats.last_error = f"parameter refresh failed: {exc}"

    def _on_disconnect(self, exc) -> None:
        self.stats.disconnects += 1
        reason, self._drop_reason = self._drop_reason, ""
        self.stats.last_error = reason or f"QTM connection lost{': ' + str(exc) if exc else ''}"
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(DISCONNECTED)
        self.keeper.lost()
