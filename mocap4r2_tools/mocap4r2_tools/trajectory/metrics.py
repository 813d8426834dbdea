"""ATE and RPE on associated (and aligned) pose pairs, and their statistics.

Definitions (Sturm et al. 2012, "A benchmark for the evaluation of RGB-D SLAM systems",
and Zhang & Scaramuzza 2018), with ground truth poses Q_i and estimate poses P_i:

* ATE: |t(Q_i) - t(S P_i)| per pair, S the alignment; translation only, metres.
* RPE over a step i -> j: E = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j); translation error |t(E)| in
  metres and rotation error angle(R(E)) in radians. Since |t(E)| equals
  |R(P_i)^T (p_j - p_i) - R(Q_i)^T (q_j - q_i)|, both are computed from positions and
  quaternions without forming 4x4 matrices.

The step comes from the ground truth (frames, metres travelled or seconds elapsed):
* consecutive pairs: starting at 0, j is the first pose at least ``delta`` after i,
  then i = j (for frames exactly ``delta`` rows);
* all pairs: every i paired with the pose nearest to ``delta`` after it, kept when it
  is within ``tolerance * delta`` (for frames: every i with i + delta).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import FloatArray, norm3, quat_angle, quat_multiply, quat_rotate, row_norms

from .poses import Trajectory, TrajectoryInputError

RPE_UNITS = ("frames", "m", "s")
IndexArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ErrorStats:
    """Summary statistics of per-pair errors (evo's names)."""

    count: int
    rmse: float
    mean: float
    median: float
    std: float
    min: float
    max: float
    sse: float

    @classmethod
    def of(cls, errors: FloatArray) -> ErrorStats:
        errors = np.asarray(errors, dtype=np.float64)
        if errors.size == 0:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        sse = float(np.dot(errors, errors))
        return cls(
            int(errors.size),
            float(np.sqrt(sse / errors.size)),
            float(np.mean(errors)),
            float(np.median(errors)),
            float(np.std(errors)),
            float(np.min(errors)),
            float(np.max(errors)),
            sse,
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def ate_errors(gt: Trajectory, est_aligned: Trajectory) -> FloatArray:
    """Per-pair position error |t(Q_i) - t(S P_i)|, metres."""
    if len(gt) != len(est_aligned):
        raise TrajectoryInputError(f"{len(est_aligned)} estimate poses for {len(gt)} ground truth poses")
    return row_norms(gt.positions - est_aligned.positions)


def rpe_pairs(
    gt: Trajectory, delta: float, unit: str = "frames", all_pairs: bool = False, tolerance: float = 0.1
) -> tuple[IndexArray, IndexArray]:
    """Index pairs (i, j) of the RPE step, chosen on the ground truth."""
    if unit not in RPE_UNITS:
        raise TrajectoryInputError(f"unknown RPE unit {unit!r} (one of {', '.join(RPE_UNITS)})")
    if not (np.isfinite(delta) and delta > 0):
        raise TrajectoryInputError(f"RPE delta must be > 0, not {delta}")
    n = len(gt)
    if unit == "frames":
        if float(delta) != int(delta):
            raise TrajectoryInputError(f"an RPE delta in frames must be a whole number, not {delta}")
        step = int(delta)
        starts = np.arange(0, n - step) if all_pairs else np.arange(0, n - step, step)
        return starts, starts + step
    if unit == "m":
        coordinate = np.concatenate(([0.0], np.cumsum(row_norms(np.diff(gt.positions, axis=0)))))
    else:
        coordinate = gt.stamps - gt.stamps[0] if n else gt.stamps
    if all_pairs:
        return _nearest_pairs(coordinate, float(delta), tolerance * float(delta))
    return _consecutive_pairs(coordinate, float(delta))


def _consecutive_pairs(coordinate: FloatArray, delta: float) -> tuple[IndexArray, IndexArray]:
    starts, ends = [], []
    i = 0
    n = coordinate.shape[0]
    while i < n:
        j = int(np.searchsorted(coordinate, coordinate[i] + delta, side="left"))
        j = max(j, i + 1)
        if j >= n:
            break
        starts.append(i)
        ends.append(j)
        i = j
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def _nearest_pairs(coordinate: FloatArray, delta: float, tol: float) -> tuple[IndexArray, IndexArray]:
    """For each i the j > i whose coordinate is nearest to coordinate[i] + delta (the
    first of equals), kept when within tol; coordinate is non-decreasing."""
    n = coordinate.shape[0]
    if n < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    starts = np.arange(n - 1)
    target = coordinate[starts] + delta
    upper = np.maximum(np.searchsorted(coordinate, target, side="left"), starts + 1)
    upper_ok = upper < n
    upper = np.minimum(upper, n - 1)
    below = np.where(upper_ok, upper - 1, n - 1)  # last row before the target
    lower_ok = below > starts
    # the first row after i holding that value (static stretches repeat a coordinate)
    lower = np.maximum(np.searchsorted(coordinate, coordinate[below], side="left"), starts + 1)
    d_upper = np.where(upper_ok, np.abs(coordinate[upper] - target), np.inf)
    d_lower = np.where(lower_ok, np.abs(coordinate[lower] - target), np.inf)
    ends = np.where(d_lower <= d_upper, lower, upper)
    best = np.minimum(d_lower, d_upper)
    keep = best <= tol
    return starts[keep], ends[keep]


def rpe_errors(
    gt: Trajectory, est: Trajectory, starts: IndexArray, ends: IndexArray
) -> tuple[FloatArray, FloatArray]:
    """Translation (m) and rotation (rad) error of each step."""
    if len(gt) != len(est):
        raise TrajectoryInputError(f"{len(est)} estimate poses for {len(gt)} ground truth poses")
    if starts.size == 0:
        return np.zeros(0), np.zeros(0)
    # plain vectorised quaternion algebra (~10x faster than scipy Rotation objects on a
    # million steps, same results to rounding), on (4, m) / (3, m) copies passed as their
    # transposed views, so that every operation runs along contiguous rows rather than
    # down the columns of (m, 4) arrays (the rotation functions keep that layout)
    q_i, q_j = _columns(gt.orientations, starts, ends)
    p_i, p_j = _columns(est.orientations, starts, ends)
    gt_i, gt_j = _columns(gt.positions, starts, ends)
    est_i, est_j = _columns(est.positions, starts, ends)
    q_i[:3] *= -1.0  # the inverses (unit quaternions: conjugates), in place
    p_i[:3] *= -1.0
    rel_gt_t = quat_rotate(q_i.T, (gt_j - gt_i).T).T
    rel_est_t = quat_rotate(p_i.T, (est_j - est_i).T).T
    diff = rel_est_t - rel_gt_t
    trans = norm3(diff.T)
    rel_gt_r = quat_multiply(q_i.T, q_j.T).T
    rel_gt_r[:3] *= -1.0
    error = quat_multiply(rel_gt_r.T, quat_multiply(p_i.T, p_j.T))
    return trans, quat_angle(error)


def _columns(values: FloatArray, starts: IndexArray, ends: IndexArray) -> tuple[FloatArray, FloatArray]:
    """Rows ``starts`` and ``ends`` of (n, k) ``values`` as two C-ordered (k, m) arrays
    (np.array would keep the transposed layout: each component a strided column)."""
    columns = values.T
    if _is_step(starts) and _is_step(ends):  # consecutive pairs: slices, no index gathering
        step = int(starts[1] - starts[0]) if starts.size > 1 else 1
        return (
            np.ascontiguousarray(columns[:, starts[0] : starts[-1] + 1 : step]),
            np.ascontiguousarray(columns[:, ends[0] : ends[-1] + 1 : step]),
        )
    return np.ascontiguousarray(columns[:, starts]), np.ascontiguousarray(columns[:, ends])


def _is_step(rows: IndexArray) -> bool:
    if rows.size < 3:
        return rows.size == 1 or (rows.size == 2 and rows[1] > rows[0])
    steps = np.diff(rows)
    return bool(steps[0] > 0 and (steps == steps[0]).all())
