"""The fault section's tracker case (stress_faults.py): marker_tracker started on a
read-only install.

Each start is a real marker_tracker process in a private mount namespace
(test/fixtures/read_only_mounts.py: ``unshare -m``, the repository bind-mounted
read-only, HOME inside it, so numba has no cache of its own), fed 100 Hz markers of one
4-marker body by this process, and STARTed through the control plane with its own 10 s
timeout:

* **nothing writable** (/tmp and /var/tmp read-only too): the kernels are compiled in
  every start, without a cache. Targets: it starts (announced, no traceback, the cache
  note said once), START answered within the 10 s, the first tracked frame within 30 s of
  the tracker's CPU time from its start (compiling is 11-16 s on 2 quiet cores).
* **only the temporary directory writable**: the first start compiles into the private
  cache, the second loads it. Target: the second start's first tracked frame within 5 s of
  its CPU time.

Targets are the tracker's CPU seconds, not wall seconds: on this shared 2-core machine the
wall time is the CPU time divided by the share of a core the load leaves (given as
context, with the load average).

ROS's own file logging needs a writable ~/.ros, so the nothing-writable start turns it off
(``--disable-external-lib-logs``), as such a deployment must (or set ROS_LOG_DIR).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml

from stress.common import Row, harness, runner

from read_only_mounts import NO_HOME, ROOT, TEMPS, read_only, why_not_here  # isort: skip  # test/fixtures

LAYOUT = np.array([[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]])
ANNOUNCE_WAIT_S = 240.0
# CPU seconds of the tracker process from its start to its first tracked frame: the wall
# time is that divided by the share of a core the machine's load leaves it (102 s wall at
# load 10 on 2 cores for ~20 CPU s), so the targets are CPU time, the wall time context
FIRST_FRAME_TARGET_CPU_S = 30.0  # nothing writable: compiled in this start (11-16 s at rest)
CACHED_FIRST_FRAME_TARGET_CPU_S = 5.0  # the private cache of an earlier start
START_TIMEOUT_S = 10.0  # the control plane's
NOTE = "compiled without a cache"


def _bodies(directory: Path) -> Path:
    path = directory / "bodies.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "layouts": {"cf": LAYOUT.tolist()},
                "bodies": [{"name": "solo", "id": 1, "layout": "cf", "initial_position": [0.5, 0.0, 1.0]}],
            }
        )
    )
    return path


class _Cloud(threading.Thread):
    """Markers of one slowly moving body at 100 Hz on ``topic`` until stopped."""

    def __init__(self, ros, topic: str) -> None:
        super().__init__(daemon=True)
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from mocap4r2_interfaces.msg import Markers

        self.publisher = ros.publisher(
            topic, Markers, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        )
        self.stop = threading.Event()

    def run(self) -> None:
        from markers_messages import markers_message  # test/fixtures

        number = 0
        while not self.stop.wait(0.01):
            number += 1
            self.publisher.publish(
                markers_message(number, LAYOUT + [0.5 + 0.0001 * (number % 1000), 0.0, 1.0])
            )


def _start(ros, procs, directory: Path, name: str, wrap, env: dict[str, str]) -> dict[str, object]:
    """One tracker start: seconds to its announcement, to START's answer, to its first
    tracked frame (all from the process's start), and its log."""
    from support import executable

    from mocap4r2_control.control_plane import SYSTEMS_QOS, SYSTEMS_TOPIC, ControlClient
    from mocap4r2_interfaces.msg import MocapSystemInfo, RigidBodies

    namespace = f"/stress_ro_{name}"
    system = f"{namespace}/tracker"
    tracked = ros.subscribe(f"{namespace}/rigid_bodies", RigidBodies)
    systems = ros.subscribe(SYSTEMS_TOPIC, MocapSystemInfo, SYSTEMS_QOS)
    cloud = _Cloud(ros, f"{namespace}/cloud")
    cloud.start()
    command = [
        str(executable("mocap4r2_tools", "marker_tracker")),
        "--ros-args",
        *("-r", "__node:=tracker", "-r", f"__ns:={namespace}"),
        *("-p", f"markers_topic:={namespace}/cloud", "-p", f"bodies:={_bodies(directory)}"),
    ]
    began = time.monotonic()
    proc = procs.start_command(wrap(command), label=name, env=env)
    out: dict[str, object] = {"announced_s": None, "start_s": None, "start_ok": False, "first_frame_s": None}
    client = ControlClient(ros.node)
    try:
        systems.wait_for(lambda m: m.system == system, timeout=ANNOUNCE_WAIT_S)
        out["announced_s"] = time.monotonic() - began
        asked = time.monotonic()
        result = client.start(systems=[system], timeout=START_TIMEOUT_S)
        out["start_s"] = time.monotonic() - asked
        out["start_ok"] = result.ok
        tracked.wait_for(lambda m: m.rigid_bodies and m.rigid_bodies[0].tracking_valid, timeout=60)
        out["first_frame_s"] = time.monotonic() - began
        out["first_frame_cpu_s"] = _cpu_seconds(proc.pid)
    except AssertionError as exc:  # a wait that timed out: the figures left None say where
        out["error"] = str(exc)[:200]
    finally:
        client.destroy()
        cloud.stop.set()
        cloud.join(2)
        out["alive"] = proc.alive()
        proc.stop()
        out["log"] = proc.log()
    return out


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) of process ``pid`` so far (unshare and sh exec into the
    tracker: one pid), from /proc; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _seconds(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else "never"


def _within(value: object, limit: float) -> bool:
    return isinstance(value, float) and value <= limit


def _budget(figure: str, value: object, limit: float) -> Row:
    """A figure in seconds against its upper limit."""
    return Row(figure, _seconds(value), f"<= {limit:g}", _within(value, limit))


def read_only_start() -> list[Row]:
    """The rows of the case (see the module docstring)."""
    reason = why_not_here()
    if reason is not None:
        return [Row("tracker read-only start: a private mount namespace", reason[:60], "possible", False)]
    ros = harness()
    procs = runner("tracker_ro")
    directory = Path(tempfile.mkdtemp(prefix="mocap4r2-stress-tracker-ro-"))
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR")}
    rows = [Row("tracker read-only: load average at the start", f"{os.getloadavg()[0]:.1f}")]
    try:
        bare = _start(
            ros,
            procs,
            directory,
            "none",
            lambda c: read_only([*c, "--disable-external-lib-logs"], [str(ROOT), *TEMPS]),
            dict(base, HOME=NO_HOME),
        )
        log = str(bare["log"])
        started = bool(bare["alive"]) and bare["announced_s"] is not None and "Traceback" not in log
        rows += [
            Row("tracker, nothing writable: starts (announced, no traceback)", started, "True", started),
            Row("tracker, nothing writable: cache note said", log.count(NOTE), "1", log.count(NOTE) == 1),
            Row("tracker, nothing writable: announced after s", _seconds(bare["announced_s"])),
            Row(
                "tracker, nothing writable: START answered in s",
                _seconds(bare["start_s"]) + ("" if bare["start_ok"] else " (failed)"),
                f"ok, <= {START_TIMEOUT_S:g}",
                bool(bare["start_ok"]) and _within(bare["start_s"], START_TIMEOUT_S),
            ),
            Row(
                "tracker, nothing writable: first tracked frame after s (wall)",
                _seconds(bare["first_frame_s"]),
            ),
            _budget(
                "tracker, nothing writable: first tracked frame after CPU s",
                bare.get("first_frame_cpu_s"),
                FIRST_FRAME_TARGET_CPU_S,
            ),
        ]
        temp = directory / "tmp"
        temp.mkdir()
        env = dict(base, HOME=NO_HOME, TMPDIR=str(temp), ROS_LOG_DIR=str(directory / "ros_log"))
        starts = [
            _start(ros, procs, directory, f"private{i}", lambda c: read_only(c, [str(ROOT)]), env)
            for i in (1, 2)
        ]
        first, second = starts
        rows += [
            Row(
                "tracker, temp writable: 1st start (compiles) first frame CPU s",
                _seconds(first.get("first_frame_cpu_s")),
            ),
            Row(
                "tracker, temp writable: 2nd start (private cache) first frame s (wall)",
                _seconds(second["first_frame_s"]),
            ),
            _budget(
                "tracker, temp writable: 2nd start (private cache) first frame CPU s",
                second.get("first_frame_cpu_s"),
                CACHED_FIRST_FRAME_TARGET_CPU_S,
            ),
            Row("tracker read-only: load average at the end", f"{os.getloadavg()[0]:.1f}"),
        ]
    finally:
        procs.stop_all()
        ros.close()
    return rows
