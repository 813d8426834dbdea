"""gazebo_system: a Gazebo (gz-sim) world as a mocap system, so the same tools run in simulation.

Input: model poses as ros_gz_bridge gives them, ``tf2_msgs/TFMessage`` (a world's
``/world/<world>/pose/info`` and/or per-model ``/model/<model>/pose`` topics bridged
from ``gz.msgs.Pose_V``). Each transform's ``child_frame_id`` names a model (or
``model::link``); its stamp is simulation time.

Output: a mocap system's frames, emulated deterministically from those poses:

* frames at a fixed ``rate`` on the simulation clock: frame k samples every model at
  t = k / rate (its newest pose not after t), frame_number k;
* configured marker layouts per model (``marker_layouts``), Gaussian marker ``noise``,
  per-marker ``occlusion``; a body is tracked when 3 or more of its markers are seen and
  its pose is fresh (``stale_timeout``); its reported pose carries the noise a fit to
  its markers would;
* ``dropped_frames`` never arrive (their numbers are skipped); each frame is delivered
  ``latency`` (+- ``latency_jitter``) after it was complete, and reports that latency;
* everything random is a function of (seed, frame number): the same poses give the
  same frames, run after run;
* frames are stamped with their capture time on the simulation clock (k / rate), as
  everything else in a simulated robot is (``stamp: wall`` stamps as a real system:
  arrival time minus latency).

The adapter API has no node handle, so the adapter subscribes through its own small
rclpy node (same process and context as the system node, spun by its own executor
thread); it does not use the command line's remappings.
"""
from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import yaml
from scipy.spatial.transform import Rotation

from mocap4r2_control.adapter import AdapterError, MocapAdapter
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.frame import AssetNames, BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.geometry import quat_multiply, quat_rotate
from mocap4r2_control.system_node import run_system
from mocap4r2_control.timebase import stamp_to_seconds

from ..common import stable_id

LOG = logging.getLogger("mocap4r2.gazebo")

# an asymmetric 4-marker layout (m), as real rigid bodies need for unique labelling
DEFAULT_LAYOUT = ((0.10, 0.0, 0.0), (-0.08, 0.06, 0.0), (-0.05, -0.09, 0.01), (0.0, 0.02, 0.07))
MAX_FRAMES_PER_UPDATE = 1000   # a jump of the simulation clock does not flood the reader
HISTORY = 512                  # poses remembered per model
STAMP_TOLERANCE = 1e-6         # s
SYNC_WINDOW = 0.1              # s of simulation time a frame waits for a lagging topic


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
    name: str
    id: int
    layout: np.ndarray   # (m, 3) in the model frame, m


class _History:
    """A model's recent poses, ordered by stamp."""

    def __init__(self):
        self.stamps: deque[float] = deque(maxlen=HISTORY)
        self.poses: deque[np.ndarray] = deque(maxlen=HISTORY)

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

    def __init__(self, models: Sequence[ModelSpec] | None, settings: Emulation,
                 default_layout: np.ndarray | None = None):
        self.settings = settings
        self.track_all = models is None
        self.default_layout = np.asarray(DEFAULT_LAYOUT if default_layout is None else default_layout, dtype=float)
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
        radius = [max(float(np.sqrt(np.mean(np.sum(m.layout ** 2, axis=1)))), 0.02) for m in models]
        self.radius = np.asarray(radius)

    def asset_names(self) -> AssetNames:
        return AssetNames(rigid_bodies=self.names, markers=self.marker_names)

    # ------------------------------------------------------------------ input
    def add(self, name: str, stamp: float, position: Sequence[float], orientation: Sequence[float]) -> None:
        row = self._index.get(name)
        if row is None:
            if not self.track_all:
                self.ignored.add(name)
                return
            row = self._add_model(name)
        if stamp < self._horizon - 1.0:
            self._reset()     # the simulation restarted: its clock went back
        pose = np.array([*position, *orientation], dtype=float)
        self._history[row].add(stamp, pose)
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

    def advance(self) -> list[MocapFrame]:
        """The frames completed by the poses received so far (t_k <= newest stamp)."""
        if self._horizon == -math.inf or not self.models:
            return []
        rate = self.settings.rate
        # models can come on different topics: frame k waits until every model still
        # publishing has a pose at or after t_k (one that stopped does not hold it up)
        newest = [h.stamps[-1] for h in self._history if h.stamps]
        active = [s for s in newest if s >= self._horizon - SYNC_WINDOW]
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

        m = self.layout.shape[0]
        body = self.marker_body
        world = quat_rotate(quat[body], self.layout) + position[body]
        noise = rng.normal(0.0, s.noise, size=(m, 3)) if s.noise > 0 else np.zeros((m, 3))
        world += noise
        occluded = (rng.random(m) < s.occlusion) | ~fresh[body]
        visible = np.bincount(body[~occluded], minlength=n)
        valid = fresh & (visible >= 3)
        residual = np.linalg.norm(noise, axis=1).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            sums = np.bincount(body[~occluded], weights=residual[~occluded], minlength=n)
            mean_error = np.where(visible > 0, sums / np.maximum(visible, 1), -1.0).astype(np.float32)
        world[occluded] = np.nan
        residual[occluded] = -1.0

        # the pose a fit to the visible markers would give: the true pose plus the noise
        # of the mean of those markers, and a small rotation of the same origin
        reported_pos = position + rng.normal(0.0, 1.0, size=(n, 3)) * (s.noise / np.sqrt(np.maximum(visible, 1)))[:, None]
        rotvec = rng.normal(0.0, 1.0, size=(n, 3)) * (s.noise / self.radius / np.sqrt(np.maximum(visible, 1)))[:, None]
        reported_quat = np.full((n, 4), np.nan)
        if valid.any():
            reported_quat[valid] = quat_multiply(quat[valid], Rotation.from_rotvec(rotvec[valid]).as_quat())
        reported_pos[~valid] = np.nan

        markers = MarkerArrays(ids=self.marker_ids, names=self.marker_names, positions=world,
                               occluded=occluded, residuals=residual)
        bodies = BodyArrays(ids=self.ids, names=self.names, positions=reported_pos, orientations=reported_quat,
                            valid=valid, mean_errors=mean_error, marker_offsets=self.marker_offsets,
                            markers=markers)
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
                self._items.popleft()   # the reader is far behind: the oldest frame goes
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


class GazeboAdapter(MocapAdapter):
    system_type = "gazebo"
    parameters = (
        ParameterSpec("pose_topics", ["/world/default/pose/info"],
                      "tf2_msgs/TFMessage topics with model poses (ros_gz_bridge of a world's pose/info "
                      "or of per-model pose topics); absolute names."),
        ParameterSpec("models", [""], "Models (child_frame_id) tracked as rigid bodies, in this order; "
                      "[''] or []: every model seen."),
        ParameterSpec("model_ids", [0], "Rigid body ids of the models (same order); [0]: 1, 2, 3, ..."),
        ParameterSpec("marker_layouts", "", "YAML mapping model -> [[x, y, z], ...] marker positions in the "
                      "model frame (m); models not listed get a default 4-marker layout.",
                      check=_check_layouts),
        ParameterSpec("rate", 100.0, "Frame rate of the emulated system, Hz (simulation time).",
                      min_value=1.0, max_value=2000.0),
        ParameterSpec("latency", 0.005, "Delay from a frame's capture to its delivery, s.", min_value=0.0,
                      max_value=1.0),
        ParameterSpec("latency_jitter", 0.0, "Uniform +- jitter of the latency, s.", min_value=0.0, max_value=0.5),
        ParameterSpec("noise", 0.0003, "Marker position noise (standard deviation), m.", min_value=0.0,
                      max_value=0.1),
        ParameterSpec("occlusion", 0.0, "Probability that a marker is not seen in a frame.", min_value=0.0,
                      max_value=1.0),
        ParameterSpec("dropped_frames", 0.0, "Probability that a frame never arrives.", min_value=0.0,
                      max_value=1.0),
        ParameterSpec("stale_timeout", 0.5, "A model without a pose for this long (simulation time) is not "
                      "tracked, s.", min_value=0.001, max_value=60.0),
        ParameterSpec("seed", 0, "Seed of the noise, occlusions and drops.", min_value=0),
        ParameterSpec("best_effort", False, "Subscribe best effort (for a bridge publishing best effort)."),
        ParameterSpec("connect_timeout", 5.0, "Seconds configure waits for the first pose; 0: do not wait.",
                      min_value=0.0, max_value=300.0),
        ParameterSpec("stamp", "simulation", "simulation: stamp each frame with its capture time on Gazebo's "
                      "clock (k / rate), as the rest of a simulated robot is stamped; wall: arrival time minus "
                      "the emulated latency, as a real system.", choices=("simulation", "wall")),
    )

    def __init__(self, values: Mapping[str, Any], context=None):
        self.topics = [t for t in values["pose_topics"] if t]
        models = [m for m in values["models"] if m]
        ids = [int(i) for i in values["model_ids"]]
        if ids and ids != [0] and len(ids) != len(models):
            raise AdapterError(f"model_ids has {len(ids)} ids for {len(models)} models")
        if ids == [0] or not ids:
            ids = list(range(1, len(models) + 1))
        if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
            raise AdapterError(f"model_ids must be distinct and non-negative, got {ids}")
        layouts = parse_layouts(values["marker_layouts"])
        unknown = sorted(set(layouts) - set(models)) if models else []
        if unknown:
            raise AdapterError(f"marker_layouts names models that are not in models: {unknown}")
        if not self.topics:
            raise AdapterError("pose_topics is empty: give the TFMessage topic(s) of ros_gz_bridge")
        self.settings = Emulation(
            rate=float(values["rate"]), latency=float(values["latency"]),
            latency_jitter=float(values["latency_jitter"]), noise=float(values["noise"]),
            occlusion=float(values["occlusion"]), dropped_frames=float(values["dropped_frames"]),
            stale_timeout=float(values["stale_timeout"]), seed=int(values["seed"]))
        specs = [ModelSpec(name, i, layouts.get(name, np.asarray(DEFAULT_LAYOUT))) for name, i in zip(models, ids)]
        self.emulator = MocapEmulator(specs if models else None, self.settings)
        self.best_effort = bool(values["best_effort"])
        self.connect_timeout = float(values["connect_timeout"])
        self.simulation_stamps = values["stamp"] == "simulation"
        self.context = context
        self.delay = DelayLine()
        self._lock = threading.Lock()
        self._node = None
        self._executor = None
        self._thread: threading.Thread | None = None
        self._streaming = False
        self._first_pose = threading.Event()
        self.messages = 0
        self.bad_transforms = 0

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> "GazeboAdapter":
        return cls(values)

    # ------------------------------------------------------------------ connection
    def connect(self) -> AssetNames:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from tf2_msgs.msg import TFMessage

        context = self.context or rclpy.get_default_context()
        if not context.ok():
            raise AdapterError("rclpy is not initialised in this process")
        # its own node: the adapter API has no node handle; no global arguments, so the
        # command line's __node/__ns remappings of the system node do not apply to it
        self._node = rclpy.create_node(f"gazebo_input_{id(self):x}", context=context, use_global_arguments=False,
                                       start_parameter_services=False)
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.BEST_EFFORT if self.best_effort
                         else ReliabilityPolicy.RELIABLE)
        for topic in self.topics:
            self._node.create_subscription(TFMessage, topic, self._on_poses, qos)
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self._node)
        self._thread = threading.Thread(target=self._spin, name="gazebo-input", daemon=True)
        self._thread.start()
        if self.connect_timeout > 0 and not self._first_pose.wait(self.connect_timeout):
            raise AdapterError(
                f"no model pose on {', '.join(self.topics)} within {self.connect_timeout:g} s: is Gazebo running "
                "and ros_gz_bridge bridging the poses, e.g. `ros2 run ros_gz_bridge parameter_bridge "
                "/world/default/pose/info@tf2_msgs/msg/TFMessage[gz.msgs.Pose_V`?")
        with self._lock:
            return self.emulator.asset_names()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except Exception:  # noqa: BLE001 - the context shuts down under it
            pass

    def _on_poses(self, msg) -> None:
        now = time.monotonic()
        wall = None
        with self._lock:
            self.messages += 1
            for tf in msg.transforms:
                stamp = stamp_to_seconds(tf.header.stamp)
                if stamp == 0.0:
                    # an unstamped pose: the time it arrived is the best estimate
                    wall = wall if wall is not None else time.time()
                    stamp = wall
                t, r = tf.transform.translation, tf.transform.rotation
                values = (t.x, t.y, t.z, r.x, r.y, r.z, r.w)
                if not all(math.isfinite(v) for v in values) or (r.x, r.y, r.z, r.w) == (0.0, 0.0, 0.0, 0.0):
                    self.bad_transforms += 1
                    continue
                self.emulator.add(tf.child_frame_id, stamp, values[:3], values[3:])
            frames = self.emulator.advance()
        self._first_pose.set()
        if self._streaming:
            for frame in frames:
                if self.simulation_stamps:
                    frame.capture_time = frame.frame_number / self.settings.rate
                self.delay.put(frame, now)

    @property
    def nominal_rate(self) -> float:
        return self.settings.rate

    def start_streaming(self) -> None:
        self.delay.clear()
        self._streaming = True

    def stop_streaming(self) -> None:
        self._streaming = False

    def read_frame(self, timeout: float) -> MocapFrame | None:
        if self._node is None:
            raise AdapterError("not connected")
        return self.delay.get(timeout)

    def disconnect(self) -> None:
        self._streaming = False
        executor, self._executor = self._executor, None
        node, self._node = self._node, None
        if executor is not None:
            executor.shutdown(timeout_sec=2.0)
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if node is not None:
            node.destroy_node()

    def status(self) -> dict[str, str]:
        with self._lock:
            e = self.emulator
            out = {"pose_topics": ", ".join(self.topics), "pose_messages": str(self.messages),
                   "frames_skipped_clock_jump": str(e.skipped_frames), "clock_resets": str(e.resets),
                   "frames_dropped_slow_reader": str(self.delay.dropped)}
            if e.ignored:
                out["ignored_frames"] = ", ".join(sorted(e.ignored)[:20])
            unseen = [m.name for m, h in zip(e.models, e._history) if not h.stamps]
            if unseen:
                out["models_without_pose"] = ", ".join(unseen)
            if self.bad_transforms:
                out["bad_transforms"] = str(self.bad_transforms)
        return out


def main(args: list[str] | None = None) -> int:
    return run_system(GazeboAdapter, "gazebo_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
