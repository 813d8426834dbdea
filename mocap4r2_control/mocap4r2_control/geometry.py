"""Poses and axis conventions the adapters share: the named up-axis changes to ROS's
Z-up, and which poses are usable at all.

Quaternions are ``x, y, z, w`` rows (geometry_msgs order); their algebra (products,
rotations, matrices, exp/log, slerp) is in :mod:`mocap4r2_control.rotation`.
:class:`Transform` is the suite's one rigid transform (the world model's frame graph,
robot_ground_truth's poses and offsets, the tools).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .rotation import FloatArray, quat_conjugate, quat_from_matrix, quat_multiply, quat_rotate, quat_to_matrix

# Up-axis conventions. ROS (REP-103) is Z-up; Motive streams Y-up by default (X right, Y up,
# Z toward the viewer), QTM may be set to any up axis. Each convention names the axis that
# points up in the system's frame; the change to Z-up is the proper rotation A taking that
# axis to +Z, written as a signed permutation: output axis i = sign_i * input axis index_i.
# Body orientations are conjugated by A (q' = a q a^-1), not just rotated: the body's own
# axes are re-expressed in the Z-up convention too, so a body created level in the vendor's
# software has the identity orientation in ROS. Conjugation by a signed permutation maps
# the quaternion's vector part v to A v and keeps w, so every change is one gather with
# signs (float32 in, float64 out) on the hot paths of the drivers.
UP_AXIS_CONVENTIONS: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    "+Z": ((0, 1, 2), (1, 1, 1)),
    "-Z": ((0, 1, 2), (1, -1, -1)),
    "+Y": ((0, 2, 1), (1, -1, 1)),  # (x, y, z) -> (x, -z, y): +90 degrees about X
    "-Y": ((0, 2, 1), (1, 1, -1)),
    "+X": ((1, 2, 0), (1, 1, 1)),
    "-X": ((1, 2, 0), (1, -1, -1)),
}


class AxisChange:
    """The change from a named up-axis convention to Z-up (or back, :meth:`inverse`)."""

    def __init__(
        self, up: str, _index: tuple[int, int, int] | None = None, _sign: tuple[int, int, int] | None = None
    ):
        if up not in UP_AXIS_CONVENTIONS:
            raise ValueError(f"unknown up axis {up!r}; one of {sorted(UP_AXIS_CONVENTIONS)}")
        self.up = up
        index, sign = UP_AXIS_CONVENTIONS[up] if _index is None or _sign is None else (_index, _sign)
        self._index = list(index)
        self._sign = np.array(sign, dtype=float)
        self._q_index = self._index + [3]
        self._q_sign = np.append(self._sign, 1.0)
        self.identity = self._index == [0, 1, 2] and bool((self._sign == 1).all())

    def positions(self, p: npt.ArrayLike) -> FloatArray:
        """Positions (..., 3) in the Z-up frame (the inverse: in the vendor's frame)."""
        out: FloatArray = np.asarray(p)[..., self._index] * self._sign
        return out

    def orientations(self, q: npt.ArrayLike) -> FloatArray:
        """Body orientations (..., 4), x y z w, conjugated by the change."""
        out: FloatArray = np.asarray(q)[..., self._q_index] * self._q_sign
        return out

    def inverse(self) -> AxisChange:
        """The change back from Z-up to this convention (A transposed)."""
        index = [0, 0, 0]
        sign = [1, 1, 1]
        for i, (j, s) in enumerate(zip(self._index, self._sign)):
            index[j], sign[j] = i, int(s)
        return AxisChange(self.up, (index[0], index[1], index[2]), (sign[0], sign[1], sign[2]))

    def matrix(self) -> FloatArray:
        """A as a 3 x 3 matrix (positions p' = A p)."""
        out = np.zeros((3, 3))
        out[np.arange(3), self._index] = self._sign
        return out


# A quaternion shorter than this carries no direction: it is noise or an all-zero
# placeholder (what several SDKs send for an untracked body), never a rotation.
MIN_QUATERNION_NORM = 1e-6


def usable_pose(position: npt.ArrayLike, orientation: npt.ArrayLike) -> tuple[FloatArray, FloatArray] | None:
    """(position, unit quaternion) of one pose, or None when it cannot be used as a
    pose: a non-finite value, or a quaternion too short to normalise."""
    p = np.asarray(position, dtype=np.float64)
    q = np.asarray(orientation, dtype=np.float64)
    norm = float(np.linalg.norm(q))
    if not (np.isfinite(p).all() and np.isfinite(norm) and norm > MIN_QUATERNION_NORM):
        return None
    return p, q / norm


def pose_is_usable(position: npt.ArrayLike, orientation: npt.ArrayLike) -> bool:
    """True when :func:`usable_pose` accepts the pose."""
    return usable_pose(position, orientation) is not None


def pose_msg_arrays(pose: Any) -> tuple[FloatArray, FloatArray] | None:
    """:func:`usable_pose` of a geometry_msgs Pose (or Transform: translation/rotation)."""
    p = getattr(pose, "position", None) or pose.translation
    q = getattr(pose, "orientation", None) or pose.rotation
    return usable_pose((p.x, p.y, p.z), (q.x, q.y, q.z, q.w))


_IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])


@dataclass(frozen=True)
class Transform:
    """A rigid transform: x_parent = rotate(rotation, x_child) + translation; ``rotation``
    is a unit quaternion x, y, z, w.

    One transform holds arrays (3,) and (4,); a batch holds (n, 3) and (n, 4), one
    transform per row, and every operation below then works row by row (the quaternion
    functions are vectorised), so a calibration composes thousands of poses in one call.
    """

    translation: FloatArray
    rotation: FloatArray

    @classmethod
    def identity(cls) -> Transform:
        return cls(np.zeros(3), _IDENTITY)

    def __mul__(self, other: Transform) -> Transform:
        return Transform(
            self.translation + quat_rotate(self.rotation, other.translation),
            quat_multiply(self.rotation, other.rotation),
        )

    def inverse(self) -> Transform:
        inv = quat_conjugate(self.rotation)
        return Transform(-quat_rotate(inv, self.translation), inv)

    def apply(self, point: npt.ArrayLike) -> FloatArray:
        """The point (3,) given in the child frame, in the parent frame."""
        return quat_rotate(self.rotation, point) + self.translation

    def take(self, rows: npt.ArrayLike) -> Transform:
        """The transforms of a batch at ``rows`` (indices or a boolean mask)."""
        index = np.asarray(rows)
        return Transform(self.translation[index], self.rotation[index])

    def matrix(self) -> FloatArray:
        """(..., 4, 4) homogeneous matrices: the form OpenCV, URDF tools and numpy's
        linear algebra take."""
        out = np.zeros(self.translation.shape[:-1] + (4, 4))
        out[..., :3, :3] = quat_to_matrix(self.rotation)
        out[..., :3, 3] = self.translation
        out[..., 3, 3] = 1.0
        return out

    @classmethod
    def from_matrix(cls, m: npt.ArrayLike) -> Transform:
        """The transform(s) of (..., 4, 4) homogeneous matrices whose rotation block is
        orthonormal."""
        mat = np.asarray(m, dtype=np.float64)
        return cls(np.array(mat[..., :3, 3]), quat_from_matrix(mat[..., :3, :3]))
