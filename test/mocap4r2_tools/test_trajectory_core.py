"""Trajectory error core: exact recovery of known transforms, hand-computable statistics,
association rules, degenerate input, and the online running sums against the batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from mocap4r2_tools.trajectory import (
    AlignmentError,
    EvalOptions,
    PointMoments,
    RunningATE,
    RunningRPE,
    StreamAssociator,
    Trajectory,
    TrajectoryInputError,
    align,
    associate,
    evaluate,
    rpe_pairs,
)
from mocap4r2_tools.trajectory.running import DecimatedHistory


def wavy(n: int = 500, dt: float = 0.01, t0: float = 0.0, offset=(0.0, 0.0, 0.0)) -> Trajectory:
    """A 3D trajectory with turning orientation (never collinear, never static)."""
    t = t0 + np.arange(n) * dt
    pos = np.c_[np.cos(t), np.sin(2 * t), 0.3 * np.sin(3 * t)] * 2.0 + np.asarray(offset)
    rot = Rotation.from_rotvec(np.c_[0.1 * np.sin(t), 0.2 * np.cos(t), t])
    return Trajectory.build(t, pos, rot.as_quat())


def moved(traj: Trajectory, rotation: Rotation, translation, scale: float = 1.0) -> Trajectory:
    """traj expressed in a frame where gt = scale * R * est + t, i.e. est = R^-1 (gt - t) / scale."""
    inv = rotation.inv()
    pos = inv.apply(traj.positions - np.asarray(translation)) / scale
    quat = (inv * Rotation.from_quat(traj.orientations)).as_quat()
    return Trajectory.build(traj.stamps, pos, quat)


# ------------------------------------------------------------------ alignment recovered exactly
R_TRUE = Rotation.from_euler("xyz", [0.4, -0.3, 2.1])
T_TRUE = np.array([3.0, -1.5, 0.7])


def test_se3_recovers_the_transform_exactly():
    gt = wavy()
    est = moved(gt, R_TRUE, T_TRUE)
    a = align(gt, est, "se3")
    assert np.allclose(a.rotation, R_TRUE.as_matrix(), atol=1e-12)
    assert np.allclose(a.translation, T_TRUE, atol=1e-12)
    assert a.scale == 1.0
    result = evaluate(gt, est, EvalOptions(align="se3"))
    assert result.ate_stats.max < 1e-12
    assert result.rpe_rot_stats.max < 1e-9 and result.rpe_trans_stats.max < 1e-12


def test_sim3_recovers_the_scale_exactly():
    gt = wavy()
    est = moved(gt, R_TRUE, T_TRUE, scale=2.5)
    a = align(gt, est, "sim3")
    assert a.scale == pytest.approx(2.5, abs=1e-12)
    assert np.allclose(a.rotation, R_TRUE.as_matrix(), atol=1e-12)
    assert np.allclose(a.translation, T_TRUE, atol=1e-11)
    assert evaluate(gt, est, EvalOptions(align="sim3")).ate_stats.max < 1e-11
    # se3 on scaled data cannot fit: a clearly non-zero error
    assert evaluate(gt, est, EvalOptions(align="se3")).ate_stats.rmse > 0.1


def test_posyaw_recovers_yaw_and_translation_and_keeps_gravity():
    gt = wavy()
    yaw_only = Rotation.from_euler("z", -2.7)
    est = moved(gt, yaw_only, T_TRUE)
    a = align(gt, est, "posyaw")
    assert np.allclose(a.rotation, yaw_only.as_matrix(), atol=1e-12)
    assert np.allclose(a.translation, T_TRUE, atol=1e-12)
    # with a tilted estimate posyaw still only turns about z (the z axis is kept)
    tilted = moved(gt, R_TRUE, T_TRUE)
    b = align(gt, tilted, "posyaw")
    assert np.allclose(b.rotation[:, 2], [0, 0, 1], atol=1e-15)
    assert np.allclose(b.rotation[2, :], [0, 0, 1], atol=1e-15)
    assert evaluate(gt, tilted, EvalOptions(align="posyaw")).ate_stats.rmse > 0.1


def test_origin_moves_the_first_pose_onto_the_ground_truth():
    gt = wavy()
    est = moved(gt, R_TRUE, T_TRUE)
    a = align(gt, est, "origin")
    assert np.allclose(a.rotation, R_TRUE.as_matrix(), atol=1e-12)
    assert np.allclose(a.translation, T_TRUE, atol=1e-12)
    aligned = a.apply(est)
    assert np.allclose(aligned.positions[0], gt.positions[0], atol=1e-12)
    assert (
        Rotation.from_quat(aligned.orientations)[0].inv() * Rotation.from_quat(gt.orientations)[0]
    ).magnitude() < 1e-12


def test_first_n_alignment_uses_only_the_first_pairs():
    gt = wavy(600)
    est = moved(gt, R_TRUE, T_TRUE)
    # the estimate drifts after pair 200: alignment on the first 200 still recovers the truth
    drifted = est.positions.copy()
    drifted[200:] += np.linspace(0, 1.0, 400)[:, None] * [1.0, 0.5, 0.0]
    est = Trajectory.build(est.stamps, drifted, est.orientations)
    a = align(gt, est, "se3", first_n=200)
    assert np.allclose(a.rotation, R_TRUE.as_matrix(), atol=1e-12)
    assert np.allclose(a.translation, T_TRUE, atol=1e-12)
    full = align(gt, est, "se3")
    assert not np.allclose(full.translation, T_TRUE, atol=1e-3)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-math.pi, math.pi), min_size=3, max_size=3),
    st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=3),
    st.floats(0.01, 100.0),
)
def test_any_similarity_is_recovered(angles, translation, scale):
    gt = wavy(60, dt=0.1)
    rotation = Rotation.from_euler("xyz", angles)
    est = moved(gt, rotation, translation, scale)
    a = align(gt, est, "sim3")
    assert a.scale == pytest.approx(scale, rel=1e-9)
    assert np.allclose(a.rotation, rotation.as_matrix(), atol=1e-9)
    assert np.allclose(a.translation, translation, atol=1e-9 * max(1.0, np.abs(translation).max()))


# ------------------------------------------------------------------ statistics by hand
def test_ate_statistics_on_a_hand_computable_case():
    t = np.arange(4.0)
    gt = Trajectory.build(t, np.zeros((4, 3)) + [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]])
    # errors 3, 4, 3, 4 metres along z
    est = Trajectory.build(t, gt.positions + np.c_[np.zeros(4), np.zeros(4), [3.0, 4.0, 3.0, 4.0]])
    r = evaluate(gt, est, EvalOptions(align="none"))
    s = r.ate_stats
    assert (s.count, s.sse, s.mean, s.median, s.min, s.max) == (4, 50.0, 3.5, 3.5, 3.0, 4.0)
    assert s.rmse == pytest.approx(math.sqrt(12.5), abs=1e-15)
    assert s.std == pytest.approx(0.5, abs=1e-15)
    assert not r.aligned


def test_rpe_translation_and_rotation_by_hand():
    n = 11
    t = np.arange(n, dtype=float)
    gt = Trajectory.build(t, np.c_[t, np.zeros(n), np.zeros(n)])
    # the estimate travels 1.1 m per step and turns 0.01 rad per step about z
    yaw = 0.01 * t
    est_pos = np.zeros((n, 3))
    for i in range(1, n):  # each step of 1.1 m along the current heading
        est_pos[i] = est_pos[i - 1] + 1.1 * np.array([np.cos(yaw[i - 1]), np.sin(yaw[i - 1]), 0.0])
    est = Trajectory.build(t, est_pos, Rotation.from_euler("z", yaw).as_quat())
    r = evaluate(gt, est, EvalOptions(align="none", rpe_delta=1))
    assert r.rpe_trans.size == 10
    assert np.allclose(r.rpe_trans, 0.1, atol=1e-12)
    assert np.allclose(r.rpe_rot, 0.01, atol=1e-12)
    r2 = evaluate(gt, est, EvalOptions(align="none", rpe_delta=2))
    assert r2.rpe_trans.size == 5
    assert np.allclose(r2.rpe_rot, 0.02, atol=1e-12)
    # over two steps with a turn between them: |(1.1 + 1.1 cos 0.01, 1.1 sin 0.01) - (2, 0)|
    expected = math.hypot(1.1 + 1.1 * math.cos(0.01) - 2.0, 1.1 * math.sin(0.01))
    assert np.allclose(r2.rpe_trans, expected, atol=1e-12)


def test_rpe_pair_selection_in_frames_metres_and_seconds():
    t = np.array([0.0, 0.1, 0.2, 0.35, 0.4, 0.5, 0.7, 0.8])
    # path lengths 0, 1, 1, 3, 4, 4, 6, 7 (two static steps)
    x = np.array([0.0, 1.0, 1.0, 3.0, 4.0, 4.0, 6.0, 7.0])
    gt = Trajectory.build(t, np.c_[x, np.zeros(8), np.zeros(8)])
    s, e = rpe_pairs(gt, 3, "frames")
    assert list(zip(s, e)) == [(0, 3), (3, 6)]
    s, e = rpe_pairs(gt, 3, "frames", all_pairs=True)
    assert list(zip(s, e)) == [(i, i + 3) for i in range(5)]
    s, e = rpe_pairs(gt, 2.0, "m")
    assert list(zip(s, e)) == [(0, 3), (3, 6)]  # first pose at least 2 m further
    s, e = rpe_pairs(gt, 3.0, "m", all_pairs=True, tolerance=0.0)
    # exactly 3 m after i: 0->3, 1->4 and 2->4 (the first of equal distances), 3->6, 4->7, 5->7
    assert list(zip(s, e)) == [(0, 3), (1, 4), (2, 4), (3, 6), (4, 7), (5, 7)]
    s, e = rpe_pairs(gt, 0.3, "s")
    assert list(zip(s, e)) == [(0, 3), (3, 6)]
    s, e = rpe_pairs(gt, 0.3, "s", all_pairs=True, tolerance=0.1)
    # nearest to t_i + 0.3, kept within 0.03 s (0 -> 0.35 and 3 -> 0.7 are 0.05 s off)
    assert list(zip(s, e)) == [(1, 4), (2, 5), (4, 6), (5, 7)]


# ------------------------------------------------------------------ association
def test_nearest_association_within_max_diff_with_offset():
    gt = Trajectory.build(np.arange(0.0, 1.0, 0.1), np.c_[np.arange(10.0), np.zeros(10), np.zeros(10)])
    # estimate stamps lag by 0.5 s: stamps + offset land 0.004 s after the ground truth
    est_t = np.array([-0.496, -0.296, -0.2, 0.01])  # the last lands 0.01 s from any ground truth
    est = Trajectory.build(est_t, np.zeros((4, 3)))
    pairs = associate(gt, est, max_diff=0.005, offset=0.5)
    assert np.allclose(pairs.gt.stamps, [0.0, 0.2, 0.3])
    assert np.allclose(pairs.est.stamps, [0.004, 0.204, 0.3])  # in the ground-truth time base
    assert len(pairs) == 3 and pairs.est_total == 4 and pairs.gt_total == 10
    # a tie goes to the earlier ground truth pose
    tie = associate(gt, Trajectory.build([0.05], np.zeros((1, 3))), max_diff=0.05)
    assert tie.gt.stamps[0] == 0.0
    with pytest.raises(TrajectoryInputError, match="no estimate stamp is within max_diff"):
        associate(gt, est, max_diff=0.001)


@pytest.mark.parametrize(
    "rows",
    [[2, 3, 4, 5], [0], [0, 2, 1, 3], [1, 2, 2, 3], [3, 2, 1, 0], [0, 1, 3, 4], list(range(10))],
)
def test_take_equals_indexing_for_runs_and_other_rows(rows):
    """Consecutive rows are taken as a slice; any other rows (repeats, reversals, gaps, or
    endpoints that only look like a run) are gathered: the result is the same either way."""
    rng = np.random.default_rng(3)
    traj = Trajectory.build(np.arange(10.0), rng.normal(size=(10, 3)), rng.normal(size=(10, 4)))
    index = np.asarray(rows, dtype=np.intp)
    taken = traj.take(index)
    np.testing.assert_array_equal(taken.stamps, traj.stamps[index])
    np.testing.assert_array_equal(taken.positions, traj.positions[index])
    np.testing.assert_array_equal(taken.orientations, traj.orientations[index])


def test_sparser_trajectory_drives_nearest_association():
    gt = Trajectory.build([0.0, 1.0], np.zeros((2, 3)))
    est = Trajectory.build(np.arange(0.0, 1.01, 0.01), np.zeros((101, 3)))
    pairs = associate(gt, est, max_diff=0.1)
    assert len(pairs) == 2
    assert np.allclose(pairs.est.stamps, [0.0, 1.0])


def test_interpolation_is_linear_and_slerp_and_never_bridges_a_gap():
    q0 = Rotation.identity().as_quat()
    q1 = Rotation.from_euler("z", 1.0).as_quat()
    gt = Trajectory.build(
        [0.0, 0.02, 5.0, 5.02], [[0, 0, 0], [2, 4, 6], [0, 0, 0], [0, 0, 0]], [q0, q1, q0, q0]
    )
    est = Trajectory.build([0.005, 2.5, 5.01], np.zeros((3, 3)))
    pairs = associate(gt, est, max_diff=0.011, method="interpolate")
    assert len(pairs) == 2  # 2.5 s lies in the gap: no ground truth within max_diff
    assert np.allclose(pairs.gt.positions[0], [0.5, 1.0, 1.5], atol=1e-15)
    assert Rotation.from_quat(pairs.gt.orientations)[0].magnitude() == pytest.approx(0.25, abs=1e-12)
    assert pairs.gt.stamps[0] == 0.005


# ------------------------------------------------------------------ bad input
def test_degenerate_input_gets_a_clear_error():
    t = np.arange(10.0)
    line = np.c_[t, 2 * t, -t]
    with pytest.raises(AlignmentError, match="lie on a line"):
        align(Trajectory.build(t, line), Trajectory.build(t, line + 1), "se3")
    static = np.ones((10, 3))
    with pytest.raises(AlignmentError, match="do not move"):
        align(Trajectory.build(t, static), Trajectory.build(t, line), "se3")
    with pytest.raises(AlignmentError, match="at least 3 pose pairs, have 2"):
        align(Trajectory.build(t[:2], line[:2]), Trajectory.build(t[:2], line[:2]), "sim3")
    vertical = np.c_[np.zeros(10), np.zeros(10), t]
    with pytest.raises(AlignmentError, match="no horizontal motion"):
        align(Trajectory.build(t, vertical), Trajectory.build(t, vertical), "posyaw")
    with pytest.raises(AlignmentError, match="unknown alignment"):
        align(Trajectory.build(t, line), Trajectory.build(t, line), "se2")


def test_unsorted_duplicate_and_non_finite_input_is_refused_with_the_rows_named():
    with pytest.raises(TrajectoryInputError, match=r"not sorted: row 2 \(0\.5"):
        Trajectory.build([0.0, 1.0, 0.5], np.zeros((3, 3)))
    with pytest.raises(TrajectoryInputError, match="duplicate stamp 1.000000000 s at rows 1 and 2"):
        Trajectory.build([0.0, 1.0, 1.0], np.zeros((3, 3)))
    with pytest.raises(TrajectoryInputError, match="positions of row 1 are not finite"):
        Trajectory.build([0.0, 1.0], [[0, 0, 0], [np.nan, 0, 0]])
    with pytest.raises(TrajectoryInputError, match="row 0 is not a rotation"):
        Trajectory.build([0.0], [[0, 0, 0]], [[0, 0, 0, 0]])
    with pytest.raises(TrajectoryInputError, match=r"shape \(2, 2\)"):
        Trajectory.build([0.0, 1.0], np.zeros((2, 2)))
    # a reader that sorts first still refuses duplicates
    traj = Trajectory.sorted_by_time([2.0, 0.0, 1.0], [[2, 0, 0], [0, 0, 0], [1, 0, 0]])
    assert list(traj.positions[:, 0]) == [0.0, 1.0, 2.0]
    with pytest.raises(TrajectoryInputError, match="duplicate"):
        Trajectory.sorted_by_time([1.0, 0.0, 1.0], np.zeros((3, 3)))
    with pytest.raises(TrajectoryInputError, match="whole number"):
        rpe_pairs(wavy(10), 1.5, "frames")


# ------------------------------------------------------------------ running sums
def test_moments_merge_equals_moments_of_the_union():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(100, 3)) + 50, rng.normal(size=(100, 3)) - 20
    a = PointMoments.of(x[:37], y[:37]).merged(PointMoments.of(x[37:], y[37:]))
    b = PointMoments.of(x, y)
    assert a.count == b.count
    assert np.allclose(a.cross, b.cross, atol=1e-10)
    assert a.scatter_est == pytest.approx(b.scatter_est, rel=1e-13)


@pytest.mark.parametrize("method", ["none", "se3", "sim3", "posyaw", "origin"])
@pytest.mark.parametrize("first_n", [0, 300])
def test_running_ate_and_rpe_equal_the_batch_far_from_the_origin(method, first_n):
    rng = np.random.default_rng(11)
    gt = wavy(3000, offset=(4000.0, -2500.0, 30.0))  # kilometres from the origin
    est = moved(gt, R_TRUE, T_TRUE, scale=1.3 if method == "sim3" else 1.0)
    noisy = Trajectory.build(
        est.stamps,
        est.positions + rng.normal(0, 0.002, est.positions.shape),
        (
            Rotation.from_quat(est.orientations) * Rotation.from_rotvec(rng.normal(0, 0.01, (3000, 3)))
        ).as_quat(),
    )
    for unit, delta in (("frames", 7), ("m", 0.4), ("s", 0.25)):
        batch = evaluate(
            gt, noisy, EvalOptions(align=method, align_first_n=first_n, rpe_delta=delta, rpe_unit=unit)
        )
        ate = RunningATE(method, first_n, history=100_000)
        sums_only = RunningATE(method, first_n, history=64)  # rmse from the running sums alone
        rpe = RunningRPE(delta, unit)
        for i in range(len(gt)):
            ate.add(gt.positions[i], gt.orientations[i], noisy.positions[i], noisy.orientations[i])
            sums_only.add(gt.positions[i], gt.orientations[i], noisy.positions[i], noisy.orientations[i])
            rpe.add(
                gt.stamps[i], gt.positions[i], gt.orientations[i], noisy.positions[i], noisy.orientations[i]
            )
        snap = ate.snapshot()
        assert snap.samples == 3000
        assert snap.aligned == (method != "none")
        assert snap.rmse == pytest.approx(batch.ate_stats.rmse, rel=1e-9)
        assert not sums_only.history.exact
        assert sums_only.snapshot().rmse == pytest.approx(batch.ate_stats.rmse, rel=1e-9)
        assert snap.mean == pytest.approx(batch.ate_stats.mean, rel=1e-9)
        assert snap.max == pytest.approx(batch.ate_stats.max, rel=1e-9)
        assert np.allclose(snap.alignment.translation, batch.alignment.translation, atol=1e-9 * 4000)
        assert rpe.count == batch.rpe_trans.size
        assert rpe.trans_rmse(snap.alignment.scale) == pytest.approx(batch.rpe_trans_stats.rmse, rel=1e-9)
        assert rpe.rot_rmse() == pytest.approx(batch.rpe_rot_stats.rmse, rel=1e-9)


def test_running_ate_memory_is_bounded_and_rmse_stays_exact():
    rng = np.random.default_rng(5)
    gt = wavy(20000, dt=0.001)
    est = Trajectory.build(gt.stamps, gt.positions + rng.normal(0, 0.01, gt.positions.shape), gt.orientations)
    ate = RunningATE("se3", history=512)
    for i in range(len(gt)):
        ate.add(gt.positions[i], gt.orientations[i], est.positions[i], est.orientations[i])
    est_kept, _ = ate.history.pairs()
    assert len(est_kept) <= 512 and not ate.history.exact
    batch = evaluate(gt, est, EvalOptions(align="se3"))
    snap = ate.snapshot()
    assert snap.rmse == pytest.approx(batch.ate_stats.rmse, rel=1e-9)
    # mean and max come from an evenly thinned subset: close, not exact
    assert snap.mean == pytest.approx(batch.ate_stats.mean, rel=0.05)
    assert snap.max <= batch.ate_stats.max + 1e-12


def test_decimated_history_keeps_an_even_subset():
    h = DecimatedHistory(8)
    for i in range(100):
        h.add(np.array([i, 0.0, 0.0]), np.zeros(3))
    kept = h.pairs()[0][:, 0]
    assert len(kept) <= 8
    assert np.all(np.diff(kept) == kept[1] - kept[0])  # even stride
    assert kept[0] == 0


def test_running_ate_reports_not_aligned_without_nan_then_aligns():
    ate = RunningATE("se3")
    assert ate.snapshot().samples == 0 and not ate.snapshot().aligned
    for _ in range(50):  # a robot standing still: alignment undetermined
        ate.add(np.ones(3), np.array([0, 0, 0, 1.0]), np.zeros(3), np.array([0, 0, 0, 1.0]))
    snap = ate.snapshot()
    assert not snap.aligned and "do not move" in snap.reason
    assert all(math.isfinite(v) for v in (snap.rmse, snap.mean, snap.max))
    assert snap.rmse == pytest.approx(math.sqrt(3.0))  # unaligned error reported instead
    gt = wavy(100)
    for i in range(100):
        ate.add(gt.positions[i], gt.orientations[i], gt.positions[i] - 1.0, gt.orientations[i])
    assert ate.snapshot().aligned and ate.snapshot().reason == ""


def test_running_first_n_window_grows_until_it_determines_the_alignment():
    ate = RunningATE("se3", first_n=10)
    q = np.array([0, 0, 0, 1.0])
    for _ in range(20):
        ate.add(np.zeros(3), q, np.zeros(3), q)  # static: window too poor
    assert ate.alignment() is None
    gt = wavy(50)
    est = moved(gt, R_TRUE, T_TRUE)
    for i in range(50):
        ate.add(gt.positions[i], q, est.positions[i], q)
    assert ate.alignment() is not None


# ------------------------------------------------------------------ online association
@pytest.mark.parametrize("method", ["nearest", "interpolate"])
def test_stream_association_equals_the_batch(method):
    rng = np.random.default_rng(2)
    gt = wavy(3000, dt=0.001)  # 1 kHz ground truth
    est_t = np.sort(rng.uniform(0.0, 3.0, 90))  # ~30 Hz estimate, irregular
    est = Trajectory.build(
        est_t + 0.0, rng.normal(size=(90, 3)), Rotation.random(90, random_state=1).as_quat()
    )
    batch = associate(gt, est, max_diff=0.0006, offset=-0.0002, method=method)
    stream = StreamAssociator(max_diff=0.0006, offset=-0.0002, method=method, horizon=1.0)
    pairs = []
    # estimates arrive 50 ms late relative to the ground truth stream
    e = 0
    for i in range(len(gt)):
        pairs += stream.add_gt(gt.stamps[i], gt.positions[i], gt.orientations[i])
        while e < len(est) and est.stamps[e] + 0.05 <= gt.stamps[i]:
            pairs += stream.add_est(est.stamps[e], est.positions[e], est.orientations[e])
            e += 1
    assert len(pairs) == len(batch) > 10
    assert np.allclose([p.stamp for p in pairs], batch.gt.stamps if method == "nearest" else batch.est.stamps)
    assert np.allclose([p.gt_position for p in pairs], batch.gt.positions, atol=1e-12)
    got_q = Rotation.from_quat([p.gt_orientation for p in pairs])
    assert np.all((got_q.inv() * Rotation.from_quat(batch.gt.orientations)).magnitude() < 1e-9)
    # memory is bounded by the horizon (1 s of 1 kHz), not by the stream length
    assert len(stream._t) - stream._start <= 1001


def test_stream_association_waits_for_ground_truth_and_drops_out_of_order():
    stream = StreamAssociator(max_diff=0.01)
    q = np.array([0, 0, 0, 1.0])
    assert stream.add_est(1.0, np.zeros(3), q) == []  # no ground truth yet: waits
    assert stream.add_gt(0.995, np.ones(3), q) == []  # not yet past 1.0
    pairs = stream.add_gt(1.002, 2 * np.ones(3), q)  # now 1.002 is nearest
    assert len(pairs) == 1 and pairs[0].stamp == 1.002
    assert stream.add_gt(0.5, np.zeros(3), q) == [] and stream.gt_out_of_order == 1
    assert stream.add_est(3.0, np.zeros(3), q) == []
    assert stream.add_gt(3.5, np.zeros(3), q) == [] and stream.est_unmatched == 1
