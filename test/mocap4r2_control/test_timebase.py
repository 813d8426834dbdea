"""mocap4r2_control.timebase: seconds <-> builtin_interfaces/Time, one rounding everywhere."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mocap4r2_control.timebase import split_seconds, stamp_to_seconds, time_msg


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
