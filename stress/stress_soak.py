"""Soak: at least 300 000 frames from a simulated_system at 2 kHz with a small scene (a
real process, autostarted), received by a subscriber, while the system's RSS is sampled.

The figure is the RSS slope over frames after a warm-up (the first fifth of the run,
when allocators and DDS histories fill), in KiB per 100 000 frames: a leak of even a few
bytes per frame shows as a steady slope; the target is no growth beyond measurement
noise.
"""

from __future__ import annotations

import time

import psutil

from stress.common import Row, runner, slope, write_scene

FRAMES = 300_000
RATE = 2000.0
TIME_LIMIT_S = 300.0
# noise of RSS sampling (page granularity, allocator arenas): well under a byte per frame
SLOPE_TARGET_KIB = 256.0


def run() -> list[Row]:
    from bench.listener import FrameListener

    procs = runner("soak")
    listener = FrameListener("/stress_soak", other_topics=("markers",))
    try:
        scene = write_scene(procs.tmp_path, rate=RATE, bodies=1)
        proc = procs.start(
            "mocap4r2_drivers",
            "simulated_system",
            name="sim",
            namespace="/stress_soak",
            params={"scene": scene, "autostart": True, "publish_skeletons": False, "qos_depth": 100},
        )
        if not listener.wait_first(timeout=60):
            return [Row("soak: frames received", 0, f">= {FRAMES}", False)]
        system = psutil.Process(proc.pid)
        listener.samples = []
        listener.recording = True
        rss: list[float] = []
        frames: list[float] = []
        first = None
        start = time.monotonic()
        last_number = 0
        while time.monotonic() - start < TIME_LIMIT_S and proc.alive():
            time.sleep(1.0)
            samples = listener.samples
            if not samples:
                continue
            if first is None:
                first = samples[0][2]
            last_number = samples[-1][2]
            rss.append(system.memory_info().rss / 1024.0)
            frames.append(float(last_number - first))
            if last_number - first >= FRAMES:
                break
        elapsed = time.monotonic() - start
        listener.recording = False
        received = len(listener.samples)
        published = last_number - (first or 0) + 1 if first is not None else 0
        warm = [i for i, f in enumerate(frames) if f >= 0.2 * max(frames[-1] if frames else 0, 1)]
        kib_per_100k = (
            1e5 * slope([frames[i] for i in warm], [rss[i] for i in warm]) if len(warm) > 2 else float("nan")
        )
        growth = (rss[-1] - rss[warm[0]]) / 1024.0 if warm else float("nan")
        alive = proc.alive()
        return [
            Row("soak: frames published (frame numbers)", published, f">= {FRAMES}", published >= FRAMES),
            Row("soak: frames received by a Python subscriber (context)", received),
            Row("soak: achieved rate Hz (nominal 2000)", published / elapsed if elapsed else 0.0),
            Row(
                "soak: system RSS at start / end MiB",
                f"{rss[0] / 1024:.1f} / {rss[-1] / 1024:.1f}" if rss else "-",
            ),
            Row(
                "soak: RSS slope after warm-up, KiB per 100 k frames",
                kib_per_100k,
                f"< {SLOPE_TARGET_KIB:.0f}",
                kib_per_100k < SLOPE_TARGET_KIB,
            ),
            Row("soak: RSS growth after warm-up MiB", growth),
            Row("soak: system alive", alive, "True", alive),
        ]
    finally:
        # the publisher first: a listener closed under a 2 kHz stream may not stop its
        # executor thread in time, and a thread left spinning aborts the interpreter at exit
        procs.stop_all()
        listener.close()
