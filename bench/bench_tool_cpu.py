"""CPU of the tool nodes and of idle nodes, against a bare rclpy subscriber.

The simulated system streams the demo scene (4 bodies, markers, a skeleton) at 120 Hz
and at 1 kHz in a namespace of its own; marker_viz, robot_ground_truth and
trajectory_error run as in `make demo` (config/tools.yaml, pointed at that namespace).
Next to each tool, a bare rclpy node subscribes to the same topics with a
SingleThreadedExecutor and does nothing else (bench/bare_subscriber.py): the tool's
ratio to it is what the tool costs beyond receiving its input. Then, with nothing
arriving, an unconfigured system, an auxiliar_system and the three tools (pointed at
topics nobody publishes) show what a node costs when idle.

CPU is user + system time of each process (psutil) over the same window, in % of one
core. Targets: each tool <= 2x its bare subscriber; an idle node <= 1 % of a core.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "install"
TOOLS_CONFIG = ROOT / "config" / "tools.yaml"
SCENE = ROOT / "config" / "demo_scene.yaml"
RATES = (120.0, 1000.0)
WARMUP_S = float(os.environ.get("BENCH_TOOL_CPU_WARMUP", 4.0))
WINDOW_S = float(os.environ.get("BENCH_TOOL_CPU_WINDOW", 8.0))
STARTUP_S = 90.0
TARGET_RATIO = 2.0
TARGET_IDLE = 1.0

RB = "mocap4r2_interfaces/msg/RigidBodies"


def exe(package: str, name: str) -> str:
    path = INSTALL / package / "lib" / package / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is not installed: run `make setup`")
    return str(path)


class Procs:
    def __init__(self):
        self.items: list[tuple[str, subprocess.Popen]] = []

    def start(self, label: str, cmd: list[str], stdout=subprocess.DEVNULL) -> subprocess.Popen:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=stdout, stderr=subprocess.DEVNULL, text=True, start_new_session=True
        )
        self.items.append((label, proc))
        return proc

    def stop(self) -> None:
        for label, proc in self.items:
            if proc.poll() is None:  # the bare subscribers report their rate on SIGTERM
                proc.send_signal(15 if label.startswith("bare:") else 2)
        for _, proc in self.items:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.items.clear()


def simulated_system_cmd(ns: str, rate: float) -> list[str]:
    """The simulated system streaming the bench scene at ``rate`` in namespace ``ns``."""
    return [
        exe("mocap4r2_drivers", "simulated_system"),
        "--ros-args",
        "-r",
        f"__ns:={ns}",
        "-p",
        f"scene:={SCENE}",
        "-p",
        f"rate:={rate}",
        "-p",
        "autostart:=true",
    ]


def tool_cmd(tool: str, ns: str, silent: bool = False) -> list[str]:
    """A tool as `make demo` runs it (its node name is the key of config/tools.yaml),
    with its input topics in namespace ``ns``."""
    args = [exe("mocap4r2_tools", tool), "--ros-args", "--params-file", str(TOOLS_CONFIG)]
    if tool == "marker_viz":
        args += ["-p", f"systems:=['{ns}']", "-p", "discover:=false"]
    elif tool == "robot_ground_truth":
        args += ["-p", f"rigid_bodies_topic:={ns}/rigid_bodies"]
    elif tool == "trajectory_error":
        args += ["-p", f"gt_topic:={ns}/rigid_bodies"]  # estimate: /robot_ground_truth/odom
    return args


def tool_topics(tool: str, ns: str) -> list[str]:
    """The topics the tool subscribes to, for its bare twin."""
    if tool == "marker_viz":
        return [
            f"{ns}/markers:mocap4r2_interfaces/msg/Markers",
            f"{ns}/rigid_bodies:{RB}",
            f"{ns}/skeletons:mocap4r2_interfaces/msg/Skeletons",
        ]
    if tool == "robot_ground_truth":
        return [f"{ns}/rigid_bodies:{RB}"]
    # trajectory_error: best effort, as config/tools.yaml sets it
    return [
        f"{ns}/rigid_bodies:{RB}:best_effort",
        "/robot_ground_truth/odom:nav_msgs/msg/Odometry:best_effort",
    ]


TOOLS = ("marker_viz", "robot_ground_truth", "trajectory_error")


def cpu_percent(procs: dict[str, subprocess.Popen], window: float) -> dict[str, float]:
    handles = {label: psutil.Process(p.pid) for label, p in procs.items()}
    before = {label: sum(h.cpu_times()[:2]) for label, h in handles.items()}
    start = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - start
    return {label: 100.0 * (sum(h.cpu_times()[:2]) - before[label]) / elapsed for label, h in handles.items()}


def wait_ready(proc: subprocess.Popen, label: str, timeout: float = STARTUP_S) -> None:
    """Bare subscribers print READY once every topic delivered (so the tools get data too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == "READY":
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{label} ended before its topics delivered")
    raise RuntimeError(f"{label}: no message on every topic within {timeout} s")


def streaming(rate: float) -> dict[str, float]:
    ns = f"/bench_{uuid.uuid4().hex[:6]}"
    procs = Procs()
    try:
        sim = procs.start("simulated_system", simulated_system_cmd(ns, rate))
        watched = {"simulated_system": sim}
        bares = {}
        for tool in TOOLS:
            watched[tool] = procs.start(tool, tool_cmd(tool, ns))
            bare = procs.start(
                f"bare:{tool}",
                [sys.executable, "-m", "bench.bare_subscriber", *tool_topics(tool, ns)],
                stdout=subprocess.PIPE,
            )
            bares[tool] = bare
            watched[f"bare:{tool}"] = bare
        for tool, bare in bares.items():
            wait_ready(bare, f"bare subscriber of {tool}")
        time.sleep(WARMUP_S)
        dead = [label for label, p in watched.items() if p.poll() is not None]
        if dead:
            raise RuntimeError(f"ended during the run: {dead}")
        cpu = cpu_percent(watched, WINDOW_S)
    finally:
        procs.stop()
    for tool, bare in bares.items():
        rates = [
            float(line.split()[1]) for line in bare.stdout.read().splitlines() if line.startswith("RATE ")
        ]
        cpu[f"rate:{tool}"] = rates[0] if rates else float("nan")
    return cpu


def idle() -> dict[str, float]:
    ns = f"/bench_idle_{uuid.uuid4().hex[:6]}"
    procs = Procs()
    try:
        watched = {
            "simulated_system (unconfigured)": procs.start(
                "sim", [exe("mocap4r2_drivers", "simulated_system"), "--ros-args", "-r", f"__ns:={ns}"]
            ),
            "auxiliar_system": procs.start(
                "aux", [exe("mocap4r2_control", "auxiliar_system"), "--ros-args", "-r", f"__ns:={ns}"]
            ),
        }
        for tool in TOOLS:
            watched[f"{tool} (no data)"] = procs.start(tool, tool_cmd(tool, ns))
        # start-up (imports, DDS discovery) is not idling: wait until each process has
        # been quiet, then measure
        handles = {label: psutil.Process(p.pid) for label, p in watched.items()}
        deadline = time.monotonic() + STARTUP_S
        last = {label: sum(h.cpu_times()[:2]) for label, h in handles.items()}
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = {label: sum(h.cpu_times()[:2]) for label, h in handles.items()}
            busy = [label for label in now if now[label] - last[label] > 0.05]
            last = now
            if not busy:
                break
        time.sleep(WARMUP_S)
        return cpu_percent(watched, WINDOW_S)
    finally:
        procs.stop()


def run() -> None:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    print(
        f"CPU in % of one core over {WINDOW_S:.0f} s (after {WARMUP_S:.0f} s of warm-up); "
        f"targets: tool <= {TARGET_RATIO:g}x its bare subscriber, idle node <= {TARGET_IDLE:g} %"
    )
    print("(msg/s: messages per second the bare subscriber received on all its topics)")
    print(f"{'rate':>7}  {'process':32s} {'CPU %':>7} {'bare %':>7} {'ratio':>6}  {'target':6s} {'msg/s':>7}")
    for rate in RATES:
        cpu = streaming(rate)
        print(f"{rate:5.0f} Hz  {'simulated_system (streaming)':32s} {cpu['simulated_system']:7.1f}")
        for tool in TOOLS:
            bare = cpu[f"bare:{tool}"]
            ratio = cpu[tool] / bare if bare > 0 else float("inf")
            verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
            print(
                f"{rate:5.0f} Hz  {tool:32s} {cpu[tool]:7.1f} {bare:7.1f} {ratio:6.2f}  {verdict:6s} "
                f"{cpu[f'rate:{tool}']:7.0f}"
            )
    for label, value in idle().items():
        verdict = "met" if value <= TARGET_IDLE else "MISSED"
        print(f"{'idle':>7}  {label:32s} {value:7.2f} {'':7s} {'':6s}  {verdict}")


if __name__ == "__main__":
    from bench.domain import isolate

    print(f"ROS_DOMAIN_ID={isolate()}")
    run()
