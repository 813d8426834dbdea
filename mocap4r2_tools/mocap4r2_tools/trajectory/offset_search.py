"""The live search for an estimate's time offset (``trajectory_error``'s
``time_offset_auto``), without ROS: the recent samples of both streams, one search on
them at a time (:func:`~mocap4r2_tools.trajectory.time_offset.estimate_time_offset`), and
the value held once :data:`AUTO_STABLE` searches in a row agree within :data:`AUTO_AGREE` s.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

from .poses import Trajectory, TrajectoryInputError
from .time_offset import TimeOffset, estimate_time_offset

# seconds of both streams searched (and samples kept, at most), how many values in a row
# must agree, and within how much (s)
AUTO_SECONDS = 30.0
AUTO_SAMPLES = 30_000
AUTO_STABLE = 3
AUTO_AGREE = 0.001
#: seconds both streams must overlap before a search can see anything
MIN_OVERLAP = 5.0

Array = npt.NDArray[np.float64]
Sample = tuple[float, Array, Array]  # stamp, position, orientation (x, y, z, w)


class OffsetSearch:
    """Samples of the ground truth and the estimate kept for the search, and the values
    it found."""

    def __init__(self) -> None:
        self.gt: deque[Sample] = deque(maxlen=AUTO_SAMPLES)
        self.est: deque[Sample] = deque(maxlen=AUTO_SAMPLES)
        self.found: deque[float] = deque(maxlen=AUTO_STABLE)

    def keep_gt(self, stamp: float, pose: tuple[Array, Array]) -> None:
        _keep(self.gt, stamp, pose)

    def keep_est(self, stamp: float, pose: tuple[Array, Array]) -> None:
        _keep(self.est, stamp, pose)

    def search(self, window: float, align: str) -> TimeOffset | None:
        """One search on the samples kept; None while they are too few or overlap too
        little. Raises TrajectoryInputError when the data cannot give an offset (and
        forgets the values found so far, which must agree in a row)."""
        if len(self.gt) < 10 or len(self.est) < 10:
            return None
        gt, est = _trajectory(self.gt), _trajectory(self.est)
        overlap = min(gt.stamps[-1], est.stamps[-1]) - max(gt.stamps[0], est.stamps[0])
        if overlap < MIN_OVERLAP:
            return None
        try:
            found = estimate_time_offset(gt, est, window, align)
        except TrajectoryInputError:
            self.found.clear()
            raise
        self.found.append(found.offset)
        return found

    def agreed(self) -> float | None:
        """The median of the last values found once AUTO_STABLE of them agree, else None."""
        values = list(self.found)
        if len(values) == AUTO_STABLE and max(values) - min(values) <= AUTO_AGREE:
            return float(np.median(values))
        return None

    def take(self) -> tuple[list[Sample], list[Sample]]:
        """The samples kept (ground truth, estimate), forgotten here."""
        gt, est = list(self.gt), list(self.est)
        self.gt.clear()
        self.est.clear()
        return gt, est


def replay_order(gt: list[Sample], est: list[Sample], offset: float) -> list[tuple[float, int, Array, Array]]:
    """Both streams as (time, 0 for ground truth or 1 for estimate, position, orientation),
    in ground-truth time (estimate stamps plus ``offset``), as they would have arrived."""
    events = [(t, 0, p, q) for t, p, q in gt] + [(t + offset, 1, p, q) for t, p, q in est]
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def _keep(samples: deque[Sample], stamp: float, pose: tuple[Array, Array]) -> None:
    """Append a sample for the offset search: in time order only (a sample older than the
    last is left out, as the association leaves out ground truth out of order), and only
    the last AUTO_SECONDS."""
    if samples and stamp <= samples[-1][0]:
        return
    samples.append((stamp, *pose))
    while stamp - samples[0][0] > AUTO_SECONDS:
        samples.popleft()


def _trajectory(samples: deque[Sample]) -> Trajectory:
    stamps = np.fromiter((s[0] for s in samples), float, len(samples))
    positions = np.array([s[1] for s in samples], dtype=float)
    orientations = np.array([s[2] for s in samples], dtype=float)
    return Trajectory.build(stamps, positions, orientations)
