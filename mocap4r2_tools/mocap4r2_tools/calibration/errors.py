"""The one error the calibration core raises for input it cannot calibrate from."""

from __future__ import annotations

from ..trajectory.poses import TrajectoryInputError


class CalibrationError(TrajectoryInputError):
    """Input a calibration cannot come from (too few pairs, too little motion, streams
    that do not overlap, ...); the message says what is missing and what to add."""
