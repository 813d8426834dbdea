"""Time in one vocabulary: seconds (float) <-> builtin_interfaces/Time.

Frames, acks, announcements and every tool convert stamps; doing it in one place keeps
the rounding identical everywhere (a nanosecond field never reaches 1e9). The module
imports no ROS package at load time, so rclpy-free cores (offline evaluation) use it too.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from builtin_interfaces.msg import Time


def split_seconds(seconds: float) -> tuple[int, int]:
    """(sec, nanosec) of builtin_interfaces/Time for a time in seconds."""
    sec = int(seconds // 1)
    return sec, min(int((seconds - sec) * 1e9), 999_999_999)


def time_msg(seconds: float | None = None) -> Time:
    """builtin_interfaces/Time of ``seconds`` (wall time now when None)."""
    from builtin_interfaces.msg import Time  # here, so the module stays importable without ROS

    sec, nanosec = split_seconds(time.time() if seconds is None else seconds)
    return Time(sec=sec, nanosec=nanosec)


def stamp_to_seconds(stamp: Any) -> float:
    """Seconds of a builtin_interfaces/Time (or anything with sec and nanosec)."""
    return float(stamp.sec + stamp.nanosec * 1e-9)


# ---------------------------------------------------------------------------- clocks
class HostClock(Protocol):
    """The two clocks every stamping and time-sync path reads.

    ``host()`` is the clock stamps are on (the host's system clock, or ROS time with
    ``use_sim_time``): NTP, chrony or a resume from sleep step it. ``monotonic()`` never
    steps: estimators run on it and map to ``host()`` when stamping, so a step of the host
    clock moves the stamps to the new clock at once instead of corrupting what was learnt.
    """

    def host(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """``time.time`` and ``time.monotonic``."""

    host = staticmethod(time.time)
    monotonic = staticmethod(time.monotonic)


SYSTEM_CLOCK = SystemClock()


class NodeClock:
    """A node's ROS time (simulation time with ``use_sim_time``) as both clocks.

    Simulation time has no monotonic twin: it advances in the steps of /clock and at the
    simulation's own rate, so its difference to ``time.monotonic`` changes all the time and
    would read as host clock steps. Estimators run on simulation time itself instead (as
    they ran on the host's clock before they ran on the monotonic one)."""

    def __init__(self, node: Any) -> None:
        self._now = node.get_clock().now

    def host(self) -> float:
        return float(self._now().nanoseconds * 1e-9)

    def monotonic(self) -> float:
        return self.host()


def node_clock(node: Any) -> HostClock:
    """The clock a node's stamps are on: the system clock, or ROS time with ``use_sim_time``."""
    if node.get_parameter("use_sim_time").value:
        return NodeClock(node)
    return SYSTEM_CLOCK


class ManualClock:
    """Both clocks set by hand, for tests and benches that step the host clock: ``mono``
    is the monotonic reading, ``offset`` what the host clock reads ahead of it."""

    def __init__(self, mono: float = 0.0, offset: float = 0.0) -> None:
        self.mono = mono
        self.offset = offset

    def host(self) -> float:
        return self.mono + self.offset

    def monotonic(self) -> float:
        return self.mono


class SteppedClock:
    """The system's clocks with the host clock stepped by ``offset`` for this process
    alone: a test or a stress run steps it as NTP would, on a live link."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self.monotonic = time.monotonic

    def host(self) -> float:
        return time.time() + self.offset


# a host-minus-monotonic reading this far from the one known is checked with a careful read
HOST_OFFSET_CHECK_S = 50e-6
# a careful read this far from the known offset moves it; this far is counted as a step
HOST_OFFSET_MOVE_S = 20e-6
HOST_STEP_S = 1e-3
# a careful read whose two host readings are further apart was interrupted: read again
_CAREFUL_SPAN_S = 50e-6


class HostOffset:
    """``host() - monotonic()``, followed across steps of the host clock.

    On Linux the two clocks run at the same (NTP-disciplined) rate, so their difference
    changes only when the host clock is stepped (NTP/chrony step, settimeofday, resume).
    Callers compare a cheap reading (a host time they already hold minus a monotonic
    reading taken after it: never more than the true offset) with ``offset`` and call
    :meth:`check` only when it is off by more than ``HOST_OFFSET_CHECK_S``; ``check`` reads
    both clocks back to back (host, monotonic, host) so that a reader delayed between its
    two readings is not taken for a step. Not thread-safe: one owner.
    """

    def __init__(self, clock: HostClock) -> None:
        self.clock = clock
        self.steps = 0
        self.last_step = 0.0
        self.offset = self.read()

    def read(self) -> float:
        """Host minus monotonic time from back-to-back readings (the least interrupted of three)."""
        host, mono = self.clock.host, self.clock.monotonic
        best_span = math.inf
        best = 0.0
        for _ in range(3):
            w1 = host()
            m = mono()
            w2 = host()
            span = w2 - w1
            if 0.0 <= span < best_span:
                best_span, best = span, 0.5 * (w1 + w2) - m
            if 0.0 <= span < _CAREFUL_SPAN_S:
                break
        return best

    def check(self) -> float:
        """Read carefully; the step of the host clock found (0.0: none beyond HOST_STEP_S)."""
        careful = self.read()
        moved = careful - self.offset
        if -HOST_OFFSET_MOVE_S <= moved <= HOST_OFFSET_MOVE_S:
            return 0.0
        self.offset = careful
        if moved >= HOST_STEP_S or moved <= -HOST_STEP_S:
            self.steps += 1
            self.last_step = moved
            return moved
        return 0.0
