"""The simulated mocap system's scene: cost of a frame, and the rate a node sustains.

1. Microseconds per frame of the demo scene computed one frame at a time
   (``Scene.frames(k, 1)``, the per-frame path) and in batches (``Scene.frame(k)``, which
   computes a batch of frames together: 64 at 2 kHz), in this process, and their ratio.
2. ``simulated_system`` (the installed executable) streaming the demo scene at 2000 Hz,
   batched (the default, 64 frames at 2 kHz) and one frame at a time (``batch_frames: 1``), received by a raw
   subscriber (bench/listener.py): achieved rate, frames received / frames due (the scene's
   own drops excluded from the due ones), gaps, CPU per frame of the system process.
Prints figures and ratios; asserts nothing about speed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.domain import isolate  # noqa: F401  (puts test/fixtures on sys.path)
from bench.listener import FrameListener, measure_process

ROOT = Path(__file__).resolve().parents[1]
SCENE = ROOT / "config" / "demo_scene.yaml"
FRAMES = 2000
RATE = 2000.0
WARMUP_S = 2.0
MEASURE_S = 4.0


def per_frame_costs() -> None:
    from mocap4r2_drivers.simulated.scene import Scene

    scene = Scene.from_file(SCENE)
    # at the rate streamed live below: the batch size follows the rate (the file's
    # 120 Hz would give batches of 4, not the 64 of 2 kHz)
    scene.config["rate"] = RATE
    scene = Scene(scene.config)
    scene.frames(0, 1)  # first-call costs (imports, caches) outside the timing
    best_single = best_batched = float("inf")
    for repeat in range(3):
        base = 100_000 * (repeat + 1)
        t0 = time.perf_counter()
        for k in range(base, base + FRAMES):
            scene.frames(k, 1)
        t1 = time.perf_counter()
        for k in range(base + FRAMES, base + 2 * FRAMES):
            scene.frame(k)
        t2 = time.perf_counter()
        best_single = min(best_single, (t1 - t0) / FRAMES * 1e6)
        best_batched = min(best_batched, (t2 - t1) / FRAMES * 1e6)
    print(
        f"demo scene ({len(scene.description.bodies)} bodies, {len(scene.description.skeletons)} skeleton) "
        "at "
        f"{RATE:.0f} Hz, best of 3 x {FRAMES} frames:"
    )
    print(f"  one frame at a time: {best_single:8.1f} us/frame")
    print(f"  batches of {scene.batch_size:3d}:      {best_batched:8.1f} us/frame")
    print(
        f"  => batched is {best_single / best_batched:.1f}x faster (per-frame / batched); "
        f"2000 Hz leaves {1e6 / RATE:.0f} us per frame for scene and publishing together"
    )


def live(batch_frames: int, receiver: FrameListener) -> dict:
    from support import executable

    from mocap4r2_drivers.simulated.scene import Scene

    cmd = [
        str(executable("mocap4r2_drivers", "simulated_system")),
        "--ros-args",
        "-r",
        "__ns:=/bench",
        "-r",
        "__node:=scene_bench",
        "-p",
        f"scene:={SCENE}",
        "-p",
        f"rate:={RATE}",
        "-p",
        "autostart:=true",
        "-p",
        f"batch_frames:={batch_frames}",
        "-p",
        "publish_tf:=false",
    ]
    samples, cpu = measure_process(cmd, receiver, WARMUP_S, MEASURE_S, cwd=ROOT)
    if len(samples) < 10:
        return {}
    scene = Scene.from_file(SCENE)
    numbers = [s[2] for s in samples]
    due = [k for k in range(numbers[0], numbers[-1] + 1) if not scene.is_dropped(k)]
    received = set(numbers)
    gaps = sum(1 for k in due if k not in received)
    span = samples[-1][0] - samples[0][0]
    return {
        "rate": (len(samples) - 1) / span,
        "received": len(received),
        "due": len(due),
        "gaps": gaps,
        "numbers_rate": (numbers[-1] - numbers[0]) / span,
        "cpu_us": 1e6 * cpu / max(numbers[-1] - numbers[0] + 1, 1),
    }


def run() -> None:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    per_frame_costs()
    print(
        f"\nsimulated_system, demo scene at {RATE:.0f} Hz, {MEASURE_S:.0f} s after {WARMUP_S:.0f} s warm-up:"
    )
    receiver = FrameListener()
    results = {}
    try:
        for batch in (0, 1):
            r = live(batch, receiver)
            results[batch] = r
            if not r:
                print(f"  batch_frames {batch:3d}: no frames received")
                continue
            print(
                f"  batch_frames {batch:3d}{' (auto: 64)' if batch == 0 else ' (one at a time)'}: achieved "
                f"{r['rate']:7.1f} Hz (frame numbers advance at "
                f"{r['numbers_rate']:7.1f} Hz), received/due {r['received']}/{r['due']} = "
                f"{r['received'] / max(r['due'], 1):.3f}, gaps {r['gaps']}, cpu {r['cpu_us']:.0f} us/frame",
                flush=True,
            )
    finally:
        receiver.close()
    a, b = results.get(0), results.get(1)
    if a and b:
        print(
            f"  => received/due batched {a['received'] / max(a['due'], 1):.3f} vs one at a time "
            f"{b['received'] / max(b['due'], 1):.3f}; CPU per frame ratio {b['cpu_us'] / a['cpu_us']:.2f} "
            f"(one at a time / batched)"
        )


if __name__ == "__main__":
    run()
