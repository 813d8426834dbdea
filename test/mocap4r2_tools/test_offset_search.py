"""mocap4r2_tools.trajectory.offset_search alone: what trajectory_error's time_offset_auto
keeps of both streams, when it searches, and when it holds a value."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mocap4r2_tools.trajectory.offset_search import (
    AUTO_SECONDS,
    AUTO_STABLE,
    OffsetSearch,
    replay_order,
)
from mocap4r2_tools.trajectory.poses import TrajectoryInputError

T0 = 1_700_000_000.0
IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])


def motion(t: float) -> tuple[np.ndarray, np.ndarray]:
    """A moving, turning body (sums of sines), as position and quaternion (x, y, z, w)."""
    p = np.array([1.5 * np.cos(0.7 * t) + 0.3 * np.sin(2.3 * t), np.sin(0.9 * t), 1 + 0.2 * np.sin(1.7 * t)])
    q = Rotation.from_rotvec([0.2 * np.sin(1.1 * t), 0.15 * np.cos(0.8 * t), 0.6 * t]).as_quat()
    return p, q


def fill(search: OffsetSearch, seconds: float, shift: float, start: float = 0.0) -> None:
    """Ground truth at 100 Hz and the same motion as an estimate at 20 Hz, stamped
    ``shift`` s late (so the offset to add to the estimate is -shift)."""
    for t in np.arange(start, start + seconds, 0.01):
        search.keep_gt(T0 + t, motion(t))
    for t in np.arange(start + 0.5, start + seconds - 0.5, 0.05):
        search.keep_est(T0 + t + shift, motion(t))


def test_samples_are_kept_in_time_order_and_only_the_last_seconds():
    search = OffsetSearch()
    pose = (np.zeros(3), IDENTITY)
    search.keep_gt(T0 + 1.0, pose)
    search.keep_gt(T0 + 0.5, pose)  # older than the last: left out
    search.keep_gt(T0 + 1.0, pose)  # not newer: left out
    assert [s[0] for s in search.gt] == [T0 + 1.0]
    search.keep_gt(T0 + 1.0 + AUTO_SECONDS + 0.1, pose)
    assert [s[0] for s in search.gt] == [T0 + 1.0 + AUTO_SECONDS + 0.1]


def test_no_search_before_enough_samples_overlapping_long_enough():
    search = OffsetSearch()
    fill(search, 0.05, 0.0)  # 5 ground truth samples, no estimate
    assert search.search(0.5, "se3") is None
    search = OffsetSearch()
    fill(search, 4.0, 0.0)  # plenty of samples, 3 s of overlap
    assert search.search(0.5, "se3") is None
    assert not search.found


def test_a_shift_is_found_and_held_once_the_searches_agree():
    search = OffsetSearch()
    fill(search, 20.0, 0.03)
    for n in range(1, AUTO_STABLE + 1):
        assert search.agreed() is None
        found = search.search(0.5, "se3")
        assert found is not None and found.offset == pytest.approx(-0.03, abs=0.001), found
        assert len(search.found) == n
    held = search.agreed()
    assert held == pytest.approx(-0.03, abs=0.001)
    gt, est = search.take()
    assert len(gt) == 2000 and len(est) == 380 and not search.gt and not search.est


def test_values_that_disagree_are_not_held():
    search = OffsetSearch()
    search.found.extend([0.010, 0.010, 0.013])
    assert search.agreed() is None
    search.found.extend([0.0105, 0.0101])  # the last three: 0.013 still among them
    assert search.agreed() is None
    search.found.append(0.0102)  # 0.0105, 0.0101, 0.0102: within 1 ms, their median held
    assert search.agreed() == pytest.approx(0.0102)


def test_a_failed_search_forgets_the_values_found_so_far():
    search = OffsetSearch()
    search.found.extend([0.01, 0.01])
    pose = (np.zeros(3), IDENTITY)  # a body that never moves: nothing to correlate
    for t in np.arange(0.0, 10.0, 0.01):
        search.keep_gt(T0 + t, pose)
        search.keep_est(T0 + t, pose)
    with pytest.raises(TrajectoryInputError):
        search.search(0.5, "se3")
    assert not search.found


def test_replay_order_puts_both_streams_in_ground_truth_time():
    p, q = motion(0.0)
    gt = [(10.0, p, q), (10.1, p, q)]
    est = [(10.02, p, q), (10.09, p, q)]
    order = [(round(t, 6), kind) for t, kind, _, _ in replay_order(gt, est, 0.05)]
    assert order == [(10.0, 0), (10.07, 1), (10.1, 0), (10.14, 1)]
