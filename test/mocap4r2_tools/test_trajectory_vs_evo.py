"""Our ATE/RPE against evo's on the same data, to 1e-9 where the definitions coincide.

evo (GPL) is a test-only reference here. Where they coincide:
  * association: evo pairs from the sparser trajectory (we do too); with interpolation
    evo resamples the denser one at the sparser one's stamps, so the estimate is made
    the sparser one here (we always interpolate the ground truth);
  * RPE: evo chooses pairs on the estimate by default; ours are chosen on the ground
    truth, which is evo's ``pairs_from_reference=True``.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

evo_metrics = pytest.importorskip("evo.core.metrics", reason="evo is the reference implementation")
from evo.core import geometry as evo_geometry  # noqa: E402 - after importorskip (evo)
from evo.core import sync as evo_sync  # noqa: E402 - after importorskip (evo)
from evo.core.sync_method import SyncMethod  # noqa: E402 - after importorskip (evo)
from evo.core.trajectory import PoseTrajectory3D  # noqa: E402 - after importorskip (evo)

from mocap4r2_tools.trajectory import EvalOptions, Trajectory, align, evaluate  # noqa: E402 - after importorskip (evo)

TOL = 1e-9
STATS = ("rmse", "mean", "median", "std", "min", "max", "sse")


def to_evo(traj: Trajectory) -> PoseTrajectory3D:
    # evo stores quaternions w, x, y, z
    return PoseTrajectory3D(traj.positions.copy(), np.roll(traj.orientations, 1, axis=1), traj.stamps.copy())


@pytest.fixture(scope="module")
def data():
    """200 Hz ground truth, an irregular ~45 Hz estimate in another frame, scale 1.2,
    with position and orientation noise and a 3 ms clock offset."""
    rng = np.random.default_rng(42)
    t = np.arange(0.0, 20.0, 0.005)
    pos = np.c_[2 * np.cos(0.5 * t), np.sin(t), 0.5 + 0.2 * np.sin(0.7 * t)] + [10.0, -4.0, 0.0]
    rot = Rotation.from_rotvec(np.c_[0.2 * np.sin(0.3 * t), 0.1 * np.cos(0.4 * t), 0.5 * t])
    gt = Trajectory.build(t, pos, rot.as_quat())
    est_t = np.sort(rng.choice(t, 900, replace=False)) + 0.003 + rng.uniform(-0.001, 0.001, 900)
    rows = np.searchsorted(t, est_t - 0.003)
    frame = Rotation.from_euler("xyz", [0.05, -0.1, 1.2])
    est_pos = frame.apply(pos[rows] + rng.normal(0, 0.02, (900, 3))) * 1.2 + [1.0, 2.0, -0.5]
    est_rot = frame * rot[rows] * Rotation.from_rotvec(rng.normal(0, 0.02, (900, 3)))
    est = Trajectory.build(est_t, est_pos, est_rot.as_quat())
    return gt, est


def evo_reference(gt, est, sync_method, max_diff, offset, align_method, first_n):
    ref, e = evo_sync.associate_trajectories(
        to_evo(gt), to_evo(est), sync_method=sync_method, max_diff=max_diff, offset_2=offset
    )
    e = copy.deepcopy(e)
    if align_method == "origin":
        e.align_origin(ref)
    elif align_method in ("se3", "sim3"):
        e.align(ref, correct_scale=align_method == "sim3", n=first_n or -1)
    return ref, e


@pytest.mark.parametrize("association", ["nearest", "interpolate"])
@pytest.mark.parametrize(
    "align_method,first_n", [("none", 0), ("se3", 0), ("sim3", 0), ("origin", 0), ("se3", 150), ("sim3", 150)]
)
def test_ate_matches_evo(data, association, align_method, first_n):
    gt, est = data
    sync_method = SyncMethod.nearest_time if association == "nearest" else SyncMethod.interpolation
    ref, e = evo_reference(gt, est, sync_method, 0.004, -0.003, align_method, first_n)
    ours = evaluate(
        gt,
        est,
        EvalOptions(
            association=association, max_diff=0.004, offset=-0.003, align=align_method, align_first_n=first_n
        ),
    )
    assert len(ours.association) == ref.num_poses > 800
    ape = evo_metrics.APE(evo_metrics.PoseRelation.translation_part)
    ape.process_data((ref, e))
    theirs = ape.get_all_statistics()
    for name in STATS:
        assert getattr(ours.ate_stats, name) == pytest.approx(theirs[name], abs=TOL), name
    # per-pair errors too, not only the statistics
    assert np.allclose(ours.ate, ape.error, atol=TOL, rtol=0)


@pytest.mark.parametrize("unit,delta", [("frames", 1), ("frames", 10), ("m", 0.5), ("m", 2.0)])
@pytest.mark.parametrize("all_pairs", [False, True])
@pytest.mark.parametrize("align_method", ["se3", "sim3"])
def test_rpe_matches_evo(data, unit, delta, all_pairs, align_method):
    gt, est = data
    ref, e = evo_reference(gt, est, SyncMethod.nearest_time, 0.004, -0.003, align_method, 0)
    ours = evaluate(
        gt,
        est,
        EvalOptions(
            max_diff=0.004,
            offset=-0.003,
            align=align_method,
            rpe_delta=delta,
            rpe_unit=unit,
            rpe_all_pairs=all_pairs,
        ),
    )
    evo_unit = evo_metrics.Unit.frames if unit == "frames" else evo_metrics.Unit.meters
    for relation, errors, stats in (
        (evo_metrics.PoseRelation.translation_part, ours.rpe_trans, ours.rpe_trans_stats),
        (evo_metrics.PoseRelation.rotation_angle_rad, ours.rpe_rot, ours.rpe_rot_stats),
    ):
        rpe = evo_metrics.RPE(
            relation, delta, evo_unit, rel_delta_tol=0.1, all_pairs=all_pairs, pairs_from_reference=True
        )
        rpe.process_data((ref, e))
        assert errors.size == rpe.error.size > 5
        assert np.allclose(errors, rpe.error, atol=TOL, rtol=0)
        theirs = rpe.get_all_statistics()
        for name in STATS:
            assert getattr(stats, name) == pytest.approx(theirs[name], abs=TOL), (relation, name)


@pytest.mark.parametrize("with_scale", [False, True])
def test_umeyama_parameters_match_evo(data, with_scale):
    gt, est = data
    n = min(len(gt), len(est))
    ours = align(gt.take(slice(0, n)), est.take(slice(0, n)), "sim3" if with_scale else "se3")
    r, t, c = evo_geometry.umeyama_alignment(est.positions[:n].T, gt.positions[:n].T, with_scale)
    assert np.allclose(ours.rotation, r, atol=TOL, rtol=0)
    assert np.allclose(ours.translation, t, atol=TOL, rtol=0)
    assert ours.scale == pytest.approx(c, abs=TOL)


def test_degenerate_data_both_refuse():
    """A standing robot: evo raises, and so do we, with the reason. (Exactly collinear
    positions pass evo's absolute rank test through rounding, and get an arbitrary roll
    about the line; we refuse those too, see test_trajectory_core.)"""
    from mocap4r2_tools.trajectory import AlignmentError

    t = np.arange(50.0)
    static = np.tile([1.0, 2.0, 3.0], (50, 1))
    moving = np.c_[np.cos(t), np.sin(t), 0.1 * t]
    with pytest.raises(evo_geometry.GeometryException):
        evo_geometry.umeyama_alignment(moving.T, static.T)
    with pytest.raises(AlignmentError, match="ground truth positions do not move"):
        align(Trajectory.build(t, static), Trajectory.build(t, moving), "se3")
