"""gazebo_system: a Gazebo (gz-sim) world as a mocap system, so the same tools run in simulation.

Input: model poses as ros_gz_bridge gives them, ``tf2_msgs/TFMessage`` converted from
``gz.msgs.Pose_V``. Only named, stamped world poses can be used: the PosePublisher
system with ``use_pose_vector_msg`` and ``publish_model_pose`` gives them (its
transforms carry the model's name in ``child_frame_id``, the world's in ``frame_id`` and
the simulation time). A world's ``pose/info`` does not: the bridge delivers its poses
without names or stamps, so configure refuses it and says how to bridge the poses
instead (docs/gazebo.md).

Output: a mocap system's frames emulated from those poses (:mod:`.convert`): frame k
samples every model at t = k / rate, with marker layouts, noise, occlusion, drops and
latency, deterministic given the seed; stamped with the capture time on the simulation
clock (``stamp: simulation``) or arrival minus latency (``stamp: wall``).

The adapter declares the bridge's topics as topic inputs (:mod:`.client`); the system
node subscribes to them on itself and hands each message to the adapter.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from mocap4r2_control.adapter import AdapterError, MocapAdapter, TopicInput
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system

from .client import bridge_inputs
from .convert import (  # some names re-exported for users of the emulator
    DEFAULT_LAYOUT,
    DelayLine,
    Emulation,
    MocapEmulator,
    ModelSpec,
    _check_layouts,
    parse_layouts,
    ros_name,
)
from .poses import PoseIntake


class GazeboAdapter(MocapAdapter):
    """Gazebo models seen as a mocap system: their poses from ros_gz_bridge, markers emulated."""

    system_type = "gazebo"
    parameters = (
        ParameterSpec(
            "pose_topics",
            ["/model/robot/pose"],
            "tf2_msgs/TFMessage topics of ros_gz_bridge carrying named, stamped world poses: the "
            "PosePublisher system's pose vector of each model (see docs/gazebo.md).",
        ),
        ParameterSpec(
            "world",
            "default",
            "Name of the Gazebo world: only transforms whose frame_id is it are world poses.",
        ),
        ParameterSpec(
            "models",
            [""],
            "Models (child_frame_id; model::link may be written as the bridge "
            "writes it, model/link) tracked as rigid bodies, in this order; [''] or []: every model seen.",
        ),
        ParameterSpec("model_ids", [0], "Rigid body ids of the models (same order); [0]: 1, 2, 3, ..."),
        ParameterSpec(
            "marker_layouts",
            "",
            "YAML mapping model -> [[x, y, z], ...] marker positions in the "
            "model frame (m); models not listed get a default 4-marker layout.",
            check=_check_layouts,
        ),
        ParameterSpec(
            "rate",
            100.0,
            "Frame rate of the emulated system, Hz (simulation time).",
            min_value=1.0,
            max_value=2000.0,
        ),
        ParameterSpec(
            "latency", 0.005, "Delay from a frame's capture to its delivery, s.", min_value=0.0, max_value=1.0
        ),
        ParameterSpec(
            "latency_jitter", 0.0, "Uniform +- jitter of the latency, s.", min_value=0.0, max_value=0.5
        ),
        ParameterSpec(
            "noise", 0.0003, "Marker position noise (standard deviation), m.", min_value=0.0, max_value=0.1
        ),
        ParameterSpec(
            "occlusion",
            0.0,
            "Probability that a marker is not seen in a frame.",
            min_value=0.0,
            max_value=1.0,
        ),
        ParameterSpec(
            "dropped_frames", 0.0, "Probability that a frame never arrives.", min_value=0.0, max_value=1.0
        ),
        ParameterSpec(
            "stale_timeout",
            0.5,
            "A model without a pose for this long (simulation time) is not tracked, s.",
            min_value=0.001,
            max_value=60.0,
        ),
        ParameterSpec("seed", 0, "Seed of the noise, occlusions and drops.", min_value=0),
        ParameterSpec("best_effort", False, "Subscribe best effort (for a bridge publishing best effort)."),
        ParameterSpec(
            "connect_timeout",
            5.0,
            "Seconds configure waits for the first pose of every model; 0: do not wait.",
            min_value=0.0,
            max_value=300.0,
        ),
        ParameterSpec(
            "stamp",
            "simulation",
            "simulation: stamp each frame with its capture time on Gazebo's "
            "clock (k / rate), as the rest of a simulated robot is stamped; wall: arrival time minus "
            "the emulated latency, as a real system.",
            choices=("simulation", "wall"),
        ),
    )

    def __init__(
        self,
        *,
        pose_topics: Sequence[str] = ("/model/robot/pose",),
        world: str = "default",
        models: Sequence[str] = (),
        model_ids: Sequence[int] = (0,),
        marker_layouts: str = "",
        rate: float = 100.0,
        latency: float = 0.005,
        latency_jitter: float = 0.0,
        noise: float = 0.0003,
        occlusion: float = 0.0,
        dropped_frames: float = 0.0,
        stale_timeout: float = 0.5,
        seed: int = 0,
        best_effort: bool = False,
        connect_timeout: float = 5.0,
        stamp: str = "simulation",
    ):
        """Each argument is the parameter of its name; AdapterError for models, ids,
        layouts and topics that do not fit together."""
        self.topics = [t for t in pose_topics if t]
        models = [ros_name(m) for m in models if m]
        ids = [int(i) for i in model_ids]
        if ids and ids != [0] and len(ids) != len(models):
            raise AdapterError(f"model_ids has {len(ids)} ids for {len(models)} models")
        if ids == [0] or not ids:
            ids = list(range(1, len(models) + 1))
        if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
            raise AdapterError(f"model_ids must be distinct and non-negative, got {ids}")
        layouts = {ros_name(k): v for k, v in parse_layouts(marker_layouts).items()}
        unknown = sorted(set(layouts) - set(models)) if models else []
        if unknown:
            raise AdapterError(f"marker_layouts names models that are not in models: {unknown}")
        if not self.topics:
            raise AdapterError("pose_topics is empty: give the TFMessage topic(s) of ros_gz_bridge")
        self.world = str(world)
        self.settings = Emulation(
            rate=float(rate),
            latency=float(latency),
            latency_jitter=float(latency_jitter),
            noise=float(noise),
            occlusion=float(occlusion),
            dropped_frames=float(dropped_frames),
            stale_timeout=float(stale_timeout),
            seed=int(seed),
        )
        specs = [
            ModelSpec(name, i, layouts.get(name, np.asarray(DEFAULT_LAYOUT))) for name, i in zip(models, ids)
        ]
        self.models = models
        # Gazebo has poses, not frames: the converter takes poses (add) and hands out the
        # frames they complete at the emulated rate (advance)
        self.converter = MocapEmulator(specs if models else None, self.settings)
        self.connect_timeout = float(connect_timeout)
        self.simulation_stamps = stamp == "simulation"
        self.best_effort = bool(best_effort)
        self._connected = False
        self.delay = DelayLine()
        self.poses = PoseIntake(self.converter, self.world, self.simulation_stamps, self.settings.rate)
        self._streaming = False

    @property
    def pose_rate(self) -> float:
        """The rate of the first model's poses (simulation time), 0 until measured."""
        return self.poses.pose_rate

    @property
    def bad_transforms(self) -> int:
        """Transforms dropped for a non-finite value or a zero quaternion."""
        return self.poses.bad_transforms

    # ------------------------------------------------------------------ connection
    def topic_inputs(self) -> Sequence[TopicInput]:
        """The bridge's pose topics, each message to :meth:`_on_poses`."""
        return bridge_inputs(self.topics, self.best_effort, self._on_poses)

    def connect(self) -> AssetNames:
        deadline = time.monotonic() + self.connect_timeout
        poses = self.poses
        while self.connect_timeout > 0 and poses.refused is None and not poses.ready(self.models):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = poses.missing(self.models)
                raise AdapterError(
                    f"no pose of {', '.join(missing) if missing else 'any model'} "
                    f"on {', '.join(self.topics)} "
                    f"within {self.connect_timeout:g} s: is Gazebo running, the PosePublisher system in each "
                    "model, and ros_gz_bridge bridging them, e.g. `ros2 run ros_gz_bridge parameter_bridge "
                    "/model/<model>/pose@tf2_msgs/msg/TFMessage[gz.msgs.Pose_V`? (docs/gazebo.md)"
                )
            poses.seen.wait(min(remaining, 0.1))
            poses.seen.clear()
        if poses.refused is not None:
            raise AdapterError(f"the poses on {', '.join(self.topics)} cannot be used: {poses.refused}")
        poses.configuring = False
        self._connected = True
        with poses.lock:
            return self.converter.asset_names()

    def _on_poses(self, topic: str, msg) -> None:
        now = time.monotonic()
        frames = self.poses.add(topic, msg, now)
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
        if not self._connected:
            raise AdapterError("not connected")
        return self.delay.get(timeout)

    def disconnect(self) -> None:
        self._streaming = False
        self._connected = False

    def status(self) -> dict[str, str]:
        poses = self.poses
        with poses.lock:
            e = self.converter
            out = {
                "pose_topics": ", ".join(self.topics),
                "pose_messages": str(poses.messages),
                "frames_skipped_clock_jump": str(e.skipped_frames),
                "clock_resets": str(e.resets),
                "frames_dropped_slow_reader": str(self.delay.dropped),
            }
            if self.pose_rate:
                out["pose_rate"] = f"{self.pose_rate:.1f}"
                if self.settings.rate > 1.05 * self.pose_rate:
                    out["rate_above_pose_rate"] = "true"
            if e.ignored:
                out["ignored_frames"] = ", ".join(sorted(e.ignored)[:20])
            unseen = [m.name for m, h in zip(e.models, e._history) if not h.stamps]
            if unseen:
                out["models_without_pose"] = ", ".join(unseen)
            if poses.bad_transforms:
                out["bad_transforms"] = str(poses.bad_transforms)
            for key, count in poses.refusals.items():
                out[f"refused: {key}"] = str(count)
        return out


def main(args: list[str] | None = None) -> int:
    """The gazebo_system executable: the adapter under MocapSystemNode until shutdown."""
    # two executor threads: the pose subscriptions (their own callback group) must deliver
    # while configure waits for the first poses in the node's default group
    return run_system(GazeboAdapter, "gazebo_system", args, threads=2)


if __name__ == "__main__":
    raise SystemExit(main())
