"""The two halves of playing a file: decoding ahead of time, and handing frames over on time.

:class:`ReadAhead` runs a thread that decodes the file's frames into a bounded queue (in
chunks, looping when asked) and watches the file for changes; what it puts last is an
:class:`End` with the reason it stopped. :class:`Pacer` turns a frame's offset in the
file into the monotonic time it is due at, and waits for it. Neither knows of ROS nodes
or of the adapter's parameters beyond what it is given.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .readers import ReplayFileError, ReplaySource, TimedFrame, file_signature
from .source import DECODE_BATCH, FAST_DECODE_BATCH

#: how often the read-ahead thread looks at the file for changes, s
WATCH_PERIOD = 0.5
#: frames handed from the read-ahead thread to the reader at once: one queue operation
#: (two thread switches) per frame cost more than decoding a small frame
CHUNK = 16

#: a frame and the shift of its loop (added to its offset in every loop after the first)
Item = tuple[TimedFrame, float]


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
    """Frames of ``source`` between ``start`` and ``end`` decoded on a thread of their own,
    at most about ``depth`` ahead of the reader. ``paced``: the reader waits for due
    times, so the thread gives it the interpreter after every frame."""

    def __init__(
        self,
        source: ReplaySource,
        signature: tuple[int, int] | None,
        start: float,
        end: float,
        loop: bool,
        depth: int,
        paced: bool,
    ) -> None:
        self.source = source
        self.signature = signature
        self.start = start
        self.end = end
        self.loop = loop
        self.paced = paced
        source.decode_batch = DECODE_BATCH if paced else FAST_DECODE_BATCH
        self.loops = 0
        self._queue: queue.Queue[list[Item] | End] = queue.Queue(maxsize=max(1, depth // CHUNK))
        self._ready: collections.deque[Item] = collections.deque()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def begin(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._closing.clear()
            self._thread = threading.Thread(target=self._run, name="replay-read-ahead", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the thread and wait for it (bounded)."""
        self._closing.set()
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
        """Frames decoded and not yet taken (chunks counted whole)."""
        return self._queue.qsize() * CHUNK + len(self._ready)

    def _run(self) -> None:
        source = self.source
        last_watch = time.monotonic()
        shift = 0.0  # added to the offsets of every loop after the first
        reason = ""
        try:
            batch: list[Item] = []
            while not self._closing.is_set():
                last = None
                for item in source.frames(self.start, self.end):
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
                    batch.append((item, shift))
                    if len(batch) >= CHUNK:
                        if not self._put(batch):
                            return
                        batch = []
                    last = item
                if batch:
                    if not self._put(batch):
                        return
                    batch = []
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
        self._put(End(problem or reason))

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

    @staticmethod
    def wait_until(due: float, timeout: float, paused: threading.Event) -> bool:
        """Wait for the monotonic time ``due``; False when ``timeout`` ends first or
        ``paused`` is set.

        A plain sleep, without polling the clock for the last part: a sleep wakes up some
        0.1 ms late on an idle machine, within a frame's budget, while a thread polling
        the clock is the one the scheduler preempts when other processes want the cores,
        and then it is milliseconds late (on a loaded 2-core machine, polling the last
        0.4 ms made a frame more than 0.5 ms late 33-59 % of the time against 13-29 %
        with the plain sleep, in every one of five alternated runs)."""
        limit = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if now >= due:
                return True
            if now >= limit or paused.is_set():
                return False
            time.sleep(min(due, limit) - now)
