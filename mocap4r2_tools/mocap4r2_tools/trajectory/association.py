"""Association of an estimate with the ground truth by time.

Time base: an estimate stamp ``t`` corresponds to ground-truth time ``t + offset``
(``offset`` is a constant clock offset, e.g. a camera's exposure delay).

Two methods:
  * ``nearest``: each pose of the sparser trajectory is paired with the pose of the
    denser one nearest in time, if it is at most ``max_diff`` away (ties go to the
    earlier pose). Starting from the sparser side loses none of its poses and pairs
    no pose of it twice.
  * ``interpolate``: the ground truth is resampled at the estimate's stamps, positions
    linearly and orientations by slerp. An estimate stamp is used only when a ground
    truth pose lies within ``max_diff`` of it, so a gap in the ground truth (tracking
    loss) is never bridged; at the two ends the nearest ground truth pose is used.

:class:`StreamAssociator` does the same online, with bounded memory.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import quat_slerp, quat_slerp_one

from .poses import Trajectory, TrajectoryInputError

Array = npt.NDArray[np.float64]
IndexArray = npt.NDArray[np.intp]

METHODS = ("nearest", "interpolate")


@dataclass(frozen=True, eq=False)
class Association:
    """Pose pairs: row i of ``gt`` and row i of ``est`` belong together.

    ``gt.stamps`` are ground-truth times; ``est.stamps`` are the estimate's own stamps
    plus the offset, i.e. also in the ground-truth time base."""

    gt: Trajectory
    est: Trajectory
    gt_total: int
    est_total: int

    def __len__(self) -> int:
        return len(self.gt)


def associate(
    gt: Trajectory, est: Trajectory, max_diff: float = 0.01, offset: float = 0.0, method: str = "nearest"
) -> Association:
    """Pairs of ground truth and estimate poses; TrajectoryInputError when none match."""
    if method not in METHODS:
        raise TrajectoryInputError(f"unknown association {method!r} (one of {', '.join(METHODS)})")
    if not (max_diff >= 0.0 and np.isfinite(max_diff)):
        raise TrajectoryInputError(f"max_diff must be a finite number >= 0, not {max_diff}")
    if not np.isfinite(offset):
        raise TrajectoryInputError(f"offset must be finite, not {offset}")
    if len(gt) == 0 or len(est) == 0:
        raise TrajectoryInputError(
            f"nothing to associate: {len(gt)} ground truth and {len(est)} estimate poses"
        )
    est_times = est.stamps + offset
    if method == "nearest" and len(gt) < len(est):
        # ground truth is the sparser side: it looks for estimate poses
        gt_rows, est_rows = nearest_indices(gt.stamps, est_times, max_diff)
    else:
        est_rows, gt_rows = nearest_indices(est_times, gt.stamps, max_diff)
    if est_rows.size == 0:
        raise TrajectoryInputError(
            f"no estimate stamp is within max_diff={max_diff} s of a ground truth stamp (offset {offset} s): "
            f"ground truth spans [{gt.stamps[0]:.3f}, {gt.stamps[-1]:.3f}] s, estimate+offset "
            f"[{est_times[0]:.3f}, {est_times[-1]:.3f}] s"
        )
    est_pairs = est.take(est_rows).with_stamps(est_times[est_rows])
    gt_pairs = interpolate(gt, est_times[est_rows]) if method == "interpolate" else gt.take(gt_rows)
    return Association(gt_pairs, est_pairs, len(gt), len(est))


def nearest_indices(query: Array, reference: Array, max_diff: float) -> tuple[IndexArray, IndexArray]:
    """For each query stamp the nearest reference stamp within max_diff (both sorted).

    Returns (query rows, reference rows) of the accepted matches."""
    if reference.size == 0 or query.size == 0:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    after = np.searchsorted(reference, query, side="right")
    upper = np.minimum(after, reference.size - 1)
    lower = np.maximum(after - 1, 0)
    d_upper = np.abs(reference[upper] - query)
    d_lower = np.abs(query - reference[lower])
    pick = np.where(d_upper < d_lower, upper, lower)
    best = np.minimum(d_upper, d_lower)
    ok = best <= max_diff
    rows: IndexArray = pick[ok]
    return np.flatnonzero(ok), rows


def interpolate(traj: Trajectory, times: Array) -> Trajectory:
    """Poses of ``traj`` at ``times``: linear positions, slerp orientations, clamped to the ends.

    Where two rows share a stamp (recorded files do that), the interval between them has
    no length and the earlier row is used, as evo's PoseTrajectory3D.interpolate does."""
    times = np.asarray(times, dtype=np.float64)
    if len(traj) == 1:
        rows = np.zeros(times.shape[0], dtype=np.int64)
        return Trajectory(times, traj.positions[rows], traj.orientations[rows], traj.name)
    clamped = np.clip(times, traj.stamps[0], traj.stamps[-1])
    upper = np.clip(np.searchsorted(traj.stamps, clamped, side="left"), 1, len(traj) - 1)
    lower = upper - 1
    span = traj.stamps[upper] - traj.stamps[lower]
    frac = np.where(span > 0.0, (clamped - traj.stamps[lower]) / np.where(span > 0.0, span, 1.0), 0.0)
    frac = np.clip(frac, 0.0, 1.0)
    positions = traj.positions[lower] + frac[:, None] * (traj.positions[upper] - traj.positions[lower])
    # slerp per bracketing pair (only the intervals used, so a million-pose ground truth
    # sampled at a few thousand stamps costs only those), along the shorter arc
    orientations = quat_slerp(traj.orientations[lower], traj.orientations[upper], frac)
    return Trajectory(times, positions, orientations, traj.name)


# --------------------------------------------------------------------------- online
@dataclass(frozen=True)
class PosePair:
    """A ground-truth pose and the estimated pose associated with it, stamped with the ground-truth time."""

    stamp: float  # ground-truth time
    gt_position: Array  # (3,)
    gt_orientation: Array  # (4,) x, y, z, w
    est_position: Array
    est_orientation: Array


class StreamAssociator:
    """Online association with bounded memory.

    Ground truth is kept for ``horizon`` seconds (and at most ``max_gt`` samples); an
    estimate sample waits (at most ``max_pending``) until the ground truth has passed its
    time, so a slow ground-truth stream does not lose estimates, and an estimate that
    arrives late is still matched against the kept history. Every add is amortised O(1)
    plus a binary search.
    """

    def __init__(
        self,
        *,
        max_diff: float = 0.01,
        offset: float = 0.0,
        method: str = "nearest",
        horizon: float = 5.0,
        max_gt: int = 100_000,
        max_pending: int = 1000,
    ):
        if method not in METHODS:
            raise ValueError(f"unknown association {method!r} (one of {', '.join(METHODS)})")
        self.max_diff = float(max_diff)
        self.offset = float(offset)
        self.method = method
        self.horizon = float(horizon)
        self.max_gt = int(max_gt)
        self._t: list[float] = []
        self._p: list[Array] = []
        self._q: list[Array] = []
        self._start = 0  # rows before it are expired (compacted lazily, amortised O(1))
        self._pending: deque[tuple[float, Array, Array]] = deque(maxlen=max_pending)
        self.gt_out_of_order = 0
        self.est_unmatched = 0
        self.est_dropped_pending = 0

    def reset(self) -> None:
        """Forget every sample and counter (the configuration stays)."""
        self._t.clear()
        self._p.clear()
        self._q.clear()
        self._start = 0
        self._pending.clear()
        self.gt_out_of_order = self.est_unmatched = self.est_dropped_pending = 0

    # ------------------------------------------------------------------ input
    def add_gt(self, stamp: float, position: Array, orientation: Array) -> list[PosePair]:
        if self._start < len(self._t) and stamp <= self._t[-1]:
            self.gt_out_of_order += 1
            return []
        self._t.append(stamp)
        self._p.append(position)
        self._q.append(orientation)
        self._expire(stamp)
        return self._drain()

    def add_est(self, stamp: float, position: Array, orientation: Array) -> list[PosePair]:
        if len(self._pending) == self._pending.maxlen:
            self.est_dropped_pending += 1
        self._pending.append((stamp + self.offset, position, orientation))
        return self._drain()

    # ------------------------------------------------------------------ internals
    def _expire(self, newest: float) -> None:
        start = self._start
        limit = len(self._t)
        # keep at least two samples so interpolation can bracket
        while start < limit - 2 and (newest - self._t[start] > self.horizon or limit - start > self.max_gt):
            start += 1
        self._start = start
        if start > 4096 and start * 2 > limit:
            del self._t[:start], self._p[:start], self._q[:start]
            self._start = 0

    def _drain(self) -> list[PosePair]:
        pairs: list[PosePair] = []
        while self._pending:
            t, p, q = self._pending[0]
            if self._start >= len(self._t):
                break
            # until ground truth has passed t, a later sample could still be the nearer one
            if self._t[-1] < t:
                break
            self._pending.popleft()
            pair = self._match(t, p, q)
            if pair is None:
                self.est_unmatched += 1
            else:
                pairs.append(pair)
        return pairs

    def _match(self, t: float, p: Array, q: Array) -> PosePair | None:
        times = self._t
        after = bisect.bisect_right(times, t, self._start)
        candidates = [i for i in (after - 1, after) if self._start <= i < len(times)]
        if not candidates:
            return None
        best = min(candidates, key=lambda i: (abs(times[i] - t), i))
        if abs(times[best] - t) > self.max_diff:
            return None
        if self.method == "nearest" or len(candidates) < 2:
            return PosePair(times[best], self._p[best], self._q[best], p, q)
        lo, hi = candidates
        frac = (t - times[lo]) / (times[hi] - times[lo])
        position = self._p[lo] + frac * (self._p[hi] - self._p[lo])
        orientation = np.array(quat_slerp_one(self._q[lo], self._q[hi], frac))
        return PosePair(t, position, orientation, p, q)
