"""Trajectory monitors (motion_control_interfaces' TriggerCondition), evaluated on
trajectory feedback. No rclpy: the trajectory_monitor node and the simulated arm share it.

A monitor triggers, per the TriggerCondition comments:

* RATIO: when the feedback's ``ratio_of_trajectory`` reaches the condition's (valid
  range [0, 1]);
* TIME: when the feedback's ``time_from_start`` reaches the condition's, while the
  trajectory is executing (a trajectory that ends earlier never triggers it);
* JOINT_STATE: when every joint is within its tolerance,
  ``target[i] - tol[i] <= actual[i] <= target[i] + tol[i]``; the tolerance list must be
  as long as the target positions (refused otherwise). Joints are matched by name when
  the condition names them, else by index.

Results are latched: ``is_triggered`` is false until the monitor triggers and true from
then on, for its trajectory; feedback of another trajectory starts the monitors over.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mocap4r2_control.rotation import Quat, quat_slerp_one

RATIO, TIME, JOINT_STATE = 1, 2, 3
TYPE_NAMES = {"RATIO": RATIO, "TIME": TIME, "JOINT_STATE": JOINT_STATE}
MAX_MONITORS = 1000
MAX_JOINTS = 64


class MonitorError(ValueError):
    """A monitor that cannot be evaluated, with the reason."""


@dataclass(frozen=True)
class Monitor:
    """A condition on a running trajectory (ratio done, time elapsed, joint state)."""

    monitor_id: str
    type: int
    ratio_of_trajectory: float = 0.0
    time_from_start: float = 0.0  # seconds
    joint_names: tuple[str, ...] = ()
    joint_positions: tuple[float, ...] = ()
    joint_state_tolerances: tuple[float, ...] = ()

    def check(self) -> None:
        """Raise MonitorError with the reason when this monitor cannot be evaluated."""
        who = f"monitor {self.monitor_id!r}"
        if not self.monitor_id:
            raise MonitorError("a monitor needs a non-empty monitor_id")
        if self.type == RATIO:
            if not 0.0 <= self.ratio_of_trajectory <= 1.0:  # NaN fails too
                raise MonitorError(
                    f"{who}: ratio_of_trajectory must be in [0.0, 1.0], got {self.ratio_of_trajectory}"
                )
        elif self.type == TIME:
            if not (math.isfinite(self.time_from_start) and self.time_from_start >= 0.0):
                raise MonitorError(f"{who}: time_from_start must be >= 0, got {self.time_from_start}")
        elif self.type == JOINT_STATE:
            n = len(self.joint_positions)
            if n == 0:
                raise MonitorError(f"{who}: joint_state.position is empty")
            if n > MAX_JOINTS:
                raise MonitorError(f"{who}: more than {MAX_JOINTS} joints")
            if len(self.joint_state_tolerances) != n:
                raise MonitorError(
                    f"{who}: {len(self.joint_state_tolerances)} joint_state_tolerances for {n} "
                    "joint_state positions; the lengths must match"
                )
            if self.joint_names and len(self.joint_names) != n:
                raise MonitorError(f"{who}: {len(self.joint_names)} joint names for {n} positions")
            if not all(math.isfinite(v) for v in self.joint_positions):
                raise MonitorError(f"{who}: joint_state.position has a non-finite value")
            if not all(math.isfinite(v) and v >= 0 for v in self.joint_state_tolerances):
                raise MonitorError(f"{who}: joint_state_tolerances must be finite and >= 0")
        else:
            raise MonitorError(
                f"{who}: unknown trigger type {self.type!r} "
                f"(RATIO = {RATIO}, TIME = {TIME}, JOINT_STATE = {JOINT_STATE})"
            )


@dataclass
class Feedback:
    """The part of a TrajectoryFeedbackStamped the monitors need."""

    trajectory_id: str
    stamp: float
    ratio_of_trajectory: float
    time_from_start: float
    joint_names: Sequence[str] = ()
    positions: Sequence[float] = ()


def monitor_from_msg(msg: Any) -> Monitor:
    """A motion_control_interfaces/Monitor message as a Monitor (duck-typed)."""
    cond = msg.trigger_condition
    return Monitor(
        monitor_id=msg.monitor_id,
        type=int(cond.type),
        ratio_of_trajectory=float(cond.ratio_of_trajectory),
        time_from_start=cond.time_from_start.sec + cond.time_from_start.nanosec * 1e-9,
        joint_names=tuple(cond.joint_state.name),
        joint_positions=tuple(float(v) for v in cond.joint_state.position),
        joint_state_tolerances=tuple(float(v) for v in cond.joint_state_tolerances),
    )


def monitors_from_config(config: Any) -> tuple[list[tuple[str, Monitor]], list[str]]:
    """Monitors of a YAML document ``{monitors: [{monitor_id, type, ...}]}``: a list of
    (trajectory_id or "" for every trajectory, Monitor), and the reasons of the refused."""
    items = config.get("monitors") if isinstance(config, dict) else None
    if not isinstance(items, list):
        return [], ["the file needs a list under 'monitors'"]
    good: list[tuple[str, Monitor]] = []
    refused: list[str] = []
    for i, item in enumerate(items[:MAX_MONITORS]):
        try:
            if not isinstance(item, dict):
                raise MonitorError(f"monitors[{i}] is not a mapping")
            kind = item.get("type")
            kind = TYPE_NAMES.get(str(kind).upper(), kind) if isinstance(kind, str) else kind
            joint = item.get("joint_state") or {}
            monitor = Monitor(
                monitor_id=str(item.get("monitor_id", "")),
                type=kind if isinstance(kind, int) else -1,
                ratio_of_trajectory=float(item.get("ratio_of_trajectory", 0.0)),
                time_from_start=float(item.get("time_from_start", 0.0)),
                joint_names=tuple(str(n) for n in joint.get("name", [])),
                joint_positions=tuple(float(v) for v in joint.get("position", [])),
                joint_state_tolerances=tuple(float(v) for v in item.get("joint_state_tolerances", [])),
            )
            if monitor.type == -1:
                raise MonitorError(
                    f"monitor {monitor.monitor_id!r}: unknown trigger type {kind!r} "
                    "(RATIO, TIME or JOINT_STATE)"
                )
            monitor.check()
            good.append((str(item.get("trajectory_id", "")), monitor))
        except (MonitorError, TypeError, ValueError, AttributeError) as exc:
            refused.append(str(exc))
    if len(items) > MAX_MONITORS:
        refused.append(f"only the first {MAX_MONITORS} monitors are used")
    return good, refused


@dataclass
class MonitorSet:
    """The monitors of one trajectory and their latched results."""

    trajectory_id: str
    monitors: list[Monitor]
    triggered: dict[str, bool] = field(default_factory=dict)
    last_stamp: float | None = None

    def __post_init__(self) -> None:
        self.triggered = {m.monitor_id: False for m in self.monitors}

    def evaluate(self, fb: Feedback) -> list[str]:
        """Update with one feedback of this trajectory; the ids that triggered now.
        Raises MonitorError for feedback that cannot be used (the results stay)."""
        if fb.trajectory_id != self.trajectory_id:
            raise MonitorError(
                f"feedback of {fb.trajectory_id!r} given to the monitors of {self.trajectory_id!r}"
            )
        if not math.isfinite(fb.stamp):
            raise MonitorError("feedback stamp is not finite")
        if self.last_stamp is not None and fb.stamp < self.last_stamp:
            raise MonitorError(
                f"feedback stamp {fb.stamp:.6f} is before the previous one ({self.last_stamp:.6f}): ignored"
            )
        self.last_stamp = fb.stamp
        fired = []
        for m in self.monitors:
            if self.triggered[m.monitor_id]:
                continue
            if self._met(m, fb):
                self.triggered[m.monitor_id] = True
                fired.append(m.monitor_id)
        return fired

    def results(self) -> list[tuple[str, bool]]:
        return list(self.triggered.items())

    @staticmethod
    def _met(m: Monitor, fb: Feedback) -> bool:
        if m.type == RATIO:
            return math.isfinite(fb.ratio_of_trajectory) and fb.ratio_of_trajectory >= m.ratio_of_trajectory
        if m.type == TIME:
            # only while executing: feedback comes from the executing trajectory, and a
            # trajectory that ends before time_from_start never gets this far
            return math.isfinite(fb.time_from_start) and fb.time_from_start >= m.time_from_start
        actual = _joint_positions(m, fb)
        if actual is None:
            return False
        return all(
            t - tol <= a <= t + tol for a, t, tol in zip(actual, m.joint_positions, m.joint_state_tolerances)
        )


def _joint_positions(m: Monitor, fb: Feedback) -> list[float] | None:
    """The feedback positions of the monitor's joints (by name, else by index), or None
    when one is missing or not finite."""
    positions = list(fb.positions)
    if m.joint_names and fb.joint_names:
        index = {name: i for i, name in enumerate(fb.joint_names)}
        try:
            values = [positions[index[name]] for name in m.joint_names]
        except (KeyError, IndexError):
            return None
    else:
        if len(positions) < len(m.joint_positions):
            return None
        values = positions[: len(m.joint_positions)]
    if not all(math.isfinite(v) for v in values):
        return None
    return values


class PoseHistory:
    """The recent poses of one body, to say where it was at a given stamp.

    Bounded to ``seconds`` of frames (and ``max_frames``). ``at(t)`` interpolates between
    the two frames around t: position linearly, orientation along the shortest arc
    (slerp); None when t is outside the kept frames.
    """

    def __init__(self, seconds: float = 5.0, max_frames: int = 20000):
        self.seconds = seconds
        self._frames: deque[tuple[float, tuple[float, ...], Quat]] = deque(maxlen=max_frames)

    def add(self, t: float, position: Iterable[float], orientation: Iterable[float]) -> None:
        frames = self._frames
        if frames and t <= frames[-1][0]:
            return
        x, y, z, w = orientation
        frames.append((t, tuple(position), (x, y, z, w)))
        while frames and frames[0][0] < t - self.seconds:
            frames.popleft()

    @property
    def newest(self) -> float | None:
        return self._frames[-1][0] if self._frames else None

    def at(self, t: float) -> tuple[tuple[float, ...], Quat] | None:
        """(position, orientation) at t, None outside the kept frames."""
        frames = self._frames
        if not frames or t < frames[0][0] or t > frames[-1][0]:
            return None
        times = [f[0] for f in frames]
        i = bisect.bisect_left(times, t)
        if times[i] == t:
            return frames[i][1], frames[i][2]
        (t0, p0, q0), (t1, p1, q1) = frames[i - 1], frames[i]
        s = (t - t0) / (t1 - t0)
        position = tuple(a + s * (b - a) for a, b in zip(p0, p1))
        return position, quat_slerp_one(q0, q1, s)
