"""How vrpn_simulator sends its reports: each client's sockets (:class:`Session`, written
to by the asyncio loop and by the frame thread) and the frame thread
(:class:`FrameSender`), which computes each frame ahead of its instant and sends it at
that instant.

An asyncio timer cannot send at the instant: the loop wakes when the scheduler lets it
and then runs whatever callbacks are ready, so a frame left 0.1-0.2 ms after its instant
at the median and milliseconds after it on a busy machine, all of it in a latency
measured from the message time. The thread (scheduled by
:class:`~mocap4r2_drivers.sim_server.FrameThread`) computes and encodes each frame ahead of
its instant (the server's work, which its latency covers), never within the quiet time
before a send, sleeps until shortly before the instant and polls the clock for the rest,
then writes to the clients' sockets itself: an instant's reports in as few datagrams as
fit (vrpn_Connection packs a mainloop's messages and sends them once per mainloop), or in
one TCP write.

With a time impairment that delays (``--jitter-ms``, ``--burst``) the network takes each
frame at its due time and releases it with its burst (the due time of the burst's last
frame plus the delay drawn for it); the frame's message time still says when it was
measured.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..impairment import Delivery
from ..sim_server import QUIET, FramePacer, FrameThread, ThreadedStreamWriter, ThreadWrite
from . import protocol as vp

__all__ = ["FrameEvents", "FrameSender", "FrameSource", "Lateness", "PreparedFrame", "Session", "datagrams"]

#: bytes a client's TCP connection may hold before it loses reports (read when a session starts)
MAX_SEND_BUFFER = ThreadedStreamWriter.MAX_SEND_BUFFER
LATENESS_KEPT = 1 << 16  # frames whose send lateness the summary at stop covers
#: no frame is computed within this share of a period before a send (sim_server.QUIET
#: at most): the interpreter runs one thread at a time, the work would make that send late
QUIET_SHARE = 0.5


@dataclass
class Session:
    """One connected client: its own ids (it describes them) and where reports go.

    Two threads write to it: the loop (descriptions, pongs) and the frame thread
    (reports, at their instant). Every write and the close go through one lock. Reports
    go by UDP once the client described a UDP port, through a socket of the session's
    own connected to that port (vrpn_Connection opens one per client, so the
    reports' source port is not the server's); by TCP before that and for clients
    that describe none, through a :class:`ThreadedStreamWriter` sharing the session's
    lock (a frame's reports go by UDP or by TCP, whichever the session has at that moment)."""

    writer: asyncio.StreamWriter
    peer: str
    loop: asyncio.AbstractEventLoop | None = None
    senders: vp.NameTable = field(default_factory=lambda: vp.NameTable("sender"))
    types: vp.NameTable = field(default_factory=lambda: vp.NameTable("type"))
    udp: socket.socket | None = None
    reports_sent: int = 0
    reports_skipped: int = 0
    closed: bool = False
    tcp: ThreadedStreamWriter = field(init=False, repr=False, compare=False)  # its lock is the session's lock

    def __post_init__(self) -> None:
        self.tcp = ThreadedStreamWriter(
            self.writer, self.loop, lambda: self.closed, max_send_buffer=MAX_SEND_BUFFER
        )

    def send(self, data: bytes) -> None:
        """(loop thread) Write ``data`` on TCP after everything written before."""
        self.tcp.write_from_loop(data)

    def send_by_udp(self, target: tuple[str, int]) -> None:
        """(loop thread) Send reports to ``target`` by UDP from now on; OSError if no socket can."""
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.setblocking(False)
            udp.connect(target)
        except OSError:
            udp.close()
            raise
        with self.tcp.lock:
            old, self.udp = self.udp, udp
            if self.closed:
                old, self.udp = udp, None
        if old is not None:
            old.close()

    def close(self) -> None:
        """(loop thread) No more writes: the sockets are closed."""
        with self.tcp.lock:
            self.closed = True
            udp, self.udp = self.udp, None
            self.tcp.close()
        if udp is not None:
            udp.close()

    def send_reports(self, frame: PreparedFrame) -> None:
        """(frame thread) The reports of ``frame`` now: by UDP, its datagrams (one the
        socket cannot take is lost, as on a network); by TCP, in one write, unless the
        client's backlog is full (the reports are skipped)."""
        with self.tcp.lock:
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
        return self.tcp.write_from_thread(data) is ThreadWrite.WRITTEN


@dataclass(frozen=True)
class PreparedFrame:
    """A frame's reports encoded ahead of its instant."""

    number: int
    due: float  # monotonic: the message time + the scene's latency
    reports: int
    stream: bytes  # the messages one after the other (TCP)
    datagrams: list[bytes]  # the messages packed into datagrams (UDP)


@dataclass(frozen=True)
class FrameEvents:
    """The events a simulator and its frame thread share."""

    #: the frame thread looks again: clients came, or stop
    wake: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)


class FrameSource(Protocol):
    """What the frame thread reads of its simulator (VrpnSimulator is one): the clients
    to send to (a tuple the loop replaces when a client comes or goes, so the thread never
    sees a list change under it), the pacer, the delivery, the lateness record it alone
    writes, and the frames."""

    receivers: tuple[Session, ...]
    pacer: FramePacer
    delivery: Delivery[PreparedFrame]
    lateness: Lateness

    def prepare(self, k: int) -> PreparedFrame: ...

    def hand_out(self, frame: PreparedFrame) -> None: ...

    def log(self, text: str) -> None: ...


class FrameSender(FrameThread[PreparedFrame, PreparedFrame]):
    """The frame thread of a :class:`VrpnSimulator`: computes every frame ahead of its
    instant and sends it to every client at that instant, while some client is connected
    (the schedule is :class:`FrameThread`'s).

    It is handed its simulator's public side (:class:`FrameSource`), the scene's
    ``rate``, whether the network holds frames (``held``) and the shared
    :class:`FrameEvents`; it alone writes the lateness record, which the loop reads at
    stop after the thread ended."""

    #: between a frame computed and its send, nothing else is computed
    send_before_computing = True

    def __init__(self, source: FrameSource, events: FrameEvents, *, rate: float, held: bool) -> None:
        super().__init__(rate, source.delivery, held, min(QUIET, QUIET_SHARE / rate))
        self.simulator = source
        self.pacer = source.pacer
        self.lateness = source.lateness
        self._wake = events.wake
        self._stopping = events.stopping
        self._receivers: tuple[Session, ...] = ()  # this pass's: read once, in serving()

    def run(self) -> None:
        """(frame thread) Sends every frame at its instant while some client is connected, until stop."""
        try:
            self.frame_loop(self._stopping, self._wake)
        except Exception as exc:  # say why reports stopped
            self.simulator.log(f"the frame clock stopped: {exc!r}; no reports are sent any more")
            raise

    # ------------------------------------------------------------------ FrameThread's hooks
    def serving(self) -> bool:
        """Some client is connected; the clients this pass sends to are taken here, once."""
        self._receivers = self.simulator.receivers
        return bool(self._receivers)

    def restart(self) -> None:
        """Nobody was served: start at the newest frame."""
        self.pacer.restart()

    def prepare(self, now: float) -> tuple[PreparedFrame, float]:
        """The next frame to send (one the scene drops has no reports, but keeps its
        place in time) and its due time."""
        frame = self.simulator.prepare(self.pacer.take(now))  # the next, or a skip ahead when too late
        return frame, frame.due

    def hand_out(self, frame: PreparedFrame) -> PreparedFrame:
        """``frame`` leaves the server (its truth line)."""
        self.simulator.hand_out(frame)
        return frame

    def send_due(self, frame: PreparedFrame) -> None:
        """A computed frame at its instant: how late it left is recorded first."""
        # when its first byte leaves (a loopback send also runs the receiver's side)
        self.lateness.add(frame.number, time.monotonic() - frame.due)
        super().send_due(frame)

    def send_released(self, items: list[PreparedFrame]) -> None:
        """Each frame's reports to every client, in order."""
        for frame in items:
            for session in self._receivers:
                session.send_reports(frame)


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
