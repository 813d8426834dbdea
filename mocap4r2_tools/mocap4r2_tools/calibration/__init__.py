"""Calibration core: where a camera, a robot or a second mocap system sits in the mocap
frame, with its uncertainty (`mocap4r2 calibrate`).

Pure numpy/scipy (no rclpy), like :mod:`mocap4r2_tools.trajectory`, whose readers,
interpolating association and time-offset search it reuses. Problems: hand-eye
``A X = X B``, robot-world ``A X = Y B`` and frame to frame ``A = X B``; a closed-form
start, a robust refinement on SE(3) over all pairs with the time offset between the
streams, the covariance checked by a bootstrap, and a motion check that refuses too
little rotation with the motion to add. Quaternions x, y, z, w; metres; seconds.
"""

from .errors import CalibrationError
from .solve import KINDS, Calibration, CalibrationOptions, calibrate
from .streams import Stream, clean_stream, from_trajectory

__all__ = [
    "KINDS",
    "Calibration",
    "CalibrationError",
    "CalibrationOptions",
    "Stream",
    "calibrate",
    "clean_stream",
    "from_trajectory",
]
