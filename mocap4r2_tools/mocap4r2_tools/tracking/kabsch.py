"""Weighted rigid fits of a batch of bodies at once (the least-squares rotation of Kabsch,
by Horn's quaternion form with one batched eigh), with the prior's help where fewer than 3
markers are seen (numpy); and the same optimum reached from a nearby prior by Newton steps
(:func:`fit_near`, the tracker's every-frame fit, compiled in :mod:`.kernels`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from mocap4r2_tools.tracking.kernels import newton_fits

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
_XYZW = [1, 2, 3, 0]  # Horn's (w, x, y, z) in the order the tracker reports
# h.ravel() @ _HORN: Horn's symmetric matrix N (order w, x, y, z) of h = sum a b^T, whose
# largest eigenvector is the quaternion turning the a onto the b
_HORN = np.zeros((9, 16))
for (_r, _c), _terms in {
    (0, 0): ((0, 1), (4, 1), (8, 1)),
    (0, 1): ((5, 1), (7, -1)),
    (0, 2): ((6, 1), (2, -1)),
    (0, 3): ((1, 1), (3, -1)),
    (1, 1): ((0, 1), (4, -1), (8, -1)),
    (1, 2): ((1, 1), (3, 1)),
    (1, 3): ((6, 1), (2, 1)),
    (2, 2): ((0, -1), (4, 1), (8, -1)),
    (2, 3): ((5, 1), (7, 1)),
    (3, 3): ((0, -1), (4, -1), (8, 1)),
}.items():
    for _k, _v in _terms:
        _HORN[_k, 4 * _r + _c] = _v
        _HORN[_k, 4 * _c + _r] = _v
# (q q^T).ravel() @ _QUAT_TO_MATRIX: the rotation matrix of a unit quaternion (w, x, y, z)
_QUAT_TO_MATRIX = np.zeros((16, 9))
for _cell, _entries in enumerate(
    (
        ((0, 0, 1), (1, 1, 1), (2, 2, -1), (3, 3, -1)),
        ((1, 2, 2), (0, 3, -2)),
        ((1, 3, 2), (0, 2, 2)),
        ((1, 2, 2), (0, 3, 2)),
        ((0, 0, 1), (1, 1, -1), (2, 2, 1), (3, 3, -1)),
        ((2, 3, 2), (0, 1, -2)),
        ((1, 3, 2), (0, 2, -2)),
        ((2, 3, 2), (0, 1, 2)),
        ((0, 0, 1), (1, 1, -1), (2, 2, -1), (3, 3, 1)),
    )
):
    for _i, _j, _v in _entries:
        _QUAT_TO_MATRIX[4 * _i + _j, _cell] = _v
# (a b^T).ravel() @ _CROSS_DOT = (a x b, a . b); (v, c) @ _SKEW_DIAG = ([v]x + c I).ravel()
_CROSS_DOT = np.zeros((9, 4))
_SKEW_DIAG = np.zeros((4, 9))
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    _CROSS_DOT[3 * _j + _k, _i], _CROSS_DOT[3 * _k + _j, _i] = 1.0, -1.0  # (a x b)_i = a_j b_k - a_k b_j
    _CROSS_DOT[4 * _i, 3] = 1.0
    _SKEW_DIAG[_i, 3 * _k + _j], _SKEW_DIAG[_i, 3 * _j + _k] = (
        1.0,
        -1.0,
    )  # [v]x[k, j] = v_i, [v]x[j, k] = -v_i
    _SKEW_DIAG[3, 4 * _i] = 1.0


# Newton's steps shrink quadratically: after a step this small (rad) the rotation is within
# ~1e-8 rad of the optimum (a fraction of a nanometre at a marker 25 mm out)
NEWTON_TOLERANCE = 1e-4
NEWTON_STEPS = 4  # at most; 2 from the last frame's pose at 120-1000 Hz


def least_turn(was: FloatArray, seen: FloatArray) -> FloatArray:
    """The least rotations (B, 3, 3) that turn the directions ``was`` onto ``seen`` (B, 3):
    Rodrigues' formula about their cross product, R = cI + [v]x + vv^T/(1 + c) for unit
    vectors (v = a x b, c = a . b); opposite directions get the identity (no least turn).
    Cross and dot product come from the outer product a b^T through one constant matrix."""
    outer = (was[:, :, None] * seen[:, None, :]).reshape(-1, 9)
    cross_dot = outer @ _CROSS_DOT  # (B, 4): a x b, a . b
    scale = 1.0 / np.sqrt(
        np.maximum(np.einsum("bi,bi->b", was, was) * np.einsum("bi,bi->b", seen, seen), 1e-300)
    )
    cross_dot *= scale[:, None]
    v, c = cross_dot[:, :3], cross_dot[:, 3]
    opposite = 1.0 + c < 1e-12
    turn = (v[:, :, None] * v[:, None, :]).reshape(-1, 9) / np.where(opposite, 1.0, 1.0 + c)[:, None]
    turn += cross_dot @ _SKEW_DIAG  # [v]x + c I
    turn[opposite] = np.eye(3).ravel()
    out: FloatArray = turn.reshape(-1, 3, 3)
    return out


def kabsch(
    weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Weighted rigid fits for a batch: rotations, translations, RMS residuals, counts.

    local/observed (B, L, 3), weights (B, L) 0/1. Bodies with fewer than 3 weighted,
    non-collinear markers keep their prior rotation and get only a translation."""
    fit = fit_batch(weights, local, observed, prior)
    return fit.rot, fit.trans, fit.rms, fit.markers


class BatchFit(NamedTuple):
    """What :func:`fit_batch` gives per body (B rows)."""

    rot: FloatArray  # (B, 3, 3)
    trans: FloatArray  # (B, 3)
    rms: FloatArray  # (B,) RMS residual of the weighted markers
    markers: FloatArray  # (B,) weighted markers (the count)
    fitted: FloatArray  # (B, L, 3) every layout marker where the fit puts it
    sq: FloatArray  # (B, L) squared residual of each weighted marker, 0 where weighted out
    quat: FloatArray  # (B, 4) x, y, z, w of rot where ``full`` (largest component positive)
    full: BoolArray  # (B,) rotation fitted from 3+ non-collinear markers (else prior-based)


def _centred(
    weights: FloatArray, local: FloatArray, observed: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """What the fit starts from, per body: the weighted marker count and its inverse
    (1 for none), the weighted centroids of the layout and of the observed markers, and the
    layout about its centroid with the weights applied (the left factor of the
    cross-covariance)."""
    count = weights.sum(axis=1)
    inv = 1.0 / np.maximum(count, 1.0)
    w_row = weights[:, None, :]
    c_local = np.matmul(w_row, local)[:, 0] * inv[:, None]
    c_obs = np.matmul(w_row, observed)[:, 0] * inv[:, None]
    return count, inv, c_local, c_obs, (local - c_local[:, None]) * weights[:, :, None]


def fit_batch(weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray) -> BatchFit:
    """:func:`kabsch`, the fitted positions of every layout marker (B, L, 3) and each
    weighted marker's squared residual (B, L; 0 where weighted out), which the RMS needs
    anyway: the tracker's refinement and next prediction reuse them.

    Few array operations on purpose (the tracker calls it every frame for every body):
    weighted sums as products with the weights, squared lengths as einsum."""
    count, inv, c_local, c_obs, a = _centred(weights, local, observed)
    h = np.matmul(a.transpose(0, 2, 1), observed - c_obs[:, None])  # sum over markers of a b^T
    # Horn's closed form: the best rotation's quaternion is the eigenvector of the largest
    # eigenvalue of a symmetric 4x4 matrix linear in h. It is the same optimum as Kabsch's SVD
    # with the reflection corrected (a proper rotation by construction), in fewer operations.
    values, vectors = np.linalg.eigh((h.reshape(-1, 9) @ _HORN).reshape(-1, 4, 4))
    q = vectors[:, :, 3]  # (w, x, y, z), unit
    # the quaternion as rotation.quat_from_matrix gives it: x, y, z, w, largest part positive
    quat = q[:, _XYZW]
    quat *= np.where(quat[np.arange(len(q)), np.argmax(np.abs(quat), axis=1)] < 0, -1.0, 1.0)[:, None]
    rot = ((q[:, :, None] * q[:, None, :]).reshape(-1, 16) @ _QUAT_TO_MATRIX).reshape(-1, 3, 3)
    # collinear (or fewer than 3) markers leave the turn about their line free: the two
    # largest eigenvalues meet (their gap is twice the second singular value of h)
    full = (count >= 3) & (values[:, 3] - values[:, 2] > 2e-4 * np.abs(values[:, 3]))
    if not full.all():
        rot = np.where(full[:, None, None], rot, prior)
    two = np.flatnonzero(count == 2)
    if len(two):
        # two markers fix the direction of their line: turn the prior by the least rotation
        # that lays the line where it is seen (the roll about the line stays the prior's)
        seen_two = weights[two]  # 0/1
        first = np.argmax(seen_two, axis=1)
        second = weights.shape[1] - 1 - np.argmax(seen_two[:, ::-1], axis=1)
        line_seen = observed[two, second] - observed[two, first]
        prior_two = prior[two]
        was = np.matmul(prior_two, (local[two, second] - local[two, first])[:, :, None])[:, :, 0]
        rot[two] = np.matmul(least_turn(was, line_seen), prior_two)
    trans = c_obs - np.matmul(rot, c_local[:, :, None])[:, :, 0]
    fitted = np.matmul(local, rot.transpose(0, 2, 1)) + trans[:, None]
    off = fitted - observed
    sq = np.einsum("bli,bli->bl", off, off) * weights
    rms = np.sqrt(sq.sum(axis=1) * inv)
    return BatchFit(rot, trans, rms, count, fitted, sq, quat, full)


def fit_near(
    weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray, prior_quat: FloatArray
) -> BatchFit:
    """:func:`fit_batch` for bodies whose pose is near ``prior`` (B, 3, 3), ``prior_quat``
    (B, 4, x y z w, the same rotations): Newton steps on the rotation from the prior
    instead of an eigen-decomposition (the tracker's every-frame fit).

    With a = R l and b the centred, weighted layout and observed markers and P = sum a b^T
    (= R h, h = sum l b^T), turning R by a small rotation vector d changes the fit's sum of
    b . a by d . k - d^T M d / 2, where k = sum a x b and M = tr(P) I - sym(P): Newton's
    step solves M d = k. The least-squares cost has one local optimum in the rotation,
    where M is positive definite; a body whose steps do not settle within NEWTON_STEPS,
    whose M is not clearly positive definite (markers nearly collinear, or a prior far
    off), or with fewer than 3 markers is fitted by :func:`fit_batch` instead, so the
    result is fit_batch's to within ~1e-8 rad.

    The steps run per body as compiled scalar loops (:func:`.kernels.newton_fits`): as
    numpy over all bodies they were ~40 array calls a fit (~0.3 ms for 49 bodies, of the
    tracker's 1 ms budget at 1 kHz); compiled, ~0.03 ms with this function's own calls."""
    fit = BatchFit(
        *newton_fits(
            np.ascontiguousarray(weights, dtype=np.float64),
            np.ascontiguousarray(local, dtype=np.float64),
            np.ascontiguousarray(observed, dtype=np.float64),
            np.ascontiguousarray(prior, dtype=np.float64),
            np.ascontiguousarray(prior_quat, dtype=np.float64),
            NEWTON_TOLERANCE,
            NEWTON_STEPS,
        )
    )
    rest = np.flatnonzero((fit.markers >= 3) & ~fit.full)
    if len(rest):
        exact = fit_batch(weights[rest], local[rest], observed[rest], prior[rest])
        for mine, theirs in zip(fit, exact, strict=True):
            mine[rest] = theirs
        kept = rest[~exact.full]  # collinear: the prior's rotation, so its quaternion
        fit.quat[kept] = prior_quat[kept]
    return fit
