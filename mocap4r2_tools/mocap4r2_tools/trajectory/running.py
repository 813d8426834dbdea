"""Online trajectory error with O(1) work per pose pair and bounded memory.

* :class:`RunningMoments` keeps the count, means, centred scatters and centred
  cross-covariance of the paired positions with Welford-style updates (each new pair
  is centred on the running means before it is added), so the sums stay exact to
  rounding even kilometres from the origin and after millions of pairs. From them
  :func:`alignment.solve` gives the se3/sim3/posyaw alignment and
  :meth:`PointMoments.residual_sse` the exact aligned ATE rmse, without the pairs.
* :class:`RunningATE` adds the alignment policy (all pairs, first N, origin) and a
  :class:`DecimatedHistory` for the mean and max, which need the individual errors:
  they are exact up to ``history`` pairs and computed on an evenly thinned subset after.
  (While every pair is still kept, the rmse is also summed directly from them, which
  avoids the sums' rounding floor for a perfect estimate; after that it comes from the
  sums.)
* :class:`RunningRPE` accumulates the consecutive-pairs RPE (step in frames, metres or
  seconds on the ground truth) as sums, including the terms that let a sim3 scale
  found later rescale the translation error exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mocap4r2_control.rotation import (
    FloatArray,
    quat_angle_one,
    quat_conjugate_one,
    quat_multiply_one,
    quat_rotate_inverse_one,
)

from .alignment import Alignment, AlignmentError, PointMoments, origin_alignment, solve
from .metrics import RPE_UNITS

# a position or quaternion: an array or a sequence of floats
Values = FloatArray | Sequence[float]


class RunningMoments:
    """:class:`PointMoments` updated one pair at a time.

    Kept in Python floats: for one 3-vector per update, numpy's per-call overhead would
    cost ten times the arithmetic."""

    __slots__ = ("count", "_mx", "_my", "scatter_est", "scatter_gt", "_c")

    def __init__(self) -> None:
        self.count = 0
        self._mx = [0.0, 0.0, 0.0]
        self._my = [0.0, 0.0, 0.0]
        self.scatter_est = 0.0
        self.scatter_gt = 0.0
        self._c = [0.0] * 9  # row-major sum (y - mean_gt)(x - mean_est)^T

    def add(self, est: Values, gt: Values) -> None:
        self.count += 1
        n = self.count
        mx, my, c = self._mx, self._my, self._c
        x0, x1, x2 = _floats(est)
        y0, y1, y2 = _floats(gt)
        # deviations from the old means, then the new means, then the deviations after
        dx0, dx1, dx2 = x0 - mx[0], x1 - mx[1], x2 - mx[2]
        dy0, dy1, dy2 = y0 - my[0], y1 - my[1], y2 - my[2]
        mx[0] += dx0 / n
        mx[1] += dx1 / n
        mx[2] += dx2 / n
        my[0] += dy0 / n
        my[1] += dy1 / n
        my[2] += dy2 / n
        ex0, ex1, ex2 = x0 - mx[0], x1 - mx[1], x2 - mx[2]
        ey0, ey1, ey2 = y0 - my[0], y1 - my[1], y2 - my[2]
        self.scatter_est += dx0 * ex0 + dx1 * ex1 + dx2 * ex2
        self.scatter_gt += dy0 * ey0 + dy1 * ey1 + dy2 * ey2
        c[0] += ey0 * dx0
        c[1] += ey0 * dx1
        c[2] += ey0 * dx2
        c[3] += ey1 * dx0
        c[4] += ey1 * dx1
        c[5] += ey1 * dx2
        c[6] += ey2 * dx0
        c[7] += ey2 * dx1
        c[8] += ey2 * dx2

    @property
    def mean_est(self) -> FloatArray:
        return np.array(self._mx)

    @property
    def mean_gt(self) -> FloatArray:
        return np.array(self._my)

    @property
    def cross(self) -> FloatArray:
        return np.array(self._c).reshape(3, 3)

    def snapshot(self) -> PointMoments:
        return PointMoments(
            self.count, self.mean_est, self.mean_gt, self.scatter_est, self.scatter_gt, self.cross
        )


class DecimatedHistory:
    """At most ``capacity`` pairs, evenly spread over everything seen: when full, every
    second stored pair is dropped and from then on only every second new one is kept."""

    def __init__(self, capacity: int = 10_000):
        if capacity < 2:
            raise ValueError("history capacity must be >= 2")
        self.capacity = int(capacity)
        self._est = np.empty((self.capacity, 3))
        self._gt = np.empty((self.capacity, 3))
        self._size = 0
        self._stride = 1
        self._seen = 0

    def add(self, est: FloatArray, gt: FloatArray) -> None:
        if self._seen % self._stride == 0:
            if self._size == self.capacity:
                keep = self._size // 2
                self._est[:keep] = self._est[0 : self._size : 2]
                self._gt[:keep] = self._gt[0 : self._size : 2]
                self._size = keep
                self._stride *= 2
            if self._seen % self._stride == 0:
                self._est[self._size] = est
                self._gt[self._size] = gt
                self._size += 1
        self._seen += 1

    @property
    def exact(self) -> bool:
        return self._stride == 1

    def pairs(self) -> tuple[FloatArray, FloatArray]:
        return self._est[: self._size], self._gt[: self._size]


@dataclass(frozen=True)
class AteSnapshot:
    """The aligned ATE so far (rmse, mean and max in metres) and the alignment applied."""

    samples: int
    rmse: float
    mean: float
    max: float
    aligned: bool
    alignment: Alignment
    reason: str = ""  # why not aligned, when aligned is False and alignment was asked


class RunningATE:
    """Aligned ATE of a growing pair stream (see module doc)."""

    def __init__(self, method: str = "se3", first_n: int = 0, history: int = 10_000):
        if method not in ("none", "se3", "sim3", "posyaw", "origin"):
            raise ValueError(f"unknown alignment {method!r}")
        if first_n < 0:
            raise ValueError("first_n must be >= 0")
        self.method = method
        self.first_n = int(first_n)
        self.history_capacity = int(history)
        self.reset()

    def reset(self) -> None:
        self.moments = RunningMoments()
        self._window = RunningMoments() if self.first_n else None
        self._frozen: Alignment | None = None
        self._reason = "" if self.method == "none" else "no pose pairs yet"
        self.history = DecimatedHistory(self.history_capacity)

    def add(
        self,
        gt_position: FloatArray,
        gt_orientation: FloatArray,
        est_position: FloatArray,
        est_orientation: FloatArray,
    ) -> None:
        self.moments.add(est_position, gt_position)
        self.history.add(est_position, gt_position)
        if self.method == "origin" and self._frozen is None:
            self._frozen = origin_alignment(gt_position, gt_orientation, est_position, est_orientation)
        elif self._window is not None and self._frozen is None:
            self._window.add(est_position, gt_position)
            if self._window.count >= self.first_n:
                # the window keeps growing while it does not determine the alignment
                self._frozen = self._try_solve(self._window.snapshot())

    def _try_solve(self, moments: PointMoments) -> Alignment | None:
        try:
            alignment = solve(moments, self.method)
        except AlignmentError as exc:
            self._reason = str(exc)
            return None
        self._reason = ""
        return alignment

    def alignment(self) -> Alignment | None:
        """The current alignment, None when it is not (yet) determined."""
        if self.method == "none":
            return None
        if self._frozen is not None or self.method == "origin" or self._window is not None:
            return self._frozen
        return self._try_solve(self.moments.snapshot())

    def snapshot(self) -> AteSnapshot:
        alignment = self.alignment()
        aligned = alignment is not None
        applied = alignment if alignment is not None else Alignment.identity()
        n = self.moments.count
        if n == 0:
            return AteSnapshot(0, 0.0, 0.0, 0.0, aligned, applied, self._reason)
        est, gt = self.history.pairs()
        errors = np.linalg.norm(gt - applied.apply_positions(est), axis=1)
        if self.history.exact:
            # every pair is still kept: the direct sum has no cancellation at all
            rmse = float(np.sqrt(np.mean(errors * errors)))
        else:
            # exact to rounding; its floor, ~1e-8 of the trajectory's extent, only shows
            # for an estimate identical to the ground truth
            rmse = float(np.sqrt(self.moments.snapshot().residual_sse(applied) / n))
        return AteSnapshot(
            n,
            rmse,
            float(errors.mean()),
            float(errors.max()),
            aligned,
            applied,
            "" if aligned else self._reason,
        )


class RunningRPE:
    """Consecutive-pairs RPE over a ground-truth step, as running sums."""

    def __init__(self, delta: float = 1.0, unit: str = "frames"):
        if unit not in RPE_UNITS:
            raise ValueError(f"unknown RPE unit {unit!r} (one of {', '.join(RPE_UNITS)})")
        if not (np.isfinite(delta) and delta > 0):
            raise ValueError(f"RPE delta must be > 0, not {delta}")
        if unit == "frames" and float(delta) != int(delta):
            raise ValueError(f"an RPE delta in frames must be a whole number, not {delta}")
        self.delta = float(delta)
        self.unit = unit
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self._sum_gt2 = 0.0  # sum |a|^2, a = R(Q_i)^T (q_j - q_i)
        self._sum_cross = 0.0  # sum a . b
        self._sum_est2 = 0.0  # sum |b|^2, b = R(P_i)^T (p_j - p_i)
        self._sum_rot2 = 0.0
        # (stamp, gt position, gt orientation, est position, est orientation) of the step's start
        self._anchor: tuple[float, list[float], list[float], list[float], list[float]] | None = None
        self._progress = 0.0
        self._last_gt: list[float] = []

    def add(
        self,
        stamp: float,
        gt_position: Values,
        gt_orientation: Values,
        est_position: Values,
        est_orientation: Values,
    ) -> None:
        gt_p, gt_q = _floats(gt_position), _floats(gt_orientation)
        est_p, est_q = _floats(est_position), _floats(est_orientation)
        if self._anchor is None:
            self._anchor = (stamp, gt_p, gt_q, est_p, est_q)
            self._progress = 0.0
            self._last_gt = gt_p
            return
        if self.unit == "frames":
            self._progress += 1.0
        elif self.unit == "m":
            last = self._last_gt
            self._progress += math.sqrt(
                (gt_p[0] - last[0]) ** 2 + (gt_p[1] - last[1]) ** 2 + (gt_p[2] - last[2]) ** 2
            )
        else:
            self._progress = stamp - self._anchor[0]
        self._last_gt = gt_p
        if self._progress < self.delta:
            return
        _, q_i, qr_i, p_i, pr_i = self._anchor
        # R(Q_i)^T (q_j - q_i) and R(P_i)^T (p_j - p_i), see metrics.py
        a = quat_rotate_inverse_one(qr_i, (gt_p[0] - q_i[0], gt_p[1] - q_i[1], gt_p[2] - q_i[2]))
        b = quat_rotate_inverse_one(pr_i, (est_p[0] - p_i[0], est_p[1] - p_i[1], est_p[2] - p_i[2]))
        rel_gt = quat_multiply_one(quat_conjugate_one(qr_i), gt_q)
        rel_est = quat_multiply_one(quat_conjugate_one(pr_i), est_q)
        angle = quat_angle_one(quat_multiply_one(quat_conjugate_one(rel_gt), rel_est))
        self._sum_gt2 += a[0] * a[0] + a[1] * a[1] + a[2] * a[2]
        self._sum_cross += a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
        self._sum_est2 += b[0] * b[0] + b[1] * b[1] + b[2] * b[2]
        self._sum_rot2 += angle * angle
        self.count += 1
        self._anchor = (stamp, gt_p, gt_q, est_p, est_q)
        self._progress = 0.0

    def trans_rmse(self, scale: float = 1.0) -> float:
        """RMS of |s b - a|: the estimate's relative translations scaled by a sim3 scale."""
        if self.count == 0:
            return 0.0
        sse = self._sum_gt2 - 2.0 * scale * self._sum_cross + scale * scale * self._sum_est2
        return float(np.sqrt(max(sse, 0.0) / self.count))

    def rot_rmse(self) -> float:
        return float(np.sqrt(self._sum_rot2 / self.count)) if self.count else 0.0


def _floats(values: Values) -> list[float]:
    # element access on Python lists is several times cheaper than on numpy arrays
    if isinstance(values, np.ndarray):
        floats: list[float] = values.tolist()
        return floats
    return [float(v) for v in values]
