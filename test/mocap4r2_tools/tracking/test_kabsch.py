"""The batched weighted rigid fit alone: exact poses back from noiseless markers, markers
weighted out ignored, and the prior's part when fewer than 3 markers are seen."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from mocap4r2_tools.tracking.kabsch import kabsch

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
