"""The offline pipeline: (find the time offset,) associate, align, ATE, RPE; one call, one result."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from .alignment import Alignment, align
from .association import Association, associate
from .metrics import ErrorStats, ate_errors, rpe_errors, rpe_pairs
from .poses import Trajectory
from .time_offset import DEFAULT_WINDOW, TimeOffset, estimate_time_offset


@dataclass(frozen=True)
class EvalOptions:
    """How to evaluate: association, time offset, alignment, RPE step."""

    association: str = "nearest"  # nearest | interpolate
    max_diff: float = 0.01  # s
    offset: float = 0.0  # s, added to the estimate's stamps
    offset_auto: bool = False  # find the offset from the data (time_offset.py) instead
    offset_window: float = DEFAULT_WINDOW  # s, searched either way when offset_auto
    align: str = "se3"  # none | se3 | sim3 | posyaw | origin
    align_first_n: int = 0  # 0: align on every pair
    rpe_delta: float = 1.0
    rpe_unit: str = "frames"  # frames | m | s
    rpe_all_pairs: bool = False


@dataclass(frozen=True, eq=False)
class EvaluationResult:
    """Everything one evaluation computed, with the options it used (``options.offset``
    is the offset found when ``offset_auto``)."""

    options: EvalOptions
    association: Association
    alignment: Alignment
    est_aligned: Trajectory
    ate: npt.NDArray[np.float64]  # per pair, metres
    rpe_starts: npt.NDArray[np.int64]
    rpe_ends: npt.NDArray[np.int64]
    rpe_trans: npt.NDArray[np.float64]  # per step, metres
    rpe_rot: npt.NDArray[np.float64]  # per step, radians
    time_offset: TimeOffset | None = None  # what offset_auto found (options.offset is it then)
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
    found = None
    if options.offset_auto:
        found = estimate_time_offset(gt, est, options.offset_window, options.align)
        options = replace(options, offset=found.offset)
    pairs = associate(gt, est, options.max_diff, options.offset, options.association)
    alignment = align(pairs.gt, pairs.est, options.align, options.align_first_n)
    est_aligned = alignment.apply(pairs.est)
    ate = ate_errors(pairs.gt, est_aligned)
    starts, ends = rpe_pairs(pairs.gt, options.rpe_delta, options.rpe_unit, options.rpe_all_pairs)
    trans, rot = rpe_errors(pairs.gt, est_aligned, starts, ends)
    return EvaluationResult(options, pairs, alignment, est_aligned, ate, starts, ends, trans, rot, found)
