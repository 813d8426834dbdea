"""Weighted rigid fits of a batch of bodies at once (Kabsch with one batched SVD), with
the prior's help where fewer than 3 markers are seen (pure numpy)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
_NEXT, _AFTER = [1, 2, 0], [2, 0, 1]  # the cross product a x b = a[NEXT] b[AFTER] - a[AFTER] b[NEXT]


def least_turn(was: FloatArray, seen: FloatArray) -> FloatArray:
    """The least rotations (B, 3, 3) that turn the directions ``was`` onto ``seen`` (B, 3):
    Rodrigues' formula about their cross product, R = cI + [v]x + vv^T/(1 + c) for unit
    vectors (v = a x b, c = a . b); opposite directions get the identity (no least turn)."""
    a = was / np.maximum(np.linalg.norm(was, axis=1), 1e-300)[:, None]
    b = seen / np.maximum(np.linalg.norm(seen, axis=1), 1e-300)[:, None]
    v = a[:, _NEXT] * b[:, _AFTER] - a[:, _AFTER] * b[:, _NEXT]
    c = (a * b).sum(axis=1)
    opposite = 1.0 + c < 1e-12
    turn = v[:, :, None] * v[:, None, :] / np.where(opposite, 1.0, 1.0 + c)[:, None, None]
    turn += c[:, None, None] * np.eye(3)
    turn[:, 0, 1] -= v[:, 2]
    turn[:, 0, 2] += v[:, 1]
    turn[:, 1, 0] += v[:, 2]
    turn[:, 1, 2] -= v[:, 0]
    turn[:, 2, 0] -= v[:, 1]
    turn[:, 2, 1] += v[:, 0]
    turn[opposite] = np.eye(3)
    out: FloatArray = turn
    return out


def kabsch(
    weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Weighted rigid fits for a batch: rotations, translations, RMS residuals, counts.

    local/observed (B, L, 3), weights (B, L) 0/1. Bodies with fewer than 3 weighted,
    non-collinear markers keep their prior rotation and get only a translation."""
    rot, trans, rms, count, _ = fit_batch(weights, local, observed, prior)
    return rot, trans, rms, count


def fit_batch(
    weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """:func:`kabsch`, and the fitted positions of every layout marker (B, L, 3), which the
    residuals need anyway: the tracker's refinement and next prediction reuse them."""
    count = weights.sum(axis=1)
    safe = np.maximum(count, 1.0)[:, None]
    w = weights[:, :, None]
    c_local = (w * local).sum(axis=1) / safe
    c_obs = (w * observed).sum(axis=1) / safe
    a = (local - c_local[:, None]) * w
    b = observed - c_obs[:, None]
    h = np.matmul(a.transpose(0, 2, 1), b)  # sum over markers of a b^T
    u, s, vt = np.linalg.svd(h)
    rot = np.matmul(u, vt).transpose(0, 2, 1)  # V U^T
    # a reflection (det -1) is turned into the nearest rotation: V diag(1, 1, -1) U^T
    mirrored = np.flatnonzero(np.linalg.det(rot) < 0)
    if len(mirrored):
        rot[mirrored] -= 2.0 * vt[mirrored, 2, :, None] * u[mirrored, None, :, 2]
    full = (count >= 3) & (s[:, 1] > 1e-4 * np.maximum(s[:, 0], 1e-12))
    rot = np.where(full[:, None, None], rot, prior)
    two = np.flatnonzero(count == 2)
    if len(two):
        # two markers fix the direction of their line: turn the prior by the least rotation
        # that lays the line where it is seen (the roll about the line stays the prior's)
        first = np.argmax(weights[two] > 0, axis=1)
        second = weights.shape[1] - 1 - np.argmax(weights[two, ::-1] > 0, axis=1)
        seen = observed[two, second] - observed[two, first]
        was = np.einsum("bij,bj->bi", prior[two], local[two, second] - local[two, first])
        turn = least_turn(was, seen)
        rot[two] = np.einsum("bij,bjk->bik", turn, prior[two])
    trans = c_obs - np.matmul(rot, c_local[:, :, None])[:, :, 0]
    fitted = np.matmul(local, rot.transpose(0, 2, 1)) + trans[:, None]
    sq = ((fitted - observed) ** 2).sum(axis=2) * weights
    rms = np.sqrt(sq.sum(axis=1) / safe[:, 0])
    return rot, trans, rms, count, fitted
