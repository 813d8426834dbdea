"""What a network and a mocap server do to time, for the stand-ins to do it too.

Every stand-in (``natnet_simulator``, ``qtm_simulator``, the simulated system, the Vicon
SDK double) can serve its frames the way a real installation does, so that stamping can
be measured against the truth:

* the server's own clock runs at its own rate (``clock_drift_ppm``) from its own origin
  (``clock_offset_s``) and may restart (``clock_reset_at`` s after the start: a server
  restart, a new measurement);
* the network holds frames back and delivers them ``burst`` at a time (Wi-Fi
  aggregation, a busy switch), each delivery delayed by an exponential ``jitter_ms``,
  in order (a queue does not overtake);
* the truth log (``truth_log``) has one CSV line ``frame_number,capture_time`` per frame
  sent: the true capture instant on the host clock, Unix seconds.

Pure Python, no sockets: each stand-in calls :class:`ServerClock` for the time it puts in
a frame and :class:`Delivery` for when the frame may leave.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

T = TypeVar("T")

# a truth log stops growing at this many lines (about 300 MB): a forgotten flag must not fill a disk
TRUTH_LOG_MAX_LINES = 10_000_000
# at most this many frames held back by a burst or waiting for their delivery time
MAX_HELD = 100_000


@dataclass(frozen=True)
class TimeImpairment:
    """What the stand-in does to time; the defaults do nothing."""

    jitter_ms: float = 0.0  # mean of the exponential extra delay of each delivery
    burst: int = 1  # frames held back and delivered together
    clock_drift_ppm: float = 0.0  # how much faster the server clock runs than the host's
    clock_offset_s: float = 0.0  # the server clock's reading at the start
    clock_reset_at: float = -1.0  # the server clock restarts this many s after the start; < 0: never
    truth_log: str = ""  # CSV file of true capture times; "": none
    seed: int = 0  # of the jitter draws

    def problem(self) -> str | None:
        """Why these values cannot be used, or None."""
        for name in ("jitter_ms", "clock_drift_ppm", "clock_offset_s", "clock_reset_at"):
            if not math.isfinite(getattr(self, name)):
                return f"{name} must be a finite number, got {getattr(self, name)!r}"
        if not 0.0 <= self.jitter_ms <= 10_000.0:
            return f"jitter_ms must be in [0, 10000], got {self.jitter_ms!r}"
        if not 1 <= self.burst <= 10_000:
            return f"burst must be in [1, 10000], got {self.burst!r}"
        if abs(self.clock_drift_ppm) > 100_000.0:
            return f"clock_drift_ppm must be within +-100000, got {self.clock_drift_ppm!r}"
        if abs(self.clock_offset_s) > 1e10:
            return f"clock_offset_s must be within +-1e10, got {self.clock_offset_s!r}"
        return None

    @property
    def shifts_clock(self) -> bool:
        """Whether the server clock differs from the host's by more than an origin."""
        return self.clock_drift_ppm != 0.0 or self.clock_offset_s != 0.0 or self.clock_reset_at >= 0.0

    @property
    def delays(self) -> bool:
        """Whether deliveries are held back or delayed at all."""
        return self.jitter_ms > 0.0 or self.burst > 1

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TimeImpairment:
        """From scene keys or parsed flags (unknown keys ignored; None means the default);
        ValueError with the reason when a value is wrong."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            value = values.get(f.name)
            if value is None:
                continue
            kind = type(getattr(cls(), f.name))
            try:
                kwargs[f.name] = kind(value) if kind is not float else float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{f.name} must be {kind.__name__}, got {value!r}") from None
            if kind is int and float(value) != int(value):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
        impairment = cls(**kwargs)
        problem = impairment.problem()
        if problem:
            raise ValueError(problem)
        return impairment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The stand-ins' flags: --jitter-ms, --burst, --clock-drift-ppm, --clock-offset-s,
    --clock-reset-at, --truth-log."""
    group = parser.add_argument_group("time impairment (what a network and a server clock do)")
    group.add_argument("--jitter-ms", type=float, default=0.0, help="extra delay, exponential with this mean")
    group.add_argument("--burst", type=int, default=1, help="frames held back and sent this many at a time")
    group.add_argument("--clock-drift-ppm", type=float, default=0.0, help="server clock rate vs the host's")
    group.add_argument("--clock-offset-s", type=float, default=0.0, help="server clock reading at the start")
    group.add_argument(
        "--clock-reset-at", type=float, default=-1.0, help="the server clock restarts this many s after start"
    )
    group.add_argument(
        "--truth-log", default="", help="CSV frame_number,capture_time (host clock, Unix s) per frame sent"
    )


def from_arguments(args: argparse.Namespace, seed: int = 0) -> TimeImpairment:
    """The impairment of parsed flags; ValueError with the reason when one is wrong."""
    return TimeImpairment.from_mapping({**vars(args), "seed": seed})


class ServerClock:
    """The server's own clock, read at a host time (any host clock, the same for every call)."""

    def __init__(self, impairment: TimeImpairment, origin: float) -> None:
        self.impairment = impairment
        self.origin = origin
        self.rate = 1.0 + impairment.clock_drift_ppm * 1e-6

    def read(self, host_time: float) -> float:
        elapsed = host_time - self.origin
        reset_at = self.impairment.clock_reset_at
        if reset_at >= 0.0 and elapsed >= reset_at:
            elapsed -= reset_at
        return self.impairment.clock_offset_s + elapsed * self.rate

    def restarted(self, host_time: float) -> bool:
        """Whether the clock has restarted by ``host_time``."""
        reset_at = self.impairment.clock_reset_at
        return reset_at >= 0.0 and host_time - self.origin >= reset_at


class Delivery(Generic[T]):
    """When frames may leave: held until ``burst`` of them are ready, then released
    together after an exponential delay, never before an earlier delivery.

    ``put(item, now)`` when a frame is ready; ``due(now)`` gives the frames whose time has
    come, in order; ``next_time()`` is when the next one will be (None: none waiting).
    """

    def __init__(self, impairment: TimeImpairment) -> None:
        self.burst = impairment.burst
        self.mean = impairment.jitter_ms * 1e-3
        self._random = random.Random(impairment.seed)
        self._held: list[T] = []
        self._queue: deque[tuple[float, T]] = deque()
        self._last = -math.inf
        self.dropped = 0

    def put(self, item: T, now: float) -> None:
        if len(self._held) + len(self._queue) >= MAX_HELD:
            self.dropped += 1  # a full buffer loses the newest, as a socket's does
            return
        self._held.append(item)
        if len(self._held) >= self.burst:
            release = now + (self._random.expovariate(1.0 / self.mean) if self.mean > 0 else 0.0)
            release = max(release, self._last)
            self._last = release
            self._queue.extend((release, held) for held in self._held)
            self._held.clear()

    def due(self, now: float) -> list[T]:
        out: list[T] = []
        queue = self._queue
        while queue and queue[0][0] <= now:
            out.append(queue.popleft()[1])
        return out

    def next_time(self) -> float | None:
        return self._queue[0][0] if self._queue else None


#: clock-pair reads :func:`wall_clock_offset` takes; the tightest one is kept
OFFSET_READS = 7


def wall_clock_offset(
    monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time
) -> float:
    """Unix time minus monotonic time, for writing monotonic capture instants into a
    truth log on the host's (Unix) clock.

    ``time.time() - time.monotonic()`` read once is off by whatever passes between the two
    calls: another thread of the process taking the GIL (5 ms switch interval) or the
    scheduler on a loaded machine, often several milliseconds. That error would sit in
    every line of the log as a constant, and every stamp compared with it would look that
    much late. So the wall clock is read between two monotonic reads, a few times, and the
    read with the least time around it is kept (its error is at most half that time).
    """
    best_span, best = math.inf, 0.0
    for _ in range(OFFSET_READS):
        before = monotonic()
        unix = wall()
        after = monotonic()
        if after - before < best_span:
            best_span, best = after - before, unix - (before + after) / 2.0
    return best


class TruthLog:
    """The CSV of true capture times: ``frame_number,capture_time`` (host clock, Unix s)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # line-buffered: a stand-in stopped by a signal leaves every line it sent
        self._file: IO[str] | None = open(self.path, "w", buffering=1)  # noqa: SIM115 - closed in close()
        self._file.write("frame_number,capture_time\n")
        self.lines = 0

    def write(self, frame_number: int, capture_time: float) -> None:
        if self._file is None or self.lines >= TRUTH_LOG_MAX_LINES:
            return
        self._file.write(f"{frame_number},{capture_time:.9f}\n")
        self.lines += 1

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()


def read_truth_log(path: str | Path) -> list[tuple[int, float]]:
    """The (frame_number, capture_time) lines of a truth log, in order."""
    out: list[tuple[int, float]] = []
    with open(path) as file:
        header = file.readline().strip()
        if header != "frame_number,capture_time":
            raise ValueError(f"{path}: not a truth log (header {header!r})")
        for line in file:
            number, _, capture = line.partition(",")
            if capture:
                out.append((int(number), float(capture)))
    return out
