"""The time offset between an estimate and the ground truth, found from the data.

An estimate and a mocap ground truth rarely share a clock: a camera's exposure delay, a
filter's lag, a log stamped on arrival. The offset found here is the number of seconds
to *add to the estimate's stamps* so that they are ground-truth times (the ``offset`` of
:mod:`.association`).

Two steps:

1. **Coarse**: the speed and the angular rate of each trajectory, which do not depend on
   the frames the two are expressed in (so no alignment is needed yet), are averaged into
   bins of a common time grid, standardised, and cross-correlated (FFT) over lags within
   ``±window``. The lag of the highest correlation, refined by a parabola through its
   neighbours, is the coarse offset.
2. **Fine**: the ATE rmse (ground truth interpolated at the estimate's stamps, then
   aligned as the evaluation will be) is minimised over the offset near the coarse one
   (bounded Brent), on at most :data:`FINE_POSES` evenly chosen estimate poses.

Refused with the reason (:class:`TimeOffsetError`, and no offset applied): a ground truth
without motion (nothing to see the offset by), two trajectories whose motion does not
match at any lag, and a best lag at the edge of the window (the offset may lie beyond it:
said, never clipped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize_scalar  # type: ignore[import-untyped]
from scipy.signal import correlate, correlation_lags  # type: ignore[import-untyped]
from scipy.spatial.transform import Rotation  # type: ignore[import-untyped]

from .alignment import align
from .association import interpolate, nearest_indices
from .poses import Trajectory, TrajectoryInputError

Array = npt.NDArray[np.float64]

DEFAULT_WINDOW = 1.0  # s, either way
MAX_GRID = 1 << 18  # bins of the coarse grid at most (the FFT's size)
MIN_BIN = 0.002  # s: finer bins only add noise to the coarse step
FINE_POSES = 20_000  # estimate poses the fine search evaluates at most
MIN_CORRELATION = 0.3  # a coarse peak below this is not a match
# variation of the ground truth's speed (m/s) and angular rate (rad/s) below which it
# does not move enough for an offset to be seen
MIN_SPEED_STD = 0.005
MIN_RATE_STD = 0.005
SEARCH_ALIGNMENTS = ("none", "se3", "sim3", "posyaw")


class TimeOffsetError(TrajectoryInputError):
    """The offset cannot be found from these trajectories; the message says why."""


@dataclass(frozen=True)
class TimeOffset:
    """What was found: ``offset`` s to add to the estimate's stamps."""

    offset: float
    coarse: float  # from the cross-correlation
    correlation: float  # its normalised peak, -1..1
    bin: float  # s, the coarse grid's step
    window: float  # s, searched either way
    ate_rmse: float  # m, at ``offset`` on the poses of the fine search
    poses: int  # estimate poses of the fine search
    signals: tuple[str, ...]  # "speed", "angular rate": what the coarse step correlated


def estimate_time_offset(
    gt: Trajectory,
    est: Trajectory,
    window: float = DEFAULT_WINDOW,
    align_method: str = "se3",
    max_diff: float | None = None,
) -> TimeOffset:
    """The offset to add to ``est``'s stamps, searched within ``±window`` s.

    ``align_method``: the alignment the ATE of the fine step is computed after (origin,
    which depends on one pose only, searches with se3). ``max_diff``: how far (s) an
    estimate stamp may be from a ground-truth pose to be used; default twice the ground
    truth's median step."""
    if not (math.isfinite(window) and window > 0):
        raise TimeOffsetError(f"the search window must be a positive number of seconds, not {window}")
    for what, traj in (("ground truth", gt), ("estimate", est)):
        if len(traj) < 4:
            raise TimeOffsetError(f"{what} has {len(traj)} poses: too few to find a time offset")
    gt_step = _median_step(gt.stamps)
    est_step = _median_step(est.stamps)
    if max_diff is None:
        max_diff = 2.0 * gt_step
    span = max(gt.stamps[-1], est.stamps[-1]) - min(gt.stamps[0], est.stamps[0]) + 2 * window
    step = max(gt_step, est_step, MIN_BIN, span / MAX_GRID)
    lags = int(math.ceil(window / step))
    if lags < 3:
        raise TimeOffsetError(
            f"a search window of ±{window:g} s is less than 3 steps of the sparser trajectory ({step:.4g} s)"
        )
    origin = min(gt.stamps[0], est.stamps[0]) - window
    size = int(math.ceil(span / step)) + 1
    gt_speed, gt_rate, gt_mask = _binned_motion(gt, origin, step, size)
    est_speed, est_rate, est_mask = _binned_motion(est, origin, step, size)
    _check_motion(gt_speed[gt_mask], gt_rate[gt_mask])

    signals: list[str] = []
    score = np.zeros(2 * size - 1)
    lag_values = correlation_lags(size, size)
    for name, g, e, floor in (
        ("speed", gt_speed, est_speed, MIN_SPEED_STD),
        ("angular rate", gt_rate, est_rate, MIN_RATE_STD),
    ):
        if np.std(g[gt_mask]) < floor:
            continue  # this ground truth does not vary in it: it would only add noise
        score += _normalised_correlation(g, gt_mask, e, est_mask)
        signals.append(name)
    score /= len(signals)
    # lag L of correlate(gt, est) pairs gt[k + L] with est[k]: est at time t belongs to
    # the ground truth at t + L * step, so L * step is the offset
    inside = np.abs(lag_values) <= lags
    candidates = np.flatnonzero(inside)
    best = int(candidates[np.argmax(score[candidates])])
    peak = float(score[best])
    if not peak >= MIN_CORRELATION:
        raise TimeOffsetError(
            f"the motion of the estimate matches the ground truth's at no offset within ±{window:g} s "
            f"(best correlation of {' and '.join(signals)} {peak:.2f}, needs {MIN_CORRELATION}); "
            "no offset applied"
        )
    if abs(int(lag_values[best])) >= lags - 1:
        raise TimeOffsetError(
            f"the best offset lies at the edge of the search window ({lag_values[best] * step:+.3f} s of "
            f"±{window:g} s): it may be beyond it; widen the window. No offset applied"
        )
    coarse = (lag_values[best] + _parabola_vertex(score[best - 1], score[best], score[best + 1])) * step

    search = align_method if align_method in SEARCH_ALIGNMENTS else "se3"
    fine_est = est.take(np.linspace(0, len(est) - 1, min(len(est), FINE_POSES)).round().astype(np.int64))
    radius = 2.0 * step

    def ate(offset: float) -> float:
        return _ate_rmse(gt, fine_est, offset, max_diff, search)

    found = minimize_scalar(
        ate, bounds=(coarse - radius, coarse + radius), method="bounded", options={"xatol": 1e-5}
    )
    offset = float(found.x)
    return TimeOffset(
        offset=offset,
        coarse=float(coarse),
        correlation=peak,
        bin=float(step),
        window=float(window),
        ate_rmse=float(found.fun),
        poses=len(fine_est),
        signals=tuple(signals),
    )


# --------------------------------------------------------------------------- parts
def _median_step(stamps: Array) -> float:
    steps = np.diff(stamps)
    steps = steps[steps > 0]
    return float(np.median(steps)) if steps.size else 0.0


def _binned_motion(traj: Trajectory, origin: float, step: float, size: int) -> tuple[Array, Array, Any]:
    """Speed and angular rate of ``traj`` averaged into bins ``origin + k * step``, and
    which bins the trajectory covers (between its first and last pose).

    Velocity vectors are averaged before their norm is taken: the mean of a bin's
    displacements over its time is the displacement across the bin, so measurement noise
    cancels instead of adding up as it does in the norms of single steps. Angular rates
    are the body-frame rotation vectors of consecutive poses, averaged the same way.
    """
    dt = np.diff(traj.stamps)
    moving = dt > 0  # a recorded file may repeat a stamp
    mid = 0.5 * (traj.stamps[1:] + traj.stamps[:-1])[moving]
    dt = dt[moving]
    displacement = np.diff(traj.positions, axis=0)[moving]
    rotations = Rotation.from_quat(traj.orientations)
    turn = (rotations[:-1].inv() * rotations[1:]).as_rotvec()[moving]
    bins = np.clip(((mid - origin) / step).astype(np.int64), 0, size - 1)
    time_in_bin = np.bincount(bins, weights=dt, minlength=size)
    filled = time_in_bin > 0
    velocity = np.stack([np.bincount(bins, weights=displacement[:, k], minlength=size) for k in range(3)], 1)
    rate = np.stack([np.bincount(bins, weights=turn[:, k], minlength=size) for k in range(3)], 1)
    speed = np.zeros(size)
    angular = np.zeros(size)
    speed[filled] = np.linalg.norm(velocity[filled], axis=1) / time_in_bin[filled]
    angular[filled] = np.linalg.norm(rate[filled], axis=1) / time_in_bin[filled]
    first, last = int(bins[0]), int(bins[-1])
    covered = np.zeros(size, dtype=bool)
    covered[first : last + 1] = True
    # bins inside the span that no step fell into (a sparse trajectory on a finer grid):
    # filled from their neighbours
    holes = covered & ~filled
    if holes.any():
        known = np.flatnonzero(filled)
        for values in (speed, angular):
            values[holes] = np.interp(np.flatnonzero(holes), known, values[known])
    return speed, angular, covered


def _check_motion(speed: Array, rate: Array) -> None:
    if np.std(speed) < MIN_SPEED_STD and np.std(rate) < MIN_RATE_STD:
        raise TimeOffsetError(
            "the ground truth does not move enough for a time offset to be seen (speed varies by "
            f"{np.std(speed):.4f} m/s, angular rate by {np.std(rate):.4f} rad/s; needs {MIN_SPEED_STD} or "
            f"{MIN_RATE_STD}); no offset applied"
        )


def _normalised_correlation(g: Array, g_mask: Any, e: Array, e_mask: Any) -> Array:
    """Pearson-like correlation of two standardised signals at every lag, divided by the
    number of bins where both exist (so a lag is not favoured for overlapping more)."""
    gs = np.where(g_mask, (g - g[g_mask].mean()) / max(float(g[g_mask].std()), 1e-12), 0.0)
    es = np.where(e_mask, (e - e[e_mask].mean()) / max(float(e[e_mask].std()), 1e-12), 0.0)
    products = correlate(gs, es, mode="full", method="fft")
    overlap = correlate(g_mask.astype(float), e_mask.astype(float), mode="full", method="fft")
    least = 0.1 * min(int(g_mask.sum()), int(e_mask.sum()))
    out: Array = np.where(overlap >= max(least, 3.0), products / np.maximum(overlap, 1.0), 0.0)
    return out


def _parabola_vertex(left: float, middle: float, right: float) -> float:
    """Where the parabola through (-1, left), (0, middle), (1, right) peaks, in -0.5..0.5."""
    curvature = left - 2.0 * middle + right
    if curvature >= 0.0:
        return 0.0
    return float(np.clip(0.5 * (left - right) / curvature, -0.5, 0.5))


def _ate_rmse(gt: Trajectory, est: Trajectory, offset: float, max_diff: float, method: str) -> float:
    times = est.stamps + offset
    rows, _ = nearest_indices(times, gt.stamps, max_diff)
    if rows.size < 3:
        return math.inf
    gt_pairs = interpolate(gt, times[rows])
    est_pairs = est.take(rows).with_stamps(times[rows])
    try:
        aligned = align(gt_pairs, est_pairs, method).apply(est_pairs)
    except TrajectoryInputError:
        return math.inf
    squared = np.sum((gt_pairs.positions - aligned.positions) ** 2, axis=1)
    return float(np.sqrt(np.mean(squared)))
