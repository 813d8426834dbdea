"""The few SO(3) operations the velocity estimators need, on x, y, z, w quaternions.

Rotations are compared through the rotation vector of the relative rotation (the log
map), never per quaternion component: q and -q are the same rotation, so a sign flip
between two samples (which mocap systems and quaternion conversions produce freely)
is a zero rotation here, not a jump of magnitude 2.
"""

from __future__ import annotations

import math

import numpy as np


def normalize(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=float)
    return q / np.linalg.norm(q)


def multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b of single quaternions."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array(
        (
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        )
    )


def conjugate(q: np.ndarray) -> np.ndarray:
    return np.array((-q[0], -q[1], -q[2], q[3]))


def exp(v: np.ndarray) -> np.ndarray:
    """Unit quaternion of rotation vector v (axis * angle)."""
    angle = math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
    if angle < 1e-12:
        return np.array((0.5 * v[0], 0.5 * v[1], 0.5 * v[2], 1.0))
    s = math.sin(0.5 * angle) / angle
    return np.array((s * v[0], s * v[1], s * v[2], math.cos(0.5 * angle)))


def log(q: np.ndarray) -> np.ndarray:
    """Rotation vector of unit quaternion q, angle in [0, pi]: q and -q give the same."""
    x, y, z, w = q
    if w < 0.0:  # the shorter way round: this is what makes sign flips harmless
        x, y, z, w = -x, -y, -z, -w
    n = math.sqrt(x * x + y * y + z * z)
    if n < 1e-12:
        return np.array((2.0 * x, 2.0 * y, 2.0 * z))
    angle = 2.0 * math.atan2(n, w)
    return np.array((x, y, z)) * (angle / n)


def relative(q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
    """Rotation vector of q0^-1 q1: the rotation from q0 to q1 in q0's (body) axes."""
    return log(multiply(conjugate(q0), q1))


def rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """V expressed in the axes of the frame whose orientation is q (R(q)^T v)."""
    return rotate(conjugate(q), v)


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    u = q[:3]
    t = 2.0 * np.cross(u, v)
    return v + q[3] * t + np.cross(u, t)
