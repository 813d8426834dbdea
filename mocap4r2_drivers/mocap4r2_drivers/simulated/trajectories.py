"""Where every row of a scene is at a time: the trajectories of its bodies and skeleton
roots, and the windows in which a row is not tracked (pure numpy, no ROS).

Trajectories are sums of sinusoids per axis, ``c + sum_j a_j sin(w_j t + phi_j)``,
which covers circle, figure-eight, static and a smooth bounded random walk, and lets
one vectorised evaluation serve every row of the scene.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mocap4r2_control.rotation import quat_from_axis_angle, quat_from_yaw, quat_multiply

from .scene_description import SceneError, number

TRAJECTORY_TYPES = ("circle", "figure_eight", "random_walk", "static")
TERMS = 4  # sinusoid terms per axis


class Trajectories:
    """The trajectory parameters of ``rows`` rows, set one row at a time from the scene
    file, evaluated together by :meth:`poses`."""

    def __init__(self, rows: int):
        self.center = np.zeros((rows, 3))
        self.amp = np.zeros((rows, TERMS, 3))
        self.freq = np.zeros((rows, TERMS, 3))
        self.phase = np.zeros((rows, TERMS, 3))
        self.yaw0 = np.zeros(rows)
        self.yaw_rate = np.zeros(rows)
        self.heading = np.zeros(rows, dtype=bool)  # yaw follows the velocity
        self.tilt = np.zeros(rows)  # roll/pitch wobble amplitude, rad

    def set(self, row: int, cfg: dict[str, Any], rng: np.random.Generator, name: str) -> None:
        """Row ``row`` from its ``trajectory:`` mapping; ``name`` says where it is in errors.
        A random walk draws its terms from ``rng``, in the order the scene's rows are set."""
        if not isinstance(cfg, dict):
            raise SceneError(f"{name} must be a mapping with a type")
        kind = cfg.get("type", "static")
        center = np.asarray(cfg.get("center", cfg.get("position", [0.0, 0.0, 1.0])), dtype=float)
        if center.shape != (3,):
            raise SceneError(f"{name}: center must be [x, y, z]")
        self.center[row] = center
        period = number(cfg, "period", 10.0, name)
        if kind != "static" and period <= 0:
            raise SceneError(f"{name}: period must be > 0")
        w = 2 * math.pi / period if kind != "static" else 0.0
        phase0 = number(cfg, "phase", 0.0, name)
        self.yaw0[row] = number(cfg, "yaw", 0.0, name)
        self.tilt[row] = number(cfg, "tilt", 0.0, name)
        if kind == "circle":
            r = number(cfg, "radius", 1.0, name)
            self.amp[row, 0] = (r, r, 0.0)
            self.freq[row, 0] = (w, w, 0.0)
            self.phase[row, 0] = (phase0 + math.pi / 2, phase0, 0.0)
            self.heading[row] = bool(cfg.get("heading", True))
        elif kind == "figure_eight":
            sx, sy = (float(v) for v in cfg.get("size", [2.0, 1.0]))
            self.amp[row, 0] = (sx / 2, sy / 2, 0.0)
            self.freq[row, 0] = (w, 2 * w, 0.0)
            self.phase[row, 0] = (phase0, 2 * phase0, 0.0)
            self.heading[row] = bool(cfg.get("heading", True))
        elif kind == "random_walk":
            # a smooth bounded wander: random frequencies and phases per axis and term
            extent = np.asarray(cfg.get("extent", [1.0, 1.0, 0.3]), dtype=float)
            weights = rng.uniform(0.2, 1.0, size=(TERMS, 3))
            weights /= weights.sum(axis=0)
            self.amp[row] = weights * extent
            self.freq[row] = w * rng.uniform(0.5, 2.5, size=(TERMS, 3))
            self.phase[row] = rng.uniform(0, 2 * math.pi, size=(TERMS, 3))
            self.yaw_rate[row] = number(cfg, "yaw_rate", 0.3, name)
        elif kind == "static":
            self.yaw_rate[row] = 0.0
        else:
            raise SceneError(f"{name}: unknown type {kind!r} (one of {', '.join(TRAJECTORY_TYPES)})")

    def poses(self, t: Any) -> tuple[np.ndarray, np.ndarray]:
        """Positions (..., n, 3) and orientations (..., n, 4) of every row at time t (a
        number, or an array of times for a batch)."""
        t = np.asarray(t, dtype=float)
        arg = self.freq * t[..., None, None, None] + self.phase
        pos = self.center + np.sum(self.amp * np.sin(arg), axis=-2)
        vel = np.sum(self.amp * self.freq * np.cos(arg), axis=-2)
        yaw = self.yaw0 + self.yaw_rate * t[..., None]
        moving = self.heading & (np.hypot(vel[..., 0], vel[..., 1]) > 1e-9)
        yaw = np.where(moving, np.arctan2(vel[..., 1], vel[..., 0]) + self.yaw0, yaw)
        quat = quat_from_yaw(yaw)
        if np.any(self.tilt):
            roll = self.tilt * np.sin(1.3 * t[..., None] + np.arange(len(self.yaw0)))
            quat = quat_multiply(quat, quat_from_axis_angle([1.0, 0.0, 0.0], roll))
        return pos, quat


def lost_at(loss: np.ndarray, t: Any) -> np.ndarray:
    """Rows of (every, duration): lost during the last `duration` s of each `every` s;
    (rows,) for a time t, (B, rows) for B times."""
    every = loss[:, 0]
    duration = loss[:, 1]
    t = np.asarray(t, dtype=float)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        phase = np.where(every > 0, np.mod(t, np.where(every > 0, every, 1.0)), -1.0)
    return (every > 0) & (phase >= every - duration)
