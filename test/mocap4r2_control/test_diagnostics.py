"""mocap4r2_control.diagnostics: the OK / WARN / ERROR rules of a system's /diagnostics
report, from frames recorded as the reader thread records them."""

from __future__ import annotations

import time

import numpy as np
import pytest
from diagnostic_reports import published  # test/fixtures

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
    status = published(stats, "sys", hardware_id="hw", active=True, state_label="active", nominal_rate=0.0)
    assert status.level == OK and values(status)["frames"] == "10"
    assert values(status)["tracking_ratio/robot1"] == "1.000"


def test_gaps_in_frame_numbers_are_dropped_frames_and_warn():
    stats = FrameStatistics()
    stats.activated()
    for k in (0, 1, 5, 6):
        stats.record(k, 0.0, IDS, NAMES, np.array([True, True]))
    status = published(stats, "sys", hardware_id="hw", active=True, state_label="active", nominal_rate=0.0)
    assert status.level == WARN and values(status)["dropped_frames"] == "3"
    assert "3 dropped frames" in status.message


def test_a_poorly_tracked_body_warns_by_name():
    stats = FrameStatistics()
    stats.activated()
    for k in range(10):
        stats.record(k, 0.0, IDS, NAMES, np.array([True, k < 3]))
    status = published(stats, "sys", hardware_id="hw", active=True, state_label="active", nominal_rate=0.0)
    assert status.level == WARN and "poorly tracked: robot1" in status.message


def test_silence_while_active_is_an_error_and_inactive_is_ok():
    stats = FrameStatistics(Thresholds(no_frame_error_s=0.05))
    stats.activated()
    time.sleep(0.1)  # the silence being measured
    status = published(stats, "sys", hardware_id="hw", active=True, state_label="active", nominal_rate=100.0)
    assert status.level == ERROR and "no frame for" in status.message
    assert (
        published(
            stats, "sys", hardware_id="hw", active=False, state_label="inactive", nominal_rate=100.0
        ).level
        == OK
    )


def test_tracking_ratios_count_every_frame_across_the_pending_budget_and_an_asset_change():
    """Validity is added up in blocks (PENDING_VALID frames) and at each report: every
    frame counts once, in its window, and a change of the bodies starts afresh."""
    from mocap4r2_control.diagnostics import PENDING_VALID

    stats = FrameStatistics()
    stats.activated()
    frames = 2 * PENDING_VALID + 7  # two full blocks and a partial one
    for k in range(frames):
        stats.record(k, 0.0, IDS, NAMES, np.array([True, k % 4 == 0]))
    got = values(
        published(stats, "sys", hardware_id="hw", active=True, state_label="active", nominal_rate=0.0)
    )
    assert got["tracking_ratio/drone1"] == "1.000"
    assert got["tracking_ratio/robot1"] == f"{len(range(0, frames, 4)) / frames:.3f}"
    # the next window starts empty; a new set of bodies mid-window drops what came before
    for k in range(frames, frames + 10):
        stats.record(k, 0.0, IDS, NAMES, np.array([False, False]))
    other = np.array([7], dtype=np.int32)
    for k in range(frames + 10, frames + 15):
        stats.record(k, 0.0, other, ("wand",), np.array([True]))
    got = values(
        published(stats, "sys", hardware_id="hw", active=True, state_label="active", nominal_rate=0.0)
    )
    assert got["tracking_ratio/wand"] == "1.000" and "tracking_ratio/robot1" not in got


def test_a_validity_array_not_one_per_body_is_refused():
    stats = FrameStatistics()
    stats.activated()
    with pytest.raises(ValueError, match="one per body"):
        stats.record(0, 0.0, IDS, NAMES, np.array([True]))
