"""Pairs collected live (``mocap4r2 calibrate --online``), without ROS: the recent poses
of both streams in bounded buffers, what was left out, and a calibration when the motion
suffices (or the message saying what motion is still missing)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from mocap4r2_control.geometry import usable_pose

from ..trajectory.poses import TrajectoryInputError
from .solve import Calibration, CalibrationOptions, calibrate
from .streams import Stream, clean_stream

#: poses kept per stream at most (10 minutes at 200 Hz); older ones are forgotten
MAX_SAMPLES = 120_000

Sample = tuple[float, tuple[float, float, float], tuple[float, float, float, float]]


@dataclass(frozen=True)
class Attempt:
    """One try: the calibration, or why there is none yet (the motion or data missing)."""

    calibration: Calibration | None
    waiting_for: str


class PairCollector:
    """Both streams' recent poses, in arrival order (sorted by stamp when solved)."""

    def __init__(self, max_samples: int = MAX_SAMPLES):
        self.a: deque[Sample] = deque(maxlen=max_samples)
        self.b: deque[Sample] = deque(maxlen=max_samples)
        self.dropped_a = 0
        self.dropped_b = 0

    def add_a(self, stamp: float, position, orientation) -> bool:
        """Keep one pose of A; False (and counted) when it is not a usable pose."""
        return self._add(self.a, "a", stamp, position, orientation)

    def add_b(self, stamp: float, position, orientation) -> bool:
        return self._add(self.b, "b", stamp, position, orientation)

    def _add(self, samples: deque[Sample], which: str, stamp: float, position, orientation) -> bool:
        pose = usable_pose(position, orientation)
        if pose is None or not np.isfinite(stamp):
            if which == "a":
                self.dropped_a += 1
            else:
                self.dropped_b += 1
            return False
        p, q = pose
        samples.append((float(stamp), (float(p[0]), float(p[1]), float(p[2])), tuple(float(v) for v in q)))  # type: ignore[arg-type]
        return True

    def streams(self) -> tuple[Stream, Stream]:
        return _stream(self.a, "A", self.dropped_a), _stream(self.b, "B", self.dropped_b)

    def attempt(self, options: CalibrationOptions) -> Attempt:
        """Calibrate from what was collected, or say what is still missing."""
        if len(self.a) < 2 or len(self.b) < 2:
            return Attempt(None, f"poses: {len(self.a)} of A and {len(self.b)} of B so far")
        a, b = self.streams()
        try:
            return Attempt(calibrate(a, b, options), "")
        except TrajectoryInputError as exc:  # CalibrationError, or the association's refusal
            return Attempt(None, str(exc))


def _stream(samples: deque[Sample], name: str, dropped: int) -> Stream:
    rows = list(samples)
    stamps = np.fromiter((s[0] for s in rows), float, len(rows))
    positions = np.array([s[1] for s in rows], dtype=float).reshape(-1, 3)
    orientations = np.array([s[2] for s in rows], dtype=float).reshape(-1, 4)
    order = np.argsort(stamps, kind="stable")
    stream = clean_stream(stamps[order], positions[order], orientations[order], name)
    return Stream(stream.trajectory, stream.dropped + dropped, stream.total + dropped)
