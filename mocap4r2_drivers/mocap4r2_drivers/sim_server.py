"""What the stand-in servers (qtm_simulator, vrpn_simulator, natnet_simulator) share.

The scene their command lines name, the real-time pacing of its frames (a server that
falls behind skips ahead instead of sending a growing backlog, as the real servers do),
a connected peer's name, running until SIGINT/SIGTERM, the schedule of their frame
threads (:class:`FrameThread`) and how a frame thread writes to a client's TCP
connection, which the asyncio loop writes to too (:class:`ThreadedStreamWriter`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import enum
import math
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from mocap4r2_control.stop_signals import stop_noted

from .common import lower_timer_slack, wait_until
from .impairment import Delivery
from .simulated.scene import Scene, default_scene_path

__all__ = [
    "IDLE_WAIT",
    "MAX_LATENESS",
    "MAX_PREPARED",
    "PREPARE_AHEAD",
    "QUIET",
    "QUIET_SHARE",
    "SPIN",
    "SPIN_SHARE",
    "STAND_IN_BATCH_SPAN",
    "FramePacer",
    "FrameThread",
    "ThreadWrite",
    "ThreadedStreamWriter",
    "add_scene_arguments",
    "load_scene",
    "seed_value",
    "peer_name",
    "run_until_signalled",
]

MAX_LATENESS = 0.25  # s behind real time before a server skips ahead
#: the last part of a wait for a send spent polling the clock, s: a sleep ends some
#: 0.05-0.1 ms late (more on a busy machine), polling does not ...
SPIN = 0.0003
#: ... and at most this share of a frame period, so that polling takes at most about a
#: tenth of a core whatever the rate (at 2 kHz, 0.05 ms a frame)
SPIN_SHARE = 0.1
#: no frame is computed when a send is due within this, s (computing and encoding a frame
#: takes up to a millisecond or so on a loaded machine, and the interpreter runs one
#: thread at a time: the work would make that send late) ...
QUIET = 0.002
#: ... or within this share of a frame period: above 1 / (QUIET_SHARE * QUIET) Hz a fixed
#: quiet time would be longer than the time between sends, so frames would be computed
#: only once the queue ran dry, that is when a send was already due (at 1 kHz a third of
#: the frames left late)
QUIET_SHARE = 0.5
#: a stand-in computes its scene in batches of at most this long a span of frames, s:
#: the batch is computed between two sends, so it must take less than a frame period
#: (at 1 kHz, the scene's default of 32 frames took 1.4 ms with 10 bodies, and the
#: frames after it were sent up to that late; 4 frames take about 0.2 ms)
STAND_IN_BATCH_SPAN = 0.004
#: frames are computed up to this long before they are due, s ...
PREPARE_AHEAD = 0.010
#: ... and at most this many
MAX_PREPARED = 64
#: a frame thread looks for work (clients, the streaming state) at least this often, s
IDLE_WAIT = 0.05


def add_scene_arguments(parser: argparse.ArgumentParser, rate_help: str) -> None:
    """The options every stand-in has: --scene, --host, --rate (``rate_help``), --seed."""
    parser.add_argument("--scene", default="", help="scene YAML file (default: the demo scene)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--rate", type=float, default=0.0, help=rate_help)
    parser.add_argument("--seed", type=seed_value, default=-1, help="random seed (default: the scene's)")


def seed_value(text: str) -> int:
    """A --seed: an integer >= 0. Internally -1 stands for "the scene's", so a negative
    seed typed by a user would silently become the scene's seed: it is refused instead."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, not {text!r}") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, not {seed}")
    return seed


def load_scene(path: str, seed: int, rate: float) -> Scene:
    """The scene file (the demo scene for ""), with its seed and rate unless given (>= 0,
    > 0), computed in batches a stand-in can fit between two sends."""
    scene = Scene.from_file(path or default_scene_path(), seed=None if seed < 0 else seed)
    if rate > 0:
        scene.config["rate"] = rate
        scene = Scene(scene.config, seed=None if seed < 0 else seed)
    # the same frames in smaller batches (a frame does not depend on its batch)
    scene.batch_size = max(1, min(scene.batch_size, round(scene.rate * STAND_IN_BATCH_SPAN)))
    return scene


def peer_name(writer: asyncio.StreamWriter) -> str:
    """``host:port`` of a connection's other end (``?`` once it is gone)."""
    address = writer.get_extra_info("peername")
    return f"{address[0]}:{address[1]}" if address else "?"


class FramePacer:
    """Which frame a real-time server sends next.

    Frame k is captured at ``start + k / rate`` and due ``latency`` later. The first
    frame after :meth:`restart` is the one after the newest due; a server more than
    MAX_LATENESS behind jumps there too, counting the frames it skips.
    """

    def __init__(self, rate: float, latency: float, start: float) -> None:
        self.rate = rate
        self.latency = latency
        self.start = start
        self.skipped = 0  # frames jumped over to keep real time
        self._next: int | None = None

    def restart(self) -> None:
        """Nobody was served for a while: start again at the newest due frame."""
        self._next = None

    def take(self, now: float) -> int:
        """The number of the frame to handle now (monotonic ``now``); the next call gives the one after."""
        due = int((now - self.start - self.latency) * self.rate)
        k = self._next
        if k is None or k < due - MAX_LATENESS * self.rate:
            if k is not None:
                self.skipped += due - k
            k = max(due + 1, 0)
        self._next = k + 1
        return k


class StoppableServer(Protocol):
    """What :func:`run_until_signalled` needs of a server."""

    @property
    def frames_late_skipped(self) -> int: ...

    async def stop(self) -> None: ...

    def log(self, text: str) -> None: ...


async def run_until_signalled(server: StoppableServer, ready: str) -> int:
    """Print ``ready``, serve until SIGINT or SIGTERM, stop the server; the exit status."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if stop_noted():  # a signal while the scene loaded and the server started
        stop.set()
    print(ready, flush=True)
    await stop.wait()
    await server.stop()
    server.log(f"stopped ({server.frames_late_skipped} frames skipped to keep real time)")
    return 0


class DueFrame(Protocol):
    """A frame computed ahead: it leaves the server at ``due`` (monotonic)."""

    @property
    def due(self) -> float: ...


FrameT = TypeVar("FrameT", bound=DueFrame)
ItemT = TypeVar("ItemT")


class FrameThread(Generic[FrameT, ItemT]):
    """The schedule of a stand-in's frame thread: every frame computed ahead of its due
    time and sent at that instant.

    A real server sends from its own machine whatever its command handling does, each frame
    as soon as it is processed. A stand-in that computes and encodes a frame when it wakes
    up sends it that much late, a different amount each time, and every stamp measured
    against the frame's capture carries that lateness. So :meth:`frame_loop` computes each
    frame up to PREPARE_AHEAD before its due time (at most MAX_PREPARED of them), never
    within ``quiet`` of a send unless nothing is computed and nothing is on the network,
    sleeps until shortly before a send and polls the clock for the rest
    (:func:`~mocap4r2_drivers.common.wait_until`), then sends.

    With a time impairment that delays (``held``) each frame goes to the network
    (``delivery``, an :class:`~mocap4r2_drivers.impairment.Delivery` of ItemT) at its due
    time instead, and is sent when the network releases it.

    A stand-in subclasses this and says what differs: :meth:`prepare`, :meth:`hand_out`
    (the frame leaves the server: what the network carries of it), :meth:`send_released`,
    and where it has them :meth:`serving` (anyone to send to at all), :meth:`streaming`
    (frames wanted now; a pause drops what was computed), :meth:`finished` (no more frames
    will be computed: the thread ends once the last is sent), :meth:`restart` and
    :meth:`send_due`.
    """

    #: with a computed frame waiting, wait for its send rather than for the next frame
    #: to compute (the thread then computes only between sends)
    send_before_computing = False

    def __init__(self, rate: float, delivery: Delivery[ItemT], held: bool, quiet: float = QUIET) -> None:
        self.delivery = delivery
        self.held = held  # the network delays frames: they go to it at their due time
        self.quiet = min(quiet, QUIET_SHARE / rate)
        self.spin = min(SPIN, SPIN_SHARE / rate)

    # ------------------------------------------------------------------ what a stand-in says
    def prepare(self, now: float) -> tuple[FrameT | None, float]:
        """The next frame, computed, and the due time of the newest frame looked at
        (None: no frame to send this time, e.g. a run of frames the scene drops)."""
        raise NotImplementedError

    def hand_out(self, frame: FrameT) -> ItemT:
        """``frame`` leaves the server (its truth line, its counts): what is sent of it."""
        raise NotImplementedError

    def send_released(self, items: list[ItemT]) -> None:
        """Sends ``items`` now, in order (what the network releases, a burst at once)."""
        raise NotImplementedError

    def send_due(self, frame: FrameT) -> None:
        """A computed frame is due (without impairment): it leaves now."""
        self.send_released([self.hand_out(frame)])

    def serving(self) -> bool:
        """Someone to send to; False: nothing is computed, sent or released (the network
        keeps what it holds), and computed frames are dropped. Asked first in each pass."""
        return True

    def streaming(self) -> bool:
        """Frames are wanted; False: none is computed and computed ones are dropped (what
        the network holds is still sent)."""
        return True

    def finished(self) -> bool:
        """No more frames will be computed: the thread ends once the last is sent."""
        return False

    def restart(self) -> None:
        """Frames are wanted again after a pause (or for the first time)."""

    # ------------------------------------------------------------------ the schedule
    def frame_loop(self, stop: threading.Event, wake: threading.Event) -> None:
        """(frame thread) Computes and sends frames until ``stop`` (or :meth:`finished`);
        ``wake`` set: look again now (it is cleared, unless stopping)."""
        lower_timer_slack()
        prepared: deque[FrameT] = deque()  # computed, not due yet (without impairment)
        ahead = -math.inf  # due time of the newest frame computed (or looked at)
        active = False  # frames have been wanted since the last restart
        while not stop.is_set():
            if not self.serving():
                prepared.clear()
                active = False
                self._wait(time.monotonic() + IDLE_WAIT, 0.0, stop, wake)
                continue
            now = time.monotonic()
            released = self.delivery.due(now)
            if released:
                self.send_released(released)
            streaming = self.streaming()
            if not streaming:
                prepared.clear()
                active = False
            elif not active:
                active = True
                self.restart()
                ahead = -math.inf
            while prepared and prepared[0].due <= now:
                self.send_due(prepared.popleft())
            release = self.delivery.next_time()
            # the next send: a frame due (without impairment) or a burst the network releases
            wake_at = min(math.inf if release is None else release, prepared[0].due if prepared else math.inf)
            finished = self.finished()
            more = streaming and not finished
            compute = more and ahead < now + PREPARE_AHEAD
            # compute the next frame now unless a send is due within the quiet time: the
            # work would make it late; with nothing computed and nothing on the network,
            # there is no send to protect
            if (
                compute
                and len(prepared) < MAX_PREPARED
                and (wake_at - now > self.quiet or (not prepared and release is None))
            ):
                frame, ahead = self.prepare(now)
                if frame is None:
                    continue
                if self.held:
                    # the network takes it at its due time, not when it was computed
                    self.delivery.put(self.hand_out(frame), frame.due)
                else:
                    prepared.append(frame)
                continue
            if finished and not prepared and release is None:
                return  # every frame sent (a burst still held never completes)
            later = now + IDLE_WAIT  # when to look again for work that is not a send
            if more and not compute:
                later = min(later, ahead - PREPARE_AHEAD)
            if wake_at <= later or (self.send_before_computing and prepared):
                self._wait(wake_at, self.spin, stop, wake)
            else:
                self._wait(later, 0.0, stop, wake)

    @staticmethod
    def _wait(due: float, spin: float, stop: threading.Event, wake: threading.Event) -> None:
        """Until ``due`` (polling the clock for the last ``spin`` s), or until woken."""
        if not wait_until(due, spin, wake) and not stop.is_set():
            wake.clear()


class ThreadWrite(enum.Enum):
    """What became of a frame thread's write (:meth:`ThreadedStreamWriter.write_from_thread`)."""

    WRITTEN = "written"  # to the socket, or handed to the loop behind what it holds
    FULL = "full"  # the client's backlog is at its budget: nothing written
    GONE = "gone"  # the connection is closing or reset, or the loop is closed: nothing written


class ThreadedStreamWriter:
    """A client's asyncio TCP connection that two threads write to: the loop (answers,
    descriptions) and a frame thread (frames, at their instant, without waiting for the
    loop to wake). The bytes go out in the order they were written, never interleaved.

    The frame thread writes to the transport's socket itself (non-blocking) while the
    transport holds no bytes; otherwise it hands its bytes to the loop
    (``call_soon_threadsafe``), and everything written after them, from either thread,
    follows the same way until the loop has taken them. A client further behind than
    ``max_send_buffer`` bytes in the transport or MAX_HANDED_OVER pending hand-overs
    loses the frame thread's writes.

    One lock, :attr:`lock`, serialises the two threads: :meth:`write_from_loop` and the
    loop's callback that writes what was handed over take it; the frame thread's
    methods and :meth:`close` are called holding it, so that a session that also sends
    by UDP and closes both can hold it around all of that. ``closed`` says whether the
    session is closed: a closed session writes nothing."""

    #: bytes the transport may hold for a client before the frame thread's writes are lost
    MAX_SEND_BUFFER = 4 * 1024 * 1024
    #: writes of the frame thread waiting for the loop to take them (a socket that was
    #: full); beyond this many a client loses the frame thread's writes, as beyond MAX_SEND_BUFFER
    MAX_HANDED_OVER = 256

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop | None,
        closed: Callable[[], bool],
        max_send_buffer: int = MAX_SEND_BUFFER,
    ) -> None:
        self.writer = writer
        self.loop = loop
        self.lock = threading.Lock()
        self.max_send_buffer = max_send_buffer
        self._closed = closed
        self._handed_over = 0  # writes handed to the loop and not yet taken by it

    def write_from_loop(self, data: bytes) -> None:
        """(loop thread) Write ``data`` after everything written before."""
        with self.lock:
            if self._closed():
                return
            if self._handed_over and self.loop is not None:
                self._handed_over += 1
                self.loop.call_soon(self._write_handed_over, data)  # behind those handed over
            else:
                self.writer.write(data)

    def write_from_thread(self, data: bytes) -> ThreadWrite:
        """(frame thread, holding :attr:`lock`) Write ``data`` now, or hand it to the loop
        behind what it holds; nothing when the backlog is full or the connection is gone."""
        outcome, rest = self._write_now(data)
        if rest:
            return ThreadWrite.WRITTEN if self.hand_over(rest) else ThreadWrite.GONE
        return outcome

    def _write_now(self, data: bytes) -> tuple[ThreadWrite, bytes]:
        """(frame thread, holding :attr:`lock`) The first step of :meth:`write_from_thread`:
        what it wrote to the socket, and the bytes that must still be handed to the loop
        (:meth:`hand_over`), all of ``data`` when the transport holds bytes or some were
        handed over before."""
        transport = self.writer.transport
        if self._closed() or self.loop is None or transport.is_closing():
            return ThreadWrite.GONE, b""
        buffered = transport.get_write_buffer_size()
        if buffered > self.max_send_buffer or self._handed_over >= self.MAX_HANDED_OVER:
            return ThreadWrite.FULL, b""
        if buffered or self._handed_over:
            return ThreadWrite.WRITTEN, data
        fd = transport.get_extra_info("socket").fileno()  # -1 once closed
        if fd < 0:
            return ThreadWrite.GONE, b""
        try:
            # the transport's own socket, non-blocking; the loop writes to it only through
            # the lock, and only while the transport holds no bytes
            written = os.write(fd, data)
        except (BlockingIOError, InterruptedError):
            written = 0
        except OSError:
            return ThreadWrite.GONE, b""  # reset or closed: the loop's reader sees it and drops the session
        return ThreadWrite.WRITTEN, data[written:]

    def hand_over(self, data: bytes) -> bool:
        """(frame thread, holding :attr:`lock`) ``data`` for the loop to write, behind what
        it holds; False when the loop is closed (the server is stopping)."""
        assert self.loop is not None
        try:
            self.loop.call_soon_threadsafe(self._write_handed_over, data)
        except RuntimeError:  # the loop is closed: the server is stopping
            return False
        self._handed_over += 1
        return True

    def close(self) -> None:
        """(loop thread, holding :attr:`lock`) Close the connection."""
        with contextlib.suppress(Exception):  # already closed
            self.writer.close()

    def _write_handed_over(self, data: bytes) -> None:
        with self.lock:
            self._handed_over -= 1
            if not self._closed():
                self.writer.write(data)
