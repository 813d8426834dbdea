"""The batched weighted rigid fit alone: exact poses back from noiseless markers, markers
weighted out ignored, the prior's part when fewer than 3 markers are seen, and the Newton
fit from a prior against the eigen fit."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from mocap4r2_control.rotation import quat_from_matrix, quat_to_matrix
from mocap4r2_tools.tracking.kabsch import fit_batch, fit_near, kabsch

LAYOUT = np.array([[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]])


def test_a_batch_of_poses_is_found_and_weighted_out_markers_are_ignored():
    rng = np.random.default_rng(4)
    rots = Rotation.random(5, random_state=5).as_matrix()
    trans = rng.uniform(-2, 2, (5, 3))
    local = np.broadcast_to(LAYOUT, (5, 4, 3)).copy()
    observed = np.einsum("bij,blj->bli", rots, local) + trans[:, None]
    weights = np.ones((5, 4))
    observed[2, 1] += 0.5  # a ghost in body 2's place of marker 1 ...
    weights[2, 1] = 0.0  # ... weighted out
    rot, pos, rms, count = kabsch(weights, local, observed, np.tile(np.eye(3), (5, 1, 1)))
    assert np.allclose(rot, rots, atol=1e-9) and np.allclose(pos, trans, atol=1e-9)
    assert np.all(rms < 1e-9) and count.tolist() == [4, 4, 3, 4, 4]


def test_with_two_markers_the_prior_is_turned_least_and_with_one_it_is_kept():
    prior = Rotation.from_euler("z", 30, degrees=True).as_matrix()
    truth = Rotation.from_euler("zy", [30, 20], degrees=True).as_matrix()
    local = np.broadcast_to(LAYOUT, (2, 4, 3)).copy()
    observed = np.einsum("ij,blj->bli", truth, local) + np.array([1.0, 2.0, 3.0])
    weights = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    rot, pos, rms, count = kabsch(weights, local, observed, np.stack([prior, prior]))
    assert count.tolist() == [2, 1]
    # two markers: their line is where it is seen, the fit explains both exactly
    fitted = rot[0] @ LAYOUT[:2].T
    assert np.allclose(fitted.T + pos[0], observed[0, :2], atol=1e-9) and rms[0] < 1e-9
    # one marker: the prior's rotation, the translation that puts the marker where it is
    assert np.allclose(rot[1], prior) and np.allclose(prior @ LAYOUT[2] + pos[1], observed[1, 2])


def test_newton_steps_from_a_prior_reach_the_optimum_of_the_eigen_fit():
    """fit_near (Newton steps from the prior, the tracker's every-frame fit) gives fit_batch's
    poses, residuals and quaternions: near priors (settled by Newton), priors 170 degrees
    off, collinear markers (handed to fit_batch), 0 to 4 markers seen (2: the prior turned
    least, as a quaternion too)."""
    rng = np.random.default_rng(7)
    n = 300
    truth = Rotation.random(n, random_state=8)
    near = Rotation.from_rotvec(rng.normal(0.0, 0.03, (n, 3))) * truth
    prior = near.as_matrix()
    prior[:5] = (Rotation.from_rotvec([0.0, 0.0, np.radians(170)]) * truth[:5]).as_matrix()
    local = np.broadcast_to(LAYOUT, (n, 4, 3)).copy()
    local[5:10] = np.linspace(-0.02, 0.02, 4)[:, None] * [1.0, 0.5, 0.0]  # collinear
    observed = np.einsum("bij,blj->bli", truth.as_matrix(), local) + rng.uniform(-2, 2, (n, 1, 3))
    observed += rng.normal(0.0, 2e-4, observed.shape)
    weights = (rng.random((n, 4)) > 0.25).astype(np.float64)
    prior_quat = quat_from_matrix(prior)
    exact = fit_batch(weights, local, observed, prior)
    newton = fit_near(weights, local, observed, prior, prior_quat)
    counts = weights.sum(axis=1)
    assert {0, 1, 2, 3, 4} <= set(counts.tolist())
    assert newton.full[counts >= 3].sum() > 0.8 * (counts >= 3).sum()  # most settled by Newton
    assert not newton.full[5:10].any() and not exact.full[5:10].any()  # collinear: the prior's rotation
    assert np.allclose(newton.rot, exact.rot, atol=1e-8) and np.allclose(newton.trans, exact.trans, atol=1e-9)
    assert np.allclose(newton.rms, exact.rms, atol=1e-10) and np.array_equal(newton.markers, exact.markers)
    assert np.allclose(newton.fitted, exact.fitted, atol=1e-9)
    # the quaternion of every body is its rotation's, largest component positive
    assert np.allclose(quat_to_matrix(newton.quat), newton.rot, atol=1e-9)
    assert np.all(newton.quat[np.arange(n), np.argmax(np.abs(newton.quat), axis=1)] > 0)
    assert np.allclose(exact.quat[exact.full], newton.quat[exact.full], atol=1e-8)
