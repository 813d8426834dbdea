"""Closed-form starts of the three problems, from aligned pose pairs (A_i, B_i).

* hand-eye ``A X = X B`` (Park and Martin 1994): on relative motions A_k = A_i^-1 A_j,
  B_k = B_i^-1 B_j the rotation axes satisfy alpha_k = R_X beta_k, a Kabsch problem;
  the translation then solves the stacked linear ``(R_Ak - I) t_X = R_X t_Bk - t_Ak``.
* robot-world/hand-eye ``A X = Y B``: ``R_A R_X = R_Y R_B`` is linear in the 18 entries
  of R_X and R_Y (Kronecker form); the null vector of the stacked system, scaled to unit
  determinant and projected onto SO(3), gives both rotations, and the translations come
  from the stacked linear ``R_A t_X - t_Y = R_Y t_B - t_A``.
* frame to frame ``A = X B``: the chordal mean of R_A R_B^T and the mean of
  t_A - R_X t_B.

They are the least-squares answers of linear forms, exact on exact data and biased by
noise and outliers; :mod:`.refine` starts from them. The stacked systems are solved
through their small normal matrices (6 x 6, 18 x 18) rather than by LAPACK on the tall
stack: on a loaded machine a multi-threaded OpenBLAS spends hundreds of ms on one tall
SVD or lstsq of a few thousand rows, against well under a millisecond single-threaded.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mocap4r2_control.geometry import Transform
from mocap4r2_control.rotation import FloatArray, quat_from_matrix, quat_log, quat_to_matrix

from .errors import CalibrationError

IndexArray = npt.NDArray[np.intp]


def nearest_rotation(m: FloatArray) -> FloatArray:
    """The rotation matrix nearest (Frobenius) to a 3 x 3 matrix."""
    u, _, vt = np.linalg.svd(m)
    d = np.sign(np.linalg.det(u @ vt)) or 1.0
    out: FloatArray = u @ np.diag([1.0, 1.0, d]) @ vt
    return out


def motion_pairs(n: int) -> tuple[IndexArray, IndexArray]:
    """Index pairs (i, j) whose relative motions the hand-eye problem uses: every pose
    with the one a third of the recording later (wrapping round), so each pose is in two
    motions and the motions are long ones (large rotations condition the problem best;
    consecutive poses of a dense stream barely turn)."""
    i = np.arange(n, dtype=np.intp)
    step = max(1, n // 3)
    return i, (i + step) % n


def relative_motions(p: Transform, i: IndexArray, j: IndexArray) -> Transform:
    """P_i^-1 P_j for each index pair."""
    return p.take(i).inverse() * p.take(j)


def hand_eye(a: Transform, b: Transform) -> Transform:
    """X of A_k X = X B_k from relative motions (A_k, B_k)."""
    alpha = quat_log(a.rotation)
    beta = quat_log(b.rotation)
    h = beta.T @ alpha  # sum beta alpha^T
    u, s, vt = np.linalg.svd(h)
    if s[1] < 1e-9 * max(s[0], 1e-300):
        raise CalibrationError("the relative motions all turn about one axis: X's rotation is undetermined")
    d = np.sign(np.linalg.det(vt.T @ u.T)) or 1.0
    rx = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    ra = quat_to_matrix(a.rotation)
    lhs = (ra - np.eye(3)).reshape(-1, 3)
    rhs = (b.translation @ rx.T - a.translation).reshape(-1)
    tx = _least_squares(lhs, rhs)
    return Transform(tx, quat_from_matrix(rx))


def _least_squares(lhs: FloatArray, rhs: FloatArray) -> FloatArray:
    """Argmin |lhs x - rhs| through the normal equations (see the module doc)."""
    normal = lhs.T @ lhs
    if np.linalg.cond(normal) > 1e12:
        raise CalibrationError(
            "the translation is undetermined by these motions (rotation about one axis only?)"
        )
    out: FloatArray = np.asarray(np.linalg.solve(normal, lhs.T @ rhs), dtype=np.float64)
    return out


def robot_world(a: Transform, b: Transform) -> tuple[Transform, Transform]:
    """(X, Y) of A_i X = Y B_i."""
    ra = quat_to_matrix(a.rotation)
    rb = quat_to_matrix(b.rotation)
    n = ra.shape[0]
    eye = np.eye(3)
    # row-major vec: vec(R_A R_X) = (R_A kron I) vec(R_X), vec(R_Y R_B) = (I kron R_B^T) vec(R_Y)
    left = np.einsum("nij,kl->nikjl", ra, eye).reshape(n * 9, 9)
    right = np.einsum("ij,nkl->niljk", eye, rb).reshape(n * 9, 9)
    system = np.hstack((left, -right))
    _, vectors = np.linalg.eigh(system.T @ system)
    v = vectors[:, 0]  # the null vector: the eigenvector of the smallest eigenvalue
    mx, my = v[:9].reshape(3, 3), v[9:].reshape(3, 3)
    det = np.linalg.det(mx)
    if abs(det) < 1e-12:
        raise CalibrationError("the rotations do not determine X and Y (too little rotation)")
    scale = 1.0 / np.cbrt(det)
    rx, ry = nearest_rotation(scale * mx), nearest_rotation(scale * my)
    lhs = np.concatenate((ra, np.broadcast_to(-eye, (n, 3, 3))), axis=2).reshape(-1, 6)
    rhs = (b.translation @ ry.T - a.translation).reshape(-1)
    t = _least_squares(lhs, rhs)
    return Transform(t[:3], quat_from_matrix(rx)), Transform(t[3:], quat_from_matrix(ry))


def frame_to_frame(a: Transform, b: Transform) -> Transform:
    """X of A_i = X B_i."""
    ra = quat_to_matrix(a.rotation)
    rb = quat_to_matrix(b.rotation)
    rx = nearest_rotation(np.einsum("nij,nkj->ik", ra, rb))
    tx = np.mean(a.translation - b.translation @ rx.T, axis=0)
    return Transform(tx, quat_from_matrix(rx))
