"""Steps back of a mocap system's clock, read from the system's own stamps.

The clock model (:mod:`~mocap4r2_control.clock_model`) learns the mapping of a system's
clock to the host's from arrivals, and arrivals carry the network's jitter: a step back
of the system clock by a millisecond or two hides among late bursts for seconds at 30 Hz.
The stamps themselves carry no such jitter. A system captures its frames one period
apart on its own clock, so the system time of frame ``n`` is ``s_0 + (n - n_0) * P``
and a step back of ``b`` shows at the frame it happens, as a phase that drops by ``b``
and stays there. :class:`StampSteps` watches that phase over the last five frames (three
before, two after a candidate step) and reports a step back when the three agree, the
two agree, and the two lie lower than the three by more than the threshold.

It reports steps only while the stamps are regular enough to show them
(:attr:`StampSteps.armed`): the period known (the median increment per frame number over
the last 64 frames) and the threshold (``noise_factor`` times the stamps' own noise, the
median deviation of an increment from the period, and at least ``min_step_s``) at most
``largest_threshold_s`` and half a period, so that every step of a period or more is
seen. While the threshold is also at most ``small_step_s`` (:attr:`StampSteps.sees_small_steps`),
no step the model must correct hides under it: stamps read from a capture clock (a frame
number times the period, QTM's and NatNet's timestamps), quantised to a microsecond. A
server that stamps its messages when its loop sends them (VRPN's message time) may be
noisier; its steps under the threshold are left to the model's rules on arrivals.
Frame numbers say how many periods passed, so lost frames do not look like steps; a frame
number that does not advance (reordered, repeated) is passed over. Steps forward are not
reported: a frame that comes earlier than the model's line moves the line down at once.

Pure Python, O(1) per frame (the medians are refreshed every 64 frames), without rclpy.
"""

from __future__ import annotations

from collections import deque

# frames before and after a candidate step: a glitch of one stamp is in one group and
# breaks its agreement; a step needs two frames on its new phase (67 ms at 30 Hz)
BEFORE = 3
AFTER = 2
# increments kept for the period and the stamps' noise, how many are needed before either
# is known, and how often their medians are refreshed (frames)
HISTORY = 64
KNOWN_AFTER = 16
REFRESH = 64
# increments spanning more frame numbers than this (a long gap) say little of the period
MAX_UNITS = 16


class StampSteps:
    """Steps back of a system clock, from its stamps and frame numbers.

    ``update(system_time, frame_number)`` takes every frame whose system time is sane, in
    order of arrival, and returns the step back found at it (s, > 0) or 0.0. A step is
    reported once, two frames after it happened; its size is exact to the stamps' noise.
    """

    def __init__(
        self,
        min_step_s: float,
        noise_factor: float,
        largest_threshold_s: float,
        small_step_s: float,
        max_step_s: float,
    ) -> None:
        self.min_step_s = min_step_s  # smaller steps are not told apart from the stamps' rounding
        self.noise_factor = noise_factor  # a step is this many times the stamps' median noise
        self.largest_threshold_s = largest_threshold_s  # armed only while the threshold is at most this
        self.small_step_s = small_step_s  # ... and sees every step that matters under this one
        self.max_step_s = max_step_s  # a step back this large is a restart, not a step
        self.period = 0.0  # system seconds per frame number (0.0: not known yet)
        self.noise = 0.0  # median |increment - frame numbers x period|, s
        self.threshold = 0.0  # a step back is at least this, s
        self.armed = False
        self.sees_small_steps = False
        self._units: deque[float] = deque(maxlen=HISTORY)
        self._deviations: deque[float] = deque(maxlen=HISTORY)
        self._frames: deque[tuple[int, float]] = deque(maxlen=BEFORE + AFTER)
        self._since_refresh = 0
        self._candidate = 0.0  # the deficit of the newest frame

    def reset(self) -> None:
        """The system clock restarted: forget the frames (the period is the same)."""
        self._frames.clear()
        self._candidate = 0.0

    def update(self, system_time: float, frame_number: int) -> float:
        frames = self._frames
        period = self.period
        deficit = 0.0  # how far this frame's system time falls short of the last one's plus the periods
        if frames:
            last_number, last_time = frames[-1]
            units = frame_number - last_number
            if units <= 0:  # reordered or repeated: says nothing of the phase
                return 0.0
            increment = system_time - last_time
            deficit = units * period - increment
            if increment > 0.0 and units <= MAX_UNITS:
                self._units.append(increment / units)
                if period:
                    self._deviations.append(deficit if deficit >= 0.0 else -deficit)
                self._since_refresh += 1
                if self._since_refresh >= (REFRESH if self.armed else KNOWN_AFTER):
                    self._refresh()
        frames.append((frame_number, system_time))
        # a step shows as the first frame on the new clock falling short of the period (by
        # the step, give or take the stamps' noise): frames after one that did not fall
        # short by a quarter of the threshold stop here, nearly every frame
        candidate = self._candidate
        self._candidate = deficit
        if not self.armed or candidate < 0.25 * self.threshold or len(frames) < BEFORE + AFTER:
            return 0.0
        n0, s0 = frames[0]
        phases = [s - s0 - (n - n0) * period for n, s in frames]
        before, after = phases[:BEFORE], phases[BEFORE:]
        step = sorted(before)[BEFORE // 2] - sum(after) / AFTER
        threshold = self.threshold
        if not threshold <= step < self.max_step_s:
            return 0.0
        # each group agrees within the threshold: one stamp off by more (a glitch) is no step
        # (one off by less moves the median of three not at all, the mean of two by half)
        if max(before) - min(before) > threshold or max(after) - min(after) > threshold:
            return 0.0
        # the frames before the step are of the old clock: the next candidate needs new ones
        for _ in range(BEFORE):
            frames.popleft()
        return step

    def _refresh(self) -> None:
        self._since_refresh = 0
        if len(self._units) < KNOWN_AFTER:
            return
        units = sorted(self._units)
        self.period = units[len(units) // 2]
        if len(self._deviations) < KNOWN_AFTER:
            return
        deviations = sorted(self._deviations)
        self.noise = deviations[len(deviations) // 2]
        self.threshold = max(self.min_step_s, self.noise_factor * self.noise)
        self.armed = self.threshold <= min(self.largest_threshold_s, 0.5 * self.period)
        self.sees_small_steps = self.armed and self.threshold <= self.small_step_s
