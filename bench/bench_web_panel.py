"""CPU of the web panel with 3 browser clients, and the latency from a frame to a client.

The simulated system streams the demo scene (4 bodies, markers, a skeleton) at 120 Hz and
at 1 kHz; the web panel runs as a process and three WebSocket clients (aiohttp, here) ask
it for that system's live view at 30 frames/s. Next to it, a bare rclpy node subscribes to
the same three topics and does nothing else (bench/bare_subscriber.py), the reference: the
panel's ratio to it is what the panel costs beyond receiving its input.

Latency: the client's receive time minus the frame's capture stamp (the simulated system
stamps capture, and reports 4 ms latency, both in it), per frame received.

Targets: the panel's CPU <= 15 % of a core at both rates; latency p99 <= 100 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from math import nan
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import psutil

from bench.bench_tool_cpu import Procs, exe, simulated_system_cmd, wait_ready

RATES = (120.0, 1000.0)
CLIENTS = 3
CLIENT_RATE = 30.0
WARMUP_S = float(os.environ.get("BENCH_WEB_PANEL_WARMUP", 4.0))
WINDOW_S = float(os.environ.get("BENCH_WEB_PANEL_WINDOW", 8.0))
TARGET_CPU = 15.0
TARGET_P99_MS = 100.0
TYPES = {
    "markers": "mocap4r2_interfaces/msg/Markers",
    "rigid_bodies": "mocap4r2_interfaces/msg/RigidBodies",
    "skeletons": "mocap4r2_interfaces/msg/Skeletons",
}


def panel_port(proc: subprocess.Popen, timeout: float = 90.0) -> tuple[int, str]:
    """The port the panel listens on and its token, from the URL it prints."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"web_panel: open http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line)
        if found:
            return int(found.group(1)), found.group(2)
        if proc.poll() is not None:
            raise RuntimeError("web_panel ended before printing its URL")
    raise RuntimeError("web_panel printed no URL")


async def clients(
    port: int, token: str, system: str, seconds: float
) -> tuple[list[tuple[float, ...]], list[int]]:
    """Three clients for ``seconds``: each frame's (received here, capture stamp, taken by
    the panel, encoded by the panel) wall times, and each client's frame count."""
    frames: list[tuple[float, ...]] = []
    counts = [0] * CLIENTS

    async def one(index: int, http: aiohttp.ClientSession) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with http.ws_connect(f"ws://127.0.0.1:{port}/ws", headers=headers) as ws:
            await ws.send_str(json.dumps({"system": system, "rate": CLIENT_RATE}))
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    message = await ws.receive(timeout=max(0.01, end - time.monotonic()))
                except TimeoutError:
                    break
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                now = time.time()
                frame = json.loads(message.data)
                if frame.get("type") == "frame":
                    counts[index] += 1
                    frames.append((now, frame["stamp"], frame.get("taken", nan), frame.get("sent", nan)))

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(one(i, http) for i in range(CLIENTS)))
    return frames, counts


def reference_main(argv: list[str]) -> int:
    """The reference process: a bare rclpy subscriber of the given ``topic:type`` pairs
    (a SingleThreadedExecutor, a callback per message, as bench/bare_subscriber.py) that
    also notes each message's receive time and capture stamp: the latency a subscriber
    gets with nothing in between, which the panel cannot beat. Written to ``argv[0]``
    (numpy .npy, rows of receive time and latency in s) when stopped (SIGINT)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data

    from bench.bare_subscriber import message_type

    out, specs = argv[0], argv[1:]
    rclpy.init()
    node = rclpy.create_node("web_panel_reference")
    rows: list[tuple[float, float]] = []
    waiting = {spec.split(":")[0] for spec in specs}

    def callback_for(topic: str) -> Any:
        def on_message(msg: Any) -> None:
            now = time.time()
            rows.append((now, now - (msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)))
            if topic in waiting:
                waiting.discard(topic)
                if not waiting:
                    print("READY", flush=True)

        return on_message

    for spec in specs:
        topic, type_name = spec.split(":")
        # the panel's own QoS (sensor data) on the same topics
        node.create_subscription(message_type(type_name), topic, callback_for(topic), qos_profile_sensor_data)
    executor = SingleThreadedExecutor()
    executor.add_node(node)

    def save(*_: Any) -> None:
        np.save(out, np.asarray(rows, dtype=float).reshape(-1, 2))
        os._exit(0)

    # stopped with SIGINT (bench_tool_cpu.Procs): written then, whatever the executor does
    signal.signal(signal.SIGINT, save)
    signal.signal(signal.SIGTERM, save)
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        executor.spin()
    save()
    return 0


def behind(reference: np.ndarray, received: np.ndarray, stamp: np.ndarray) -> np.ndarray:
    """How far each frame a client received is behind the newest capture the reference
    had received by then (s): what the panel adds, frame by frame. Not a difference of
    percentiles: the reference's latency is per message, the panel samples the newest at
    its clients' instants, and when the source runs late its messages come fewer and
    older, so the two weight the same stream differently. Frames received before the
    reference's first message are left out."""
    if reference.size == 0 or received.size == 0:
        return np.zeros(0)
    order = np.argsort(reference[:, 0], kind="stable")
    at = reference[order, 0]
    newest_stamp = np.maximum.accumulate(at - reference[order, 1])
    index = np.searchsorted(at, received, side="right") - 1
    known = index >= 0
    return newest_stamp[index[known]] - stamp[known]


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    if values.size == 0:
        return nan, nan
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def measure(rate: float) -> dict[str, float]:
    ns = f"/bench_web_{uuid.uuid4().hex[:6]}"
    system = f"{ns}/simulated_system"
    reference_file = Path(tempfile.mkdtemp(prefix="bench_web_panel_")) / "reference.npy"
    procs = Procs()
    try:
        source = procs.start("simulated_system", simulated_system_cmd(ns, rate))
        panel = procs.start(
            "web_panel",
            [exe("mocap4r2_tools", "web_panel"), "--ros-args", "-p", "port:=0", "-p", "sessions_dir:=/tmp"],
            stdout=subprocess.PIPE,
        )
        reference = procs.start(
            "reference",
            [
                sys.executable,
                "-m",
                "bench.bench_web_panel",
                str(reference_file),
                *(f"{ns}/{t}:{k}" for t, k in TYPES.items()),
            ],
            stdout=subprocess.PIPE,
        )
        port, token = panel_port(panel)
        wait_ready(reference, "reference subscriber")
        # the clients connect and run through the warm-up and the window
        handles = {
            "panel": psutil.Process(panel.pid),
            "bare": psutil.Process(reference.pid),
            "source": psutil.Process(source.pid),
        }
        result: dict[str, float] = {}
        window: list[float] = []

        async def run() -> tuple[list[tuple[float, ...]], list[int]]:
            task = asyncio.create_task(clients(port, token, system, WARMUP_S + WINDOW_S))
            await asyncio.sleep(WARMUP_S)
            before = {k: sum(h.cpu_times()[:2]) for k, h in handles.items()}
            start = time.monotonic()
            window.append(time.time())
            await asyncio.sleep(WINDOW_S)
            elapsed = time.monotonic() - start
            for k, h in handles.items():
                result[k] = 100.0 * (sum(h.cpu_times()[:2]) - before[k]) / elapsed
            return await task

        frames, counts = asyncio.run(run())
    finally:
        procs.stop()
    # latencies in the window only (the warm-up holds connection and discovery transients)
    got = np.asarray(frames, dtype=float).reshape(-1, 4)
    got = got[got[:, 0] >= window[0]] if window else got[:0]
    received, stamp, taken, sent = (got[:, i] for i in range(4))
    ms = 1000.0
    result["p50_ms"], result["p99_ms"] = _percentiles((received - stamp) * ms)
    # the hops: capture to the panel's take, take to the JSON build (the wait for a
    # client's turn), the build to the client's receive (send, socket, client loop)
    for name, values in (("take", taken - stamp), ("wait", sent - taken), ("deliver", received - sent)):
        result[f"{name}_p50_ms"], result[f"{name}_p99_ms"] = _percentiles(values * ms)
    rows = np.load(reference_file) if reference_file.exists() else np.zeros((0, 2))
    result["behind_p50_ms"], result["behind_p99_ms"] = _percentiles(behind(rows, received, stamp) * ms)
    rows = rows[rows[:, 0] >= window[0]] if window else rows[:0]
    result["ref_p50_ms"], result["ref_p99_ms"] = _percentiles(rows[:, 1] * ms)
    shutil.rmtree(reference_file.parent, ignore_errors=True)
    result["frames_per_client_s"] = float(np.mean(counts)) / (WARMUP_S + WINDOW_S)
    return result


def run() -> None:
    print(
        f"web panel: {CLIENTS} WebSocket clients at {CLIENT_RATE:g} frames/s, demo scene; "
        f"CPU in % of one core over {WINDOW_S:g} s; "
        f"targets CPU <= {TARGET_CPU:g} %, p99 <= {TARGET_P99_MS:g} ms"
    )
    print(
        "latency: capture stamp to a client's receive; ref: a bare subscriber's, per message "
        "(same topics, same run); behind: how far each frame a client got is behind the newest "
        "capture the bare subscriber had by then (what the panel adds); hops (p99): take = "
        "capture to the panel's take, wait = take to the JSON build, deliver = build to the "
        "client's receive; sim %: the simulated system's CPU (when it cannot keep up, its frames "
        "leave late for every subscriber)"
    )
    print(
        f"{'input':>8} {'panel %':>8} {'bare %':>7} {'ratio':>6} {'sim %':>6} {'frames/s/client':>16} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'ref p99':>8} {'behind p50/p99':>15} "
        f"{'take':>6} {'wait':>6} {'deliver':>8}  met  (p50 ms: ref take wait deliver)"
    )
    for rate in RATES:
        r = measure(rate)
        ratio = r["panel"] / r["bare"] if r["bare"] > 0 else nan
        met = r["panel"] <= TARGET_CPU and r["p99_ms"] <= TARGET_P99_MS
        print(
            f"{rate:>6.0f}Hz {r['panel']:>8.1f} {r['bare']:>7.1f} {ratio:>6.2f} {r['source']:>6.1f} "
            f"{r['frames_per_client_s']:>16.1f} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} "
            f"{r['ref_p99_ms']:>8.1f} {r['behind_p50_ms']:>7.1f}/{r['behind_p99_ms']:<7.1f} "
            f"{r['take_p99_ms']:>6.1f} {r['wait_p99_ms']:>6.1f} {r['deliver_p99_ms']:>8.1f}  "
            f"{'yes' if met else 'NO ':<3}  ({r['ref_p50_ms']:.1f} {r['take_p50_ms']:.1f} "
            f"{r['wait_p50_ms']:.1f} {r['deliver_p50_ms']:.1f})",
            flush=True,
        )


if __name__ == "__main__":
    raise SystemExit(reference_main(sys.argv[1:]))
