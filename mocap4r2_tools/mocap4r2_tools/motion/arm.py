"""A simple serial arm for the simulated_arm node (no rclpy): goal validation per
motion_control_interfaces' QueueTrajectory, trajectory interpolation, forward kinematics.

Kinematics: joint 1 turns about z (base yaw); every other joint turns about its own y
axis (pitch); link i extends ``link_lengths[i]`` along its x axis. The end effector is the
tip of the last link.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from dataclasses import dataclass

import numpy as np

from mocap4r2_control.rotation import FloatArray, quat_exp_one, quat_multiply_one, quat_rotate_one

MIN_POINTS = 3
MAX_POINTS = 100_000


@dataclass(frozen=True)
class Point:
    """One point of a joint trajectory."""

    positions: tuple[float, ...]
    velocities: tuple[float, ...]
    time: float  # seconds from the start


def validate(
    trajectory_id: str,
    joint_names: Sequence[str],
    points: Sequence[Point],
    n_joints: int,
    known_ids: Container[str],
) -> str | None:
    """The reason a QueueTrajectory goal is refused, or None when it can be executed."""
    if not trajectory_id:
        return "trajectory_id must be a non-empty string"
    if trajectory_id in known_ids:
        return f"trajectory_id {trajectory_id!r} is already used: ids must be unique"
    if len(points) < MIN_POINTS:
        return f"a trajectory needs at least {MIN_POINTS} points, got {len(points)}"
    if len(points) > MAX_POINTS:
        return f"a trajectory has at most {MAX_POINTS} points, got {len(points)}"
    if joint_names and len(joint_names) != n_joints:
        return f"the arm has {n_joints} joints, the trajectory names {len(joint_names)}"
    last = -1.0
    for i, p in enumerate(points):
        if len(p.positions) != n_joints:
            return f"point {i}: {len(p.positions)} positions for {n_joints} joints"
        if len(p.velocities) != n_joints:
            return (
                f"point {i}: {len(p.velocities)} velocities for {n_joints} joints (velocities are required)"
            )
        if not all(math.isfinite(v) for v in (*p.positions, *p.velocities, p.time)):
            return f"point {i}: a position, velocity or time_from_start is not finite"
        if i == 0 and p.time < 0:
            return "point 0: time_from_start must be >= 0"
        if i > 0 and p.time <= last:
            return f"point {i}: time_from_start must increase (a time is required for every point)"
        last = p.time
    return None


def sample(points: Sequence[Point], t: float) -> tuple[FloatArray, FloatArray, int]:
    """Positions and velocities at t (cubic Hermite between points, from their positions
    and velocities), and the index of the point being executed (the last one reached)."""
    if t <= points[0].time:
        return np.array(points[0].positions), np.array(points[0].velocities), 0
    if t >= points[-1].time:
        return np.array(points[-1].positions), np.array(points[-1].velocities), len(points) - 1
    i = max(k for k in range(len(points)) if points[k].time <= t)
    a, b = points[i], points[i + 1]
    h = b.time - a.time
    s = (t - a.time) / h
    p0, p1 = np.array(a.positions), np.array(b.positions)
    v0, v1 = np.array(a.velocities) * h, np.array(b.velocities) * h
    h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
    d00, d10, d01, d11 = 6 * s**2 - 6 * s, 3 * s**2 - 4 * s + 1, -6 * s**2 + 6 * s, 3 * s**2 - 2 * s
    pos = h00 * p0 + h10 * v0 + h01 * p1 + h11 * v1
    vel = (d00 * p0 + d10 * v0 + d01 * p1 + d11 * v1) / h
    return pos, vel, i


def forward_kinematics(
    joints: Sequence[float], link_lengths: Sequence[float], base: Sequence[float] = (0.0, 0.0, 0.0)
) -> list[tuple[FloatArray, FloatArray]]:
    """Pose (position, x y z w quaternion) of the tip of every link, base first to end effector."""
    q = np.array([0.0, 0.0, 0.0, 1.0])
    p = np.asarray(base, dtype=np.float64)
    out: list[tuple[FloatArray, FloatArray]] = []
    for i, (angle, length) in enumerate(zip(joints, link_lengths)):
        axis = np.array([0.0, 0.0, 1.0]) if i == 0 else np.array([0.0, 1.0, 0.0])
        q = np.array(quat_multiply_one(q, quat_exp_one(axis * angle)))
        if i == 0:
            # the first link stands up from the base: the yaw joint carries a vertical link
            p = p + np.array([0.0, 0.0, length])
        else:
            p = p + np.array(quat_rotate_one(q, (length, 0.0, 0.0)))
        out.append((p.copy(), q.copy()))
    return out
