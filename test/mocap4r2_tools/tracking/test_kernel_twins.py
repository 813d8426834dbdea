"""The numba kernels' rotation arithmetic against mocap4r2_control.rotation (issue 38):
a compiled kernel cannot call rotation.py, so it carries its own twin of what it needs;
each twin is held here to the one vocabulary, on random rotations."""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_control.rotation import (
    quat_angle,
    quat_conjugate,
    quat_from_matrix,
    quat_multiply,
    quat_normalize,
    quat_to_matrix,
)
from mocap4r2_tools.tracking import kernels


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    return quat_normalize(rng.normal(size=(n, 4)))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_kernels_matrix_of_a_quaternion_is_rotations(seed):
    rng = np.random.default_rng(seed)
    out = np.empty((3, 3))
    for q in _unit(rng, 200):
        kernels._quat_matrix(q, out)
        # the kernel writes the |q|^2-scaled form (w^2 + x^2 - y^2 - z^2, ...): equal to
        # rotation's 1 - 2 (y^2 + z^2) for a unit q, up to rounding
        np.testing.assert_allclose(out, quat_to_matrix(q), rtol=0, atol=4e-15)


def test_the_kernels_turn_angle_is_rotations_angle_between_the_two():
    rng = np.random.default_rng(3)
    last, now = _unit(rng, 500), _unit(rng, 500)
    now[:10] = -last[:10]  # q and -q: no turn
    _, angle = kernels.motion(last, now, np.zeros((500, 3)), np.zeros((500, 3)))
    expected = quat_angle(quat_multiply(quat_conjugate(last), now))
    np.testing.assert_allclose(angle, expected, rtol=0, atol=2e-7)  # arccos near 1: ~sqrt(eps)
    assert np.all(angle[:10] < 2e-7)


def test_the_kernels_hamilton_product_and_sign_rule_are_rotations():
    """_turn_two composes turn * q by hand and newton_fits keeps the largest part
    positive: turning a body of two markers whose line is seen turned by a known rotation
    gives that rotation times the prior, as rotation.quat_multiply composes it, with
    rotation.quat_from_matrix's sign rule."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        prior_q = _unit(rng, 1)[0]
        axis = rng.normal(size=3)
        line = np.cross(axis, rng.normal(size=3))  # a turn about an axis across the line
        angle = rng.uniform(0.1, 2.0)
        turn = np.append(np.sin(angle / 2) * axis / np.linalg.norm(axis), np.cos(angle / 2))
        local = np.array([[0.0, 0.0, 0.0], line])
        prior = quat_to_matrix(prior_q)
        seen_line = quat_to_matrix(turn) @ prior @ line
        observed = np.array([[0.0, 0.0, 0.0], seen_line])
        q = prior_q.copy()
        kernels._turn_two(np.ones(2), local, observed, prior, q)
        # the least turn of the line is not always `turn` (only the line's direction is
        # seen), but it lays the line where it is seen
        np.testing.assert_allclose(quat_to_matrix(q) @ line, seen_line, atol=1e-12)
        # and the kernel's hand-written product is rotation.quat_multiply of that least turn
        was = prior @ line
        least = quat_normalize(
            np.append(
                np.cross(was, seen_line), np.linalg.norm(was) * np.linalg.norm(seen_line) + was @ seen_line
            )
        )
        np.testing.assert_allclose(q, quat_multiply(least, prior_q), rtol=0, atol=1e-15)
    fitted = quat_from_matrix(quat_to_matrix(-prior_q))
    assert max(fitted) >= -min(fitted)  # the sign rule the kernels copy
