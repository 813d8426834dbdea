"""What goes to the flight controller, and when: rate limiting, the tracking-loss gate and
the neutral sample every MAVLink message is built from.

A flight controller must never get a stale pose. mocap4r2 systems keep a lost body's last
pose in ``rigid_bodies`` with ``tracking_valid: false`` (hold-last), so the gate lets a
sample through only while the body is tracked; after a loss the odometry's
``reset_counter`` increments so the estimator knows the pose may have jumped.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .frames import B_FLU_FRD, enu_flu_to_ned_frd, flu_to_frd

# MAVLink's "unknown covariance": first element NaN (the rest is ignored)
UNKNOWN_COVARIANCE = [math.nan] + [0.0] * 20
_NAN3 = (math.nan, math.nan, math.nan)


def pose_covariance_urt(position_stddev: float, orientation_stddev: float) -> list[float]:
    """The 21-element upper-right triangle (row-major) of the 6x6 covariance of
    (x, y, z, roll, pitch, yaw) MAVLink's ODOMETRY/VISION_POSITION_ESTIMATE carry, for
    isotropic standard deviations (isotropic, so the same in ENU and in NED). A value
    <= 0 means unknown."""
    if not (position_stddev > 0 and orientation_stddev > 0):
        return list(UNKNOWN_COVARIANCE)
    diagonal = [position_stddev**2] * 3 + [orientation_stddev**2] * 3
    return urt(np.diag(diagonal))


def urt(matrix: np.ndarray) -> list[float]:
    """Row-major upper-right triangle (with the diagonal) of a 6x6 matrix: 21 floats."""
    rows, cols = np.triu_indices(6)
    return [float(v) for v in np.asarray(matrix, dtype=float)[rows, cols]]


def twist_covariance_frd(covariance_flu) -> list[float]:
    """A nav_msgs twist covariance (6x6 row-major, body FLU: vx vy vz wx wy wz) as the
    MAVLink velocity covariance in FRD; all zeros (ROS's "not set") or non-finite
    values mean unknown."""
    c = np.asarray(covariance_flu, dtype=float).reshape(6, 6)
    if not np.isfinite(c).all() or not c.any():
        return list(UNKNOWN_COVARIANCE)
    m = np.zeros((6, 6))
    m[:3, :3] = B_FLU_FRD
    m[3:, 3:] = B_FLU_FRD
    return urt(m @ c @ m.T)


@dataclass
class VisionSample:
    """One pose for the flight controller, already in NED/FRD."""

    time_usec: int
    position: np.ndarray  # NED, m
    quat_xyzw: np.ndarray  # FRD in NED
    velocity: tuple[float, float, float] = _NAN3  # FRD, m/s (NaN: unknown)
    angular_velocity: tuple[float, float, float] = _NAN3  # FRD, rad/s (NaN: unknown)
    pose_covariance: list[float] = field(default_factory=lambda: list(UNKNOWN_COVARIANCE))
    velocity_covariance: list[float] = field(default_factory=lambda: list(UNKNOWN_COVARIANCE))
    reset_counter: int = 0
    quality: int = 0  # MAVLink: 0 unknown, 1 worst .. 100 best


def build_sample(
    stamp: float,
    position_enu,
    quat_enu_xyzw,
    *,
    twist=None,
    twist_covariance=None,
    position_stddev: float = 0.0,
    orientation_stddev: float = 0.0,
    reset_counter: int = 0,
    quality: int = 0,
) -> VisionSample:
    """The sample of a FLU-in-ENU pose captured at ``stamp`` (s); ``twist`` is the
    body-frame (FLU) (linear, angular) velocity, or None when unknown."""
    position, quat = enu_flu_to_ned_frd(position_enu, quat_enu_xyzw)
    velocity, angular = _NAN3, _NAN3
    velocity_covariance = list(UNKNOWN_COVARIANCE)
    if twist is not None:
        linear_frd, angular_frd = flu_to_frd(twist[0]), flu_to_frd(twist[1])
        if np.isfinite(linear_frd).all() and np.isfinite(angular_frd).all():
            velocity = (float(linear_frd[0]), float(linear_frd[1]), float(linear_frd[2]))
            angular = (float(angular_frd[0]), float(angular_frd[1]), float(angular_frd[2]))
            if twist_covariance is not None:
                velocity_covariance = twist_covariance_frd(twist_covariance)
    return VisionSample(
        time_usec=max(0, int(round(stamp * 1e6))),
        position=position,
        quat_xyzw=quat,
        velocity=velocity,
        angular_velocity=angular,
        pose_covariance=pose_covariance_urt(position_stddev, orientation_stddev),
        velocity_covariance=velocity_covariance,
        reset_counter=reset_counter % 256,
        quality=int(max(0, min(100, quality))),
    )


class RateLimiter:
    """Lets through at most ``rate`` samples per second of capture time.

    Decided on capture stamps, not arrival times, so DDS jitter does not change which
    frames go out: a 100 Hz stream limited to 50 Hz sends every other frame. A frame is
    due a quarter period early at most, so a stream slightly slower than ``rate`` still
    gets every frame through; after a gap the schedule restarts from the next frame.
    """

    def __init__(self, rate: float):
        self.set_rate(rate)
        self._next: float | None = None

    def set_rate(self, rate: float) -> None:
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be a positive number, got {rate!r}")
        self.period = 1.0 / rate

    def reset(self) -> None:
        self._next = None

    def admit(self, stamp: float) -> bool:
        if self._next is not None and stamp < self._next - 0.25 * self.period:
            return False
        if self._next is None or stamp - self._next >= self.period:
            self._next = stamp + self.period  # first frame, or after a gap
        else:
            self._next += self.period
        return True


class TrackingGate:
    """Whether the body may be sent, and what the flight controller must know about losses.

    ``update(tracked, now)`` per rigid_bodies message (``now``: a monotonic clock, s);
    ``silent(now)`` when no message came for the node's timeout. A loss that follows
    tracking increments ``reset_counter`` when tracking comes back (uint8, wraps as
    MAVLink's does) and records how long it lasted.
    """

    def __init__(self, quality_window: float = 1.0, budget: int = 4096):
        self.state = "waiting"  # waiting | tracking | lost
        self.reason = "no rigid_bodies message yet"
        self.reset_counter = 0
        self.losses = 0
        self.lost_since: float | None = None
        self.last_loss_duration: float | None = None
        self.quality_window = quality_window
        self._history: deque[tuple[float, bool]] = deque(maxlen=budget)

    def update(self, tracked: bool, now: float, reason: str = "") -> bool:
        self._history.append((now, tracked))
        while self._history and now - self._history[0][0] > self.quality_window:
            self._history.popleft()
        if tracked:
            if self.state == "lost":
                self.reset_counter = (self.reset_counter + 1) % 256
                self.last_loss_duration = now - self.lost_since if self.lost_since is not None else None
            self.state = "tracking"
            self.lost_since = None
            self.reason = "tracking"
            return True
        self._lose(now, reason or "not tracked")
        return False

    def silent(self, now: float, reason: str) -> None:
        if self.state == "tracking":
            self._lose(now, reason)
        elif self.state == "lost":
            self.reason = reason

    def _lose(self, now: float, reason: str) -> None:
        if self.state == "tracking":
            self.losses += 1
            self.lost_since = now
            self.state = "lost"
        elif self.state == "waiting" and self.lost_since is None:
            pass  # never tracked: nothing to reset, but keep waiting
        self.reason = reason

    def lost_for(self, now: float) -> float | None:
        """Seconds the current loss has lasted, or None while tracking/waiting."""
        return now - self.lost_since if self.state == "lost" and self.lost_since is not None else None

    def quality(self) -> int:
        """MAVLink quality 1..100: the percentage of tracked messages in the last window
        (0, "unknown", before any message)."""
        if not self._history:
            return 0
        ratio = sum(1 for _, ok in self._history if ok) / len(self._history)
        return max(1, int(round(100 * ratio)))
