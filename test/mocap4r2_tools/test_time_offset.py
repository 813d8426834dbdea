"""mocap4r2_tools.trajectory.time_offset alone: the offset between an estimate and the
ground truth found from the data (speed and angular rate cross-correlated, then the ATE
minimised), its targets, and the inputs it must refuse."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mocap4r2_tools.trajectory import EvalOptions, Trajectory, evaluate
from mocap4r2_tools.trajectory.time_offset import TimeOffsetError, estimate_time_offset

FRAME = Rotation.from_euler("xyz", [0.1, -0.2, 0.9])
T0 = 1_700_000_000.0


def motion(t: np.ndarray) -> tuple[np.ndarray, Rotation]:
    """A hand-held-like motion: sums of sines in position, turning about all axes."""
    p = np.c_[1.5 * np.cos(0.7 * t) + 0.3 * np.sin(2.3 * t), np.sin(0.9 * t), 1 + 0.2 * np.sin(1.7 * t)]
    r = Rotation.from_rotvec(
        np.c_[0.2 * np.sin(1.1 * t), 0.15 * np.cos(0.8 * t), 0.6 * t + 0.4 * np.sin(0.5 * t)]
    )
    return p, r


def ground_truth(rate: float = 200.0, duration: float = 60.0) -> Trajectory:
    t = np.arange(0.0, duration, 1.0 / rate)
    p, r = motion(t)
    return Trajectory.build(T0 + t, p, r.as_quat())


def estimate(shift: float, seed: int = 0, rate: float = 20.0, noise: float = 0.002, duration: float = 60.0):
    """The motion sampled at ``rate`` Hz, in another frame, with ``noise`` m of position
    noise, stamped ``shift`` s late (so the offset to add is -shift)."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.5, duration - 0.5, 1.0 / rate)
    p, r = motion(t)
    p = FRAME.apply(p + rng.normal(0.0, noise, p.shape)) + [1.0, 2.0, 3.0]
    return Trajectory.build(T0 + t + shift, p, (FRAME * r).as_quat())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_37_ms_shift_is_found_within_half_a_millisecond(seed):
    gt = ground_truth()
    found = estimate_time_offset(gt, estimate(0.037, seed))
    assert found.offset == pytest.approx(-0.037, abs=0.0005), found
    assert found.signals == ("speed", "angular rate") and found.correlation > 0.9


def test_the_ate_after_correction_is_that_of_the_unshifted_pair():
    gt = ground_truth()
    options = EvalOptions(association="interpolate", align="se3")
    unshifted = evaluate(gt, estimate(0.0), options)
    corrected = evaluate(
        gt, estimate(0.037), EvalOptions(association="interpolate", align="se3", offset_auto=True)
    )
    uncorrected = evaluate(gt, estimate(0.037), options)
    assert corrected.time_offset is not None
    assert corrected.options.offset == corrected.time_offset.offset
    assert corrected.ate_stats.rmse == pytest.approx(unshifted.ate_stats.rmse, rel=0.02)
    assert uncorrected.ate_stats.rmse > 3 * unshifted.ate_stats.rmse  # the shift matters


@pytest.mark.parametrize("shift", [-0.4, 0.25, 0.0])
def test_either_sign_and_zero(shift):
    found = estimate_time_offset(ground_truth(), estimate(shift, rate=50.0))
    assert found.offset == pytest.approx(-shift, abs=0.0005)


def test_translation_only_uses_speed():
    t = np.arange(0.0, 30.0, 0.01)
    p, _ = motion(t)
    gt = Trajectory.build(T0 + t, p)
    rows = np.arange(0, t.size, 4)
    est = Trajectory.build(T0 + t[rows] + 0.05, p[rows] + [0.5, 0.0, 0.0])
    found = estimate_time_offset(gt, est)
    assert found.signals == ("speed",)
    assert found.offset == pytest.approx(-0.05, abs=0.0005)


def test_no_motion_is_refused_and_nothing_applied():
    t = T0 + np.arange(0.0, 20.0, 0.01)
    rng = np.random.default_rng(4)
    gt = Trajectory.build(t, np.ones((t.size, 3)) + rng.normal(0, 1e-5, (t.size, 3)))
    est = Trajectory.build(t[::5] + 0.03, np.ones((t[::5].size, 3)) + rng.normal(0, 0.002, (t[::5].size, 3)))
    with pytest.raises(TimeOffsetError, match="does not move enough.*no offset applied"):
        estimate_time_offset(gt, est)
    with pytest.raises(TimeOffsetError, match="does not move enough"):
        evaluate(gt, est, EvalOptions(offset_auto=True, align="none"))


def test_an_offset_beyond_the_window_is_said_not_clipped():
    gt = ground_truth()
    with pytest.raises(TimeOffsetError, match="edge of the search window.*widen"):
        estimate_time_offset(gt, estimate(1.5), window=1.0)
    # with a window that holds it, it is found
    assert estimate_time_offset(gt, estimate(1.5), window=2.5).offset == pytest.approx(-1.5, abs=0.0005)


def test_unrelated_motion_is_refused():
    gt = ground_truth(duration=40.0)
    rng = np.random.default_rng(7)
    t = T0 + np.arange(0.5, 39.5, 0.05)
    walk = np.cumsum(rng.normal(0, 0.05, (t.size, 3)), axis=0)
    est = Trajectory.build(
        t, walk, Rotation.from_rotvec(np.cumsum(rng.normal(0, 0.05, (t.size, 3)), 0)).as_quat()
    )
    with pytest.raises(
        TimeOffsetError, match="matches the ground truth's at no offset|edge of the search window"
    ):
        estimate_time_offset(gt, est)


def test_bad_arguments():
    gt = ground_truth(duration=10.0)
    with pytest.raises(TimeOffsetError, match="positive number"):
        estimate_time_offset(gt, estimate(0.0, duration=10.0), window=float("nan"))
    with pytest.raises(TimeOffsetError, match="too few"):
        estimate_time_offset(gt, gt.take(slice(0, 3)))


def test_out_of_order_rows_are_sorted_as_before_then_used():
    """A recorded estimate with rows out of order is sorted by the reader (with a note), as
    for every evaluation; the offset is then found on the sorted rows."""
    est = estimate(0.037)
    order = np.arange(len(est))
    order[[10, 11]] = order[[11, 10]]
    recorded = Trajectory.from_recorded(est.stamps[order], est.positions[order], est.orientations[order])
    assert recorded.notes
    assert estimate_time_offset(ground_truth(), recorded).offset == pytest.approx(-0.037, abs=0.0005)
