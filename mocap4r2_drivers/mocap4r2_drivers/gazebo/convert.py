"""Model poses to an emulated mocap system's frames (pure: no ROS, no wall clock of its own).

* frames at a fixed rate on the simulation clock: frame k samples every model at
  t = k / rate (its newest pose not after t), frame_number k;
* models can come on several topics: frame k is built only once every model that is
  still publishing has a pose at or after t (so no frame is built from a pose older
  than its time while a newer one is on its way). "Still publishing" is judged by when
  the model's poses last *arrived* (a wall-clock time the caller passes in), not by
  how far its stamps lag: a topic delivered late under load is waited for, a topic
  that stopped is not;
* everything random is a function of (seed, frame number): the same poses give the same
  frames, run after run.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import yaml

from mocap4r2_control.frame import AssetNames, BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.rotation import quat_exp, quat_multiply

from ..common import stable_id
from ..emulation import observe_markers

# an asymmetric 4-marker layout (m), as real rigid bodies need for unique labelling
DEFAULT_LAYOUT = ((0.10, 0.0, 0.0), (-0.08, 0.06, 0.0), (-0.05, -0.09, 0.01), (0.0, 0.02, 0.07))
MAX_FRAMES_PER_UPDATE = 1000  # a jump of the simulation clock does not flood the reader
HISTORY = 512  # poses remembered per model
STAMP_TOLERANCE = 1e-6  # s
SYNC_WINDOW = 0.1  # s of simulation time a frame waits for a lagging topic (no arrival times)
ARRIVAL_WINDOW = 1.0  # s of wall time after its last pose arrived that a model is waited for
CLOCK_BACK = 1.0  # s a model's stamps may go back before it counts as a simulation restart


def parse_layouts(text: str) -> dict[str, np.ndarray]:
    """``{model: [[x, y, z], ...]}`` (YAML or JSON text) to arrays; ValueError if invalid."""
    if not text.strip():
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"marker_layouts is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("marker_layouts must map model names to lists of [x, y, z] marker positions")
    out = {}
    for name, points in data.items():
        try:
            layout = np.asarray(points, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"marker_layouts[{name}]: {exc}") from exc
        if layout.ndim != 2 or layout.shape[1] != 3 or layout.shape[0] < 3 or not np.isfinite(layout).all():
            raise ValueError(f"marker_layouts[{name}] needs 3 or more finite [x, y, z] points")
        out[str(name)] = layout
    return out


def _check_layouts(text: str) -> str | None:
    try:
        parse_layouts(text)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Emulation:
    """How real the emulated system is (all deterministic given the seed)."""

    rate: float = 100.0
    latency: float = 0.005
    latency_jitter: float = 0.0
    noise: float = 0.0003
    occlusion: float = 0.0
    dropped_frames: float = 0.0
    stale_timeout: float = 0.5
    seed: int = 0


@dataclass
class ModelSpec:
    """A tracked model: its name, id and marker layout."""

    name: str
    id: int
    layout: np.ndarray  # (m, 3) in the model frame, m


class _History:
    """A model's recent poses, ordered by stamp."""

    def __init__(self):
        self.stamps: deque[float] = deque(maxlen=HISTORY)
        self.poses: deque[np.ndarray] = deque(maxlen=HISTORY)
        self.arrival: float | None = None  # wall (monotonic) time the newest pose arrived

    def add(self, stamp: float, pose: np.ndarray) -> None:
        if self.stamps and stamp < self.stamps[-1]:
            # out of order (two topics for one model): insert in place
            if len(self.stamps) == HISTORY:
                self.stamps.popleft()
                self.poses.popleft()
            i = bisect.bisect_right(self.stamps, stamp)
            self.stamps.insert(i, stamp)
            self.poses.insert(i, pose)
            return
        self.stamps.append(stamp)
        self.poses.append(pose)

    def at(self, t: float) -> tuple[float, np.ndarray] | None:
        """The newest pose not after t, with its stamp (a stamp within a microsecond
        after t counts as at t: stamps are nanoseconds, frame times are k / rate)."""
        i = bisect.bisect_right(self.stamps, t + STAMP_TOLERANCE) - 1
        if i < 0:
            return None
        return self.stamps[i], self.poses[i]

    def prune(self, t: float) -> None:
        """Forget poses older than the one in effect at t."""
        while len(self.stamps) > 1 and self.stamps[1] <= t + STAMP_TOLERANCE:
            self.stamps.popleft()
            self.poses.popleft()


class MocapEmulator:
    """Poses in, mocap frames out (pure: no ROS, no wall clock)."""

    def __init__(
        self,
        models: Sequence[ModelSpec] | None,
        settings: Emulation,
        default_layout: np.ndarray | None = None,
    ):
        self.settings = settings
        self.track_all = models is None
        self.default_layout = np.asarray(
            DEFAULT_LAYOUT if default_layout is None else default_layout, dtype=float
        )
        self.models: list[ModelSpec] = list(models or [])
        self._index = {m.name: i for i, m in enumerate(self.models)}
        self._history = [_History() for _ in self.models]
        self._next_k: int | None = None
        self._horizon = -math.inf
        self.ignored: set[str] = set()
        self.skipped_frames = 0
        self.resets = 0
        self._prepare()

    def _prepare(self) -> None:
        models = self.models
        self.names = tuple(m.name for m in models)
        self.ids = np.asarray([m.id for m in models], dtype=np.int32)
        counts = np.asarray([m.layout.shape[0] for m in models], dtype=np.int64)
        self.marker_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.marker_body = np.repeat(np.arange(len(models)), counts)
        self.layout = np.concatenate([m.layout for m in models]) if models else np.zeros((0, 3))
        self.marker_names = tuple(f"{m.name}:marker{i + 1}" for m in models for i in range(m.layout.shape[0]))
        self.marker_ids = np.asarray([stable_id(n) for n in self.marker_names], dtype=np.int32)
        radius = [max(float(np.sqrt(np.mean(np.sum(m.layout**2, axis=1)))), 0.02) for m in models]
        self.radius = np.asarray(radius)

    def asset_names(self) -> AssetNames:
        return AssetNames(rigid_bodies=self.names, markers=self.marker_names)

    # ------------------------------------------------------------------ input
    def add(
        self,
        name: str,
        stamp: float,
        position: Sequence[float],
        orientation: Sequence[float],
        arrival: float | None = None,
    ) -> None:
        """One pose of a model at simulation time ``stamp``; ``arrival`` is when it arrived
        (monotonic seconds), so a model whose topic lags is told from one that stopped."""
        row = self._index.get(name)
        if row is None:
            if not self.track_all:
                self.ignored.add(name)
                return
            row = self._add_model(name)
        history = self._history[row]
        # the simulation restarted when a model's own clock goes back (another topic
        # lagging behind the newest stamp is not a restart)
        if history.stamps and stamp < history.stamps[-1] - CLOCK_BACK:
            self._reset()
            history = self._history[row]
        pose = np.array([*position, *orientation], dtype=float)
        history.add(stamp, pose)
        if arrival is not None:
            history.arrival = arrival
        self._horizon = max(self._horizon, stamp)

    def _add_model(self, name: str) -> int:
        self.models.append(ModelSpec(name, stable_id(name), self.default_layout))
        self._index[name] = len(self.models) - 1
        self._history.append(_History())
        self._prepare()
        return len(self.models) - 1

    def _reset(self) -> None:
        self.resets += 1
        self._history = [_History() for _ in self.models]
        self._next_k = None
        self._horizon = -math.inf

    # ------------------------------------------------------------------ output
    def is_dropped(self, k: int) -> bool:
        p = self.settings.dropped_frames
        return p > 0 and bool(np.random.default_rng([self.settings.seed, 0xD0, k]).random() < p)

    def advance(self, now: float | None = None) -> list[MocapFrame]:
        """The frames completed by the poses received so far (t_k <= newest stamp).

        ``now`` (monotonic seconds, as the ``arrival`` of :meth:`add`): a model whose
        poses arrived within ARRIVAL_WINDOW holds frames back until it has a pose at
        their time, however far its stamps lag; without arrival times a model is waited
        for while its stamps are within SYNC_WINDOW of the newest."""
        if self._horizon == -math.inf or not self.models:
            return []
        rate = self.settings.rate
        active = []
        for h in self._history:
            if not h.stamps:
                continue
            if h.stamps[-1] >= self._horizon - SYNC_WINDOW or (
                now is not None and h.arrival is not None and now - h.arrival <= ARRIVAL_WINDOW
            ):
                active.append(h.stamps[-1])
        complete = min(active) if active else self._horizon
        last = math.floor((complete + STAMP_TOLERANCE) * rate)
        if self._next_k is not None and last < self._next_k:
            return []
        if self._next_k is None:
            self._next_k = last
        if last - self._next_k >= MAX_FRAMES_PER_UPDATE:
            skip = last - MAX_FRAMES_PER_UPDATE + 1
            self.skipped_frames += skip - self._next_k
            self._next_k = skip
        frames = []
        for k in range(self._next_k, last + 1):
            if not self.is_dropped(k):
                frames.append(self.frame(k))
        self._next_k = max(self._next_k, last + 1)
        t = (self._next_k - 1) / rate
        for history in self._history:
            history.prune(t)
        return frames

    def frame(self, k: int) -> MocapFrame:
        s = self.settings
        t = k / s.rate
        n = len(self.models)
        rng = np.random.default_rng([s.seed, k])
        true_pose = np.full((n, 7), np.nan)
        fresh = np.zeros(n, dtype=bool)
        for row, history in enumerate(self._history):
            sample = history.at(t)
            if sample is not None and t - sample[0] <= s.stale_timeout:
                true_pose[row] = sample[1]
                fresh[row] = True
        position = true_pose[:, :3]
        quat = true_pose[:, 3:]
        norm = np.linalg.norm(quat, axis=1, keepdims=True)
        quat = np.where(fresh[:, None], quat / np.where(norm > 0, norm, 1.0), np.nan)

        seen = observe_markers(
            rng,
            self.layout,
            marker_body=self.marker_body,
            positions=position,
            orientations=quat,
            noise=s.noise,
            occlusion=s.occlusion,
            hidden=~fresh,
        )
        world, occluded, residual = seen.positions, seen.occluded, seen.residuals
        visible, valid, mean_error = seen.visible, seen.valid, seen.mean_errors

        # the pose a fit to the visible markers would give: the true pose plus the noise
        # of the mean of those markers, and a small rotation of the same origin
        reported_pos = (
            position
            + rng.normal(0.0, 1.0, size=(n, 3)) * (s.noise / np.sqrt(np.maximum(visible, 1)))[:, None]
        )
        rotvec = (
            rng.normal(0.0, 1.0, size=(n, 3))
            * (s.noise / self.radius / np.sqrt(np.maximum(visible, 1)))[:, None]
        )
        reported_quat = np.full((n, 4), np.nan)
        if valid.any():
            reported_quat[valid] = quat_multiply(quat[valid], quat_exp(rotvec[valid]))
        reported_pos[~valid] = np.nan

        markers = MarkerArrays(
            ids=self.marker_ids,
            names=self.marker_names,
            positions=world,
            occluded=occluded,
            residuals=residual,
        )
        bodies = BodyArrays(
            ids=self.ids,
            names=self.names,
            positions=reported_pos,
            orientations=reported_quat,
            valid=valid,
            mean_errors=mean_error,
            marker_offsets=self.marker_offsets,
            markers=markers,
        )
        latency = s.latency + (rng.uniform(-1.0, 1.0) * s.latency_jitter if s.latency_jitter > 0 else 0.0)
        return MocapFrame(frame_number=k, markers=markers, bodies=bodies, latency=max(latency, 0.0))


class DelayLine:
    """Frames wait here until their latency has passed on the wall clock."""

    def __init__(self, capacity: int = 1024):
        self._items: deque[tuple[float, MocapFrame]] = deque()
        self._cond = threading.Condition()
        self.capacity = capacity
        self.dropped = 0

    def put(self, frame: MocapFrame, now: float) -> None:
        with self._cond:
            if len(self._items) >= self.capacity:
                self._items.popleft()  # the reader is far behind: the oldest frame goes
                self.dropped += 1
            self._items.append((now + frame.latency, frame))
            self._cond.notify_all()

    def get(self, timeout: float) -> MocapFrame | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                if self._items and self._items[0][0] <= now:
                    return self._items.popleft()[1]
                remaining = deadline - now
                if remaining <= 0:
                    return None
                wait = remaining if not self._items else min(remaining, self._items[0][0] - now)
                self._cond.wait(max(wait, 0.0))

    def clear(self) -> None:
        with self._cond:
            self._items.clear()


# ====================================================================== what the bridge delivers
def ros_name(gz_name: str) -> str:
    """An entity name as ros_gz_bridge writes it into a frame id (``model::link`` -> ``model/link``)."""
    return gz_name.replace("::", "/")


def transform_problem(
    child: str, parent: str, stamp: float, world: str, simulation_stamps: bool
) -> str | None:
    """Why a bridged transform cannot be used as a model's world pose, or None.

    ros_gz_bridge fills a TransformStamped from the header of each gz.msgs.Pose only:
    ``child_frame_id`` and ``frame_id`` from the header's data entries, the stamp from its
    stamp; the pose's ``name`` is ignored. gz-sim's SceneBroadcaster (``/world/<w>/pose/info``)
    sets only names, so its poses arrive unnamed, unparented and unstamped; PosePublisher
    sets all three, relative to the entity's parent."""
    if not child:
        return (
            "a transform has no child_frame_id: ros_gz_bridge leaves it empty for a world's "
            "pose/info (SceneBroadcaster names poses only in a field the bridge drops). Bridge the "
            "PosePublisher system's pose vector instead (docs/gazebo.md): <use_pose_vector_msg>true, "
            "<publish_model_pose>true, <publish_link_pose>false, and "
            "`ros2 run ros_gz_bridge parameter_bridge "
            "/model/<model>/pose@tf2_msgs/msg/TFMessage[gz.msgs.Pose_V`"
        )
    if parent != world:
        what = f"relative to {parent!r}" if parent else "without a frame_id"
        return (
            f"the pose of {child!r} is {what}, not a world pose (frame_id {world!r}, the `world` "
            "parameter): PosePublisher sends link and nested poses relative to their parent; set "
            "<publish_link_pose>false</publish_link_pose> and <publish_model_pose>true</publish_model_pose> "
            "in its SDF block, or set `world` to the name of the Gazebo world"
        )
    if simulation_stamps and stamp == 0.0:
        return (
            f"the pose of {child!r} has a zero stamp, so frames cannot be put on the simulation clock "
            "(stamp: simulation): ros_gz_bridge drops the stamp of messages without a header, such as "
            "pose/info; bridge PosePublisher's stamped poses, or set stamp: wall"
        )
    return None
