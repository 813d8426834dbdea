"""Synthetic pose streams with a known answer, for the tests and ``python -m bench calibration``.

Two scenes, each giving stream A, stream B and the true X and Y:

* :func:`arm_scene`: the simulated arm's kinematics (``motion.arm.forward_kinematics``,
  what the ``simulated_arm`` node runs) moving all joints smoothly; A is the flange in
  the robot base, B the pose a mocap system measures of a tool mounted on the flange at
  ``tool`` (X), in a mocap frame whose pose in the robot base is Y. The node publishes
  the same tool pose on ``~/tool_pose`` (parameter ``tool_offset``).
* :func:`drone_scene`: a drone body flying a Lissajous path while yawing and tilting,
  measured by mocap (A), with a camera rigidly mounted at ``camera`` (X) whose poses
  come in its own map frame (B; Y is that map in the mocap frame), as a visual odometry
  or a camera looking at a fixed target would give them.

Both then corrupt B as the bench asks: B's stamps late by ``delay`` (the offset to find is
+delay), Gaussian noise (``noise_m`` per axis, ``noise_deg`` per axis of a rotation vector)
on B (and on A with ``noise_on_a``), a share of B's poses replaced by gross outliers (8 cm
and 14 deg per axis), and optionally NaN rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mocap4r2_control.geometry import Transform
from mocap4r2_control.rotation import FloatArray, quat_exp, quat_multiply, quat_normalize

from ..motion.arm import forward_kinematics
from .streams import Stream, clean_stream

ARM_LINKS = (0.4, 0.35, 0.3, 0.12)
TOOL = Transform(np.array([0.03, -0.02, 0.11]), quat_normalize(np.array([0.2, -0.1, 0.35, 0.9])))
ARM_BASE_IN_MOCAP = Transform(
    np.array([1.2, -0.4, 0.05]), quat_normalize(np.array([0.01, -0.02, 0.38, 0.92]))
)
CAMERA = Transform(np.array([0.08, 0.01, -0.04]), quat_normalize(np.array([-0.5, 0.5, -0.48, 0.52])))
MAP_IN_MOCAP = Transform(np.array([0.5, 1.5, 0.2]), quat_normalize(np.array([0.0, 0.05, -0.6, 0.8])))


@dataclass(frozen=True, eq=False)
class Scene:
    """Two streams and the truth: A X = Y B (hand-eye needs only X)."""

    a: Stream
    b: Stream
    x: Transform
    y: Transform
    offset: float  # s to add to B's stamps
    outliers: int  # B poses replaced by outliers


@dataclass(frozen=True)
class Corruption:
    """What is done to the clean streams."""

    noise_m: float = 0.001
    noise_deg: float = 0.2
    outlier_share: float = 0.05
    delay: float = 0.040  # s B's stamps lag its true times
    nan_rows: int = 0  # B rows set to NaN (left out and counted by the calibration)
    noise_on_a: bool = False  # A too (a robot's joint encoders or mocap are usually far finer)
    seed: int = 0


def arm_flange(times: FloatArray) -> Transform:
    """The arm's flange in its base, every joint swinging at its own frequency: the base
    yaws +-86 deg and the flange pitches by up to +-115 deg (this arm has no wrist roll, so
    large swings of its two rotation axes are what determine the tool's offset)."""
    j1 = 1.5 * np.sin(2 * np.pi * 0.045 * times)
    j2 = 0.6 + 0.5 * np.sin(2 * np.pi * 0.07 * times + 0.5)
    j3 = -0.9 + 0.6 * np.sin(2 * np.pi * 0.11 * times + 1.0)
    j4 = 0.3 + 0.9 * np.sin(2 * np.pi * 0.13 * times + 2.0)
    poses = [forward_kinematics(j, ARM_LINKS)[-1] for j in zip(j1, j2, j3, j4)]
    return Transform(np.array([p for p, _ in poses]), np.array([q for _, q in poses]))


def drone_body(times: FloatArray) -> Transform:
    """A drone flying a Lissajous path, yawing and tilting (roll and pitch of +-25 deg)."""
    t = times
    position = np.stack(
        (
            1.5 * np.sin(2 * np.pi * 0.05 * t),
            1.0 * np.sin(2 * np.pi * 0.08 * t + 0.3),
            1.2 + 0.3 * np.sin(2 * np.pi * 0.11 * t),
        ),
        axis=1,
    )
    yaw = 1.2 * np.sin(2 * np.pi * 0.03 * t)
    roll = 0.45 * np.sin(2 * np.pi * 0.13 * t + 0.7)
    pitch = 0.45 * np.sin(2 * np.pi * 0.17 * t + 1.9)
    z, y, x = (np.eye(3)[k] for k in (2, 1, 0))
    q = quat_multiply(
        quat_exp(z * yaw[:, None]), quat_multiply(quat_exp(y * pitch[:, None]), quat_exp(x * roll[:, None]))
    )
    return Transform(position, q)


def arm_scene(
    seconds: float = 40.0, rate_a: float = 200.0, rate_b: float = 100.0, corruption: Corruption | None = None
) -> Scene:
    """Flange (A, robot base) and tracked tool (B, mocap frame): X = tool, Y = mocap in base."""
    y = ARM_BASE_IN_MOCAP.inverse()

    def b_of(flange: Transform) -> Transform:
        tool_in_base = flange * TOOL
        return ARM_BASE_IN_MOCAP * tool_in_base

    return _scene(
        arm_flange,
        b_of,
        x=TOOL,
        y=y,
        seconds=seconds,
        rate_a=rate_a,
        rate_b=rate_b,
        c=corruption or Corruption(),
        name_a="flange",
        name_b="tool",
    )


def drone_scene(
    seconds: float = 40.0, rate_a: float = 200.0, rate_b: float = 100.0, corruption: Corruption | None = None
) -> Scene:
    """Drone body (A, mocap) and its camera (B, map frame): X = camera, Y = map in mocap."""

    def b_of(body: Transform) -> Transform:
        return MAP_IN_MOCAP.inverse() * (body * CAMERA)

    return _scene(
        drone_body,
        b_of,
        x=CAMERA,
        y=MAP_IN_MOCAP,
        seconds=seconds,
        rate_a=rate_a,
        rate_b=rate_b,
        c=corruption or Corruption(),
        name_a="body",
        name_b="camera",
    )


def _scene(
    motion, b_of, *, x: Transform, y: Transform, seconds, rate_a, rate_b, c: Corruption, name_a, name_b
) -> Scene:
    rng = np.random.default_rng(c.seed)
    times_a = np.arange(0.0, seconds, 1.0 / rate_a)
    times_b = np.arange(0.5 / rate_b, seconds, 1.0 / rate_b)
    a = _noisy(motion(times_a), c, rng) if c.noise_on_a else motion(times_a)
    b = _noisy(b_of(motion(times_b)), c, rng)
    count = int(round(c.outlier_share * len(b.translation)))
    rows = rng.choice(len(b.translation), size=count, replace=False)
    b_t, b_q = b.translation.copy(), b.rotation.copy()
    b_t[rows] += rng.normal(0.0, 0.08, (count, 3))
    b_q[rows] = quat_multiply(b_q[rows], quat_exp(rng.normal(0.0, 0.25, (count, 3))))
    if c.nan_rows:
        nan = rng.choice(len(b.translation), size=c.nan_rows, replace=False)
        b_t[nan] = np.nan
    stream_a = clean_stream(times_a, a.translation, a.rotation, name_a)
    stream_b = clean_stream(times_b - c.delay, b_t, b_q, name_b)
    return Scene(stream_a, stream_b, x, y, c.delay, count)


def _noisy(p: Transform, c: Corruption, rng: np.random.Generator) -> Transform:
    t = p.translation + rng.normal(0.0, c.noise_m, p.translation.shape)
    q = quat_multiply(p.rotation, quat_exp(rng.normal(0.0, np.radians(c.noise_deg), p.translation.shape)))
    return Transform(t, q)


def frame_to_frame_scene(
    seconds: float = 40.0, rate_a: float = 200.0, rate_b: float = 100.0, corruption: Corruption | None = None
) -> Scene:
    """One drone body seen by two mocap systems: A in the first's frame, B in the second's;
    X = the second's frame in the first's (Y = X: A = X B)."""
    second_in_first = MAP_IN_MOCAP

    def b_of(body: Transform) -> Transform:
        return second_in_first.inverse() * body

    return _scene(
        drone_body,
        b_of,
        x=second_in_first,
        y=second_in_first,
        seconds=seconds,
        rate_a=rate_a,
        rate_b=rate_b,
        c=corruption or Corruption(),
        name_a="system1",
        name_b="system2",
    )
