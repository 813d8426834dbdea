"""MocapSystemNode throughput: highest sustained rate, CPU per frame, publish latency.

Configurations of the issue: 10 bodies / 100 markers, and 50 bodies / 500 markers / 2
skeletons. Each is run four ways in the same session (see bench/replay_system.py):
``mocap4r2`` (the framework, replaying precomputed frames), ``raw`` (the same messages
serialized beforehand, only stamp and frame number patched: the least an rclpy
publisher can do, the reference of the targets), ``floor`` (prebuilt message objects)
and ``bare`` (a plain rclpy loop building message objects per frame: what a
hand-written Python driver does).
A rate is "sustained" when every frame number arrives and the achieved rate is within 3 %
of the target. Latency is from the frame's stamp (its arrival in the publisher) to its
receipt by a subscriber in this process (raw CDR, no deserialisation).
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from bench.guard import GuardFigure
from bench.listener import FrameListener, measure_process

ROOT = Path(__file__).resolve().parents[1]
# rates rise until one is not sustained at or beyond the reference rate (the target: 1 kHz
# for 10 bodies, 2 kHz for 50 bodies and 2 skeletons), so the output shows where it fails
# the last figure: the CPU per frame ratio to raw at the reference rate that the regression
# guard holds (issue 41's targets; bench/guard.py)
CONFIGS = [
    ("10 bodies / 100 markers", (10, 10, 0), [500, 1000, 1500, 2000, 3000, 4000, 5000], 1000, 1.3),
    (
        "50 bodies / 500 markers / 2 skeletons",
        (50, 10, 2),
        [360, 1000, 2000, 2500, 3000, 4000, 5000],
        2000,
        1.5,
    ),
]
MODES = ("mocap4r2", "raw", "floor", "bare")
WARMUP_S = 1.5
MEASURE_S = 3.0
# runs at the reference rate per mode: CPU per frame varies by a factor of 1.5 between
# single 3 s runs on this 2-core machine, so the ratios compare medians. The first is the
# sweep's; the others are rounds of every mode in turn, so that a round's modes ran close
# together and its ours/raw ratio is one paired sample of the guard's noise.
REFERENCE_RUNS = 4


def run_once(receiver: FrameListener, mode: str, shape: tuple[int, int, int], rate: float) -> dict:
    mode_arg = "replay" if mode == "mocap4r2" else mode
    cmd = [sys.executable, "-m", "bench.replay_system", mode_arg, *map(str, shape), str(rate)]
    samples, cpu = measure_process(cmd, receiver, WARMUP_S, MEASURE_S, cwd=ROOT, ready_line=True)
    if len(samples) < 10:
        return {"rate": 0.0, "gaps": -1, "cpu_ms": float("nan"), "p50": float("nan"), "p99": float("nan")}
    numbers = [s[2] for s in samples]
    gaps = sum(max(0, b - a - 1) for a, b in zip(numbers, numbers[1:]))
    achieved = (len(samples) - 1) / (samples[-1][0] - samples[0][0])
    lat = sorted((now - stamp) * 1000 for now, stamp, _ in samples)
    frames = numbers[-1] - numbers[0] + 1
    return {
        "rate": achieved,
        "gaps": gaps,
        "cpu_ms": 1000 * cpu / max(frames, 1),
        "p50": statistics.median(lat),
        "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
    }


def run() -> list[GuardFigure]:
    """Print the figures; return the CPU per frame ratios to raw for the regression guard."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    receiver = FrameListener()
    guarded: list[GuardFigure] = []
    try:
        for title, shape, rates, reference, target in CONFIGS:
            print(f"\n{title}: rates {rates} Hz, {MEASURE_S:.0f} s each")
            best: dict[str, float] = {}
            runs: dict[str, list[dict]] = {}
            for mode in MODES:
                best[mode] = 0.0
                for rate in rates:
                    r = run_once(receiver, mode, shape, rate)
                    ok = r["gaps"] == 0 and r["rate"] >= 0.97 * rate
                    print(
                        f"  {mode:9s} {rate:6.0f} Hz: achieved {r['rate']:7.1f} Hz, gaps {r['gaps']}, "
                        f"cpu {r['cpu_ms']:.3f} ms/frame, latency p50 {r['p50']:.2f} ms p99 {r['p99']:.2f} ms"
                        f"{'' if ok else '  (not sustained)'}",
                        flush=True,
                    )
                    if rate == reference:
                        runs[mode] = [r]
                    if ok:
                        best[mode] = rate
                    elif rate >= reference:
                        break
            for _ in range(REFERENCE_RUNS - 1):
                for mode in runs:
                    runs[mode].append(run_once(receiver, mode, shape, reference))
            results: dict[str, dict] = {}
            for mode in MODES:
                at_reference = None
                if mode in runs:
                    at_reference = {
                        key: statistics.median(r[key] for r in runs[mode]) for key in ("cpu_ms", "p50", "p99")
                    }
                    print(
                        f"  {mode:9s} {reference:6.0f} Hz, median of {REFERENCE_RUNS} runs: cpu "
                        f"{at_reference['cpu_ms']:.3f} ms/frame, latency p50 {at_reference['p50']:.2f} ms "
                        f"p99 {at_reference['p99']:.2f} ms",
                        flush=True,
                    )
                results[mode] = {"best": best[mode], "ref": at_reference}
            ours = results["mocap4r2"]
            print(f"  => mocap4r2 sustains {ours['best']:.0f} Hz (target {reference} Hz)")
            for other in ("raw", "floor", "bare"):
                ref_o, ref_r = ours["ref"], results[other]["ref"]
                if ref_o and ref_r:
                    rate_ratio = results[other]["best"] / max(ours["best"], 1)
                    cpu_ratio = ref_o["cpu_ms"] / ref_r["cpu_ms"]
                    p50_ratio, p99_ratio = ref_o["p50"] / ref_r["p50"], ref_o["p99"] / ref_r["p99"]
                    print(
                        f"     vs {other:5s}: sustained rate ratio {rate_ratio:.2f} (theirs/ours), "
                        f"CPU per frame ratio {cpu_ratio:.2f} (ours/theirs), latency p50 ratio "
                        f"{p50_ratio:.2f}, p99 ratio {p99_ratio:.2f} at {reference} Hz (medians)"
                    )
            figure = GuardFigure(
                f"core {title} at {reference} Hz, CPU per frame vs raw",
                paired_ratios(runs.get("mocap4r2", []), runs.get("raw", [])),
                target,
            )
            guarded.append(figure)
            print(
                f"  => CPU per frame vs raw, {len(figure.rounds)} paired rounds: {figure.ratio:.2f} "
                f"+- {figure.noise:.2f} (95 %), target <= {target:.2f}",
                flush=True,
            )
    finally:
        receiver.close()
    return guarded


def paired_ratios(ours: list[dict], theirs: list[dict]) -> tuple[float, ...]:
    """CPU per frame ours/theirs of each round both ran (nan where either measured nothing)."""
    return tuple(o["cpu_ms"] / t["cpu_ms"] for o, t in zip(ours, theirs))


if __name__ == "__main__":
    run()
