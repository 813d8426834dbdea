"""The stand-ins' time impairment: server clock, bursty delayed delivery, truth log."""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pytest

from mocap4r2_drivers.impairment import (
    Delivery,
    ServerClock,
    TimeImpairment,
    TruthLog,
    add_arguments,
    from_arguments,
    read_truth_log,
    wall_clock_offset,
)


def test_server_clock_has_offset_drift_and_restarts():
    clock = ServerClock(TimeImpairment(clock_drift_ppm=100.0, clock_offset_s=3.0, clock_reset_at=10.0), 50.0)
    assert clock.read(50.0) == pytest.approx(3.0)
    assert clock.read(55.0) == pytest.approx(3.0 + 5.0 * (1 + 100e-6), abs=1e-12)
    assert not clock.restarted(59.99)
    assert clock.restarted(60.0)
    assert clock.read(60.0) == pytest.approx(3.0)  # restarted from its origin
    assert clock.read(61.0) == pytest.approx(3.0 + 1.0001)


def test_delivery_holds_bursts_and_keeps_order():
    delivery: Delivery[int] = Delivery(TimeImpairment(burst=4, jitter_ms=2.0, seed=3))
    released: list[tuple[float, int]] = []

    def drain(until: float) -> None:
        # each delivery at its own time, as a stand-in waiting for next_time() does
        while (due := delivery.next_time()) is not None and due <= until:
            released.extend((due, item) for item in delivery.due(due))

    for k in range(4000):
        now = k * 0.004
        drain(now)
        delivery.put(k, now)
        drain(now)
    drain(math.inf)
    items = [item for _, item in released]
    assert items == list(range(4000))  # every frame, in order
    times = np.array([t for t, _ in released])
    captured = np.array(items) * 0.004
    delay = times - captured
    assert np.all(delay >= -1e-12)
    # the last frame of each burst waits only for the jitter (mean 2 ms), the first 3 periods more
    last_of_burst = delay[3::4]
    assert 1.2e-3 < np.mean(last_of_burst) < 3.5e-3
    assert np.mean(delay[0::4]) - np.mean(last_of_burst) == pytest.approx(0.012, abs=0.003)


def test_what_an_impairment_changes():
    assert not TimeImpairment().shifts_clock and not TimeImpairment().delays
    assert (
        TimeImpairment(clock_reset_at=5.0).shifts_clock and TimeImpairment(clock_drift_ppm=-20).shifts_clock
    )
    assert TimeImpairment(burst=2).delays and not TimeImpairment(burst=2).shifts_clock


def test_no_impairment_delivers_at_once():
    delivery: Delivery[str] = Delivery(TimeImpairment())
    delivery.put("a", 1.0)
    assert delivery.due(1.0) == ["a"]
    assert delivery.next_time() is None


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"jitter_ms": -1.0}, "jitter_ms must be in"),
        ({"burst": 0}, "burst must be in"),
        ({"burst": 2.5}, "burst must be an integer"),
        ({"clock_drift_ppm": math.nan}, "clock_drift_ppm must be a finite number"),
        ({"clock_offset_s": "soon"}, "clock_offset_s must be float"),
    ],
)
def test_bad_values_are_refused_with_the_reason(values, words):
    with pytest.raises(ValueError, match=words):
        TimeImpairment.from_mapping(values)


def test_flags_and_truth_log(tmp_path):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    path = tmp_path / "truth.csv"
    args = parser.parse_args(
        ["--jitter-ms", "2", "--burst", "4", "--clock-drift-ppm", "100", "--clock-offset-s", "3"]
        + ["--clock-reset-at", "8", "--truth-log", str(path)]
    )
    impairment = from_arguments(args, seed=7)
    assert impairment == TimeImpairment(2.0, 4, 100.0, 3.0, 8.0, str(path), 7)
    log = TruthLog(impairment.truth_log)
    log.write(12, 1700000000.123456789)
    log.write(13, 1700000000.127456789)
    log.close()
    assert path.read_text().splitlines()[0] == "frame_number,capture_time"
    lines = read_truth_log(path)
    assert [n for n, _ in lines] == [12, 13]
    assert lines[1][1] == pytest.approx(1700000000.127456789, abs=1e-6)


class PausingClocks:
    """Simulated clocks (Unix = monotonic + 1.7e9) whose first wall read is followed by a
    pause before the thread runs again (the GIL taken by another thread, the scheduler)."""

    TRUE_OFFSET = 1_700_000_000.0

    def __init__(self, pause: float) -> None:
        self.now = 100.0
        self.pauses = [pause]

    def monotonic(self) -> float:
        self.now += 1e-6
        return self.now

    def wall(self) -> float:
        unix = self.TRUE_OFFSET + self.now
        self.now += self.pauses.pop() if self.pauses else 0.0
        return unix


def test_wall_clock_offset_ignores_a_pause_between_the_two_clocks():
    """A truth log writes monotonic capture instants as Unix times through one offset.
    Read once as time.time() - time.monotonic(), a pause between the two calls is in the
    offset and so in every line of the log: 8 ms here, and every stamp compared with the
    log then looks 8 ms late. The tightest of several bracketed reads is kept instead."""
    naive = PausingClocks(0.008)
    assert naive.wall() - naive.monotonic() - PausingClocks.TRUE_OFFSET < -7e-3
    clocks = PausingClocks(0.008)
    assert abs(wall_clock_offset(clocks.monotonic, clocks.wall) - PausingClocks.TRUE_OFFSET) < 2e-6
    # on the real clocks it is the offset a quiet read gives
    assert abs(wall_clock_offset() - (time.time() - time.monotonic())) < 0.05
