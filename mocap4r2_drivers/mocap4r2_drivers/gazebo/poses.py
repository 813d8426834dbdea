"""The poses ros_gz_bridge delivers, checked and handed to the emulator.

Each transform must be a named, stamped world pose (:func:`~.convert.transform_problem`)
with finite values and a non-zero quaternion. What cannot be used is refused: while the
system configures, the first reason is kept for configure to report; afterwards the
input is dropped, counted by reason (the first words of it) and logged the first time.
The rate of the first model's poses is measured to warn when frames would be faster.
"""

from __future__ import annotations

import logging
import math
import threading
import time

import numpy as np

from mocap4r2_control.frame import MocapFrame
from mocap4r2_control.timebase import stamp_to_seconds

from .convert import MocapEmulator, transform_problem

__all__ = ["RATE_SAMPLES", "PoseIntake"]

LOG = logging.getLogger("mocap4r2.gazebo")
RATE_SAMPLES = 30  # pose stamps of one model used to estimate the pose rate
MAX_REFUSAL_KINDS = 32  # reasons counted apart; others of a new kind are not counted


class PoseIntake:
    """Pose messages into ``emulator`` (shared with the reader under :attr:`lock`)."""

    def __init__(self, emulator: MocapEmulator, world: str, simulation_stamps: bool, rate: float) -> None:
        self.emulator = emulator
        self.world = world
        self.simulation_stamps = simulation_stamps
        self.rate = rate  # of the emulated frames, to compare with the poses' rate
        self.lock = threading.Lock()
        self.seen = threading.Event()  # set at every message, for configure's wait
        self.configuring = True
        self.refused: str | None = None  # why the input cannot be used (found while configuring)
        self.refusals: dict[str, int] = {}  # input dropped while running, by reason (first words)
        self._rate_stamps: list[float] = []
        self._rate_name = ""
        self.pose_rate = 0.0
        self.messages = 0
        self.bad_transforms = 0

    def missing(self, models: list[str]) -> list[str]:
        """Those of ``models`` that have no pose yet."""
        e = self.emulator
        with self.lock:
            seen = {m.name for m, h in zip(e.models, e._history) if h.stamps}
        return [m for m in models if m not in seen]

    def ready(self, models: list[str]) -> bool:
        """Every listed model has a pose (any model when all are tracked)."""
        if models:
            return not self.missing(models)
        with self.lock:
            return any(h.stamps for h in self.emulator._history)

    def add(self, topic: str, msg, now: float) -> list[MocapFrame]:
        """One TFMessage from ``topic`` arrived at ``now`` (monotonic); the frames it completed."""
        wall = None
        with self.lock:
            self.messages += 1
            for tf in msg.transforms:
                child, parent = tf.child_frame_id, tf.header.frame_id
                stamp = stamp_to_seconds(tf.header.stamp)
                problem = transform_problem(child, parent, stamp, self.world, self.simulation_stamps)
                if problem is not None:
                    self._refuse(topic, problem)
                    continue
                if stamp == 0.0:
                    # stamp: wall and an unstamped pose: the time it arrived stands for it
                    wall = wall if wall is not None else time.time()
                    stamp = wall
                t, r = tf.transform.translation, tf.transform.rotation
                values = (t.x, t.y, t.z, r.x, r.y, r.z, r.w)
                if not all(math.isfinite(v) for v in values) or (r.x, r.y, r.z, r.w) == (0.0, 0.0, 0.0, 0.0):
                    self.bad_transforms += 1
                    continue
                self._measure_rate(child, stamp)
                self.emulator.add(child, stamp, values[:3], values[3:], arrival=now)
            frames = self.emulator.advance(now)
        self.seen.set()
        return frames

    def _refuse(self, topic: str, problem: str) -> None:
        if self.configuring:
            if self.refused is None:
                self.refused = problem
            return
        key = problem.split(":")[0][:80]
        count = self.refusals.get(key, 0) + 1
        if len(self.refusals) < MAX_REFUSAL_KINDS or key in self.refusals:
            self.refusals[key] = count
        if count == 1:
            LOG.error("dropping poses on %s: %s", topic, problem)

    def _measure_rate(self, name: str, stamp: float) -> None:
        """The pose rate of the first model seen, to warn when frames would be faster."""
        if self.pose_rate or (self._rate_stamps and self._rate_name != name):
            return
        self._rate_name = name
        if not self._rate_stamps or stamp > self._rate_stamps[-1]:
            self._rate_stamps.append(stamp)
        if len(self._rate_stamps) >= RATE_SAMPLES:
            period = float(np.median(np.diff(self._rate_stamps)))
            self.pose_rate = 1.0 / period if period > 0 else 0.0
            if self.pose_rate and self.rate > 1.05 * self.pose_rate:
                LOG.warning(
                    "rate %g Hz is above the rate of the poses (%.1f Hz of simulation time): "
                    "consecutive frames will repeat a pose; lower `rate` or raise the "
                    "PosePublisher's update_frequency",
                    self.rate,
                    self.pose_rate,
                )
