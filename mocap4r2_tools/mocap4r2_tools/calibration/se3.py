"""Rigid transforms as (positions (n, 3), unit quaternions (n, 4) x y z w) arrays.

The calibration problems compose, invert and compare many poses at once; keeping them as
the two arrays the readers give (instead of 4 x 4 matrices) lets every step run as a few
vectorised calls of :mod:`mocap4r2_control.rotation`, the suite's one quaternion
vocabulary. A transform ``T`` maps points of its child frame into its parent frame:
``p_parent = R(q) p_child + t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import (
    FloatArray,
    quat_conjugate,
    quat_exp,
    quat_from_matrix,
    quat_log,
    quat_multiply,
    quat_rotate,
    quat_to_matrix,
)


@dataclass(frozen=True, eq=False)
class Poses:
    """Rigid transforms, one per row (or one, with shapes (3,) and (4,))."""

    t: FloatArray  # (..., 3) translation, m
    q: FloatArray  # (..., 4) unit quaternion x, y, z, w

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def take(self, rows: npt.ArrayLike) -> Poses:
        rows = np.asarray(rows)
        return Poses(self.t[rows], self.q[rows])

    def inverse(self) -> Poses:
        qi = quat_conjugate(self.q)
        return Poses(-quat_rotate(qi, self.t), qi)

    def compose(self, other: Poses) -> Poses:
        """Self * other: ``other`` expressed in self's parent frame."""
        return Poses(self.t + quat_rotate(self.q, other.t), quat_multiply(self.q, other.q))

    def matrices(self) -> FloatArray:
        """(..., 4, 4) homogeneous matrices."""
        out = np.zeros(self.t.shape[:-1] + (4, 4))
        out[..., :3, :3] = quat_to_matrix(self.q)
        out[..., :3, 3] = self.t
        out[..., 3, 3] = 1.0
        return out

    @classmethod
    def from_matrices(cls, m: npt.ArrayLike) -> Poses:
        m = np.asarray(m, dtype=np.float64)
        return cls(np.array(m[..., :3, 3]), quat_from_matrix(m[..., :3, :3]))

    @classmethod
    def identity(cls) -> Poses:
        return cls(np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0]))

    def perturbed(self, delta: npt.ArrayLike) -> Poses:
        """The transform moved by ``delta`` = (rotation vector in its own axes (rad),
        translation in its parent frame (m)): the local coordinates the refinement and
        the covariance use."""
        d = np.asarray(delta, dtype=np.float64)
        return Poses(self.t + d[3:6], quat_multiply(self.q, quat_exp(d[0:3])))


def difference(left: Poses, right: Poses) -> FloatArray:
    """(n, 6) rows of (rotation vector of left^-1 right in left's axes (rad), right's
    translation minus left's (m)): zero where the two transforms agree."""
    out = np.empty(np.broadcast_shapes(left.t.shape, right.t.shape)[:-1] + (6,))
    out[..., 0:3] = quat_log(quat_multiply(quat_conjugate(left.q), right.q))
    out[..., 3:6] = right.t - left.t
    return out


def rotation_angle_between(a: Poses, b: Poses) -> FloatArray:
    """Angles (rad) between the orientations of a and b."""
    rotvec = quat_log(quat_multiply(quat_conjugate(a.q), b.q))
    angle: FloatArray = np.linalg.norm(rotvec, axis=-1)
    return angle
