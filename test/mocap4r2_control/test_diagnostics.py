"""mocap4r2_control.diagnostics: the OK / WARN / ERROR rules of a system's /diagnostics
report, from frames recorded as the reader thread records them."""

from __future__ import annotations

import time

import numpy as np

from mocap4r2_control.diagnostics import ERROR, OK, WARN, FrameStatistics, Thresholds

IDS = np.array([1, 2], dtype=np.int32)
NAMES = ("drone1", "robot1")


def values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_streaming_is_ok_and_counts_frames():
    stats = FrameStatistics()
    stats.activated()
    for k in range(10):
        stats.record(k, 0.004, IDS, NAMES, np.array([True, True]))
    status = stats.report("sys", "hw", True, "active", 0.0)
    assert status.level == OK and values(status)["frames"] == "10"
    assert values(status)["tracking_ratio/robot1"] == "1.000"


def test_gaps_in_frame_numbers_are_dropped_frames_and_warn():
    stats = FrameStatistics()
    stats.activated()
    for k in (0, 1, 5, 6):
        stats.record(k, 0.0, IDS, NAMES, np.array([True, True]))
    status = stats.report("sys", "hw", True, "active", 0.0)
    assert status.level == WARN and values(status)["dropped_frames"] == "3"
    assert "3 dropped frames" in status.message


def test_a_poorly_tracked_body_warns_by_name():
    stats = FrameStatistics()
    stats.activated()
    for k in range(10):
        stats.record(k, 0.0, IDS, NAMES, np.array([True, k < 3]))
    status = stats.report("sys", "hw", True, "active", 0.0)
    assert status.level == WARN and "poorly tracked: robot1" in status.message


def test_silence_while_active_is_an_error_and_inactive_is_ok():
    stats = FrameStatistics(Thresholds(no_frame_error_s=0.05))
    stats.activated()
    time.sleep(0.1)  # the silence being measured
    status = stats.report("sys", "hw", True, "active", 100.0)
    assert status.level == ERROR and "no frame for" in status.message
    assert stats.report("sys", "hw", False, "inactive", 100.0).level == OK
