"""mocap4r2_control.timebase: seconds <-> builtin_interfaces/Time, one rounding everywhere."""

from __future__ import annotations

import time
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mocap4r2_control.timebase import (
    HostOffset,
    ManualClock,
    SteppedClock,
    node_clock,
    split_seconds,
    stamp_to_seconds,
    time_msg,
)


@given(st.floats(min_value=0.0, max_value=4e9, allow_nan=False))
def test_split_never_overflows_and_round_trips_within_a_nanosecond(seconds):
    sec, nanosec = split_seconds(seconds)
    assert 0 <= nanosec <= 999_999_999
    assert abs(sec + nanosec * 1e-9 - seconds) <= 1e-9 + 4e9 * 2**-52


def test_time_msg_and_back():
    msg = time_msg(1_700_000_000.25)
    assert (msg.sec, msg.nanosec) == (1_700_000_000, 250_000_000)
    assert stamp_to_seconds(msg) == pytest.approx(1_700_000_000.25, abs=1e-9)
    now = stamp_to_seconds(time_msg())
    assert abs(now - time.time()) < 5.0


# ---------------------------------------------------------------------------- clocks
def test_host_offset_finds_a_step_either_way_and_counts_only_those():
    clock = ManualClock(100.0, 1_700_000_000.0)
    offset = HostOffset(clock)
    assert offset.offset == 1_700_000_000.0
    assert offset.check() == 0.0
    clock.offset += 0.3
    assert offset.check() == pytest.approx(0.3)
    clock.offset -= 1.0
    assert offset.check() == pytest.approx(-1.0)
    clock.offset += 10e-6  # under HOST_OFFSET_MOVE_S: not even moved
    assert offset.check() == 0.0 and offset.offset == pytest.approx(1_699_999_999.3)
    clock.offset += 0.5e-3  # moved, under HOST_STEP_S: not a step
    assert offset.check() == 0.0 and offset.steps == 2
    assert offset.last_step == pytest.approx(-1.0)


def test_host_offset_reads_again_when_interrupted_between_its_readings():
    readings = iter([10.0, 10.5, 10.0 + 1e-6])  # the first pair was 0.5 s apart: a reader held

    class Interrupted(ManualClock):
        def host(self) -> float:
            return next(readings, 10.0 + 2e-6) + self.offset

    clock = Interrupted(0.0, 0.0)
    assert HostOffset(clock).offset == pytest.approx(10.0, abs=1e-5)


def test_stepped_clock_steps_its_host_clock_only():
    clock = SteppedClock()
    before = clock.host() - time.time()
    clock.offset = 2.0
    assert clock.host() - time.time() == pytest.approx(before + 2.0, abs=0.05)
    assert clock.monotonic is time.monotonic


def test_a_node_clock_is_its_own_monotonic_clock():
    # simulation time moves in /clock steps at the simulation's rate: no host steps to find
    class Node:
        def __init__(self, seconds):
            self.seconds = seconds

        def get_clock(self):
            node = self

            class Clock:
                def now(self):
                    return types.SimpleNamespace(nanoseconds=int(node.seconds * 1e9))

            return Clock()

        def get_parameter(self, name):
            assert name == "use_sim_time"
            return types.SimpleNamespace(value=True)

    node = Node(12.5)
    clock = node_clock(node)
    assert clock.host() == clock.monotonic() == 12.5
    offset = HostOffset(clock)
    node.seconds = 40.0  # the simulation ran ahead of the wall clock
    assert offset.check() == 0.0 and offset.steps == 0
