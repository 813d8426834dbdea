"""How vrpn_simulator sends its reports: each client's sockets (:class:`Session`, written
to by the asyncio loop and by the frame thread) and the frame thread
(:class:`FrameSender`), which computes each frame ahead of its instant and sends it at
that instant.

An asyncio timer cannot send at the instant: the loop wakes when the scheduler lets it
and then runs whatever callbacks are ready, so a frame left 0.1-0.2 ms after its instant
at the median and milliseconds after it on a busy machine, all of it in a latency
measured from the message time. The thread computes and encodes each frame ahead of its
instant (the server's work, which its latency covers), never within the quiet time before
a send, sleeps until shortly before the instant and polls the clock for the rest
(:func:`~mocap4r2_drivers.common.wait_until`), then writes to the clients' sockets
itself: an instant's reports in as few datagrams as fit (vrpn_Connection packs a
mainloop's messages and sends them once per mainloop), or in one TCP write.

With a time impairment that delays (``--jitter-ms``, ``--burst``) the network takes each
frame at its due time and releases it with its burst (the due time of the burst's last
frame plus the delay drawn for it); the frame's message time still says when it was
measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..common import lower_timer_slack, wait_until
from . import protocol as vp

if TYPE_CHECKING:
    from .simulator import VrpnSimulator

__all__ = ["FrameSender", "Lateness", "PreparedFrame", "Session", "datagrams"]

MAX_SEND_BUFFER = 4 * 1024 * 1024
LATENESS_KEPT = 1 << 16  # frames whose send lateness the summary at stop covers
#: writes of the frame thread waiting for the loop to take them (a TCP socket that was
#: full); beyond this many a client loses reports, as beyond MAX_SEND_BUFFER
MAX_HANDED_OVER = 256
#: the last part of a wait for a frame's instant spent polling the clock, s: a sleep ends
#: some 0.05-0.1 ms late (more on a busy machine), polling does not ...
SPIN = 0.0003
#: ... and at most this share of a frame period, so that polling takes at most about a
#: tenth of a core whatever the rate (at 1 kHz, 0.1 ms a frame)
SPIN_SHARE = 0.1
#: no frame is computed when one is due within this, s, nor within half a period (the
#: interpreter runs one thread at a time: the work would make that frame late)
QUIET = 0.002
#: frames are computed up to this long before their instant, s ...
PREPARE_AHEAD = 0.010
#: ... and at most this many
MAX_PREPARED = 64
#: the frame thread looks at the clients at least this often, s
IDLE_WAIT = 0.05


@dataclass
class Session:
    """One connected client: its own ids (it describes them) and where reports go.

    Two threads write to it: the loop (descriptions, pongs) and the frame thread
    (reports, at their instant). Every write and the close go through one lock. Reports
    go by UDP once the client described a UDP port, through a socket of the session's
    own connected to that port (vrpn_Connection opens one per client, so the
    reports' source port is not the server's); by TCP before that and for clients
    that describe none. The frame thread writes to the TCP socket itself when nothing
    is waiting to be written before it; otherwise it hands the bytes to the loop, and
    everything written after them follows the same way until the loop has taken them."""

    writer: asyncio.StreamWriter
    peer: str
    loop: asyncio.AbstractEventLoop | None = None
    senders: vp.NameTable = field(default_factory=lambda: vp.NameTable("sender"))
    types: vp.NameTable = field(default_factory=lambda: vp.NameTable("type"))
    udp: socket.socket | None = None
    reports_sent: int = 0
    reports_skipped: int = 0
    closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _handed_over: int = 0  # writes handed to the loop and not yet taken by it

    def send(self, data: bytes) -> None:
        """(loop thread) Write ``data`` on TCP after everything written before."""
        with self._lock:
            if self.closed:
                return
            if self._handed_over and self.loop is not None:
                self._handed_over += 1
                self.loop.call_soon(self._write_handed_over, data)  # behind those handed over
            else:
                self.writer.write(data)

    def send_by_udp(self, target: tuple[str, int]) -> None:
        """(loop thread) Send reports to ``target`` by UDP from now on; OSError if no socket can."""
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.setblocking(False)
            udp.connect(target)
        except OSError:
            udp.close()
            raise
        with self._lock:
            old, self.udp = self.udp, udp
            if self.closed:
                old, self.udp = udp, None
        if old is not None:
            old.close()

    def close(self) -> None:
        """(loop thread) No more writes: the sockets are closed."""
        with self._lock:
            self.closed = True
            udp, self.udp = self.udp, None
            with contextlib.suppress(Exception):  # already closed
                self.writer.close()
        if udp is not None:
            udp.close()

    def send_reports(self, frame: PreparedFrame) -> None:
        """(frame thread) The reports of ``frame`` now: by UDP, its datagrams (one the
        socket cannot take is lost, as on a network); by TCP, in one write, unless the
        client's backlog is full (the reports are skipped)."""
        with self._lock:
            if self.closed:
                return
            if self.udp is not None:
                try:
                    for datagram in frame.datagrams:
                        self.udp.send(datagram)
                except OSError:  # full, or the client's port closed (ICMP): lost, as on a network
                    self.reports_skipped += frame.reports
                    return
            elif not self._write_tcp(frame.stream):
                self.reports_skipped += frame.reports
                return
            self.reports_sent += frame.reports

    def _write_tcp(self, data: bytes) -> bool:
        transport = self.writer.transport
        if self.loop is None or transport.is_closing():
            return False
        buffered = transport.get_write_buffer_size()
        if buffered > MAX_SEND_BUFFER or self._handed_over >= MAX_HANDED_OVER:
            return False
        if buffered or self._handed_over:
            return self._hand_over(data)
        fd = transport.get_extra_info("socket").fileno()  # -1 once closed
        if fd < 0:
            return False
        try:
            # the transport's own socket, non-blocking; the loop writes to it only through
            # this lock, and only while the transport holds no bytes
            written = os.write(fd, data)
        except (BlockingIOError, InterruptedError):
            written = 0
        except OSError:
            return False  # reset or closed: the loop's reader sees it and drops the session
        return written == len(data) or self._hand_over(data[written:])

    def _hand_over(self, data: bytes) -> bool:
        assert self.loop is not None
        try:
            self.loop.call_soon_threadsafe(self._write_handed_over, data)
        except RuntimeError:  # the loop is closed: the server is stopping
            return False
        self._handed_over += 1
        return True

    def _write_handed_over(self, data: bytes) -> None:
        with self._lock:
            self._handed_over -= 1
            if not self.closed:
                self.writer.write(data)


@dataclass(frozen=True)
class PreparedFrame:
    """A frame's reports encoded ahead of its instant."""

    number: int
    due: float  # monotonic: the message time + the scene's latency
    reports: int
    stream: bytes  # the messages one after the other (TCP)
    datagrams: list[bytes]  # the messages packed into datagrams (UDP)


class FrameSender:
    """The frame thread of a :class:`VrpnSimulator`: computes every frame ahead of its
    instant and sends it to every client at that instant.

    It reads the simulator's ``receivers`` (a tuple the loop replaces when a client
    comes or goes, so the thread never sees a list change under it), its pacer, and its
    events (``_wake``: look again; ``_stopping``); it alone writes the lateness record,
    which the loop reads at stop after the thread ended."""

    def __init__(self, simulator: VrpnSimulator) -> None:
        self.simulator = simulator
        self.rate = simulator.scene.rate
        self.pacer = simulator.pacer
        self.lateness = simulator.lateness
        self._wake = simulator._wake
        self._stopping = simulator._stopping
        self.quiet = min(QUIET, 0.5 / self.rate)
        self.spin = min(SPIN, SPIN_SHARE / self.rate)

    def run(self) -> None:
        """(frame thread) Sends every frame at its instant while some client is connected, until stop."""
        try:
            self._frame_clock()
        except Exception as exc:  # say why reports stopped
            self.simulator.log(f"the frame clock stopped: {exc!r}; no reports are sent any more")
            raise

    def _frame_clock(self) -> None:
        lower_timer_slack()
        simulator = self.simulator
        delivery = simulator.delivery
        held = simulator.impairment.delays
        prepared: deque[PreparedFrame] = deque()  # computed, not due yet (without impairment)
        ahead = -math.inf  # due time of the newest frame computed
        serving = False
        while not self._stopping.is_set():
            receivers = simulator.receivers
            if not receivers:
                prepared.clear()
                serving = False
                self._wait(time.monotonic() + IDLE_WAIT, 0.0)
                continue
            if not serving:
                serving = True
                self.pacer.restart()  # nobody was served: start at the newest frame
                ahead = -math.inf
            now = time.monotonic()
            for frame in delivery.due(now):  # what the network releases, a burst in order
                for session in receivers:
                    session.send_reports(frame)
            while prepared and prepared[0].due <= now:
                frame = prepared.popleft()
                # when its first byte leaves (a loopback send also runs the receiver's side)
                self.lateness.add(frame.number, time.monotonic() - frame.due)
                simulator.hand_out(frame)
                for session in receivers:
                    session.send_reports(frame)
            release = delivery.next_time()
            # the next send: a frame due (without impairment) or a burst the network releases
            wake = min(math.inf if release is None else release, prepared[0].due if prepared else math.inf)
            compute = ahead < now + PREPARE_AHEAD and len(prepared) < MAX_PREPARED
            # compute the next frame now unless a send is due within the quiet time
            if compute and (wake - now > self.quiet or (not prepared and release is None)):
                frame, ahead = self._prepare(now)
                if held:
                    # the network takes it at its due time, not when it was computed
                    simulator.hand_out(frame)
                    delivery.put(frame, frame.due)
                else:
                    prepared.append(frame)
                continue
            later = min(ahead - PREPARE_AHEAD, now + IDLE_WAIT)  # the next frame to compute
            # a send first when one is waiting: a computed frame, or a release sooner than the
            # next computation or holding it back (it is within the quiet time)
            if prepared or (release is not None and (release <= later or compute)):
                self._wait(wake, self.spin)
            else:
                self._wait(later, 0.0)

    def _prepare(self, now: float) -> tuple[PreparedFrame, float]:
        """The next frame to send (one the scene drops has no reports, but keeps its
        place in time) and its due time."""
        frame = self.simulator.prepare(self.pacer.take(now))  # the next, or a skip ahead when too late
        return frame, frame.due

    def _wait(self, due: float, spin: float) -> None:
        """Until ``due`` (polling the clock for the last ``spin`` s), or until woken."""
        if not wait_until(due, spin, self._wake) and not self._stopping.is_set():
            self._wake.clear()


class Lateness:
    """How late frames left after their due instant (s): the newest LATENESS_KEPT, for the
    figures printed at stop (what the stand-in adds to a latency measured from the message time)."""

    def __init__(self) -> None:
        self._frames = np.zeros(LATENESS_KEPT, dtype=np.int64)
        self._values = np.zeros(LATENESS_KEPT)
        self._count = 0

    def add(self, k: int, seconds: float) -> None:
        """Frame k left ``seconds`` after its instant."""
        at = self._count % LATENESS_KEPT
        self._frames[at] = k
        self._values[at] = seconds
        self._count += 1

    def save(self, path: str) -> None:
        """The kept frames as a .npy array of rows (frame number, lateness s)."""
        kept = min(self._count, LATENESS_KEPT)
        np.save(path, np.column_stack([self._frames[:kept].astype(np.float64), self._values[:kept]]))

    def summary(self) -> str:
        """``frames sent after their instant: p50 0.05 ms, p99 0.20 ms, max 1.00 ms``."""
        kept = self._values[: min(self._count, LATENESS_KEPT)] * 1e3
        if not kept.size:
            return "no frames sent"
        p50, p99, top = np.percentile(kept, (50, 99, 100))
        return f"frames sent after their instant: p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {top:.3f} ms"


def datagrams(messages: list[bytes]) -> list[bytes]:
    """Messages packed into datagrams of at most vp.UDP_PAYLOAD bytes, in order."""
    out: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for m in messages:
        if current and size + len(m) > vp.UDP_PAYLOAD:
            out.append(b"".join(current))
            current, size = [], 0
        current.append(m)
        size += len(m)
    if current:
        out.append(b"".join(current))
    return out
