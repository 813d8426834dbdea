"""Is there enough motion to calibrate from? Said before solving, with what to add.

X of ``A X = X B`` and ``A X = Y B`` is determined only by rotations about at least two
different axes: about one axis alone the translation along it cannot be told apart
(Tsai and Lenz 1989; Chen 1991), and a stream that only translates says nothing about
the rotation. The check looks at stream A's orientations: their rotation vectors about
their chordal mean, and the spread (rms, deg) of those along their three principal axes.
The second largest spread must reach ``min_rotation_deg``; otherwise the refusal names
the axis the motion turned about and the axis to add rotation about, so a lab redoes
the motion instead of trusting a wrong answer.

``A = X B`` (frame to frame) is determined by one pose; it needs pairs, not motion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mocap4r2_control.geometry import Transform
from mocap4r2_control.rotation import FloatArray, quat_from_matrix, quat_relative, quat_to_matrix

from .closed_form import nearest_rotation
from .errors import CalibrationError

#: rms rotation (deg) about the second principal axis below which X is refused
MIN_ROTATION_DEG = 5.0
#: pairs needed at least, per problem
MIN_PAIRS = {"hand_eye": 10, "robot_world": 10, "frame_to_frame": 3}


@dataclass(frozen=True)
class MotionSpread:
    """The rotation of a stream about its mean orientation, along its principal axes."""

    spread_deg: FloatArray  # (3,) rms rotation about each principal axis, largest first
    axes: FloatArray  # (3, 3) the principal axes as rows, in the stream's body axes
    travel_m: float  # rms distance of the positions from their mean


def spread(poses: Transform) -> MotionSpread:
    """The principal rotation spreads of ``poses``' orientations."""
    mean = quat_from_matrix(nearest_rotation(quat_to_matrix(poses.rotation).sum(axis=0)))
    rotvecs = quat_relative(np.broadcast_to(mean, poses.rotation.shape), poses.rotation)
    scatter = rotvecs.T @ rotvecs / max(len(poses.translation), 1)
    values, vectors = np.linalg.eigh(scatter)
    order = np.argsort(values)[::-1]
    travel = float(
        np.sqrt(np.mean(np.sum((poses.translation - poses.translation.mean(axis=0)) ** 2, axis=1)))
    )
    return MotionSpread(np.degrees(np.sqrt(np.clip(values[order], 0.0, None))), vectors[:, order].T, travel)


def axis_name(axis: FloatArray) -> str:
    """'z' for an axis within ~25 deg of a coordinate axis, else the unit vector."""
    k = int(np.argmax(np.abs(axis)))
    if abs(axis[k]) > 0.9:
        return "xyz"[k]
    return "(" + ", ".join(f"{v:+.2f}" for v in axis) + ")"


def check_motion(
    kind: str, pairs: int, a: Transform, stream: str, min_rotation_deg: float = MIN_ROTATION_DEG
) -> None:
    """CalibrationError saying what is missing: too few pairs, or (hand-eye, robot-world)
    too little rotation about two axes of stream A (named ``stream``)."""
    need = MIN_PAIRS[kind]
    if pairs < need:
        raise CalibrationError(
            f"{pairs} pose pairs: {kind} needs at least {need}. Record longer, or check that both streams "
            "cover the same time (tracked, and stamped on comparable clocks)"
        )
    if kind == "frame_to_frame":
        return
    found = spread(a)
    first, second = float(found.spread_deg[0]), float(found.spread_deg[1])
    if first < min_rotation_deg:
        moved = f"it moves {found.travel_m * 100:.1f} cm (rms) but " if found.travel_m > 0.01 else ""
        raise CalibrationError(
            f"too little rotation in {stream}: {moved}turns only {first:.1f} deg (rms) about its mean "
            f"orientation; {kind} needs at least {min_rotation_deg:g} deg about two different axes. Add "
            "rotation: tilt the body back and forth about two perpendicular axes (e.g. its x and y), "
            "by 20-40 deg each way"
        )
    if second < min_rotation_deg:
        main, other = axis_name(found.axes[0]), axis_name(found.axes[1])
        raise CalibrationError(
            f"rotation about one axis only in {stream}: {first:.1f} deg (rms) about its {main} axis, "
            f"{second:.1f} deg about any other; {kind} needs at least {min_rotation_deg:g} deg about a "
            f"second axis (about one axis the translation along it is undetermined). Add rotation about "
            f"an axis perpendicular to {main}, e.g. its {other} axis, by 20-40 deg each way"
        )
