"""A mocap system's own clock mapped to the host clock, and the stamp of each frame.

Stamping a frame ``arrival - reported latency`` puts every network delay, burst and
scheduling stall of the host straight into the stamp. Systems that send their own
capture clock (NatNet's mid-exposure timestamp, QTM's timestamp, a Vicon frame number
times the frame period, VRPN's message time, the simulated system's clock) allow much
better: the capture instants on the system clock are evenly spaced and exact, and only
their mapping to the host clock has to be learnt.

What networks do, and how the model fits it:

* a frame's delay (capture to arrival, minus the latency the system reports) is never
  below the transport's minimum and is skewed and bursty above it: the points
  ``(system_time, arrival - latency)`` lie *on or above* a line, and the line is their
  lower envelope, not a mean. :class:`ClockModel` keeps the lowest point of every
  ``block_s`` of arrivals over a sliding ``window_s`` and fits the line of the lower
  convex hull that spans their mean (the line under every point with the least total
  gap: one outlier cannot tilt it, and no delay above the minimum pulls it up);
* the two clocks differ in offset and in rate (tens of ppm): the hull's slope is the
  drift, bounded by ``max_drift_ppm``; until ``slope_span_s`` of points are known (and
  after a reset, with the drift learnt before it) only the offset is fitted;
* clocks reset (a server restart, a frame number restart, a new QTM measurement): a
  system time going back by more than ``back_s``, a point far below the line (the system
  clock jumped forward), points far above it for a while (it stood still) and frame
  numbers going back restart the fit, which is in use again ``converge_s`` later;
* a system clock stepped back by less (a server's own NTP step) is absorbed without
  leaving convergence. The system's own stamps show it best, free of the arrivals' jitter
  (:class:`~mocap4r2_control.stamp_steps.StampSteps`: the phase of the system times against
  frame numbers times the period drops by the step and stays there); every point learnt
  then moves onto the new clock by exactly that much (:meth:`ClockModel.shift_back`), so
  the line is as good as before at the second frame after the step. Where the stamps are
  too noisy to show every step above ``step_back_min_s``, the lowest points of
  ``step_back_blocks`` blocks in a row lying far, and equally far, above the line also
  restart the line on the points after them; where they show none (too noisy, or the
  first 32 frames, before their period is known), so does a newer frame with an older
  system time;
* the host clock steps too (NTP, chrony, a resume): the model runs on the monotonic clock,
  and the stamper maps each arrival to it and each stamp back to the host clock in force
  (:class:`~mocap4r2_control.timebase.HostOffset`), so a step moves the stamps to the new
  clock at the next frame and loses nothing the model learnt.

:class:`FrameStamper` is what the node calls once per frame: it chooses the rule
(``time_source``), feeds the model, stamps on the line fitted so far (or the adapter's
``capture_time``) until the model has converged, rejects insane system times (NaN,
infinite, absurdly large, not advancing) and insane latencies (negative, not finite), and
guarantees what every consumer relies on, whatever the rule: a stamp never lies after the
frame's arrival and moves forward by at least 1 us (tf2 drops repeated stamps), except
across a host clock stepped back. Both are pure Python, O(1) per frame (a refit runs once
per block), without rclpy.

The line the model fits moves: down at once when a frame comes faster than any before
(the first 0.3 s on a busy host may all come late, leaving the line hundreds of
microseconds too high), up when a refit finds the window's lowest points higher. The
stamper does not apply such a move at once, which would put a step of that size into
the stamps and into every velocity computed from them. As NTP and chrony discipline a
clock (slew, step only when far), the mapping it applies follows the model's drift and
moves toward the line by at most ``slew_ppm`` (2000 ppm: a 1 ms correction takes 0.5 s,
a 100 Hz frame moves by 20 us); a gap beyond ``step_s`` (2 ms: a clock change, not envelope
noise) and every (re)convergence are applied at once. Slewing down may leave a stamp
after ``arrival - latency`` for a while, never after the arrival: a frame that arrives
before the mapping says it was captured brings the mapping down to its arrival.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from .stamp_steps import StampSteps
from .timebase import HOST_OFFSET_CHECK_S, SYSTEM_CLOCK, HostClock, HostOffset

LOG = logging.getLogger("mocap4r2.clock_model")

TIME_SOURCES = ("auto", "system", "arrival")

# a stamp that would repeat or precede the previous one is moved this far after it
# (float64 Unix seconds resolve 0.24 us, so one nanosecond would be lost)
MIN_STAMP_STEP = 1e-6
# frame numbers going back by more than this are a restart, not UDP reordering
FRAME_RESTART_BACK = 16
# an arrival this far before the previous stamp, with no step of this stamper's clock
# seen, comes from another clock that went back: the stamps follow it
HOST_STEP_RESET_S = 0.05
# a line that comes down this soon (system s) after a step back is applied at once
STEP_BACK_REVERT_S = 2.0
# transport delays kept for the p50/p99 of /diagnostics
DELAY_HISTORY = 2048
# after a forward host clock step, frames handed over this long (monotonic s) may have been
# received before it: their latency, which the adapters read on the host clock, spans it
HOST_STEP_SPAN_S = 1.0


@dataclass(frozen=True)
class ClockModelSettings:
    """How the model fits; the defaults suit rates from 30 Hz to 2 kHz."""

    window_s: float = 8.0  # span of host time whose lowest points define the line
    block_s: float = 0.2  # one lowest point is kept per block of arrivals
    converge_s: float = 0.3  # arrivals after a (re)start before the model is used
    slope_span_s: float = 4.0  # span of points before the drift is fitted
    max_drift_ppm: float = 1000.0  # a fitted slope beyond this is ignored
    jump_s: float = 0.05  # a point this far below the line: the system clock jumped forward
    back_s: float = 0.05  # a system time this far before the previous one: it jumped back
    stall_s: float = 0.5  # points this far above the line ...
    # ... for this long: the system clock stood still (a reader that falls 0.5 s behind
    # for a moment must not pass for one)
    stall_persist_s: float = 2.0
    max_abs_system_time: float = 1e11  # seconds (3000 years): beyond it a clock is garbage
    # how fast the mapping the stamps use moves toward a newly fitted line, ppm of the
    # system time elapsed: a 1 ms correction takes 0.5 s; a frame moves by 8 us at 250 Hz,
    # 20 us at 100 Hz, 67 us at 30 Hz, against milliseconds of arrival jitter. Slower
    # leaves the stamps off the line for longer (500 ppm doubled the error of the first
    # seconds on the bench's stand-ins) and longer above it, where a frame that arrives
    # before the mapping's stamp forces a step after all
    slew_ppm: float = 2000.0
    # a correction larger than this is applied at once (a step): it is a clock change, not
    # envelope noise, and slewing it would keep the stamps that far off for a second or more
    step_s: float = 0.002
    # the drift is also fitted on the lowest point of every drift_block_s over drift_window_s:
    # a slope read over a minute is 8-15 times less sensitive to delivery jitter than one
    # read over the 8 s window (20 ms mean exponential jitter: 432 ppm read for 100 ppm)
    drift_block_s: float = 2.0
    drift_window_s: float = 128.0
    # a fitted drift is used only when its uncertainty (the envelope's noise over half the
    # span of the points) is under this: a noisy envelope fits a slope of noise
    drift_sigma_ppm: float = 100.0
    # the system clock stepped back (by less than back_s: an NTP step of the server): the
    # lowest point of each of the last step_back_blocks blocks lies more than
    # max(step_back_min_s, step_back_noise x the blocks' usual lowest residual) above the line
    step_back_blocks: int = 3
    step_back_min_s: float = 0.5e-3
    step_back_noise: float = 4.0
    # ... and at most this far: a step back of a frame period or more shows at once as a
    # newer frame with an older system time, so blocks are needed only for smaller ones;
    # a host that holds every frame back longer (a loaded reader) is not taken for one
    step_back_max_s: float = 0.010
    # ... or, below 100 Hz, up to this many frame periods (the median system-time step
    # between frames): a step back between 10 ms and one period shows in no frame order,
    # so only the blocks can see it
    step_back_periods: float = 1.25
    # the system's own stamps show a step back two frames after it (stamp_steps.py): a
    # phase drop of at least max(stamp_step_min_s, stamp_step_noise x the stamps' median
    # noise). While that threshold is at most stamp_step_largest_s and half a period, the
    # stamps, not the frame order, find steps; while it is at most step_back_min_s, not
    # the blocks either (they could only add false ones)
    stamp_step_min_s: float = 0.1e-3
    stamp_step_noise: float = 8.0
    stamp_step_largest_s: float = 2e-3

    def __post_init__(self) -> None:
        for name in ("slew_ppm", "step_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"ClockModelSettings.{name} must be a finite number > 0, got {value!r}")


class ClockModel:
    """System time -> host time, fitted on the lower envelope of the arrivals.

    ``update(system_time, host_time)`` takes the system's capture time of a frame and
    the time it arrived minus the latency the system reported (so what remains is
    transport delay, never negative), both on a clock that never steps (the stamper feeds
    it monotonic time), and returns the estimated capture time on that clock.
    ``converged`` says whether that estimate should be used.
    """

    def __init__(self, settings: ClockModelSettings | None = None) -> None:
        self.settings = settings or ClockModelSettings()
        self.resets = 0
        self.last_reset_reason = ""
        self.steps_back = 0  # system clock steps back under back_s, absorbed without a reset
        self.last_step_back = ""
        self.generation = 0  # counts every reset and step back: the stamper re-anchors on a change
        self.drift = 0.0  # host seconds per system second, minus 1
        self.rejected_drift = 0.0  # the last drift fitted beyond max_drift_ppm (0.0: none)
        self._drift_known = False
        self._block_residuals: deque[float] = deque(maxlen=40)
        # the system-time step between frames, one estimate per block (kept across resets:
        # a restart does not change the frame rate)
        self._block_periods: deque[float] = deque(maxlen=40)
        # set by the stamper while the system's stamps show every step back (the blocks'
        # rule, which reads steps from arrivals, would only add false ones)
        self.steps_in_stamps = False
        self._start(0.0, 0.0, 0.0)
        self._started = False

    # ------------------------------------------------------------------ state
    def _start(self, s: float, u: float, host: float, keep_converged: bool = False) -> None:
        # the line: host - system = a + drift * (system - s_a)
        self._a = u
        self._s_a = s
        self._last_s = s
        self._started = True
        if not keep_converged:
            self._since = host
            self.converged = False
        # lowest point (s, u, residual) of the block being filled, and closed blocks (s, u, host end)
        self._block_end = host + self.settings.block_s
        self._block_best: tuple[float, float] | None = None
        self._block_best_r = math.inf
        self._block_frames = 0  # frames in the block being filled, from system time _block_first_s
        self._block_first_s = s
        self._blocks: deque[tuple[float, float, float]] = deque()
        # the drift's longer view: lowest block point of every drift_block_s
        self._long: deque[tuple[float, float, float]] = deque()
        self._long_best: tuple[float, float] | None = None
        self._long_end = host + self.settings.drift_block_s
        self._stall_since: float | None = None
        self._block_residuals.clear()

    def reset(self, reason: str) -> None:
        """Forget the fit (the drift is kept: the oscillators are the same after a
        restart); the next point starts it again."""
        self.resets += 1
        self.generation += 1
        self.last_reset_reason = reason
        self._started = False
        self.converged = False

    def step_back(self, reason: str) -> None:
        """The system clock stepped back: forget the points before it (the drift is kept)
        and start the line again on the next point without leaving convergence."""
        self.steps_back += 1
        self.generation += 1
        self.last_step_back = reason
        self._restart_pending = True

    _restart_pending = False

    def shift_back(self, step: float, reason: str) -> None:
        """The system clock stepped back by ``step`` (s, known exactly: from its stamps):
        every point learnt moves onto the new clock (system time ``step`` earlier, host
        minus system ``step`` larger), so the line is as good at once as before the step."""
        self.steps_back += 1
        self.generation += 1
        self.last_step_back = reason
        if not self._started:
            return
        self._restart_pending = False
        # host - system = a + drift * (s - s_a) becomes, with s' = s - step, u' = u + step:
        # a' = a + step, s_a' = s_a - step
        self._a += step
        self._s_a -= step
        self._last_s -= step
        self._block_first_s -= step
        self._blocks = deque((s - step, u + step, host) for s, u, host in self._blocks)
        self._long = deque((s - step, u + step, host) for s, u, host in self._long)
        if self._block_best is not None:
            self._block_best = (self._block_best[0] - step, self._block_best[1] + step)
        if self._long_best is not None:
            self._long_best = (self._long_best[0] - step, self._long_best[1] + step)

    @property
    def offset(self) -> float:
        """Host time minus system time at the newest point, s."""
        return self._a + self.drift * (self._last_s - self._s_a)

    @property
    def drift_ppm(self) -> float:
        """How much faster the system clock runs than the host's, ppm (the line's slope
        is host - system per system second, so a fast system clock makes it negative)."""
        return _ppm(self.drift)

    @property
    def drift_known(self) -> bool:
        """Whether a drift was fitted (sure enough and within the gate, kept across resets);
        until then the line follows the offset alone and the drift is unknown, not 0."""
        return self._drift_known

    @property
    def rejected_drift_ppm(self) -> float:
        """The last drift fitted beyond ``max_drift_ppm`` (and so not used), ppm; 0.0 when
        the last fit was within it."""
        return _ppm(self.rejected_drift) if self.rejected_drift else 0.0

    def line(self, system_time: float) -> float:
        """The host time of ``system_time`` on the current line."""
        return system_time + self._a + self.drift * (system_time - self._s_a)

    # ------------------------------------------------------------------ update
    def update(self, system_time: float, host_time: float) -> float:
        """Add one point; the estimated host time of ``system_time``.

        Raises nothing; a reset it detects is counted and named in ``last_reset_reason``.
        """
        cfg = self.settings
        s, y = system_time, host_time
        u = y - s
        if not self._started:
            self._start(s, u, y)
        elif self._restart_pending:
            self._restart_pending = False
            self._start(s, u, y, keep_converged=True)
        elif s < self._last_s - cfg.back_s:
            self.reset(f"the system clock went back {self._last_s - s:.3f} s")
            self._start(s, u, y)
        r = u - self._a - self.drift * (s - self._s_a)
        if r < -cfg.jump_s and self.converged:
            # (before convergence the line may rest on a point that came late: lower it)
            self.reset(f"the system clock jumped forward {-r:.3f} s")
            self._start(s, u, y)
            r = 0.0
        elif r > cfg.stall_s:
            if self._stall_since is None:
                self._stall_since = y
            elif y - self._stall_since >= cfg.stall_persist_s:
                self.reset(f"the system clock fell {r:.3f} s behind (stood still or jumped back)")
                self._start(s, u, y)
                r = 0.0
        else:
            self._stall_since = None
        if r <= 0.0:
            # the line must pass under every point (a delay is never below the minimum);
            # every earlier point of the block is now above it, so this one is the lowest
            self._a += r
            self._block_best_r = 0.0
            self._block_best = (s, u)
        elif r < self._block_best_r:
            self._block_best_r = r
            self._block_best = (s, u)
        if s > self._last_s:
            self._last_s = s
        if self._block_frames == 0:
            self._block_first_s = s
        self._block_frames += 1
        if y >= self._block_end:
            self._close_block(y)
        if not self.converged and y - self._since >= cfg.converge_s:
            self.converged = True
        return s + self._a + self.drift * (s - self._s_a)

    def _close_block(self, host: float) -> None:
        cfg = self.settings
        if self._block_frames > 1 and self._last_s > self._block_first_s:
            self._block_periods.append((self._last_s - self._block_first_s) / (self._block_frames - 1))
        self._block_frames = 0
        best = self._block_best
        if best is not None:
            self._blocks.append((best[0], best[1], host))
            residuals = self._block_residuals
            residuals.append(self._block_best_r)
            if self._stepped_back(residuals):
                return
            long_best = self._long_best
            if long_best is None or best[1] - long_best[1] < self.drift * (best[0] - long_best[0]):
                self._long_best = best
        self._block_best = None
        self._block_best_r = math.inf
        self._block_end = host + cfg.block_s
        if host >= self._long_end:
            if self._long_best is not None:
                self._long.append((self._long_best[0], self._long_best[1], host))
            self._long_best = None
            self._long_end = host + cfg.drift_block_s
            while self._long and self._long[0][2] < host - cfg.drift_window_s:
                self._long.popleft()
        blocks = self._blocks
        while blocks and blocks[0][2] < host - cfg.window_s:
            blocks.popleft()
        if blocks:
            self._refit(host)

    def _stepped_back(self, residuals: deque[float]) -> bool:
        """Whether the last blocks' lowest points all lie far above the line: the system
        clock stepped back by less than back_s (the line then starts again on them)."""
        cfg = self.settings
        k = cfg.step_back_blocks
        if not self.converged or self.steps_in_stamps or len(residuals) < k:
            return False
        recent = list(residuals)[-k:]
        lowest = min(recent)
        earlier = sorted(list(residuals)[:-k])
        usual = earlier[len(earlier) // 2] if earlier else 0.0
        periods = sorted(self._block_periods)
        period = periods[len(periods) // 2] if periods else 0.0
        largest = max(cfg.step_back_max_s, cfg.step_back_periods * period)
        if lowest <= max(cfg.step_back_min_s, cfg.step_back_noise * usual) or lowest > largest:
            return False
        # a clock that stepped back stays as far, block after block (its lowest points
        # differ by the envelope's noise); a reader working off a backlog comes closer, a
        # loaded host's delays wander
        if max(recent) - lowest > max(cfg.step_back_min_s, 0.25 * lowest):
            return False
        blocks = list(self._blocks)[-k:]
        self.steps_back += 1
        self.generation += 1
        self.last_step_back = f"the system clock went back {lowest * 1e3:.2f} ms"
        drift = self.drift
        s_a = blocks[-1][0]
        self._s_a = s_a
        self._a = min(u - drift * (s - s_a) for s, u, _ in blocks)
        self._blocks = deque(blocks)
        self._long.clear()
        self._long_best = None
        self._long_end = host_end = blocks[-1][2]
        self._long_end = host_end + cfg.drift_block_s
        residuals.clear()
        self._block_best = None
        self._block_best_r = math.inf
        self._block_end = host_end + cfg.block_s
        return True

    def _refit(self, host: float) -> None:
        cfg = self.settings
        blocks = self._blocks
        candidates = []
        for points in (blocks, self._long):
            if len(points) >= 8 and points[-1][0] - points[0][0] >= cfg.slope_span_s:
                fitted = _envelope_line(points)
                if fitted is not None:
                    candidates.append(fitted)
        best: tuple[float, float, float, float] | None = None
        for s1, u1, slope, sigma in candidates:
            if best is None or sigma < best[3]:
                best = (s1, u1, slope, sigma)
        if best is not None and best[3] <= cfg.drift_sigma_ppm * 1e-6:
            if abs(best[2]) <= cfg.max_drift_ppm * 1e-6:
                self.drift = best[2]
                self._drift_known = True
                self.rejected_drift = 0.0
            else:
                self.rejected_drift = best[2]
        # the offset under every point of the window with the drift known (before it is
        # fitted the points span at most slope_span_s: 100 ppm unfitted is at most 0.4 ms;
        # a shorter window would follow a reader that fell behind for a second)
        s_a = self._last_s
        a = math.inf
        drift = self.drift
        for s, u, _ in blocks:
            a = min(a, u - drift * (s - s_a))
        if math.isfinite(a):
            self._s_a, self._a = s_a, a


def _ppm(drift: float) -> float:
    return -drift / (1.0 + drift) * 1e6


def _envelope_line(points: deque[tuple[float, float, float]]) -> tuple[float, float, float, float] | None:
    """(s_a, a, slope, sigma) of the lower convex hull's edge that spans the points' mean
    system time (of all lines under every point, the one with the least total gap), and
    the slope's uncertainty: the points. lower-quartile gap above that line over half their span."""
    hull: list[tuple[float, float]] = []
    total = 0.0
    for s, u, _ in points:
        total += s
        while len(hull) >= 2:
            (s1, u1), (s2, u2) = hull[-2], hull[-1]
            # drop the middle point when it lies on or above the chord (s1,u1)-(s, u)
            if (u2 - u1) * (s - s1) >= (u - u1) * (s2 - s1):
                hull.pop()
            else:
                break
        if hull and s <= hull[-1][0]:  # same system time: keep the lower one
            if u < hull[-1][1]:
                hull[-1] = (s, u)
            continue
        hull.append((s, u))
    if len(hull) < 2:
        return None
    mean = total / len(points)
    edge = (hull[-2], hull[-1])
    for (s1, u1), (s2, u2) in zip(hull, hull[1:]):
        if s2 >= mean:
            edge = ((s1, u1), (s2, u2))
            break
    (s1, u1), (s2, u2) = edge
    slope = (u2 - u1) / (s2 - s1)
    gaps = sorted(u - u1 - slope * (s - s1) for s, u, _ in points)
    span = points[-1][0] - points[0][0]
    sigma = gaps[len(gaps) // 2] / (0.5 * span) if span > 0 else math.inf
    # the slope between the lowest points of either half must tell the same: a hull edge
    # resting on two lucky points of a noisy envelope does not
    half = len(points) // 2
    first = min(
        points[:half] if isinstance(points, list) else list(points)[:half], key=lambda p: p[1] - slope * p[0]
    )
    second = min(list(points)[half:], key=lambda p: p[1] - slope * p[0])
    if second[0] > first[0]:
        halves = (second[1] - first[1]) / (second[0] - first[0])
        sigma = max(sigma, abs(halves - slope))
    return s1, u1, slope, sigma


class FrameStamper:
    """The stamp of every frame of one system, by its ``time_source``:

    * ``arrival``: the adapter's ``capture_time`` when it gives one, else
      ``arrival - latency`` (the rule of systems without a clock);
    * ``system``: the clock model; a system that hands no system time falls back to the
      arrival rule and says so;
    * ``auto``: the clock model for frames with a system time, the arrival rule otherwise.

    Whatever the source, a stamp never lies after the frame's arrival and moves forward by
    at least MIN_STAMP_STEP from the previous one (tf2 drops a repeated stamp as
    TF_REPEATED_DATA), except across a host clock stepped back. The one case where both
    cannot hold is an arrival that did not advance MIN_STAMP_STEP past the previous stamp
    (a clock read twice within a microsecond, which the node's per-frame reading never
    does): the stamp then moves forward anyway. A latency that is negative or not finite
    is refused by name (counted in ``bad_latency``, logged once) and taken as 0.

    The model runs on the monotonic clock of ``clock``: ``arrival`` (on the host clock the
    stamps are on, read by the caller) is mapped to it with :class:`HostOffset`, whose
    cheap check per frame costs one monotonic reading; a host clock step is found at the
    next frame, and the stamps are on the new host clock from then on while the model keeps
    what it learnt; a frame received before a forward step and handed over after it, whose
    latency (read by the adapter on the host clock) holds the step, is learnt with the step
    taken off (for HOST_STEP_SPAN_S). Until the model has converged the frames are stamped
    on the line fitted so far (the system time plus the least delay seen: never after the
    arrival, and spaced as the system clock says) or the adapter's ``capture_time``; frames
    whose system time is insane are stamped by the arrival rule (counted and logged once
    per kind).
    Called from one thread; ``status`` may be read from another (plain values).
    """

    def __init__(
        self,
        source: str = "auto",
        settings: ClockModelSettings | None = None,
        clock: HostClock | None = None,
    ) -> None:
        if source not in TIME_SOURCES:
            raise ValueError(f"time_source must be one of {list(TIME_SOURCES)}, got {source!r}")
        self.source = source
        self.model = ClockModel(settings)
        cfg = self.model.settings
        self.stamp_steps = StampSteps(
            cfg.stamp_step_min_s,
            cfg.stamp_step_noise,
            cfg.stamp_step_largest_s,
            cfg.step_back_min_s,
            cfg.back_s,
        )
        self.clock = clock if clock is not None else SYSTEM_CLOCK
        self.host = HostOffset(self.clock)
        self._monotonic = self.clock.monotonic
        self.in_use = "arrival" if source == "arrival" else "none yet"
        self.bad_system_time = 0
        self.bad_kinds: dict[str, int] = {}
        self.bad_latency = 0
        self.host_clock_steps = 0  # steps of the host clock (either way) beyond HOST_STEP_S
        # the last forward host step, s, and until when (monotonic) a latency may span it
        self._spanned_step = 0.0
        self._spanned_until = -math.inf
        self.model_frames = 0
        # the mapping the stamps use: host - system at system time _applied_s, moving with
        # the model's drift and slewed toward its line (None until the model has converged)
        self._applied_offset: float | None = None
        self._applied_s = 0.0
        self._generation = 0
        self._generation_s = -math.inf  # system time of the last step back
        self._steps_back = 0
        self._slew_rate = self.model.settings.slew_ppm * 1e-6  # s per system s
        self._step_s = self.model.settings.step_s
        self.correction = 0.0  # applied mapping minus the model's line at the newest frame, s
        self.mapping_steps = 0  # corrections beyond step_s applied at once
        self._last_stamp = -math.inf
        self._last_system_time: float | None = None
        self._last_frame: int | None = None
        self._delays = np.zeros(DELAY_HISTORY)
        self._delay_count = 0
        self._warned_no_clock = False
        self._logged_resets = 0

    def stamp(
        self,
        arrival: float,
        latency: float = 0.0,
        system_time: float | None = None,
        capture_time: float | None = None,
        frame_number: int = 0,
    ) -> float:
        """The stamp of one frame, in seconds of the host clock ``arrival`` is on."""
        if not 0.0 <= latency < math.inf:  # also NaN
            latency = self._refuse_latency(latency)
        if self.source == "arrival":
            return self._bounded(capture_time if capture_time is not None else arrival - latency, arrival)
        # arrival on the monotonic clock: the model's clock never steps
        host_offset = self.host.offset
        seen = arrival - self._monotonic()
        if seen > host_offset + HOST_OFFSET_CHECK_S or seen < host_offset - HOST_OFFSET_CHECK_S:
            host_offset = self._check_host()
        if system_time is None:
            if self.source == "system" and not self._warned_no_clock:
                self._warned_no_clock = True
                LOG.warning("time_source is 'system' but the system hands no clock: stamping on arrival")
            self.in_use = "arrival (no system time)"
            return self._bounded(capture_time if capture_time is not None else arrival - latency, arrival)
        last_frame = self._last_frame
        if last_frame is not None and frame_number + FRAME_RESTART_BACK < last_frame:
            self.model.reset(f"frame numbers restarted ({last_frame} -> {frame_number})")
            self._log_reset()
            self._last_system_time = None
            self.stamp_steps.reset()
        self._last_frame = frame_number
        problem = self._insane(system_time, frame_number)
        if problem is not None:
            self._count_bad(problem, system_time)
            self.in_use = "arrival (system time insane)"
            return self._bounded(capture_time if capture_time is not None else arrival - latency, arrival)
        last_system = self._last_system_time
        model = self.model
        steps = self.stamp_steps
        stepped = steps.update(system_time, frame_number)
        model.steps_in_stamps = steps.sees_small_steps
        if stepped:
            model.shift_back(stepped, f"the system clock went back {stepped * 1e3:.2f} ms (its stamps)")
        elif (
            not steps.armed
            and last_system is not None
            and last_system - self.model.settings.back_s <= system_time < last_system
            and last_frame is not None
            and frame_number > last_frame
        ):
            # a newer frame with an older system time: the system clock stepped back (a
            # reordered frame is older in both); further back than back_s is a restart,
            # which the model resets on
            self.model.step_back(f"the system clock went back {(last_system - system_time) * 1e3:.2f} ms")
        self._last_system_time = system_time
        resets = model.resets
        mono = arrival - host_offset
        if latency >= self._spanned_step > 0.0 and mono < self._spanned_until:
            # received before a forward host step and handed over after it: the adapter's
            # time since the bytes came (read on the host clock) holds the step, which would
            # put the point that far below the line (a line moved down, or a reset). A frame
            # received after it loses as much: its point lies above the line, which no
            # lower envelope follows
            latency -= self._spanned_step
        estimate = model.update(system_time, mono - latency)
        if model.resets != resets:
            self._log_reset()
            self.stamp_steps.reset()
        if model.converged:
            stamp = self._applied(system_time, estimate, mono) + host_offset
            self.model_frames += 1
            self.in_use = "system clock model"
            self._delays[self._delay_count % DELAY_HISTORY] = mono - latency - estimate
            self._delay_count += 1
        else:
            self._applied_offset = None
            self.in_use = "system clock model (converging: offset only)"
            stamp = capture_time if capture_time is not None else estimate + host_offset
        return self._bounded(stamp, arrival)

    def _check_host(self) -> float:
        """A careful reading of host - monotonic; a step found moves the last stamp with it
        (stamps go on from the new clock) and is counted and logged."""
        step = self.host.check()
        if step:
            self.host_clock_steps += 1
            self._last_stamp += step
            self._spanned_step = max(step, 0.0)  # back: a latency spanning it is only smaller
            self._spanned_until = self._monotonic() + HOST_STEP_SPAN_S
            if self.host_clock_steps <= 10 or self.host_clock_steps % 100 == 0:
                LOG.warning(
                    "the host clock stepped %+.6f s (step %d): stamps follow the new clock, the clock "
                    "model is kept (it runs on the monotonic clock)",
                    step,
                    self.host_clock_steps,
                )
        return self.host.offset

    def _refuse_latency(self, latency: float) -> float:
        self.bad_latency += 1
        if self.bad_latency == 1 or self.bad_latency % 1000 == 0:
            LOG.warning(
                "latency %r s refused (%s): a frame is never captured after it arrives; taken as 0 "
                "(counted in /diagnostics bad_latency, %d so far)",
                latency,
                "negative" if latency < 0.0 else "not finite",
                self.bad_latency,
            )
        return 0.0

    def _applied(self, system_time: float, estimate: float, arrival: float) -> float:
        """The stamp of a frame by the applied mapping, moved toward the model's line.

        The model's line moves whenever a frame comes faster than any before it or a
        refit raises it; applying it at once would step the stamps by as much (hundreds of
        microseconds when the first arrivals all came late), a jump in every velocity
        computed from them. So the applied mapping follows the model's drift and closes
        the gap to the line by at most ``slew_ppm`` of the elapsed system time, as clock
        disciplines slew; a gap beyond ``step_s`` (a clock change) and a system clock the
        model found stepped back are applied at once. ``arrival`` here is monotonic.
        """
        target = estimate - system_time
        applied = self._applied_offset
        generation = self.model.generation
        if applied is None or generation != self._generation:  # (re)converged or stepped
            if generation != self._generation and self.model.steps_back != self._steps_back:
                self._steps_back = self.model.steps_back
                self._generation_s = system_time
            self._generation = generation
            applied = target
        else:
            elapsed = system_time - self._applied_s
            if elapsed < 0.0:  # a reordered frame: no time to slew in
                elapsed = 0.0
            predicted = applied + self.model.drift * elapsed
            gap = target - predicted
            room = self._slew_rate * elapsed
            if gap > self._step_s or gap < -self._step_s:
                applied = target
                self.mapping_steps += 1
            elif gap > room:
                applied = predicted + room
            elif gap < -room and system_time - self._generation_s > STEP_BACK_REVERT_S:
                applied = predicted - room
            else:
                # (also a line coming down soon after a step back: the step was a stretch of
                # late frames after all, undone at once as it was made)
                applied = target
        if system_time + applied > arrival:
            # the frame arrived before the mapping says it was captured: the mapping is
            # late by at least that much, so it comes down that far at once
            applied = arrival - system_time
        self._applied_offset = applied
        self._applied_s = system_time
        self.correction = applied - target
        return system_time + applied

    def _bounded(self, stamp: float, arrival: float) -> float:
        last = self._last_stamp
        if last + MIN_STAMP_STEP <= stamp <= arrival:  # nearly every frame
            self._last_stamp = stamp
            return stamp
        if arrival < last - HOST_STEP_RESET_S:
            # the host clock went back further than any stamp can be from its arrival and
            # no step was seen (a source of arrivals that is not this stamper's clock)
            self.host_clock_steps += 1
            last = -math.inf
        if not stamp <= arrival:  # also NaN
            stamp = arrival
        if stamp < last + MIN_STAMP_STEP:
            if arrival < last and self.source == "arrival":
                # the arrival rule reads no clock per frame: was the host clock stepped back?
                self._check_host()
                last = self._last_stamp
            if stamp < last + MIN_STAMP_STEP:
                # forward by at least 1 us, even past an arrival that did not advance as much
                stamp = last + MIN_STAMP_STEP
        self._last_stamp = stamp
        return stamp

    def _insane(self, system_time: float, frame_number: int) -> str | None:
        if not math.isfinite(system_time):
            return "not finite"
        if abs(system_time) > self.model.settings.max_abs_system_time:
            return "out of range"
        last = self._last_system_time
        if last is not None and system_time == last:
            return "reads zero" if system_time == 0.0 else "not advancing"
        return None

    def _count_bad(self, kind: str, value: float) -> None:
        self.bad_system_time += 1
        count = self.bad_kinds.get(kind, 0) + 1
        self.bad_kinds[kind] = count
        if count == 1:
            LOG.warning(
                "system time %r %s: stamping on arrival until it is sane (logged once, counted in "
                "/diagnostics bad_system_time)",
                value,
                kind,
            )

    def _log_reset(self) -> None:
        self._logged_resets += 1
        # a flapping clock must not flood the log: the first ten, then every hundredth
        if self._logged_resets <= 10 or self._logged_resets % 100 == 0:
            LOG.warning(
                "clock reset %d: %s; stamping on the offset alone until the model converges again",
                self.model.resets,
                self.model.last_reset_reason,
            )

    def delay_percentiles(self) -> tuple[float, float] | None:
        """p50 and p99 of the transport delay (arrival - latency - stamp) of the last
        frames stamped by the model, s; None before any."""
        n = min(self._delay_count, DELAY_HISTORY)
        if n == 0:
            return None
        p50, p99 = linear_percentiles(self._delays[:n], (50.0, 99.0))
        return p50, p99

    def status(self) -> dict[str, str]:
        """The /diagnostics key/values of the stamps."""
        model = self.model
        out = {
            "time_source": self.source,
            "time_source_in_use": self.in_use,
            "clock_converged": str(model.converged and self.in_use == "system clock model"),
            "clock_resets": str(model.resets),
            "bad_system_time": str(self.bad_system_time),
        }
        if self.source != "arrival" and model.converged:
            # the model's offset is to the monotonic clock: reported against the host's
            out["clock_offset_s"] = f"{model.offset + self.host.offset:.6f}"
            # 0.00 before a fit is sure enough reads as "no drift": under heavy jitter that
            # is the first 60-100 s, while the stamps follow the offset alone
            out["clock_drift_ppm"] = f"{model.drift_ppm:.2f}" if model.drift_known else "unknown"
            out["clock_correction_ms"] = f"{self.correction * 1e3:.3f}"
        if model.rejected_drift:
            limit = model.settings.max_drift_ppm
            out["clock_drift_beyond_gate_ppm"] = f"{model.rejected_drift_ppm:.2f}"
            out["clock_drift_gate"] = (
                f"fitted {model.rejected_drift_ppm:.2f} ppm, beyond the +-{limit:g} ppm gate: not used "
                + (
                    f"(stamps follow the last drift within it, {model.drift_ppm:.2f} ppm)"
                    if model.drift_known
                    else "(none within it fitted yet: stamps follow the offset alone)"
                )
            )
        if model.steps_back:
            out["clock_steps_back"] = str(model.steps_back)
            out["clock_last_step_back"] = model.last_step_back
        if self.bad_latency:
            out["bad_latency"] = str(self.bad_latency)
        if self.mapping_steps:
            out["clock_steps"] = str(self.mapping_steps)
        delays = self.delay_percentiles()
        if delays is not None:
            out["transport_delay_p50_ms"] = f"{delays[0] * 1e3:.3f}"
            out["transport_delay_p99_ms"] = f"{delays[1] * 1e3:.3f}"
        if model.last_reset_reason:
            out["clock_last_reset"] = model.last_reset_reason
        if self.host_clock_steps:
            out["host_clock_steps"] = str(self.host_clock_steps)
            out["host_clock_last_step_s"] = f"{self.host.last_step:+.6f}"
        return out


def linear_percentiles(
    values: np.ndarray[Any, np.dtype[np.float64]], percents: tuple[float, ...]
) -> list[float]:
    """``np.percentile(values, percents)`` of a non-empty 1-D array, by its default (linear)
    method and bit for bit (NaN when a value is), from one sort.

    Why not np.percentile: the /diagnostics report asks for two percentiles of the 2048
    newest delays once a second, and numpy's Python around its partition made that
    80-250 us of the report's 0.9 ms, all of it holding the interpreter the reader thread
    needs for the next frame. The arithmetic is numpy's (numpy/lib/_function_base_impl.py:
    the virtual index ``(n - 1) q`` with q = percent / 100, clipped to the ends as it clips;
    ``_lerp``'s two forms around gamma 0.5), in Python floats, which round alike."""
    ordered = np.sort(values)
    n = int(ordered.size)
    if n == 0:
        raise ValueError("percentiles of no values")
    if math.isnan(ordered[-1]):  # numpy sorts NaN last and answers NaN
        return [math.nan] * len(percents)
    out = []
    for percent in percents:
        q = percent / 100
        virtual = (n - 1) * q
        if virtual >= n - 1:  # numpy takes the last value, as index -1 (gamma counts from it)
            below, above = -1, -1
        elif virtual < 0:
            below, above = 0, 0
        else:
            below = math.floor(virtual)
            above = below + 1
        gamma = virtual - below
        a, b = float(ordered[below]), float(ordered[above])
        step = b - a
        out.append(b - step * (1 - gamma) if gamma >= 0.5 else a + step * gamma)
    return out
