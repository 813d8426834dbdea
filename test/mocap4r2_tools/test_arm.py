"""The simulated arm's core: goal validation, interpolation through the points with
their velocities, forward kinematics against hand-computed poses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mocap4r2_tools.motion.arm import Point, forward_kinematics, sample, validate


def points(n=3):
    return [Point((0.1 * i, 0.0, 0.0), (0.0, 0.0, 0.0), 0.5 * i) for i in range(n)]


def test_validation_reasons():
    assert validate("a", [], points(), 3, set()) is None
    assert "at least 3 points" in validate("a", [], points(2), 3, set())
    assert "non-empty" in validate("", [], points(), 3, set())
    assert "already used" in validate("a", [], points(), 3, {"a"})
    assert "velocities are required" in validate(
        "a", [], [Point((0, 0, 0), (), 0.0)] + points()[1:], 3, set()
    )
    assert "must increase" in validate("a", [], [points()[0], points()[0], points()[2]], 3, set())
    assert "not finite" in validate(
        "a", [], [Point((math.nan, 0, 0), (0, 0, 0), 0.0)] + points()[1:], 3, set()
    )
    assert "names 2" in validate("a", ["j1", "j2"], points(), 3, set())


def test_interpolation_passes_through_points_with_their_velocities():
    pts = [Point((0.0,), (1.0,), 0.0), Point((1.0,), (0.0,), 1.0), Point((0.0,), (-2.0,), 2.0)]
    for p in pts:
        pos, vel, _ = sample(pts, p.time)
        assert pos[0] == pytest.approx(p.positions[0]) and vel[0] == pytest.approx(p.velocities[0])
    _, _, index = sample(pts, 1.2)
    assert index == 1
    # derivative of the interpolated position is the interpolated velocity
    h = 1e-6
    (p0, _, _), (p1, _, _), (_, v, _) = sample(pts, 0.7 - h), sample(pts, 0.7 + h), sample(pts, 0.7)
    assert (p1 - p0)[0] / (2 * h) == pytest.approx(v[0], rel=1e-6)


def test_forward_kinematics_by_hand():
    links = [0.3, 0.25, 0.2]
    # straight: up 0.3, then 0.45 along x
    tip = forward_kinematics([0.0, 0.0, 0.0], links)[-1][0]
    assert np.allclose(tip, [0.45, 0.0, 0.3])
    # yaw 90 deg: along y; pitch the second joint by 90 deg about y: pointing down
    poses = forward_kinematics([math.pi / 2, math.pi / 2, 0.0], links, base=(1.0, 0.0, 0.0))
    assert np.allclose(poses[1][0], [1.0, 0.0, 0.3 - 0.25], atol=1e-12)
    assert np.allclose(poses[2][0], [1.0, 0.0, 0.3 - 0.45], atol=1e-12)
    poses = forward_kinematics([math.pi / 2, 0.0, 0.0], links)
    assert np.allclose(poses[-1][0], [0.0, 0.45, 0.3], atol=1e-12)
