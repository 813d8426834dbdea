"""Alignment of an estimate to the ground truth: none, se3, sim3, posyaw, origin.

An :class:`Alignment` maps estimate coordinates to ground-truth coordinates,
``p_gt ~ s R p_est + t`` and ``R_gt ~ R R_est``.

* se3 / sim3: least squares over positions (Umeyama 1991, "Least-squares estimation of
  transformation parameters between two point patterns"), without / with scale.
* posyaw: translation and a rotation about the gravity (z) axis only, the 4 degrees of
  freedom a visual-inertial estimator cannot observe (Zhang & Scaramuzza 2018, "A
  tutorial on quantitative trajectory evaluation for visual(-inertial) odometry").
* origin: the first estimate pose is moved onto the first ground-truth pose.

Every least-squares solution is computed from :class:`PointMoments` (count, means,
centred scatters and the centred cross-covariance), which can be built from arrays in
one pass or updated one pair at a time (see running.py): the same closed forms serve
the offline evaluator and the online node. Centring keeps the sums exact to rounding
even far from the origin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import (
    FloatArray,
    quat_from_matrix,
    quat_multiply,
    quat_normalize,
    quat_to_matrix,
)

from .poses import Trajectory, TrajectoryInputError

METHODS = ("none", "se3", "sim3", "posyaw", "origin")
_MIN_PAIRS = {"se3": 3, "sim3": 3, "posyaw": 2, "origin": 1, "none": 0}
# positions whose RMS spread is below this (metres) are treated as not moving
_STATIC_SPREAD = 1e-9
# second singular value relative to the first below which positions count as collinear
_COLLINEAR = 1e-10


class AlignmentError(TrajectoryInputError):
    """The data does not determine the requested alignment (too few, static or collinear)."""


@dataclass(frozen=True, eq=False)
class Alignment:
    """p_gt ~ scale * rotation @ p_est + translation (see the module doc)."""

    rotation: FloatArray  # (3, 3)
    translation: FloatArray  # (3,)
    scale: float = 1.0
    method: str = "none"

    @classmethod
    def identity(cls) -> Alignment:
        return cls(np.eye(3), np.zeros(3), 1.0, "none")

    def apply_positions(self, positions: FloatArray) -> FloatArray:
        return positions @ (self.scale * self.rotation).T + self.translation

    def apply(self, traj: Trajectory) -> Trajectory:
        if self.method == "none":
            return traj
        # q * o for every row o is linear in o: one (n, 4) x (4, 4) product instead of
        # elementwise work down the columns of an (n, 4) array
        rows = quat_multiply(self.quaternion(), np.eye(4))  # row k: q * e_k
        orientations = traj.orientations @ rows
        return Trajectory(traj.stamps, self.apply_positions(traj.positions), orientations, traj.name)

    def quaternion(self) -> FloatArray:
        """Rotation as x, y, z, w."""
        return quat_from_matrix(self.rotation)

    def matrix(self) -> FloatArray:
        """4x4 similarity transform."""
        out = np.eye(4)
        out[:3, :3] = self.scale * self.rotation
        out[:3, 3] = self.translation
        return out


@dataclass(frozen=True, eq=False)
class PointMoments:
    """Sufficient statistics of paired positions x (estimate) and y (ground truth)."""

    count: int
    mean_est: FloatArray  # (3,)
    mean_gt: FloatArray  # (3,)
    scatter_est: float  # sum |x - mean_est|^2
    scatter_gt: float  # sum |y - mean_gt|^2
    cross: FloatArray  # (3, 3) sum (y - mean_gt)(x - mean_est)^T

    @classmethod
    def empty(cls) -> PointMoments:
        return cls(0, np.zeros(3), np.zeros(3), 0.0, 0.0, np.zeros((3, 3)))

    @classmethod
    def of(cls, est: FloatArray, gt: FloatArray) -> PointMoments:
        est = np.asarray(est, dtype=np.float64).reshape(-1, 3)
        gt = np.asarray(gt, dtype=np.float64).reshape(-1, 3)
        if est.shape != gt.shape:
            raise TrajectoryInputError(
                f"{est.shape[0]} estimate positions for {gt.shape[0]} ground truth positions"
            )
        if est.shape[0] == 0:
            return cls.empty()
        mean_est = est.mean(axis=0)
        mean_gt = gt.mean(axis=0)
        dx = est - mean_est
        dy = gt - mean_gt
        return cls(
            est.shape[0],
            mean_est,
            mean_gt,
            float(np.einsum("ij,ij->", dx, dx)),
            float(np.einsum("ij,ij->", dy, dy)),
            dy.T @ dx,
        )

    def merged(self, other: PointMoments) -> PointMoments:
        """Moments of both sets together (Chan et al.'s pairwise update)."""
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        w = self.count * other.count / n
        dx = other.mean_est - self.mean_est
        dy = other.mean_gt - self.mean_gt
        return PointMoments(
            n,
            self.mean_est + dx * (other.count / n),
            self.mean_gt + dy * (other.count / n),
            self.scatter_est + other.scatter_est + w * float(dx @ dx),
            self.scatter_gt + other.scatter_gt + w * float(dy @ dy),
            self.cross + other.cross + w * np.outer(dy, dx),
        )

    def residual_sse(self, alignment: Alignment) -> float:
        """Sum |y - (s R x + t)|^2 over the pairs, from the moments alone (never negative)."""
        if self.count == 0:
            return 0.0
        s, r = alignment.scale, alignment.rotation
        offset = self.mean_gt - s * (r @ self.mean_est) - alignment.translation
        sse = (
            self.scatter_gt
            + s * s * self.scatter_est
            - 2.0 * s * float(np.sum(r * self.cross))
            + self.count * float(offset @ offset)
        )
        return max(sse, 0.0)


def solve(moments: PointMoments, method: str) -> Alignment:
    """Least-squares alignment from moments (se3, sim3, posyaw); AlignmentError when undetermined."""
    if method == "none":
        return Alignment.identity()
    if method not in ("se3", "sim3", "posyaw"):
        raise AlignmentError(f"alignment {method!r} cannot be solved from positions alone")
    n = moments.count
    if n < _MIN_PAIRS[method]:
        raise AlignmentError(f"{method} alignment needs at least {_MIN_PAIRS[method]} pose pairs, have {n}")
    _check_moving(moments)
    c = moments.cross
    if method == "posyaw":
        cos_part = c[0, 0] + c[1, 1]
        sin_part = c[1, 0] - c[0, 1]
        if np.hypot(cos_part, sin_part) <= _COLLINEAR * np.sqrt(moments.scatter_est * moments.scatter_gt):
            raise AlignmentError("posyaw alignment: no horizontal motion, the yaw is undetermined")
        yaw = np.arctan2(sin_part, cos_part)
        rotation = np.array(
            [[np.cos(yaw), -np.sin(yaw), 0.0], [np.sin(yaw), np.cos(yaw), 0.0], [0.0, 0.0, 1.0]]
        )
        return Alignment(rotation, moments.mean_gt - rotation @ moments.mean_est, 1.0, method)
    u, d, vt = np.linalg.svd(c)
    if d[0] <= _COLLINEAR * np.sqrt(moments.scatter_est * moments.scatter_gt):
        raise AlignmentError(f"{method} alignment: estimate and ground truth positions are uncorrelated")
    if d[1] <= _COLLINEAR * d[0]:
        raise AlignmentError(
            f"{method} alignment: the positions lie on a line, the rotation about it "
            "is undetermined (use posyaw or origin, or more varied motion)"
        )
    sign = np.ones(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0.0:
        sign[2] = -1.0  # a reflection would fit better: take the best proper rotation
    rotation = (u * sign) @ vt
    scale = float(np.dot(d, sign) / moments.scatter_est) if method == "sim3" else 1.0
    return Alignment(rotation, moments.mean_gt - scale * (rotation @ moments.mean_est), scale, method)


def _check_moving(moments: PointMoments) -> None:
    limit = moments.count * _STATIC_SPREAD**2
    for what, scatter in (("estimate", moments.scatter_est), ("ground truth", moments.scatter_gt)):
        if scatter <= limit:
            spread = np.sqrt(scatter / max(moments.count, 1))
            raise AlignmentError(
                f"the {what} positions do not move (RMS spread {spread:.3g} m): the alignment is undetermined"
            )


def origin_alignment(
    gt_position: npt.ArrayLike,
    gt_orientation: npt.ArrayLike,
    est_position: npt.ArrayLike,
    est_orientation: npt.ArrayLike,
) -> Alignment:
    """The transform moving the estimate pose onto the ground truth pose (G E^-1)."""
    r_gt = quat_to_matrix(quat_normalize(gt_orientation))
    r_est = quat_to_matrix(quat_normalize(est_orientation))
    rotation = r_gt @ r_est.T
    return Alignment(
        rotation, np.asarray(gt_position, float) - rotation @ np.asarray(est_position, float), 1.0, "origin"
    )


def align(gt: Trajectory, est: Trajectory, method: str, first_n: int = 0) -> Alignment:
    """Alignment of associated ``est`` onto ``gt`` (row i with row i), from the first
    ``first_n`` pairs when ``first_n > 0``, else from all."""
    if method not in METHODS:
        raise AlignmentError(f"unknown alignment {method!r} (one of {', '.join(METHODS)})")
    if len(gt) != len(est):
        raise TrajectoryInputError(f"{len(est)} estimate poses for {len(gt)} ground truth poses")
    if first_n < 0:
        raise AlignmentError(f"first_n must be >= 0, not {first_n}")
    rows = slice(0, first_n) if first_n > 0 else slice(None)
    if method == "none":
        return Alignment.identity()
    if method == "origin":
        if len(gt) == 0:
            raise AlignmentError("origin alignment needs at least 1 pose pair, have 0")
        return origin_alignment(gt.positions[0], gt.orientations[0], est.positions[0], est.orientations[0])
    return solve(PointMoments.of(est.positions[rows], gt.positions[rows]), method)
