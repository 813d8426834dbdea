"""What the marker_tracker keeps of its source between the subscription and the tracker.

Two small pieces with no ROS in them: :class:`FrameQueue`, the bounded hand-over from the
executor thread that receives messages to the reader thread that tracks them (a tracker
slower than its source drops the oldest frames and counts them, never queues without
bound), and :class:`SourceRate`, the source's frame rate measured from the source's own
frame numbers and stamps, so that a publish rate below it on /diagnostics shows the
tracker falling behind rather than the source slowing down.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

SOURCE_PERIODS_KEPT = 256  # recent frame periods the rate's median is taken over


class FrameQueue:
    """Raw messages between the subscription and the reader thread, at most ``size``: a
    full queue drops its oldest message and counts it."""

    def __init__(self, size: int) -> None:
        self._items: deque[bytes] = deque()
        self._size = size
        self._ready = threading.Condition()
        self.dropped = 0
        self.open = False

    def put(self, data: bytes) -> None:
        with self._ready:
            if not self.open:
                return
            if len(self._items) >= self._size:
                self._items.popleft()
                self.dropped += 1
            self._items.append(data)
            self._ready.notify()

    def get(self, timeout: float) -> bytes | None:
        with self._ready:
            if not self._items:
                self._ready.wait(max(timeout, 0.0))
            return self._items.popleft() if self._items else None

    def set_open(self, is_open: bool) -> None:
        with self._ready:
            self.open = is_open
            self._items.clear()
            self._ready.notify_all()


class SourceRate:
    """The source's frame rate from the frames tracked: the median period between two
    frames, each divided by the frame numbers between them, so frames the tracker
    dropped do not change it."""

    def __init__(self) -> None:
        self._last: tuple[int, float] | None = None
        self._periods: deque[float] = deque(maxlen=SOURCE_PERIODS_KEPT)

    def note(self, frame_number: int, stamp: float) -> None:
        last = self._last
        self._last = (frame_number, stamp)
        if last is not None and frame_number > last[0] and stamp > last[1]:
            self._periods.append((stamp - last[1]) / (frame_number - last[0]))

    @property
    def hz(self) -> float:
        """The rate in Hz; 0 before two frames."""
        if not self._periods:
            return 0.0
        return float(1.0 / np.median(np.asarray(self._periods)))
