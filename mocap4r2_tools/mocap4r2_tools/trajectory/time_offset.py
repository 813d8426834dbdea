"""The time offset between an estimate and the ground truth, found from the data.

An estimate and a mocap ground truth rarely share a clock: a camera's exposure delay, a
filter's lag, a log stamped on arrival. The offset found here is the number of seconds
to *add to the estimate's stamps* so that they are ground-truth times (the ``offset`` of
:mod:`.association`).

Two steps:

1. **Coarse**: the speed and the angular rate of each trajectory, which do not depend on
   the frames the two are expressed in (so no alignment is needed yet), are averaged into
   bins of a common time grid, standardised, and cross-correlated (FFT) over lags within
   ``±window``. The bins are as fine as the sparser trajectory allows; the signals are
   then averaged over several widths, from one bin up by factors of 4 (a wider average
   cancels more measurement noise: a 1 kHz estimate with 1 cm noise has speeds of metres
   per second between single samples), and the width whose correlation peaks highest is
   kept. The lag of that peak, refined by a parabola through its
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
from scipy.ndimage import uniform_filter1d
from scipy.optimize import minimize_scalar
from scipy.signal import correlate, correlation_lags

from mocap4r2_control.rotation import quat_relative

from .alignment import align
from .association import nearest_indices
from .poses import Trajectory, TrajectoryInputError

Array = npt.NDArray[np.float64]

DEFAULT_WINDOW = 1.0  # s, either way
MAX_GRID = 1 << 18  # bins of the coarse grid at most (the FFT's size)
MIN_BIN = 0.002  # s: finer bins only add noise to the coarse step
FINE_POSES = 20_000  # estimate poses the fine search evaluates at most
MIN_CORRELATION = 0.3  # a coarse peak below this is not a match
MIN_LAGS = 4  # bins of the coarse grid within the window, at least
MIN_AVERAGES = 20  # the widest average is a twentieth of the time both span
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
    first = min(gt.stamps[0], est.stamps[0]) - window
    span = max(gt.stamps[-1], est.stamps[-1]) - first + window
    base = max(gt_step, est_step, MIN_BIN, span / MAX_GRID)
    if window / base < MIN_LAGS:
        raise TimeOffsetError(
            f"a search window of ±{window:g} s is less than {MIN_LAGS} steps of the sparser trajectory "
            f"({base:.4g} s)"
        )
    size = int(math.ceil(span / base)) + 1
    gt_bins = _binned(_motion_steps(gt), first, base, size)
    est_bins = _binned(_motion_steps(est), first, base, size)
    best: _Peak | None = None
    width = 1
    while width == 1 or width * base <= span / MIN_AVERAGES:
        peak = _correlation_peak(gt_bins, est_bins, base, width, window)
        if best is None or peak.correlation > best.correlation:
            best = peak
        width *= 4
    assert best is not None  # the first width always runs
    if not best.correlation >= MIN_CORRELATION:
        raise TimeOffsetError(
            f"the motion of the estimate matches the ground truth's at no offset within ±{window:g} s "
            f"(best correlation of {' and '.join(best.signals)} {best.correlation:.2f}, needs "
            f"{MIN_CORRELATION}); no offset applied"
        )
    if best.at_edge:
        raise TimeOffsetError(
            f"the best offset lies at the edge of the search window ({best.offset:+.3f} s of ±{window:g} s): "
            "it may be beyond it; widen the window. No offset applied"
        )
    coarse, step, peak_value, signals = best.offset, best.step, best.correlation, best.signals
    # the fine search goes as far as the coarse step may be off: a bin or two, more where
    # the signals were averaged over a long time
    radius = 2.0 * step + 0.25 * best.averaged

    search = align_method if align_method in SEARCH_ALIGNMENTS else "se3"
    fine_est = est.take(np.linspace(0, len(est) - 1, min(len(est), FINE_POSES)).round().astype(np.int64))

    def ate(offset: float) -> float:
        return _ate_rmse(gt, fine_est, offset, max_diff, search)

    found = minimize_scalar(
        ate, bounds=(coarse - radius, coarse + radius), args=(), method="bounded", options={"xatol": 1e-5}
    )
    offset = float(found.x)
    return TimeOffset(
        offset=offset,
        coarse=float(coarse),
        correlation=peak_value,
        bin=float(step),
        window=float(window),
        ate_rmse=float(found.fun),
        poses=len(fine_est),
        signals=signals,
    )


# --------------------------------------------------------------------------- parts
def _median_step(stamps: Array) -> float:
    steps = np.diff(stamps)
    steps = steps[steps > 0]
    return float(np.median(steps)) if steps.size else 0.0


@dataclass(frozen=True)
class _Motion:
    """Per step between consecutive poses: mid time, duration, displacement, body-frame
    rotation vector."""

    mid: Array
    dt: Array
    displacement: Array
    turn: Array


@dataclass(frozen=True)
class _Peak:
    offset: float  # s
    correlation: float
    step: float  # s, the bin width
    averaged: float  # s, the width the signals were averaged over
    at_edge: bool
    signals: tuple[str, ...]


@dataclass(frozen=True)
class _Bins:
    """Sums per bin: time, displacement (k, 3), body rotation vector (k, 3); and the
    bins between the trajectory's first and last pose."""

    time: Array
    displacement: Array
    turn: Array
    covered: Any


def _motion_steps(traj: Trajectory) -> _Motion:
    dt = np.diff(traj.stamps)
    moving = dt > 0  # a recorded file may repeat a stamp
    q = traj.orientations
    return _Motion(
        mid=(0.5 * (traj.stamps[1:] + traj.stamps[:-1]))[moving],
        dt=dt[moving],
        displacement=np.diff(traj.positions, axis=0)[moving],
        turn=quat_relative(q[:-1], q[1:])[moving],
    )


def _binned(motion: _Motion, origin: float, step: float, size: int) -> _Bins:
    bins = np.clip(((motion.mid - origin) / step).astype(np.int64), 0, size - 1)
    covered = np.zeros(size, dtype=bool)
    covered[int(bins[0]) : int(bins[-1]) + 1] = True
    return _Bins(
        time=np.bincount(bins, weights=motion.dt, minlength=size).astype(np.float64),
        displacement=np.stack(
            [np.bincount(bins, weights=motion.displacement[:, k], minlength=size) for k in range(3)], 1
        ),
        turn=np.stack([np.bincount(bins, weights=motion.turn[:, k], minlength=size) for k in range(3)], 1),
        covered=covered,
    )


def _rates(bins: _Bins, width: int) -> tuple[Array, Array]:
    """Speed and angular rate averaged over ``width`` bins around each bin.

    Velocity vectors are averaged before their norm is taken: the sum of displacements
    over a stretch of time is the displacement across it, so measurement noise cancels
    instead of adding up as it does in the norms of single steps. Angular rates are the
    body-frame rotation vectors of consecutive poses, summed the same way. Bins inside the
    span that no step fell into (a sparse trajectory on a finer grid) are filled from
    their neighbours.
    """
    time = uniform_filter1d(bins.time, width, mode="constant")
    displacement = uniform_filter1d(bins.displacement, width, axis=0, mode="constant")
    turn = uniform_filter1d(bins.turn, width, axis=0, mode="constant")
    filled = time > 1e-12
    speed = np.zeros(time.size)
    angular = np.zeros(time.size)
    speed[filled] = np.linalg.norm(displacement[filled], axis=1) / time[filled]
    angular[filled] = np.linalg.norm(turn[filled], axis=1) / time[filled]
    holes = bins.covered & ~filled
    if holes.any():
        known = np.flatnonzero(filled)
        for values in (speed, angular):
            values[holes] = np.interp(np.flatnonzero(holes), known, values[known])
    return speed, angular


def _correlation_peak(gt: _Bins, est: _Bins, step: float, width: int, window: float) -> _Peak:
    """The best lag within ±window of the motion signals averaged over ``width`` bins."""
    size = gt.time.size
    lags = int(math.ceil(window / step))
    gt_speed, gt_rate = _rates(gt, width)
    est_speed, est_rate = _rates(est, width)
    gt_mask, est_mask = gt.covered, est.covered
    if width == 1:
        _check_motion(gt_speed[gt_mask], gt_rate[gt_mask])
    signals: list[str] = []
    score = np.zeros(2 * size - 1)
    for name, g, e, floor in (
        ("speed", gt_speed, est_speed, MIN_SPEED_STD),
        ("angular rate", gt_rate, est_rate, MIN_RATE_STD),
    ):
        if np.std(g[gt_mask]) < floor:
            continue  # this ground truth does not vary in it: it would only add noise
        score += _normalised_correlation(g, gt_mask, e, est_mask)
        signals.append(name)
    if not signals:
        return _Peak(0.0, 0.0, step, width * step, False, ())
    score /= len(signals)
    # lag L of correlate(gt, est) pairs gt[k + L] with est[k]: est at time t belongs to
    # the ground truth at t + L * step, so L * step is the offset
    lag_values = correlation_lags(size, size)
    candidates = np.flatnonzero(np.abs(lag_values) <= lags)
    best = int(candidates[np.argmax(score[candidates])])
    lag = int(lag_values[best])
    vertex = _parabola_vertex(score[best - 1], score[best], score[best + 1]) if abs(lag) < lags else 0.0
    return _Peak(
        (lag + vertex) * step, float(score[best]), step, width * step, abs(lag) >= lags - 1, tuple(signals)
    )


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
    """ATE rmse of ``est`` moved by ``offset`` against the ground truth interpolated at its
    stamps, after ``method`` alignment. Positions only: the ATE is translational, and the
    alignments searched with fit positions alone."""
    times = est.stamps + offset
    rows, _ = nearest_indices(times, gt.stamps, max_diff)
    if rows.size < 3:
        return math.inf
    at = times[rows]
    upper = np.clip(np.searchsorted(gt.stamps, at, side="left"), 1, len(gt) - 1)
    lower = upper - 1
    span = gt.stamps[upper] - gt.stamps[lower]
    frac = np.clip((at - gt.stamps[lower]) / np.where(span > 0.0, span, 1.0), 0.0, 1.0)
    gt_positions = gt.positions[lower] + frac[:, None] * (gt.positions[upper] - gt.positions[lower])
    orientations = est.orientations[rows]  # not used by these alignments
    gt_pairs = Trajectory(at, gt_positions, orientations)
    est_pairs = Trajectory(at, est.positions[rows], orientations)
    try:
        aligned = align(gt_pairs, est_pairs, method).apply_positions(est_pairs.positions)
    except TrajectoryInputError:
        return math.inf
    squared = np.sum((gt_positions - aligned) ** 2, axis=1)
    return float(np.sqrt(np.mean(squared)))
