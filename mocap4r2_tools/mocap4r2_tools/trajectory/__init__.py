"""Trajectory error core: association, alignment, ATE/RPE, online running sums, I/O.

Pure numpy/scipy (no rclpy): the `trajectory_error` node, the `mocap4r2 eval` command
and the tests share it. Quaternions are x, y, z, w; metres; seconds.
"""

from .alignment import Alignment, AlignmentError, PointMoments, align, solve
from .association import Association, StreamAssociator, associate
from .evaluation import EvalOptions, EvaluationResult, evaluate
from .metrics import ErrorStats, ate_errors, rpe_errors, rpe_pairs
from .poses import Trajectory, TrajectoryInputError
from .running import RunningATE, RunningMoments, RunningRPE

__all__ = [
    "Alignment",
    "AlignmentError",
    "Association",
    "ErrorStats",
    "EvalOptions",
    "EvaluationResult",
    "PointMoments",
    "RunningATE",
    "RunningMoments",
    "RunningRPE",
    "StreamAssociator",
    "Trajectory",
    "TrajectoryInputError",
    "align",
    "associate",
    "ate_errors",
    "evaluate",
    "rpe_errors",
    "rpe_pairs",
    "solve",
]
