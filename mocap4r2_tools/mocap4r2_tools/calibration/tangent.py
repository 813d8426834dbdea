"""The calibration's local coordinates on rigid transforms (:class:`Transform` batches).

The refinement moves a transform by a small step and measures how far two transforms
are apart in the same six numbers: a rotation vector in the transform's own axes (rad),
then a translation in its parent frame (m). The unknowns, the residuals and the
covariance are all in these coordinates, so the two functions here are each other's
inverse to first order: ``difference(T, perturbed(T, d))`` is ``d`` for a small ``d``.
The transforms themselves are :class:`mocap4r2_control.geometry.Transform`, the suite's
one rigid transform; this is only the calibration's choice of coordinates about them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mocap4r2_control.geometry import Transform
from mocap4r2_control.rotation import FloatArray, quat_conjugate, quat_exp, quat_log, quat_multiply


def perturbed(pose: Transform, delta: npt.ArrayLike) -> Transform:
    """``pose`` moved by ``delta`` (..., 6) = (rotation vector in its own axes (rad),
    translation in its parent frame (m)); a batch of deltas gives a batch of poses."""
    d = np.asarray(delta, dtype=np.float64)
    return Transform(pose.translation + d[..., 3:6], quat_multiply(pose.rotation, quat_exp(d[..., 0:3])))


def difference(left: Transform, right: Transform) -> FloatArray:
    """(..., 6) rows of (rotation vector of left^-1 right in left's axes (rad), right's
    translation minus left's (m)): zero where the two transforms agree."""
    shape = np.broadcast_shapes(left.translation.shape, right.translation.shape)[:-1] + (6,)
    out = np.empty(shape)
    out[..., 0:3] = quat_log(quat_multiply(quat_conjugate(left.rotation), right.rotation))
    out[..., 3:6] = right.translation - left.translation
    return out
