"""The simulated mocap system: a Scene streamed in real time through MocapSystemNode.

It behaves like a real system on a network: frames are due on the wall clock at the
scene's rate and arrive ``latency`` after capture; frames the scene drops never arrive
(their numbers are skipped); a reader that falls behind by more than ``max_backlog``
frames loses the oldest ones, as a full socket buffer would. By default that buffer
holds BACKLOG_SECONDS of frames (at least 8), as a socket's does whatever the rate: a
fixed 8 frames were 4 ms at 2 kHz, less than the scene's own batch computation stalls
the reader (64 frames at once), and cost 0.2-1 % of the frames of a node that kept up.

A scene with ``arms:`` also tracks arms whose link poses come from ROS topics
(geometry_msgs/PoseArray, see simulated/arms.py): the adapter declares them as topic
inputs once ``connect`` has read the scene, and the system node subscribes to them.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from mocap4r2_control.adapter import AdapterError, ConfigurationError, MocapAdapter, TopicInput
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system

from ..impairment import ServerClock, TimeImpairment, TruthLog
from .arms import MAX_LINKS, LinkPosesRefused, SceneArms
from .scene import Scene, SceneError, default_scene_path, unlabeled_cloud

_LOG = logging.getLogger("mocap4r2.simulated")
# what a reader may fall behind by default (see the module docstring)
BACKLOG_SECONDS = 0.1
MIN_BACKLOG = 8
# only the newest link poses matter: a deeper queue, worked off late on a loaded machine,
# would show the arm where it was up to depth / rate seconds ago
LINK_POSES_DEPTH = 1


class SimulatedAdapter(MocapAdapter):
    """A scene YAML streamed in real time as a mocap system."""

    system_type = "sim"
    parameters = (
        ParameterSpec("scene", "", "Scene YAML file; empty: the demo scene shipped in config/."),
        ParameterSpec("seed", -1, "Random seed; -1: the scene file's seed.", min_value=-1),
        ParameterSpec(
            "rate", 0.0, "Frame rate in Hz; 0: the scene file's rate.", min_value=0.0, max_value=10000.0
        ),
        ParameterSpec(
            "max_backlog",
            0,
            "Frames a slow reader may fall behind before frames are lost; "
            f"0: {BACKLOG_SECONDS} s of frames at the scene's rate, at least {MIN_BACKLOG}.",
            min_value=0,
            max_value=100000,
        ),
        ParameterSpec(
            "batch_frames",
            0,
            "Scene frames computed together; 0: from the rate (32 ms of "
            "frames, at most 64); 1: one at a time (the reference of bench_scene).",
            min_value=0,
            max_value=1024,
        ),
        ParameterSpec(
            "publish_labels",
            True,
            "false: send only the point cloud, as a system that cannot label markers (markers "
            "with UNKNOWN_ID and empty names, shuffled; no rigid bodies, no skeletons). Two "
            "systems with the same scene and seed give the truth and the cloud of the same frames.",
        ),
    )

    def __init__(
        self,
        *,
        scene: str = "",
        seed: int = -1,
        rate: float = 0.0,
        max_backlog: int = 0,
        batch_frames: int = 0,
        publish_labels: bool = True,
    ):
        """Each argument is the parameter of its name (``scene``: the scene file, empty for
        the demo scene)."""
        self.scene_path = scene or str(default_scene_path())
        self.seed = None if seed < 0 else seed
        self.rate_override = rate
        self.max_backlog = max_backlog
        self.backlog = max_backlog  # in frames, known once the scene's rate is (connect)
        self.batch_frames = batch_frames
        self.publish_labels = publish_labels
        self.scene: Scene | None = None
        self._start = 0.0
        self._next = 0
        self._stop = threading.Event()
        self.lost_frames = 0
        self.arms: SceneArms | None = None
        self._inputs: tuple[TopicInput, ...] = ()  # the arms' link poses, once connected
        self._refusals_logged: set[str] = set()
        # time as a real installation serves it (scene keys, see mocap4r2_drivers/impairment.py)
        self.impairment = TimeImpairment()
        self.clock: ServerClock | None = None
        self.truth: TruthLog | None = None
        self._released = 0.0  # when the previous frame arrived: deliveries stay in order
        self._jitter_group = -1
        self._jitter = 0.0

    def connect(self) -> AssetNames:
        try:
            scene = Scene.from_file(self.scene_path, seed=self.seed)
            if self.rate_override > 0:
                scene.config["rate"] = self.rate_override
                scene = Scene(scene.config, seed=self.seed)
        except SceneError as exc:
            raise ConfigurationError(str(exc)) from exc
        arms = scene.description.arms
        if self.batch_frames > 0:
            scene.batch_size = self.batch_frames
        self.backlog = self.max_backlog or max(MIN_BACKLOG, round(BACKLOG_SECONDS * scene.rate))
        try:
            impairment = TimeImpairment.from_mapping({**scene.config, "seed": self.seed or 0})
        except ValueError as exc:
            raise ConfigurationError(f"{self.scene_path}: {exc}") from exc
        self.impairment = impairment
        self.clock = None  # the server clock starts with the first stream
        if self.truth is not None:
            self.truth.close()
        self.truth = TruthLog(impairment.truth_log) if impairment.truth_log else None
        self.scene = scene
        self.arms = SceneArms(scene) if arms else None
        self._inputs = self._arm_inputs()
        # a system that sends only its cloud has no assets to name
        return scene.asset_names() if self.publish_labels else AssetNames()

    def topic_inputs(self) -> Sequence[TopicInput]:
        """The arms' link poses, known once ``connect`` has read the scene (the node asks
        again after it); none before, and none for a scene without arms."""
        return self._inputs

    def _arm_inputs(self) -> tuple[TopicInput, ...]:
        arms = self.arms
        if arms is None:
            return ()
        # made once per connect: the same inputs each time the node asks
        return tuple(
            TopicInput(
                arm.spec.link_poses_topic,
                "geometry_msgs/msg/PoseArray",
                LINK_POSES_DEPTH,
                False,
                self._link_poses_of(i),
            )
            for i, arm in enumerate(arms.arms)
        )

    def _link_poses_of(self, index: int) -> Callable[[str, object], None]:
        """The input's deliver: the link poses of arm ``index``."""
        return lambda _topic, msg: self._on_link_poses(index, msg)

    def _on_link_poses(self, index: int, msg) -> None:
        arms = self.arms
        if arms is None:
            return
        n = len(msg.poses)
        positions: np.ndarray | list[tuple[float, float, float]]
        orientations: np.ndarray | list[tuple[float, float, float, float]]
        if n > MAX_LINKS:  # refused by its count: no need to read the poses
            positions, orientations = np.zeros((n, 3)), np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
        else:
            positions = [(p.position.x, p.position.y, p.position.z) for p in msg.poses]
            orientations = [
                (p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w) for p in msg.poses
            ]
        try:
            arms.receive(index, positions, orientations, time.monotonic())
        except LinkPosesRefused as exc:
            reason = str(exc)
            if reason not in self._refusals_logged and len(self._refusals_logged) < 100:
                self._refusals_logged.add(reason)
                _LOG.warning("link poses refused (logged once per reason, counted in status): %s", reason)

    @property
    def nominal_rate(self) -> float:
        return self.scene.rate if self.scene is not None else 0.0

    def start_streaming(self) -> None:
        if self.scene is None:
            raise AdapterError("not connected")
        # frame numbers go on from where they were, as a real system's do across a pause
        self._start = time.time() - self._next / self.scene.rate
        if self.clock is None:
            self.clock = ServerClock(self.impairment, self._start)
        self._stop.clear()

    def stop_streaming(self) -> None:
        self._stop.set()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        scene = self.scene
        if scene is None:
            raise AdapterError("not connected")
        deadline = time.monotonic() + timeout
        while True:
            k = self._next
            now = time.time()
            due_k = int((now - self._start - scene.latency) * scene.rate)
            if due_k - k > self.backlog:
                # the reader is too slow: the oldest frames are gone
                self.lost_frames += due_k - self.backlog - k
                k = due_k - self.backlog
            arrive = self._arrival(scene, k)
            if arrive > now:
                wait = min(arrive - now, deadline - time.monotonic())
                if wait <= 0 or self._stop.wait(wait):
                    return None
                continue
            self._next = k + 1
            self._released = arrive
            if scene.is_dropped(k):
                continue
            frame = scene.frame(k)
            arms = self.arms
            if arms is not None:
                frame = arms.compose(frame, time.monotonic())
            if not self.publish_labels:
                frame = unlabeled_cloud(frame, scene.seed)
            captured = self._start + k / scene.rate
            # the time since the frame arrived (the reader's wake-up, earlier frames of a
            # burst) is the host's, not the network's: latency too, as a driver that reads
            # the kernel's receive time counts it (the scene hands each frame out once)
            frame.latency += max(time.time() - arrive, 0.0)
            if self.clock is not None:
                frame.system_time = self.clock.read(captured)
            if self.truth is not None:
                self.truth.write(k, captured)
            return frame

    def _arrival(self, scene: Scene, k: int) -> float:
        """When frame k arrives: its latency after capture, or, held back in bursts, the
        latency after the burst's last capture plus the burst's exponential jitter; never
        before the previous frame."""
        impairment = self.impairment
        if not impairment.delays:
            return self._start + k / scene.rate + scene.latency
        group = k // impairment.burst
        if group != self._jitter_group:
            # a draw per burst, a function of (seed, burst): reproducible like the scene
            self._jitter_group = group
            mean = impairment.jitter_ms * 1e-3
            rng = random.Random(impairment.seed * 1_000_003 + group)
            self._jitter = rng.expovariate(1.0 / mean) if mean > 0 else 0.0
        last = group * impairment.burst + impairment.burst - 1
        return max(self._start + last / scene.rate + scene.latency + self._jitter, self._released)

    def disconnect(self) -> None:
        self._stop.set()
        self._inputs = ()  # the node unsubscribes them
        if self.truth is not None:
            self.truth.close()
            self.truth = None
        self.scene = None
        self.arms = None

    def status(self) -> dict[str, str]:
        out = {"scene": self.scene_path, "frames_lost_to_backlog": str(self.lost_frames)}
        arms = self.arms
        if arms is not None:
            out.update(arms.counters())
        return out


def main(args: list[str] | None = None) -> int:
    """The simulated_system executable: the adapter under MocapSystemNode until shutdown."""
    return run_system(SimulatedAdapter, "simulated_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
