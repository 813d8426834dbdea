"""The offline pipeline: associate, align, ATE, RPE; one call, one result."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .alignment import Alignment, align
from .association import Association, associate
from .metrics import ErrorStats, ate_errors, rpe_errors, rpe_pairs
from .poses import Trajectory


@dataclass(frozen=True)
class EvalOptions:
    association: str = "nearest"  # nearest | interpolate
    max_diff: float = 0.01  # s
    offset: float = 0.0  # s, added to the estimate's stamps
    align: str = "se3"  # none | se3 | sim3 | posyaw | origin
    align_first_n: int = 0  # 0: align on every pair
    rpe_delta: float = 1.0
    rpe_unit: str = "frames"  # frames | m | s
    rpe_all_pairs: bool = False


@dataclass(frozen=True, eq=False)
class EvaluationResult:
    options: EvalOptions
    association: Association
    alignment: Alignment
    est_aligned: Trajectory
    ate: np.ndarray  # per pair, metres
    rpe_starts: np.ndarray
    rpe_ends: np.ndarray
    rpe_trans: np.ndarray  # per step, metres
    rpe_rot: np.ndarray  # per step, radians
    ate_stats: ErrorStats = field(init=False)
    rpe_trans_stats: ErrorStats = field(init=False)
    rpe_rot_stats: ErrorStats = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ate_stats", ErrorStats.of(self.ate))
        object.__setattr__(self, "rpe_trans_stats", ErrorStats.of(self.rpe_trans))
        object.__setattr__(self, "rpe_rot_stats", ErrorStats.of(self.rpe_rot))

    @property
    def gt(self) -> Trajectory:
        return self.association.gt

    @property
    def aligned(self) -> bool:
        return self.alignment.method != "none"


def evaluate(gt: Trajectory, est: Trajectory, options: EvalOptions = EvalOptions()) -> EvaluationResult:
    """ATE and RPE of ``est`` against ``gt``; TrajectoryInputError (AlignmentError) on input
    that cannot be evaluated, with the reason."""
    pairs = associate(gt, est, options.max_diff, options.offset, options.association)
    alignment = align(pairs.gt, pairs.est, options.align, options.align_first_n)
    est_aligned = alignment.apply(pairs.est)
    ate = ate_errors(pairs.gt, est_aligned)
    starts, ends = rpe_pairs(pairs.gt, options.rpe_delta, options.rpe_unit, options.rpe_all_pairs)
    trans, rot = rpe_errors(pairs.gt, est_aligned, starts, ends)
    return EvaluationResult(options, pairs, alignment, est_aligned, ate, starts, ends, trans, rot)
