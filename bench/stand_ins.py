"""What the vendor benchmarks (bench_natnet, bench_qtm, bench_vrpn) share: a generated
scene file, a vendor stand-in and a system node as installed processes with their logs,
frame numbers missing from a window, and a DDS domain of their own.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from bench.domain import isolate

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "install" / "mocap4r2_drivers" / "lib" / "mocap4r2_drivers"


def own_domain() -> None:
    """A DDS domain of our own, on this host only (unless `python -m bench` chose one)."""
    if "ROS_DOMAIN_ID" not in os.environ:  # run alone, not through `python -m bench`
        isolate()
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"


def generated_scene(path: Path, bodies: int, markers_per_body: int, **settings: Any) -> Path:
    """A scene of ``bodies`` generated bodies written to ``path``: seed 1, no latency
    jitter, no dropped frames, and ``settings`` (rate, latency, noise, ...)."""
    scene = {
        "seed": 1,
        "latency_jitter": 0.0,
        "dropped_frames": 0.0,
        **settings,
        "generated_bodies": {"count": bodies, "markers_per_body": markers_per_body},
    }
    path.write_text(yaml.safe_dump(scene))
    return path


def missing_numbers(numbers: list[int]) -> int:
    """Frame numbers missing between the first and the last of ``numbers``."""
    return (numbers[-1] - numbers[0] + 1 - len(numbers)) if numbers else 0


class StandIn:
    """An installed stand-in (``natnet_simulator``, ...) run with ``args``, its output in
    ``log_path``; started once its log matches ``ready`` (:attr:`ready` is the match)."""

    def __init__(self, executable: str, args: list[str], log_path: Path, ready: str) -> None:
        self.executable = executable
        self.log_path = log_path
        self.log = open(log_path, "w")  # noqa: SIM115 - the stand-in writes to it until stop()
        self.proc = subprocess.Popen(
            [str(INSTALL / executable), *args], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = re.search(ready, log_path.read_text())
            if match:
                self.ready = match
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{executable} did not start: {log_path.read_text()}")

    def stop(self) -> int:
        """Stop; the number of frames the stand-in skipped to keep real time (-1: not said)."""
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
        match = re.search(r"\((\d+) frames skipped to keep real time\)", self.log_path.read_text())
        return int(match.group(1)) if match else -1


class SystemProcess:
    """An installed system executable as node ``node`` in ``namespace`` with parameters
    ``params`` (name -> value as ``-p name:=value`` takes it) and further ``extra``
    ROS arguments, its output in ``log_path``."""

    def __init__(
        self,
        executable: str,
        node: str,
        namespace: str,
        params: dict[str, object],
        log_path: Path,
        extra: tuple[str, ...] = (),
    ) -> None:
        arguments = ["--ros-args", "-r", f"__node:={node}", "-r", f"__ns:={namespace}"]
        for name, value in params.items():
            arguments += ["-p", f"{name}:={value}"]
        self.log_path = log_path
        self.log = open(log_path, "w")  # noqa: SIM115 - the node writes to it until stop()
        self.proc = subprocess.Popen(
            [str(INSTALL / executable), *arguments, *extra], stdout=self.log, stderr=subprocess.STDOUT
        )

    def stop(self) -> None:
        """Terminate it and wait for its end."""
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
