"""The faults of a lab's clocks, driven through the real FrameStamper with injected clocks.

A case is a synthetic stream as a network and two clocks make it: capture instants on the
host's monotonic clock, the system's own clock (offset, drift, optionally a step), frames
held back and sent in bursts with an exponential jitter, handed over one after another
(``HANDOVER`` apart: decoding and publishing the frame before), and the host's system
clock, which NTP may step while the stream runs. The stamper reads its clocks from a
:class:`~mocap4r2_control.timebase.ManualClock` set to each frame's arrival, as the node's
reader thread reads them. A stamp's truth is the capture instant on the host clock in
force when the frame was stamped.

Used by ``python -m bench timing faults`` (figures), ``python -m stress faults``
(targets) and the clock model's tests (the same cases, asserted).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

HOST_ORIGIN = 1.7e9  # Unix seconds: the precision the node works with
MONO_ORIGIN = 5000.0  # the monotonic clock's reading at the start (seconds since boot)
DMIN = 100e-6  # transport minimum
HANDOVER = 20e-6  # between the hand-overs of two frames of one burst
RECOVERED_BELOW = 0.5e-3


@dataclass(frozen=True)
class ClockCase:
    """One stream and its fault, at ``fault_at`` s."""

    name: str
    rate: float = 250.0
    duration: float = 12.0
    jitter: float = 2e-3  # mean of the exponential delay per delivery, s
    burst: int = 4
    drift_ppm: float = 100.0
    offset: float = 3.0  # the system clock's reading at the start
    fault_at: float = 6.0
    host_step: float = 0.0  # the host system clock steps this far (either way), s
    vendor_step: float = 0.0  # the system clock steps this far (negative: back), s
    gap: float = 0.0  # no frame arrives for this long (frames captured meanwhile are lost), s
    identical_arrivals: bool = False  # a burst's frames all read one arrival (no hand-over time)
    seed: int = 1


@dataclass
class Series:
    """Per frame, in order of arrival."""

    mono: np.ndarray  # arrival, monotonic clock
    host_offset: np.ndarray  # host system clock minus monotonic in force at that arrival
    latency: np.ndarray  # hand-over time since the burst reached the host (the adapter's latency)
    system: np.ndarray  # the system's clock at capture
    capture: np.ndarray  # true capture instant, monotonic clock
    numbers: np.ndarray
    case: ClockCase = field(repr=False, default_factory=lambda: ClockCase("?"))

    @property
    def arrival(self) -> np.ndarray:
        """Arrival on the host system clock."""
        return self.mono + self.host_offset

    @property
    def truth(self) -> np.ndarray:
        """Capture instant on the host clock in force when the frame was stamped."""
        return self.capture + self.host_offset


def make_series(case: ClockCase) -> Series:
    rng = np.random.default_rng(case.seed)
    n = int(case.rate * case.duration)
    elapsed = np.arange(n) / case.rate
    capture = MONO_ORIGIN + elapsed
    system = case.offset + elapsed * (1.0 + case.drift_ppm * 1e-6)
    k = int(case.fault_at * case.rate)
    system[k:] += case.vendor_step
    burst = max(case.burst, 1)
    send_event = np.arange(n) // burst
    last_of_burst = np.minimum(send_event * burst + burst - 1, n - 1)
    delays = rng.exponential(case.jitter, send_event[-1] + 1)[send_event] if case.jitter > 0 else 0.0
    reached = np.maximum.accumulate(capture[last_of_burst] + DMIN + delays)
    if case.identical_arrivals:
        mono = reached
    else:  # handed over one after another, from when the frame's datagram reached the host
        handed = reached.tolist()
        for i in range(1, n):
            handed[i] = max(handed[i], handed[i - 1] + HANDOVER)
        mono = np.asarray(handed)
    position = mono - reached
    keep = np.ones(n, dtype=bool)
    if case.gap > 0:
        keep &= ~(
            (capture >= MONO_ORIGIN + case.fault_at) & (capture < MONO_ORIGIN + case.fault_at + case.gap)
        )
    host_offset = np.where(mono >= MONO_ORIGIN + case.fault_at, case.host_step, 0.0) + (
        HOST_ORIGIN - MONO_ORIGIN
    )
    return Series(
        mono[keep],
        host_offset[keep],
        position[keep],
        system[keep],
        capture[keep],
        np.arange(n)[keep],
        case,
    )


def clock_at_start(series: Series) -> Any:
    """A ManualClock reading what the clocks read when the first frame arrived."""
    from mocap4r2_control.timebase import ManualClock

    return ManualClock(float(series.mono[0]), float(series.host_offset[0]))


def stamp(series: Series, stamper: Any | None = None) -> np.ndarray:
    """The stamps of ``series`` by a FrameStamper ('auto') fed as the node feeds it.

    A FrameStamper without a ``clock`` argument (before the model ran on the monotonic
    clock) is fed the host arrivals alone: how it met the same faults."""
    from mocap4r2_control import clock_model
    from mocap4r2_control.timebase import ManualClock

    clock = ManualClock(float(series.mono[0]), float(series.host_offset[0]))
    if stamper is None:
        injectable = "clock" in inspect.signature(clock_model.FrameStamper).parameters
        stamper = (
            clock_model.FrameStamper("auto", clock=clock) if injectable else clock_model.FrameStamper("auto")
        )
    elif getattr(stamper, "clock", None) is not None:
        clock = stamper.clock
    out = np.empty(len(series.mono))
    mono = series.mono.tolist()
    offsets = series.host_offset.tolist()
    latency = series.latency.tolist()
    system = series.system.tolist()
    numbers = series.numbers.tolist()
    fn = stamper.stamp
    for i in range(len(mono)):
        clock.mono = mono[i]
        clock.offset = offsets[i]
        out[i] = fn(mono[i] + offsets[i], latency[i], system[i], None, numbers[i])
    return out


def figures(series: Series, stamps: np.ndarray, baseline: np.ndarray | None = None) -> dict[str, Any]:
    """What a case is judged on: recovery after the fault, error after recovery, and the
    stamps' rules (repeats, going back, after arrival). ``baseline``: the errors of the
    same frames without the fault; a frame that is as far off without the fault does not
    count against the recovery (the stream's own impairment, not the fault)."""
    case = series.case
    error = np.abs(stamps - series.truth)
    fault = MONO_ORIGIN + case.fault_at
    after = series.mono >= fault
    caused = error >= RECOVERED_BELOW
    if baseline is not None:
        caused &= baseline < RECOVERED_BELOW
    bad = np.flatnonzero(after & caused)
    recovery = float(series.mono[bad[-1]] - fault) if bad.size else 0.0
    settled = series.mono >= fault + 1.0
    diffs = np.diff(stamps)
    # going back is allowed only where the host clock itself went back
    host_back = np.diff(series.host_offset) < 0.0
    arrival = series.arrival
    early = series.mono < MONO_ORIGIN + 0.3
    return {
        "recovery_s": round(recovery, 3),
        "after_p50_ms": float(np.percentile(error[settled], 50) * 1e3) if settled.any() else math.nan,
        "after_p99_ms": float(np.percentile(error[settled], 99) * 1e3) if settled.any() else math.nan,
        "after_max_ms": float(np.max(error[settled]) * 1e3) if settled.any() else math.nan,
        "repeats": int(np.sum(diffs == 0.0)),
        "repeats_first_0.3s": int(np.sum((diffs == 0.0) & early[1:])),
        "backwards": int(np.sum((diffs < 0.0) & ~host_back)),
        "after_arrival": int(np.sum(stamps > arrival)),
        "after_arrival_max_us": float(max(0.0, np.max(stamps - arrival)) * 1e6),
        "frames": len(stamps),
    }


def run_case(case: ClockCase) -> dict[str, Any]:
    """Figures of one case through the FrameStamper of this tree, and its /diagnostics."""
    from mocap4r2_control.clock_model import FrameStamper

    series = make_series(case)
    stamper = FrameStamper("auto", clock=clock_at_start(series))
    stamps = stamp(series, stamper)
    baseline = None
    if case.gap == 0 and (case.host_step or case.vendor_step):
        # the same frames without the fault (the series' random draws do not depend on it)
        twin = make_series(replace(case, host_step=0.0, vendor_step=0.0))
        twin_stamps = stamp(twin, FrameStamper("auto", clock=clock_at_start(twin)))
        baseline = np.abs(twin_stamps - twin.truth)
    out = figures(series, stamps, baseline)
    if baseline is not None:
        settled = series.mono >= MONO_ORIGIN + case.fault_at + 1.0
        out["baseline_after_max_ms"] = float(np.max(baseline[settled]) * 1e3) if settled.any() else math.nan
    status = stamper.status()
    out["status"] = {k: status[k] for k in sorted(status) if k.startswith(("clock", "host", "bad"))}
    return out


#: the cases of the issue (39) and of the bench; a stress section adds its targets to them
IMPAIRED = ClockCase("impaired, no fault")
CASES: tuple[ClockCase, ...] = (
    IMPAIRED,
    *(
        replace(IMPAIRED, name=f"host clock step {step * 1e3:+g} ms", host_step=step)
        for step in (0.03, 0.3, 1.0, -0.03, -0.3, -1.0)
    ),
    *(
        replace(IMPAIRED, name=f"system clock step back {back * 1e3:g} ms", vendor_step=-back)
        for back in (0.001, 0.005, 0.03, 0.049, 0.3)
    ),
    replace(IMPAIRED, name="system clock step forward 10 ms", vendor_step=0.010),
    replace(IMPAIRED, name="gap 3 s", gap=3.0),
    replace(IMPAIRED, name="bursts of 10, one arrival each", burst=10, identical_arrivals=True),
    replace(IMPAIRED, name="bursts of 10, handed over 20 us apart", burst=10),
    # no fault: the figures are those of the 90 s after the first 30 s
    replace(IMPAIRED, name="jitter 20 ms mean, 120 s", jitter=20e-3, duration=120.0, fault_at=30.0, burst=1),
)


def fitted_drift(case: ClockCase) -> float:
    """The drift the model reads at the end of ``case``, ppm."""
    from mocap4r2_control.clock_model import FrameStamper

    series = make_series(case)
    stamper = FrameStamper("auto", clock=clock_at_start(series))
    stamp(series, stamper)
    return float(stamper.model.drift_ppm)
