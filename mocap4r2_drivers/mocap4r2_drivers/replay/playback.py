"""The two halves of playing a file: decoding ahead of time, and handing frames over on time.

:class:`ReadAhead` runs a thread that decodes the file's frames into a bounded queue (in
chunks, looping when asked) and watches the file for changes; what it puts last is an
:class:`End` with the reason it stopped. :class:`Pacer` turns a frame's offset in the
file into the monotonic time it is due at, and waits for it. Neither knows of ROS nodes
or of the adapter's parameters beyond what it is given.

Both run in one interpreter, and a thread that wants the interpreter while another
computes gets it only when that one blocks or after the switch interval (5 ms). So when
frames are paced, the read-ahead thread decodes only while the reader is not about to
hand a frame over (:meth:`Pacer.hold_off`): at 1x a frame's decoding takes a few
percent of its period, and the reader finds the interpreter free at its due time.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..common import lower_timer_slack, wait_until
from .readers import ReplayFileError, ReplaySource, TimedFrame, file_signature
from .source import DECODE_BATCH, FAST_DECODE_BATCH

#: how often the read-ahead thread looks at the file for changes, s
WATCH_PERIOD = 0.5
#: frames handed from the read-ahead thread to the reader at once: one queue operation
#: (two thread switches) per frame cost more than decoding a small frame
CHUNK = 16

#: a frame and the shift of its loop (added to its offset in every loop after the first)
Item = tuple[TimedFrame, float]

#: the last part of a wait spent polling the clock, s: a sleep wakes up some 0.05-0.1 ms
#: late on an idle machine (more on a busy one), polling does not; 0.3 ms a frame costs
#: about a tenth of a core at 360 Hz
SPIN = 0.0003
#: the read-ahead decodes nothing from this long before a frame is due ...
QUIET_BEFORE = 0.0015
#: ... until this long after it (the frame is then being encoded and published)
QUIET_AFTER = 0.0005


@dataclass(slots=True)
class End:
    """What the read-ahead thread puts last: the reason it stopped ("" at the file's end)."""

    reason: str


def file_change(path: Path, signature: tuple[int, int] | None) -> str:
    """Why the file at ``path`` is not the one of ``signature`` any more ("" if it is)."""
    if signature is None:
        return ""
    try:
        now = file_signature(path)
    except OSError as exc:
        return f"the file changed during replay ({exc})"
    if now != signature:
        return (
            f"the file changed during replay (size {signature[0]} -> {now[0]} bytes, or modified); "
            "replay stopped"
        )
    return ""


class ReadAhead:
    """Frames of ``source`` between ``start`` and ``end``, decoded ahead of the reader.

    ``paced`` (the reader waits for due times): on a thread of their own, at most about
    ``depth`` ahead; the thread gives the reader the interpreter after every frame, and
    before decoding more it sleeps for what ``hold_off`` says (seconds; the reader's frame
    is due soon). Not paced (as fast as it goes): decoded by the reader's own thread when
    it takes them. There is nothing to be ahead of then, and in one interpreter a second
    thread cannot decode while the reader encodes: it only adds the hand-overs between
    the two (decode and encode took 1.35 times as long per frame on two threads as on
    one, bench_replay's session at load 1.3-1.5)."""

    def __init__(
        self,
        source: ReplaySource,
        signature: tuple[int, int] | None,
        *,
        start: float,
        end: float,
        loop: bool,
        depth: int,
        paced: bool,
        hold_off: Callable[[], float] | None = None,
    ) -> None:
        self.source = source
        self.signature = signature
        self.start = start
        self.end = end
        self.loop = loop
        self.paced = paced
        self._hold_off = hold_off if paced else None
        source.decode_batch = DECODE_BATCH if paced else FAST_DECODE_BATCH
        self.loops = 0
        self._queue: queue.Queue[list[Item] | End] = queue.Queue(maxsize=max(1, depth // CHUNK))
        self._ready: collections.deque[Item] = collections.deque()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._inline: Iterator[Item | End] | None = None  # not paced: frames decoded on take()

    @property
    def running(self) -> bool:
        return self._thread is not None or self._inline is not None

    def begin(self) -> None:
        """Start decoding (once): the thread when paced."""
        if self.running:
            return
        self._closing.clear()
        if not self.paced:
            self._inline = self._produce()
            return
        self._thread = threading.Thread(target=self._run, name="replay-read-ahead", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop decoding, and wait for the thread (bounded)."""
        self._closing.set()
        self._inline = None
        thread, self._thread = self._thread, None
        if thread is not None:
            with contextlib.suppress(queue.Empty):
                while True:  # unblock a put
                    self._queue.get_nowait()
            thread.join(timeout=5.0)

    def take(self, timeout: float) -> Item | End | None:
        """The next frame, the End, or None when nothing came within ``timeout``."""
        if self._ready:
            return self._ready.popleft()
        if self._inline is not None:
            return next(self._inline, None)
        try:
            got = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(got, End):
            return got
        self._ready.extend(got)
        return self._ready.popleft()

    @property
    def depth(self) -> int:
        """Frames decoded and not yet taken (chunks counted whole; 0 when not paced)."""
        return self._queue.qsize() * CHUNK + len(self._ready)

    def _run(self) -> None:
        """The thread: the frames in chunks of CHUNK into the queue, then the End."""
        batch: list[Item] = []
        for got in self._produce():
            if isinstance(got, End):
                if batch and not self._put(batch):
                    return
                self._put(got)
                return
            batch.append(got)
            if len(batch) >= CHUNK:
                if not self._put(batch):
                    return
                batch = []

    def _produce(self) -> Iterator[Item | End]:
        """Every frame to play, in order and looping as asked, then an End with the reason
        it stopped; the file is watched on the way."""
        source = self.source
        last_watch = time.monotonic()
        shift = 0.0  # added to the offsets of every loop after the first
        reason = ""
        try:
            hold_off = self._hold_off
            while not self._closing.is_set():
                last = None
                frames = iter(source.frames(self.start, self.end))
                while True:
                    if hold_off is not None:
                        # decoding (the next frame may need a batch of messages) must not
                        # hold the interpreter when the reader's frame falls due
                        pause = hold_off()
                        if pause > 0:
                            time.sleep(pause)
                    item = next(frames, None)
                    if item is None:
                        break
                    now = time.monotonic()
                    if now - last_watch > WATCH_PERIOD:
                        last_watch = now
                        problem = file_change(source.path, self.signature)
                        if problem:
                            raise ReplayFileError(problem)
                    if self.paced:
                        # let the reader thread take the interpreter now if its frame is due:
                        # otherwise it waits for the switch interval (5 ms) while frames decode
                        time.sleep(0)
                    yield item, shift
                    last = item
                if last is None:
                    reason = "no frames between start and end"
                    break
                if not self.loop:
                    break
                period = 1.0 / source.info.rate if source.info.rate > 0 else 0.0
                shift += last.offset - self.start + period
                self.loops += 1
        except ReplayFileError as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - the file broke while playing: say how
            reason = f"{type(exc).__name__}: {exc}"
        problem = file_change(source.path, self.signature)
        yield End(problem or reason)

    def _put(self, item: list[Item] | End) -> bool:
        while not self._closing.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False


class Pacer:
    """Due times of frames at ``rate_factor`` (> 0) times real time, counted from the
    first frame after every (re)start, and the wait for them."""

    def __init__(self, rate_factor: float) -> None:
        self.rate_factor = rate_factor
        self.anchor_wall = -1.0  # monotonic time at which anchor_offset is due
        self.anchor_offset = 0.0
        self.anchor_unix = 0.0
        # the due time the reader waits for or has just handed over (read by the
        # read-ahead thread: a float attribute is read and written whole)
        self.next_due = -1.0
        self._slack_lowered = threading.local()  # per thread: whether its timer slack is lowered

    def restart(self) -> None:
        """The next frame is due when it is handed over; the others follow from it."""
        self.anchor_wall = -1.0

    def due(self, offset: float) -> float:
        """The monotonic time the frame at ``offset`` s in the file is due."""
        if self.anchor_wall < 0:
            self.anchor_wall = time.monotonic()
            self.anchor_offset = offset
            self.anchor_unix = time.time()
        if self.rate_factor <= 0:
            return self.anchor_wall
        return self.anchor_wall + (offset - self.anchor_offset) / self.rate_factor

    def unix_time(self, due: float) -> float:
        """The Unix time of the monotonic time ``due``."""
        return self.anchor_unix + (due - self.anchor_wall)

    def hold_off(self) -> float:
        """How long the read-ahead thread should wait before decoding more: until just
        after the frame the reader waits for, when it is due within QUIET_BEFORE; else 0."""
        due = self.next_due
        if due < 0:
            return 0.0
        now = time.monotonic()
        if now + QUIET_BEFORE < due or now > due + QUIET_AFTER:
            return 0.0
        return due + QUIET_AFTER - now

    def wait_until(self, due: float, timeout: float, paused: threading.Event) -> bool:
        """Wait for the monotonic time ``due``; False when ``timeout`` ends first or
        ``paused`` is set.

        Sleeps until SPIN before ``due`` (the thread's timer slack lowered, so the sleep
        ends when asked), then polls the clock (common.wait_until): the hand-over is then
        as late as the clock reading, unless the scheduler takes the core away in that
        last part. The read-ahead thread stays off the interpreter meanwhile
        (``hold_off``)."""
        self.next_due = due
        self._lower_timer_slack()
        return wait_until(due, SPIN, paused, time.monotonic() + timeout)

    def _lower_timer_slack(self) -> None:
        """common.lower_timer_slack for the calling thread, once (this runs every frame)."""
        if getattr(self._slack_lowered, "done", False):
            return
        self._slack_lowered.done = True
        lower_timer_slack()
