"""Weighted rigid fits of a batch of bodies at once (Kabsch with one batched SVD), with
the prior's help where fewer than 3 markers are seen (pure numpy)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import quat_from_axis_angle, quat_to_matrix

FloatArray = npt.NDArray[np.float64]


def kabsch(
    weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Weighted rigid fits for a batch: rotations, translations, RMS residuals, counts.

    local/observed (B, L, 3), weights (B, L) 0/1. Bodies with fewer than 3 weighted,
    non-collinear markers keep their prior rotation and get only a translation."""
    count = weights.sum(axis=1)
    safe = np.maximum(count, 1.0)[:, None]
    w = weights[:, :, None]
    c_local = (w * local).sum(axis=1) / safe
    c_obs = (w * observed).sum(axis=1) / safe
    a = (local - c_local[:, None]) * w
    b = observed - c_obs[:, None]
    h = np.einsum("bli,blj->bij", a, b)
    u, s, vt = np.linalg.svd(h)
    det = np.linalg.det(np.einsum("bji,bkj->bik", vt, u))
    d = np.ones((len(count), 3))
    d[:, 2] = np.sign(det) + (det == 0)
    rot = np.einsum("bji,bj,bkj->bik", vt, d, u)
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
        axis = np.cross(was, seen)
        sin = np.linalg.norm(axis, axis=1)
        cos = np.einsum("bi,bi->b", was, seen)
        turn = quat_to_matrix(
            quat_from_axis_angle(axis / np.maximum(sin, 1e-300)[:, None], np.arctan2(sin, cos))
        )
        rot[two] = np.einsum("bij,bjk->bik", turn, prior[two])
    trans = c_obs - np.einsum("bij,bj->bi", rot, c_local)
    fitted = np.einsum("bij,blj->bli", rot, local) + trans[:, None]
    sq = ((fitted - observed) ** 2).sum(axis=2) * weights
    rms = np.sqrt(sq.sum(axis=1) / safe[:, 0])
    return rot, trans, rms, count
