"""The scene's skeletons alone: segments follow their root and their parents (forward
kinematics keeps every offset), swing with the gait, and are untracked in their loss windows."""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_control.rotation import quat_rotate
from mocap4r2_drivers.simulated.scene_description import HUMAN_SEGMENTS, SceneError
from mocap4r2_drivers.simulated.skeleton_motion import SkeletonMotion
from mocap4r2_drivers.simulated.trajectories import Trajectories


def _motion(entries, first_row=1):
    rows = Trajectories(first_row + len(entries))
    return SkeletonMotion(entries, first_row, rows, np.random.default_rng(0)), rows


def test_segments_keep_their_offsets_from_their_parents():
    motion, rows = _motion(
        [
            {"name": "walker", "id": 7, "trajectory": {"type": "circle", "period": 3.0}},
            {"name": "stander", "id": 8, "step_rate": 2.0},
        ]
    )
    assert motion.ids.tolist() == [7, 8] and motion.names == ("walker", "stander")
    s = len(HUMAN_SEGMENTS)
    assert motion.segment_offsets.tolist() == [0, s, 2 * s]
    t = np.linspace(0.0, 2.0, 9)
    pos, quat = rows.poses(t)
    gp, gq, skel_valid, seg_valid = motion.batch(t, pos[:, 1:], quat[:, 1:])
    assert gp.shape == (9, 2 * s, 3) and skel_valid.all() and seg_valid.all()
    index = {name: j for j, name in enumerate(s_[0] for s_ in HUMAN_SEGMENTS)}
    for j, (name, parent, offset, *_rest) in enumerate(HUMAN_SEGMENTS):
        for k in range(2):
            row = k * s + j
            if parent is None:
                expected = pos[:, 1 + k] + quat_rotate(quat[:, 1 + k], np.asarray(offset, float))
            else:
                p = k * s + index[parent]
                expected = gp[:, p] + quat_rotate(gq[:, p], np.asarray(offset, float))
            assert np.allclose(gp[:, row], expected), name
    # the gait moves the hands relative to the hip
    hand = gp[:, index["LHand"]] - gp[:, index["Hip"]]
    assert np.ptp(hand, axis=0).max() > 0.01


def test_a_lost_skeleton_has_nan_segments_and_none_without_skeletons():
    motion, rows = _motion([{"name": "w", "tracking_loss": {"every": 1.0, "duration": 0.5}}])
    t = np.array([0.1, 0.6])
    pos, quat = rows.poses(t)
    gp, gq, skel_valid, seg_valid = motion.batch(t, pos[:, 1:], quat[:, 1:])
    assert skel_valid[:, 0].tolist() == [True, False]
    assert np.isnan(gp[1]).all() and np.isfinite(gp[0]).all() and np.isnan(gq[1]).all()
    empty, rows = _motion([])
    assert empty.batch(t, np.zeros((2, 0, 3)), np.zeros((2, 0, 4))) is None and empty.ids.size == 0


@pytest.mark.parametrize(
    "entry, words",
    [({"name": "w", "template": "cat"}, "only 'human'"), ({"name": "w", "id": -2}, "negative"), ({}, "name")],
)
def test_a_bad_skeleton_is_refused(entry, words):
    with pytest.raises(SceneError, match=words):
        _motion([entry])
