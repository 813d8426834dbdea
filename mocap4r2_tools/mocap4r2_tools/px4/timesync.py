"""MAVLink TIMESYNC as a PX4 autopilot expects it from a companion computer, and the
capture-to-send delay the bridge adds.

PX4 (``src/modules/mavlink/mavlink_timesync.cpp``, ``src/lib/timesync/Timesync.cpp``)
sends a TIMESYNC *request* (``tc1 = 0``, ``ts1`` = its boot clock in ns) about 10 times
a second on an onboard link and takes every TIMESYNC with ``tc1 > 0`` as the *answer*
to one of its requests: ``tc1`` is the companion's clock and ``ts1`` the request's own
stamp, echoed. From the answer it computes its offset to the companion, keeps only
answers whose round trip is under 10 ms, smooths them, and counts the filter converged
after 500 such answers. Only then does it convert a companion's ``time_usec``
(ODOMETRY, VISION_POSITION_ESTIMATE) to its own clock; before that it stamps each sample
with its arrival time.

So a companion must answer every request at once, with ``tc1`` on the clock its
``time_usec`` is on. :class:`TimesyncPeer` does that for the bridge (whose stamps are ROS
time, the host's system clock), and also asks the vehicle itself, the same way, to
measure the round trip and the vehicle's clock offset for /diagnostics.

Everything here is pure: clocks are passed in as integers (ns), so tests drive it with
any clock they like. Both classes may be fed on one thread and read on another (the link's
reader or sender, and /diagnostics): a lock keeps the readings whole.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

# PX4 Timesync.hpp: answers slower than this round trip are not used ...
MAX_RTT_NS = 10_000_000
# ... and this many used answers make PX4's filter converge
PX4_CONVERGENCE_ANSWERS = 500
# ... an answer this far off a converged estimate is skipped, and more than this many such
# answers in a row reset the filter (a time jump of the companion)
PX4_MAX_DEVIATION_NS = 100_000_000
PX4_MAX_CONSECUTIVE_HIGH_DEVIATION = 5
# the filter's gains, from INITIAL to FINAL over the convergence window (Timesync.hpp)
PX4_GAIN_INITIAL = 0.05
PX4_GAIN_FINAL = 0.003
# PX4 converts time_usec well enough for EKF2 while its estimate is within this of the
# offset its answers show; a host clock step under PX4's 100 ms deviation leaves its
# estimate off for tens of seconds (the final gain is 0.3 % per answer)
PX4_FOLLOWING_TOLERANCE_NS = 2_000_000
# PX4 drops answers whose round trip it measures at 10 ms or more, which the bridge can only
# estimate (a loaded host reads late): converged is said this many answers after the 500
CONVERGENCE_MARGIN = 25
# how many of our own requests we remember while waiting for their answers
_OUTSTANDING = 64
# The vehicle's offset is estimated from the used answers of this recent span only: a
# vehicle clock drifts against the host's (parts per million on a flight controller, 1 %
# on PX4 SITL's lockstep clock), so an old reading describes a clock that has moved on.
OFFSET_WINDOW_NS = 5_000_000_000
# an answer this far (PX4's Timesync.hpp MAX_DEVIATION_SAMPLE) off the previous one means
# the vehicle's clock jumped (a reboot): the readings before it are dropped. Answers used
# have a round trip under 10 ms, so honest ones differ by a few ms plus the drift.
OFFSET_JUMP_NS = 100_000_000


@dataclass(frozen=True)
class TimesyncReply:
    """A TIMESYNC to send: ``tc1`` and ``ts1`` in ns."""

    tc1: int
    ts1: int


class Px4TimesyncState:
    """What PX4's timesync filter is doing, predicted from the answers we send it.

    PX4 (``src/lib/timesync/Timesync.cpp``) estimates its offset to the companion from
    our answers: each gives ``(ts1 + now) / 2 - tc1``; answers with a round trip of
    10 ms or more are dropped; the first 500 used answers converge the estimate
    (double exponential smoothing, gains 0.05 -> 0.003); once converged an answer more
    than 100 ms off the estimate is skipped and more than 5 of those in a row reset the
    filter, which converges again over 500 answers (50 s at PX4's 10 Hz). Until it has
    converged PX4 stamps every sample on its arrival. A reboot of the vehicle starts a
    new filter, and its boot clock (the ``ts1`` of its requests) starts again near 0.

    This class runs the same rules on what the bridge knows: the vehicle's request
    stamp, the answer's ``tc1`` and round trip (the link's round trip measured on our own
    requests, plus how long we held the request). It does not copy PX4's filter; its
    converged flag is PX4's as far as the bridge can know it, and ``reason`` says why
    PX4 is not converting ``time_usec`` when it is not. Pure: clocks are integers (ns).
    """

    def __init__(self) -> None:
        self.resets = 0
        self.reboots = 0
        self.reason = "no answer sent yet"
        self._last_ts1: int | None = None
        self._host_step_ns = 0
        self._start()

    def _start(self) -> None:
        self.sequence = 0
        self._estimate = 0.0
        self._skew = 0.0
        self._high_deviation = 0
        self._recent: deque[float] = deque(maxlen=16)

    def _reset(self, reason: str) -> None:
        self.resets += 1
        self.reason = reason
        self._start()

    def on_request(self, ts1: int) -> None:
        """A request of the vehicle: its boot clock going back is a reboot."""
        last = self._last_ts1
        self._last_ts1 = ts1
        if last is not None and ts1 < last:
            self.reboots += 1
            self._host_step_ns = 0
            self._reset(
                f"the vehicle rebooted (its boot clock went from {last * 1e-9:.3f} s to {ts1 * 1e-9:.3f} s): "
                "a new filter converges over 500 answers"
            )

    def host_stepped(self, step_ns: int) -> None:
        """The host clock (the clock of our answers) stepped by ``step_ns``: PX4's
        estimate is off by that much from the next answer on, until it resets or follows."""
        self._host_step_ns = step_ns
        self._recent.clear()
        if abs(step_ns) > PX4_MAX_DEVIATION_NS:
            self.reason = (
                f"the host clock stepped {step_ns * 1e-9:+.3f} s: PX4 resets its filter after "
                f"{PX4_MAX_CONSECUTIVE_HIGH_DEVIATION + 1} answers that far off, then converges again"
            )
        else:
            self.reason = (
                f"the host clock stepped {step_ns * 1e-6:+.3f} ms: under PX4's 100 ms it is not "
                "reset, and its estimate follows at 0.3 % per answer"
            )

    def on_answer(self, tc1: int, ts1: int, round_trip_ns: int) -> None:
        """Our answer (``tc1``) to the request stamped ``ts1``, which PX4 receives
        ``round_trip_ns`` after it sent the request."""
        if round_trip_ns >= MAX_RTT_NS:
            return
        observed = ts1 + round_trip_ns / 2 - tc1  # PX4's clock minus ours, as PX4 computes it
        self._recent.append(observed)
        converged = self.sequence >= PX4_CONVERGENCE_ANSWERS
        if converged and abs(observed - self._estimate) > PX4_MAX_DEVIATION_NS:
            self._high_deviation += 1
            if self._high_deviation > PX4_MAX_CONSECUTIVE_HIGH_DEVIATION:
                step = self._host_step_ns
                self._host_step_ns = 0
                self._reset(
                    (
                        f"the host clock stepped {step * 1e-9:+.3f} s"
                        if step
                        else "the companion's clock jumped"
                    )
                    + f": PX4 reset its filter ({PX4_MAX_CONSECUTIVE_HIGH_DEVIATION + 1} answers more than "
                    "100 ms off its estimate) and converges again over 500 answers"
                )
            return
        if converged:
            gain = PX4_GAIN_FINAL
        else:
            progress = self.sequence / PX4_CONVERGENCE_ANSWERS
            weight = 1.0 - math.exp(0.5 * (1.0 - 1.0 / (1.0 - progress)))
            gain = weight * PX4_GAIN_FINAL + (1.0 - weight) * PX4_GAIN_INITIAL
        if self.sequence == 0:
            self._estimate = observed
        else:
            previous = self._estimate
            self._estimate = gain * observed + (1.0 - gain) * (self._estimate + self._skew)
            self._skew = gain * (self._estimate - previous) + (1.0 - gain) * self._skew
        self.sequence += 1
        self._high_deviation = 0

    @property
    def lag_ns(self) -> float:
        """PX4's estimate minus the offset its recent answers show (what a converted
        ``time_usec`` is off by), ns; 0.0 before any answer."""
        if not self._recent:
            return 0.0
        recent = sorted(self._recent)
        return self._estimate - recent[len(recent) // 2]

    @property
    def converged(self) -> bool:
        """Whether PX4 converts ``time_usec`` to the capture time on its clock."""
        return (
            self.sequence >= PX4_CONVERGENCE_ANSWERS + CONVERGENCE_MARGIN
            and abs(self.lag_ns) <= PX4_FOLLOWING_TOLERANCE_NS
        )

    @property
    def stamping_on_arrival(self) -> bool:
        """Whether PX4 stamps every sample with its arrival (its filter not converged)."""
        return self.sequence < PX4_CONVERGENCE_ANSWERS

    def describe(self) -> str:
        """One line for /diagnostics."""
        if self.stamping_on_arrival:
            return (
                f"PX4 stamps samples on arrival: its timesync has {self.sequence} of "
                f"{PX4_CONVERGENCE_ANSWERS} answers ({self.reason})"
            )
        if not self.converged:
            return f"PX4 converts time_usec {self.lag_ns * 1e-6:+.1f} ms off ({self.reason})"
        return "PX4 converts time_usec to its clock"


class TimesyncPeer:
    """The companion's side of MAVLink TIMESYNC towards a PX4 autopilot.

    ``on_timesync(tc1, ts1, arrival_ns, now_ns)`` for every TIMESYNC received
    (``arrival_ns``: when it was read, ``now_ns``: now, both on the bridge's clock)
    returns the answer to send, if any. ``request(now_ns)`` gives a request of our own.
    """

    def __init__(self, window: int = 64, window_ns: int = OFFSET_WINDOW_NS):
        self.requests_answered = 0
        self.requests_answered_fast = 0  # held for less than MAX_RTT_NS: usable by PX4
        self.samples_used = 0
        self.samples_slow = 0
        self.clock_jumps = 0  # answers more than OFFSET_JUMP_NS off the previous one
        self.ignored = 0  # answers to no request of ours, negative stamps
        self._outstanding: deque[int] = deque(maxlen=_OUTSTANDING)
        self._window_ns = window_ns
        # used answers of the last window_ns (at most ``window``): (middle of the round
        # trip on our clock, round trip, vehicle's clock minus ours), ns
        self._samples: deque[tuple[int, int, int]] = deque(maxlen=window)
        self._lock = threading.Lock()
        self.px4 = Px4TimesyncState()

    def host_stepped(self, step_ns: int) -> None:
        """The bridge's host clock stepped: the readings on the old clock are dropped."""
        with self._lock:
            self._samples.clear()
            self._outstanding.clear()
            self.px4.host_stepped(step_ns)

    def request(self, now_ns: int) -> TimesyncReply:
        with self._lock:
            self._outstanding.append(now_ns)
        return TimesyncReply(0, now_ns)

    def on_timesync(self, tc1: int, ts1: int, arrival_ns: int, now_ns: int) -> TimesyncReply | None:
        with self._lock:
            return self._on_timesync(tc1, ts1, arrival_ns, now_ns)

    def _on_timesync(self, tc1: int, ts1: int, arrival_ns: int, now_ns: int) -> TimesyncReply | None:
        if tc1 == 0:
            # The vehicle's request. PX4 assumes the answer spends as long coming back as
            # the request took to arrive, and places our tc1 midway between its send and
            # receive times: so tc1 is the middle of the time we held the request.
            self.requests_answered += 1
            hold = now_ns - arrival_ns
            if hold < MAX_RTT_NS:
                self.requests_answered_fast += 1
            reply = TimesyncReply((arrival_ns + now_ns) // 2, ts1)
            self.px4.on_request(ts1)
            link = self._link_rtt_ns()
            self.px4.on_answer(reply.tc1, ts1, hold + link)
            return reply
        if tc1 < 0 or ts1 <= 0 or ts1 not in self._outstanding:
            self.ignored += 1
            return None
        self._outstanding.remove(ts1)
        rtt = arrival_ns - ts1
        if not 0 <= rtt < MAX_RTT_NS:
            self.samples_slow += 1
            return None
        self.samples_used += 1
        middle = (ts1 + arrival_ns) // 2
        # the vehicle's clock minus ours, at the middle of the round trip
        offset = tc1 - middle
        samples = self._samples
        if samples and abs(offset - samples[-1][2]) > OFFSET_JUMP_NS:
            self.clock_jumps += 1
            samples.clear()
        samples.append((middle, rtt, offset))
        while samples[0][0] < middle - self._window_ns:
            samples.popleft()
        return None

    def _link_rtt_ns(self) -> int:
        """The link's round trip (the shortest of our recent used answers), ns; 0 before any."""
        samples = self._samples
        return min(rtt for _, rtt, _ in samples) if samples else 0

    @property
    def rtt_ms(self) -> float | None:
        """Median round trip of the recent usable answers, ms."""
        with self._lock:
            rtts = [rtt for _, rtt, _ in self._samples]
        return float(np.median(rtts)) * 1e-6 if rtts else None

    @property
    def offset_s(self) -> float | None:
        """The vehicle's clock minus the bridge's now, s.

        A line (offset and drift) fitted through the recent answers whose round trip is
        at most their median, evaluated at the newest answer. The shorter half is kept
        because a longer round trip was queued, most often in one direction only, which
        shifts its offset by up to half the queueing. The line follows a clock that
        drifts (SITL's lockstep clock drifts by 1 %, 10 ms/s) where the single best
        reading of the window would be stale by the drift since it was taken; with
        fewer than three answers the one with the shortest round trip is used."""
        with self._lock:
            samples = list(self._samples)
        if not samples:
            return None
        times, rtts, offsets = (np.array(column, dtype=np.int64) for column in zip(*samples, strict=True))
        if len(samples) < 3:
            return int(offsets[int(np.argmin(rtts))]) * 1e-9
        short = rtts <= np.median(rtts)
        # relative to the newest answer: ns since the epoch do not fit a float64 exactly
        t = (times[short] - times[-1]).astype(np.float64)
        y = (offsets[short] - offsets[-1]).astype(np.float64)
        if np.ptp(t) <= 0:
            return (int(offsets[-1]) + float(np.mean(y))) * 1e-9
        _slope, intercept = np.polyfit(t, y, 1)
        return (int(offsets[-1]) + float(intercept)) * 1e-9

    @property
    def vehicle_converged(self) -> bool:
        """Whether PX4's filter has converged and converts time_usec to the capture time
        (:class:`Px4TimesyncState`: false again after a reboot of the vehicle, a host
        clock step, or an answer pattern that made PX4 reset)."""
        with self._lock:
            return self.px4.converged

    def px4_state(self) -> str:
        """What PX4's timesync is doing, one line."""
        with self._lock:
            return self.px4.describe()


class DelayWindow:
    """The last ``budget`` capture-to-send delays, s, and their percentiles."""

    def __init__(self, budget: int = 2048):
        self._values: deque[float] = deque(maxlen=budget)
        self._lock = threading.Lock()

    def add(self, delay_s: float) -> None:
        if np.isfinite(delay_s):
            with self._lock:
                self._values.append(delay_s)

    def __len__(self) -> int:
        return len(self._values)

    def percentile(self, q: float) -> float | None:
        with self._lock:
            values = list(self._values)
        return float(np.percentile(values, q)) if values else None


def recommended_ev_delay_ms(
    converged: bool, capture_to_send_p50_ms: float | None, rtt_ms: float | None
) -> float | None:
    """What ``EKF2_EV_DELAY`` should be, ms.

    EKF2 places an external-vision sample at its ``timestamp_sample`` minus
    EKF2_EV_DELAY. Once PX4's timesync has converged, ``timestamp_sample`` is the
    capture time itself, so nothing is left to compensate: 0. Before that (or on a link
    whose round trip never goes under 10 ms) it is the arrival time, so the delay is
    capture to send plus the link's one-way time (half the round trip)."""
    if converged:
        return 0.0
    if capture_to_send_p50_ms is None:
        return None
    return capture_to_send_p50_ms + (rtt_ms or 0.0) / 2
