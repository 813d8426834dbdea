"""One calibration from two pose streams: the steps in order, each said in the result.

1. the time offset's start: given, or found by the trajectory tools' ``offset auto``
   (speed and angular rate cross-correlated, then refined; trajectory/time_offset.py),
   which needs no transform between the streams;
2. pairs by the interpolating association at that offset (:mod:`.streams`);
3. the motion check (:mod:`.motion`): too few pairs or too little rotation is refused;
4. the closed-form start (:mod:`.closed_form`), solved again without the pairs its own
   residuals mark as gross outliers (a start dragged by outliers can put the robust
   refinement in the wrong basin);
5. the joint refinement of X (and Y) and the offset, with uncertainty (:mod:`.refine`).

Problem kinds and what A and B are (each a pose stream, ``A_i`` the pose of stream A at
the time of ``B_i``):

* ``hand_eye``: ``A X = X B`` on relative motions. A: the flange in the robot base (or a
  drone body in the mocap frame), B: the tool (camera) in its own fixed frame (mocap, a
  calibration target, SLAM map); X: the tool (camera) in the flange (body) frame.
* ``robot_world``: ``A X = Y B``. A: flange in robot base, B: tracked tool in the mocap
  frame; X: tool in flange, Y: the mocap frame in the robot base.
* ``frame_to_frame``: ``A = X B``. A and B: one body seen by two systems; X: B's frame in
  A's frame.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from mocap4r2_control.geometry import Transform

from ..trajectory.time_offset import DEFAULT_WINDOW, TimeOffsetError, estimate_time_offset
from . import closed_form
from .blas import one_blas_thread
from .errors import CalibrationError
from .motion import MIN_ROTATION_DEG, check_motion
from .refine import LOSSES, Problem, Refined, refine, robust_scales
from .streams import PairSet, Stream, check_overlap, make_pairs, median_step
from .tangent import difference

KINDS = ("hand_eye", "robot_world", "frame_to_frame")
DEFAULT_MAX_PAIRS = 2000
TRIM_SIGMAS = 5.0  # the start's second solve leaves out pairs beyond this many robust sigmas


@dataclass(frozen=True)
class CalibrationOptions:
    """How to calibrate; the defaults suit a recording of a minute or two."""

    kind: str = "hand_eye"
    offset: float | None = None  # s added to B's stamps; None: found (offset auto)
    estimate_offset: bool = True  # refine the offset jointly (from the given one, too)
    offset_window: float = DEFAULT_WINDOW  # s either way, for offset auto
    offset_bound: float = 0.1  # s the refinement may move the offset from its start
    max_gap: float | None = None  # s; default 2.5 x A's median step
    max_pairs: int = DEFAULT_MAX_PAIRS
    loss: str = "cauchy"
    bootstrap: int = 200
    min_rotation_deg: float = MIN_ROTATION_DEG
    seed: int = 0


@dataclass(frozen=True, eq=False)
class Calibration:
    """The answer, its uncertainty and how it was found."""

    kind: str
    x: Transform
    y: Transform | None
    offset: float  # s added to B's stamps
    refined: Refined
    start_x: Transform
    start_y: Transform | None
    start_offset: float
    offset_found_by: str  # "given", "auto" or "none found, started from 0"
    pairs: PairSet
    trimmed: int  # pairs the closed form's second solve left out
    dropped_a: int  # rows of A that were NaN/untracked
    dropped_b: int
    solve_s: float
    notes: tuple[str, ...] = field(default=())

    @property
    def outliers(self) -> int:
        return int(self.refined.outliers.sum())


def calibrate(a: Stream, b: Stream, options: CalibrationOptions | None = None) -> Calibration:
    """Calibrate ``options.kind`` from streams A and B (see the module doc)."""
    with one_blas_thread():
        return _calibrate(a, b, options or CalibrationOptions())


def _calibrate(a: Stream, b: Stream, options: CalibrationOptions) -> Calibration:
    began = time.perf_counter()
    _check_options(options)
    ta, tb = a.trajectory, b.trajectory
    for label, stream in (("A", a), ("B", b)):
        if len(stream.trajectory) < 2:
            raise CalibrationError(
                f"stream {label} ({stream.name or 'unnamed'}) has {len(stream.trajectory)} usable poses "
                f"({stream.dropped} of {stream.total} left out as NaN or untracked): too few"
            )
    notes: list[str] = []
    if options.offset is not None:
        start_offset, found_by = float(options.offset), "given"
    else:
        if _far_apart(ta.stamps, tb.stamps, options.offset_window):
            check_overlap(ta, tb, 0.0)
        try:
            start_offset = estimate_time_offset(ta, tb, options.offset_window).offset
            found_by = "auto"
        except TimeOffsetError as exc:
            start_offset, found_by = 0.0, "none found, started from 0"
            notes.append(f"offset auto found no offset ({exc}); the refinement started from 0 s")
    max_gap = options.max_gap if options.max_gap is not None else 2.5 * max(median_step(ta.stamps), 1e-4)
    pairs = make_pairs(ta, tb, start_offset, max_gap, options.max_pairs)
    check_motion(options.kind, len(pairs), pairs.a, ta.name or "stream A", options.min_rotation_deg)
    motions = closed_form.motion_pairs(len(pairs)) if options.kind == "hand_eye" else None
    start_x, start_y, trimmed = _robust_start(options.kind, pairs, motions)
    if options.kind == "hand_eye":  # refined as A X = Y B, Y (B's fixed frame in A's) a nuisance
        start_y = closed_form.frame_to_frame(pairs.a * start_x, pairs.b)
    problem = Problem(
        kind=options.kind,
        pairs=pairs,
        a_stream=ta,
        estimate_offset=options.estimate_offset,
        offset_bound=options.offset_bound,
    )
    refined = refine(
        problem, start_x, start_y, loss=options.loss, bootstrap=options.bootstrap, seed=options.seed
    )
    if options.estimate_offset and abs(refined.offset - start_offset) > 0.98 * options.offset_bound:
        notes.append(
            f"the offset reached the edge of its search ({refined.offset - start_offset:+.3f} s from "
            f"{start_offset:+.3f} s): it may lie beyond; give --offset near it"
        )
    if a.dropped or b.dropped:
        notes.append(
            f"left out as NaN or untracked: {a.dropped} of {a.total} poses of A, "
            f"{b.dropped} of {b.total} of B"
        )
    return Calibration(
        kind=options.kind,
        x=refined.x,
        y=refined.y,
        offset=refined.offset,
        refined=refined,
        start_x=start_x,
        start_y=start_y,
        start_offset=start_offset,
        offset_found_by=found_by,
        pairs=pairs,
        trimmed=trimmed,
        dropped_a=a.dropped,
        dropped_b=b.dropped,
        solve_s=time.perf_counter() - began,
        notes=tuple(notes),
    )


def closed_form_start(kind: str, pairs: PairSet, motions=None) -> tuple[Transform, Transform | None]:
    """The closed-form (X, Y) of ``kind`` on ``pairs`` (Y None but for robot_world)."""
    if kind == "frame_to_frame":
        return closed_form.frame_to_frame(pairs.a, pairs.b), None
    if kind == "robot_world":
        return closed_form.robot_world(pairs.a, pairs.b)
    i, j = motions if motions is not None else closed_form.motion_pairs(len(pairs))
    a_rel = closed_form.relative_motions(pairs.a, i, j)
    b_rel = closed_form.relative_motions(pairs.b, i, j)
    return closed_form.hand_eye(a_rel, b_rel), None


def _robust_start(kind: str, pairs: PairSet, motions) -> tuple[Transform, Transform | None, int]:
    x, y = closed_form_start(kind, pairs, motions)
    if kind == "robot_world":
        assert y is not None
        raw = difference(pairs.a * x, y * pairs.b)
    elif kind == "frame_to_frame":
        raw = difference(pairs.a, x * pairs.b)
    else:
        i, j = motions
        a_rel = closed_form.relative_motions(pairs.a, i, j)
        b_rel = closed_form.relative_motions(pairs.b, i, j)
        raw = difference(a_rel * x, x * b_rel)
    rot, trans = robust_scales(raw)
    score = np.maximum(np.abs(raw[:, 0:3]).max(axis=1) / rot, np.abs(raw[:, 3:6]).max(axis=1) / trans)
    keep = score <= TRIM_SIGMAS
    if keep.all() or keep.sum() < max(3, keep.size // 2):
        return x, y, 0
    if kind == "hand_eye":
        i, j = motions
        x2, y2 = closed_form_start(kind, pairs, (i[keep], j[keep]))
    else:
        x2, y2 = closed_form_start(kind, pairs.take(np.flatnonzero(keep)))
    return x2, y2, int((~keep).sum())


def _far_apart(a: np.ndarray, b: np.ndarray, window: float) -> bool:
    """Whether the streams are further apart in time than offset auto could bridge."""
    return bool(min(a[-1], b[-1]) - max(a[0], b[0]) < -window)


def _check_options(options: CalibrationOptions) -> None:
    if options.kind not in KINDS:
        raise CalibrationError(f"unknown problem {options.kind!r} (one of {', '.join(KINDS)})")
    if options.loss not in LOSSES:
        raise CalibrationError(f"unknown loss {options.loss!r} (one of {', '.join(LOSSES)})")
    if options.offset is not None and not math.isfinite(options.offset):
        raise CalibrationError(f"the offset must be a finite number of seconds, not {options.offset}")
    for name, value in (("offset window", options.offset_window), ("offset bound", options.offset_bound)):
        if not (math.isfinite(value) and value > 0):
            raise CalibrationError(f"the {name} must be a positive number of seconds, not {value}")
    if options.max_gap is not None and not (math.isfinite(options.max_gap) and options.max_gap > 0):
        raise CalibrationError(f"the largest gap must be a positive number of seconds, not {options.max_gap}")
    if options.max_pairs < 3:
        raise CalibrationError(f"max pairs must be at least 3, not {options.max_pairs}")
