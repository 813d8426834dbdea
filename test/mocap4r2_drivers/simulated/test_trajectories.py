"""Trajectory rows of a scene alone: the shapes the scene file asks for, at the times asked,
and the windows in which a row is not tracked."""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_control.rotation import quat_rotate
from mocap4r2_drivers.simulated.scene_description import SceneError
from mocap4r2_drivers.simulated.trajectories import Trajectories, lost_at


def _rows(*cfgs):
    rows = Trajectories(len(cfgs))
    rng = np.random.default_rng(1)
    for i, cfg in enumerate(cfgs):
        rows.set(i, cfg, rng, f"row{i}")
    return rows


def test_circle_figure_eight_and_static_rows_at_a_batch_of_times():
    rows = _rows(
        {"type": "circle", "center": [1.0, 2.0, 1.5], "radius": 0.5, "period": 4.0, "phase": 0.3},
        {"type": "figure_eight", "center": [0.0, 0.0, 1.0], "size": [2.0, 1.0], "period": 2.0},
        {"type": "static", "position": [0.5, -0.5, 0.2], "yaw": 0.7},
    )
    t = np.linspace(0.0, 4.0, 41)
    pos, quat = rows.poses(t)
    assert pos.shape == (41, 3, 3) and quat.shape == (41, 3, 4)
    radius = np.hypot(pos[:, 0, 0] - 1.0, pos[:, 0, 1] - 2.0)
    assert np.allclose(radius, 0.5) and np.allclose(pos[:, 0, 2], 1.5)
    # a circle is back where it started after one period, and a figure eight after one of its own
    assert np.allclose(pos[0, 0], pos[-1, 0]) and np.allclose(pos[0, 1], pos[20, 1])
    assert np.abs(pos[:, 1, 0]).max() == pytest.approx(1.0, abs=1e-3)
    assert np.allclose(pos[:, 2], [0.5, -0.5, 0.2]) and np.allclose(quat[:, 2], quat[0, 2])
    # a circle's heading follows its velocity: the body's x axis is the direction of travel
    forward = quat_rotate(quat[:, 0], np.array([1.0, 0.0, 0.0]))
    velocity = np.gradient(pos[:, 0], t, axis=0)
    cos = np.sum(forward * velocity, axis=1) / np.linalg.norm(velocity, axis=1)
    assert np.all(cos > 0.98)
    one_time, _ = rows.poses(1.0)
    assert np.allclose(one_time, pos[10])


def test_a_random_walk_stays_within_its_extent_and_depends_on_the_draws():
    cfg = {"type": "random_walk", "center": [0.0, 0.0, 1.0], "extent": [1.0, 0.5, 0.2], "period": 3.0}
    rows = _rows(cfg)
    pos, _ = rows.poses(np.linspace(0, 60, 2000))
    assert np.all(np.abs(pos[:, 0] - [0.0, 0.0, 1.0]) <= np.array([1.0, 0.5, 0.2]) + 1e-9)
    assert np.ptp(pos[:, 0, 0]) > 0.3
    other = Trajectories(1)
    other.set(0, cfg, np.random.default_rng(2), "other")
    assert not np.allclose(other.poses(1.0)[0], rows.poses(1.0)[0])


@pytest.mark.parametrize(
    "cfg, words",
    [
        ("circle", "mapping"),
        ({"type": "zigzag"}, "unknown type"),
        ({"type": "circle", "period": 0}, "period"),
    ],
)
def test_a_bad_row_is_refused_with_its_name(cfg, words):
    with pytest.raises(SceneError, match=words):
        Trajectories(1).set(0, cfg, np.random.default_rng(0), "flyer: trajectory")


def test_rows_are_lost_during_the_end_of_each_window():
    loss = np.array([[1.0, 0.25], [0.0, 0.0]])
    t = np.array([0.0, 0.5, 0.74, 0.76, 0.99, 1.1, 1.8])
    lost = lost_at(loss, t)
    assert lost[:, 0].tolist() == [False, False, False, True, True, False, True]
    assert not lost[:, 1].any()
    assert lost_at(loss, 0.8).tolist() == [True, False]
