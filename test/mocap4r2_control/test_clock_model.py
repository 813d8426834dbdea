"""The clock model and the frame stamper on synthetic delay series (no ROS).

A series is what a network does to a system's frames: capture instants on the host
clock, the system's own clock (offset and drift from the host's, optionally a reset),
frames held back and sent in bursts, each send delayed by the transport minimum plus an
exponential jitter, and delivered in order (a queue does not reorder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mocap4r2_control.clock_model import TIME_SOURCES, ClockModel, ClockModelSettings, FrameStamper

HOST_ORIGIN = 1.7e9  # Unix seconds: the precision the node works with
DMIN = 100e-6  # transport minimum


@dataclass
class Series:
    capture: np.ndarray  # true capture instants, host clock
    system: np.ndarray  # the system's clock at capture
    arrival: np.ndarray
    rate: float


def make_series(
    seed: int,
    rate: float = 250.0,
    duration: float = 12.0,
    jitter: float = 2e-3,
    burst: int = 4,
    drift_ppm: float = 100.0,
    offset: float = 3.0,
    reset_at: float | None = None,
) -> Series:
    rng = np.random.default_rng(seed)
    n = int(rate * duration)
    elapsed = np.arange(n) / rate
    capture = HOST_ORIGIN + elapsed
    system = offset + elapsed * (1.0 + drift_ppm * 1e-6)
    if reset_at is not None:
        k = int(reset_at * rate)
        system[k:] = offset + (elapsed[k:] - elapsed[k]) * (1.0 + drift_ppm * 1e-6)
    send_event = np.arange(n) // max(burst, 1)
    last_of_burst = np.minimum(send_event * burst + burst - 1, n - 1)
    delays = rng.exponential(jitter, send_event[-1] + 1)[send_event] if jitter > 0 else 0.0
    arrival = np.maximum.accumulate(capture[last_of_burst] + DMIN + delays)
    return Series(capture, system, arrival, rate)


def stamp_series(series: Series, source: str = "auto", stamper: FrameStamper | None = None) -> np.ndarray:
    stamper = stamper or FrameStamper(source)
    arrival = series.arrival.tolist()
    system = series.system.tolist()
    return np.array([stamper.stamp(arrival[i], 0.0, system[i], None, i) for i in range(len(arrival))])


# ---------------------------------------------------------------------------- properties
@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31),
    rate=st.sampled_from([60.0, 120.0, 250.0, 1000.0]),
    jitter=st.floats(0.0, 3e-3),
    burst=st.integers(1, 6),
    drift_ppm=st.floats(-200.0, 200.0),
    offset=st.floats(-1e6, 1e6),
)
def test_never_after_arrival_monotonic_and_bounded_error(seed, rate, jitter, burst, drift_ppm, offset):
    series = make_series(seed, rate, 10.0, jitter, burst, drift_ppm, offset)
    stamps = stamp_series(series)
    assert np.all(stamps <= series.arrival)
    assert np.all(np.diff(stamps) >= 0.0)
    # once converged (the first seconds include the arrival rule while converging, and
    # the drift is fitted from 4 s of points on) the error is the transport minimum plus
    # the lowest delays' spread, far below the jitter
    error = stamps - series.capture
    settled = error[int(5 * rate) :]
    assert np.max(np.abs(settled)) < DMIN + 0.75e-3, np.max(np.abs(settled))
    assert np.percentile(np.abs(settled), 50) < DMIN + 0.15e-3


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31),
    rate=st.sampled_from([100.0, 250.0, 1000.0]),
    reset_at=st.floats(5.0, 8.0),
    back=st.booleans(),
)
def test_reset_is_detected_and_recovered_within_a_second(seed, rate, reset_at, back):
    series = make_series(seed, rate, 11.0, reset_at=reset_at)
    if not back:  # the clock jumps forward instead (a server clock set anew)
        k = int(reset_at * rate)
        series.system[k:] = series.system[k - 1] + 40.0 + (series.capture[k:] - series.capture[k])
    stamper = FrameStamper()
    stamps = stamp_series(series, stamper=stamper)
    assert stamper.model.resets == 1
    assert np.all(stamps <= series.arrival)
    assert np.all(np.diff(stamps) >= 0.0)
    error = np.abs(stamps - series.capture)
    after = series.capture >= HOST_ORIGIN + reset_at + 1.0
    assert np.max(error[after]) < 0.5e-3


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    values=st.lists(
        st.one_of(
            st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e18, -1e18]),
            st.floats(-1e12, 1e12, allow_nan=False),
        ),
        min_size=1,
        max_size=60,
    ),
    latencies=st.lists(st.one_of(st.floats(-1.0, 1.0), st.just(math.nan)), min_size=1, max_size=60),
)
def test_garbage_system_times_never_crash_nor_stamp_after_arrival(values, latencies):
    stamper = FrameStamper()
    last = -math.inf
    for i, value in enumerate(values):
        arrival = HOST_ORIGIN + i / 100.0
        stamp = stamper.stamp(arrival, latencies[i % len(latencies)], value, None, i)
        assert stamp <= arrival
        assert stamp >= last
        last = stamp
    stamper.status()


# ---------------------------------------------------------------------------- figures
def test_drift_and_offset_are_estimated():
    series = make_series(7, rate=1000.0, duration=12.0, drift_ppm=80.0, offset=-5.0)
    stamper = FrameStamper()
    stamps = stamp_series(series, stamper=stamper)
    model = stamper.model
    assert model.converged
    assert abs(model.drift_ppm - 80.0) < 5.0, model.drift_ppm
    # host - system at the last point: the true one, plus the transport minimum
    truth = series.capture[-1] - series.system[-1]
    assert abs(model.offset - truth - DMIN) < 0.2e-3
    error = np.abs(stamps - series.capture)[-2000:]
    assert np.percentile(error, 99) < DMIN + 0.1e-3
    status = stamper.status()
    assert status["time_source_in_use"] == "system clock model"
    assert status["clock_converged"] == "True"
    assert abs(float(status["clock_drift_ppm"]) - 80.0) < 5.0
    assert float(status["transport_delay_p99_ms"]) > float(status["transport_delay_p50_ms"]) > 0.0


def test_model_beats_the_arrival_rule_five_fold_on_an_impaired_series():
    series = make_series(3, rate=250.0, duration=12.0)
    ours = np.abs(stamp_series(series, "auto") - series.capture)[2500:]
    arrival = np.abs(stamp_series(series, "arrival") - series.capture)[2500:]
    assert np.percentile(ours, 99) * 5 < np.percentile(arrival, 99)


def test_until_converged_the_arrival_rule_is_used_and_said():
    stamper = FrameStamper()
    first = stamper.stamp(HOST_ORIGIN, 0.004, 10.0, None, 0)
    assert first == pytest.approx(HOST_ORIGIN - 0.004)
    assert stamper.status()["time_source_in_use"] == "arrival (clock model converging)"
    assert stamper.status()["clock_converged"] == "False"


# ---------------------------------------------------------------------------- rules
def test_arrival_source_is_todays_rule():
    stamper = FrameStamper("arrival")
    assert stamper.stamp(100.0, 0.01, 5.0, None, 0) == pytest.approx(99.99)
    assert stamper.stamp(100.1, 0.01, 5.1, 99.5, 1) == 99.5  # the adapter's capture_time wins


def test_auto_without_system_time_uses_arrival_and_system_says_so(caplog):
    auto = FrameStamper("auto")
    assert auto.stamp(100.0, 0.01) == pytest.approx(99.99)
    assert auto.status()["time_source_in_use"] == "arrival (no system time)"
    system = FrameStamper("system")
    with caplog.at_level("WARNING", logger="mocap4r2.clock_model"):
        system.stamp(100.0, 0.01)
        system.stamp(100.01, 0.01)
    assert sum("hands no clock" in r.getMessage() for r in caplog.records) == 1


def test_unknown_source_is_refused():
    with pytest.raises(ValueError, match="time_source must be one of"):
        FrameStamper("gps")
    assert TIME_SOURCES == ("auto", "system", "arrival")


@pytest.mark.parametrize(
    ("bad", "kind"),
    [(math.nan, "not finite"), (math.inf, "not finite"), (1e18, "out of range")],
)
def test_insane_system_time_is_counted_logged_once_and_stamped_on_arrival(bad, kind, caplog):
    series = make_series(1, rate=250.0, duration=3.0, jitter=0.0, burst=1)
    stamper = FrameStamper()
    stamps = stamp_series(series, stamper=stamper)
    assert stamper.status()["time_source_in_use"] == "system clock model"
    t0 = series.arrival[-1]
    with caplog.at_level("WARNING", logger="mocap4r2.clock_model"):
        for j in range(5):
            arrival = t0 + (j + 1) * 0.004
            stamp = stamper.stamp(arrival, 0.001, bad, None, len(stamps) + j)
            assert stamp == pytest.approx(arrival - 0.001)
    assert stamper.bad_system_time == 5
    assert stamper.bad_kinds == {kind: 5}
    assert stamper.status()["time_source_in_use"] == "arrival (system time insane)"
    assert sum("stamping on arrival until it is sane" in r.getMessage() for r in caplog.records) == 1
    # sane again: the model goes on without a reset
    resumed = series.system[-1] + 6 * 0.004
    stamper.stamp(t0 + 6 * 0.004 + DMIN, 0.0, resumed, None, len(stamps) + 5)
    assert stamper.status()["time_source_in_use"] == "system clock model"
    assert stamper.model.resets == 0


def test_a_clock_stuck_at_zero_is_counted():
    stamper = FrameStamper()
    for i in range(10):
        stamper.stamp(HOST_ORIGIN + i * 0.01, 0.0, 0.0, None, i)
    assert stamper.bad_kinds == {"reads zero": 9}


def test_frame_number_restart_resets_the_model():
    series = make_series(2, rate=250.0, duration=3.0)
    stamper = FrameStamper()
    stamp_series(series, stamper=stamper)
    assert stamper.model.resets == 0
    stamper.stamp(series.arrival[-1] + 0.004, 0.0, series.system[-1] + 0.004, None, 3)
    assert stamper.model.resets == 1
    assert "frame numbers restarted" in stamper.status()["clock_last_reset"]
    assert stamper.status()["time_source_in_use"] == "arrival (clock model converging)"


def test_reordered_frames_are_not_a_reset():
    series = make_series(4, rate=250.0, duration=3.0, jitter=0.0, burst=1)
    order = np.arange(len(series.arrival))
    order[100], order[101] = 101, 100  # one pair swapped on the way
    stamper = FrameStamper()
    for i in order:
        stamper.stamp(float(series.arrival[i]), 0.0, float(series.system[i]), None, int(i))
    assert stamper.model.resets == 0


def test_host_clock_step_back_keeps_stamps_before_arrival():
    stamper = FrameStamper()
    series = make_series(5, rate=250.0, duration=2.0)
    stamp_series(series, stamper=stamper)
    arrival = series.arrival[-1] - 5.0  # NTP stepped the host clock back 5 s
    stamp = stamper.stamp(arrival, 0.0, series.system[-1] + 0.004, None, len(series.arrival))
    assert stamp <= arrival
    assert stamper.host_clock_steps == 1
    assert stamper.model.resets == 1


def test_model_alone_is_under_every_point():
    series = make_series(6, rate=500.0, duration=6.0)
    model = ClockModel()
    for s, a in zip(series.system.tolist(), series.arrival.tolist()):
        estimate = model.update(s, a)
        assert estimate <= a + 1e-9


def test_a_reader_that_falls_behind_for_a_while_is_not_a_reset():
    # 1.5 s in, the reader stalls 0.6 s, then works off its backlog 3 frames per period:
    # delays up to 0.6 s for more than a second, which no clock did
    series = make_series(8, rate=250.0, duration=8.0, jitter=0.5e-3, burst=1, drift_ppm=50.0)
    arrival = series.arrival.copy()
    stall_end = HOST_ORIGIN + 2.1
    late = (series.capture >= HOST_ORIGIN + 1.5) & (arrival < stall_end)
    arrival[late] = stall_end
    backlog = np.flatnonzero(arrival >= stall_end)
    worked_off = stall_end + np.arange(len(backlog)) * (0.004 / 3)
    arrival[backlog] = np.maximum(arrival[backlog], worked_off)
    series.arrival = np.maximum.accumulate(arrival)
    stamper = FrameStamper()
    stamps = stamp_series(series, stamper=stamper)
    assert stamper.model.resets == 0
    assert np.all(stamps <= series.arrival)
    caught_up = series.arrival - series.capture < 2e-3
    assert np.max(np.abs(stamps - series.capture)[caught_up & (series.capture > HOST_ORIGIN + 6.0)]) < 0.3e-3


# ---------------------------------------------------------------------------- slew
def slow_start_series(extra: float, slow_for: float, rate: float = 100.0, duration: float = 6.0) -> Series:
    """Frames whose first ``slow_for`` s all arrive ``extra`` late (a host busy at start:
    the model's first line lies that much too high), then as fast as the transport goes."""
    series = make_series(11, rate, duration, jitter=30e-6, burst=1, drift_ppm=50.0, offset=3.0)
    series.arrival[series.capture < HOST_ORIGIN + slow_for] += extra
    series.arrival = np.maximum.accumulate(series.arrival)
    return series


def stamp_with_latency(series: Series, latency: float, stamper: FrameStamper) -> np.ndarray:
    """Stamps of frames that arrive ``latency`` after what the series says and report it
    (what is left after the latency is the series' transport delay)."""
    return np.array(
        [
            stamper.stamp(a + latency, latency, s, None, i)
            for i, (a, s) in enumerate(zip(series.arrival.tolist(), series.system.tolist()))
        ]
    )


@pytest.mark.parametrize(("extra", "slow_for"), [(0.3e-3, 0.5), (0.6e-3, 0.8), (1e-3, 1.0)])
def test_a_faster_frame_after_a_slow_start_moves_the_stamps_by_a_slew_not_a_step(extra, slow_for):
    series = slow_start_series(extra, slow_for)
    stamper = FrameStamper()
    stamps = stamp_with_latency(series, 2e-3, stamper)
    offsets = stamps - series.system
    # from the model's first stamps on (it has converged 0.3 s in)
    modelled = np.diff(offsets)[np.flatnonzero(series.capture >= HOST_ORIGIN + 0.4)[0] :]
    # per 10 ms frame: the slew (2000 ppm: 20 us) and the drift (50 ppm: 0.5 us), never the
    # extra delay the first line carried
    slew = ClockModelSettings().slew_ppm * 1e-6
    assert np.max(np.abs(modelled)) < (slew + 50e-6) * 0.01 + 1e-6, np.max(np.abs(modelled))
    assert np.all(stamps <= series.arrival + 2e-3)
    assert np.all(np.diff(stamps) > 0.0)
    # and the correction is made (1 ms at 2000 ppm takes 0.5 s)
    settled = (stamps - series.capture)[series.capture >= HOST_ORIGIN + slow_for + extra / slew + 0.5]
    assert np.max(np.abs(settled)) < DMIN + 0.1e-3, np.max(np.abs(settled))
    assert abs(stamper.correction) < 1e-6
    assert stamper.mapping_steps == 0
    assert float(stamper.status()["clock_correction_ms"]) == pytest.approx(0.0, abs=1e-3)


def test_while_slewing_down_a_stamp_never_lies_after_its_arrival():
    # the arrival is what the reported latency is taken from: a frame that arrives before
    # the slewed mapping says it was captured brings the mapping down to its arrival
    series = slow_start_series(0.6e-3, 0.8)
    stamper = FrameStamper()
    stamps = stamp_with_latency(series, 0.1e-3, stamper)
    arrivals = series.arrival + 0.1e-3
    assert np.all(stamps <= arrivals)
    assert np.all(np.diff(stamps) > 0.0)
    offsets = np.diff(stamps - series.system)[np.flatnonzero(series.capture >= HOST_ORIGIN + 0.4)[0] :]
    # the step is only what the arrival forces: the extra delay less the latency
    assert np.max(np.abs(offsets)) < 0.6e-3 - 0.1e-3 + 10e-6, np.max(np.abs(offsets))


def test_a_correction_beyond_step_s_is_applied_at_once_and_counted():
    # 3 s in, the server clock jumps forward 10 ms: under the 50 ms of a reset, but no
    # transport explains it; slewing it would leave the stamps milliseconds off for seconds
    series = make_series(12, 100.0, 6.0, jitter=30e-6, burst=1, drift_ppm=0.0, offset=3.0)
    k = int(3.0 * series.rate)
    series.system[k:] += 0.010
    stamper = FrameStamper()
    stamps = stamp_with_latency(series, 2e-3, stamper)
    offsets = stamps - series.system
    assert offsets[k] - offsets[k - 1] == pytest.approx(-0.010, abs=50e-6)
    assert stamper.model.resets == 0
    assert stamper.mapping_steps == 1
    assert stamper.status()["clock_steps"] == "1"
    assert np.max(np.abs(stamps - series.capture)[k:]) < DMIN + 0.2e-3


@pytest.mark.parametrize("name", ["slew_ppm", "step_s"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf])
def test_slew_settings_must_be_finite_and_positive(name, value):
    with pytest.raises(ValueError, match=f"ClockModelSettings.{name} must be a finite number > 0"):
        ClockModelSettings(**{name: value})
