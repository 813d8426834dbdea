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
import json
import os
import re
import subprocess
import sys
import time
import uuid

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


def panel_port(proc: subprocess.Popen, timeout: float = 90.0) -> int:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"web_panel: open http://127\.0\.0\.1:(\d+)/", line)
        if found:
            return int(found.group(1))
        if proc.poll() is not None:
            raise RuntimeError("web_panel ended before printing its URL")
    raise RuntimeError("web_panel printed no URL")


async def clients(port: int, system: str, seconds: float) -> tuple[list[float], list[int]]:
    """Three clients for ``seconds``: every frame's latency (s) and each client's count."""
    latencies: list[float] = []
    counts = [0] * CLIENTS

    async def one(index: int, http: aiohttp.ClientSession) -> None:
        async with http.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
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
                    latencies.append(now - frame["stamp"])

    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(one(i, http) for i in range(CLIENTS)))
    return latencies, counts


def measure(rate: float) -> dict[str, float]:
    ns = f"/bench_web_{uuid.uuid4().hex[:6]}"
    system = f"{ns}/simulated_system"
    procs = Procs()
    try:
        procs.start("simulated_system", simulated_system_cmd(ns, rate))
        panel = procs.start(
            "web_panel",
            [exe("mocap4r2_tools", "web_panel"), "--ros-args", "-p", "port:=0", "-p", "sessions_dir:=/tmp"],
            stdout=subprocess.PIPE,
        )
        bare = procs.start(
            "bare",
            [sys.executable, "-m", "bench.bare_subscriber", *(f"{ns}/{t}:{k}" for t, k in TYPES.items())],
            stdout=subprocess.PIPE,
        )
        port = panel_port(panel)
        wait_ready(bare, "bare subscriber")
        # the clients connect and run through the warm-up and the window
        handles = {"panel": psutil.Process(panel.pid), "bare": psutil.Process(bare.pid)}
        result: dict[str, float] = {}

        async def run() -> tuple[list[float], list[int]]:
            task = asyncio.create_task(clients(port, system, WARMUP_S + WINDOW_S))
            await asyncio.sleep(WARMUP_S)
            before = {k: sum(h.cpu_times()[:2]) for k, h in handles.items()}
            start = time.monotonic()
            await asyncio.sleep(WINDOW_S)
            elapsed = time.monotonic() - start
            for k, h in handles.items():
                result[k] = 100.0 * (sum(h.cpu_times()[:2]) - before[k]) / elapsed
            return await task

        latencies, counts = asyncio.run(run())
    finally:
        procs.stop()
    lat = np.asarray(latencies) * 1000.0 if latencies else np.asarray([np.nan])
    result["p50_ms"] = float(np.percentile(lat, 50))
    result["p99_ms"] = float(np.percentile(lat, 99))
    result["frames_per_client_s"] = float(np.mean(counts)) / (WARMUP_S + WINDOW_S)
    return result


def run() -> None:
    print(
        f"web panel: {CLIENTS} WebSocket clients at {CLIENT_RATE:g} frames/s, demo scene; "
        f"CPU in % of one core over {WINDOW_S:g} s; "
        f"targets CPU <= {TARGET_CPU:g} %, p99 <= {TARGET_P99_MS:g} ms"
    )
    print(
        f"{'input':>8} {'panel %':>8} {'bare %':>7} {'ratio':>6} {'frames/s/client':>16} "
        f"{'p50 ms':>7} {'p99 ms':>7}  met"
    )
    for rate in RATES:
        r = measure(rate)
        ratio = r["panel"] / r["bare"] if r["bare"] > 0 else float("nan")
        met = r["panel"] <= TARGET_CPU and r["p99_ms"] <= TARGET_P99_MS
        print(
            f"{rate:>6.0f}Hz {r['panel']:>8.1f} {r['bare']:>7.1f} {ratio:>6.2f} "
            f"{r['frames_per_client_s']:>16.1f} {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f}  "
            f"{'yes' if met else 'NO'}",
            flush=True,
        )
