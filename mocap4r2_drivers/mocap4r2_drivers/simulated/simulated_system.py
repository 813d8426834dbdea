"""The simulated mocap system: a Scene streamed in real time through MocapSystemNode.

It behaves like a real system on a network: frames are due on the wall clock at the
scene's rate and arrive ``latency`` after capture; frames the scene drops never arrive
(their numbers are skipped); a reader that falls behind by more than ``max_backlog``
frames loses the oldest ones, as a full socket buffer would.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Mapping

from mocap4r2_control.adapter import AdapterError, ConfigurationError, MocapAdapter
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.system_node import run_system

from .scene import Scene, SceneError, default_scene_path


class SimulatedAdapter(MocapAdapter):
    system_type = "sim"
    parameters = (
        ParameterSpec("scene", "", "Scene YAML file; empty: the demo scene shipped in config/."),
        ParameterSpec("seed", -1, "Random seed; -1: the scene file's seed.", min_value=-1),
        ParameterSpec("rate", 0.0, "Frame rate in Hz; 0: the scene file's rate.", min_value=0.0, max_value=10000.0),
        ParameterSpec("max_backlog", 8, "Frames a slow reader may fall behind before frames are lost.",
                      min_value=1, max_value=100000),
    )

    def __init__(self, scene_path: str, seed: int, rate: float, max_backlog: int):
        self.scene_path = scene_path or str(default_scene_path())
        self.seed = None if seed < 0 else seed
        self.rate_override = rate
        self.max_backlog = max_backlog
        self.scene: Scene | None = None
        self._start = 0.0
        self._next = 0
        self._stop = threading.Event()
        self.lost_frames = 0

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> "SimulatedAdapter":
        return cls(values["scene"], values["seed"], values["rate"], values["max_backlog"])

    def connect(self) -> AssetNames:
        try:
            scene = Scene.from_file(self.scene_path, seed=self.seed)
            if self.rate_override > 0:
                scene.config["rate"] = self.rate_override
                scene = Scene(scene.config, seed=self.seed)
        except SceneError as exc:
            raise ConfigurationError(str(exc)) from exc
        self.scene = scene
        return scene.asset_names()

    @property
    def nominal_rate(self) -> float:
        return self.scene.rate if self.scene is not None else 0.0

    def start_streaming(self) -> None:
        # frame numbers go on from where they were, as a real system's do across a pause
        self._start = time.time() - self._next / self.scene.rate
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
            if due_k - k > self.max_backlog:
                # the reader is too slow: the oldest frames are gone
                self.lost_frames += due_k - self.max_backlog - k
                k = due_k - self.max_backlog
            arrive = self._start + k / scene.rate + scene.latency
            if arrive > now:
                wait = min(arrive - now, deadline - time.monotonic())
                if wait <= 0 or self._stop.wait(wait):
                    return None
                continue
            self._next = k + 1
            if scene.is_dropped(k):
                continue
            frame = scene.frame(k)
            return frame

    def disconnect(self) -> None:
        self._stop.set()
        self.scene = None

    def status(self) -> dict[str, str]:
        return {"scene": self.scene_path, "frames_lost_to_backlog": str(self.lost_frames)}


def main(args: list[str] | None = None) -> int:
    return run_system(SimulatedAdapter, "simulated_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
