"""Known-answer pose pairs and error measures shared by the calibration tests."""

from __future__ import annotations

import numpy as np

from mocap4r2_control.geometry import Transform
from mocap4r2_tools.calibration.synthetic import (
    ARM_BASE_IN_MOCAP,
    CAMERA,
    MAP_IN_MOCAP,
    TOOL,
    arm_flange,
    drone_body,
)
from mocap4r2_tools.calibration.tangent import difference


def errors(found: Transform, truth: Transform) -> tuple[float, float]:
    """(translation error mm, rotation error deg)."""
    d = difference(found, truth)
    return float(np.linalg.norm(d[3:]) * 1e3), float(np.degrees(np.linalg.norm(d[:3])))


def exact_pairs(kind: str, n: int = 60) -> tuple[Transform, Transform, Transform, Transform]:
    """Exact pairs (A_i, B_i) at common times, and the truth (X, Y) of A X = Y B."""
    times = np.linspace(0.0, 30.0, n, dtype=np.float64)
    if kind == "robot_world":
        a = arm_flange(times)
        return a, ARM_BASE_IN_MOCAP * (a * TOOL), TOOL, ARM_BASE_IN_MOCAP.inverse()
    a = drone_body(times)
    if kind == "hand_eye":
        return a, MAP_IN_MOCAP.inverse() * (a * CAMERA), CAMERA, MAP_IN_MOCAP
    return a, MAP_IN_MOCAP.inverse() * a, MAP_IN_MOCAP, MAP_IN_MOCAP
