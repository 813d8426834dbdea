"""CPU per frame of this checkout against another one, alternated A B A B.

``python -m bench.ab OTHER_CHECKOUT [ROUNDS]`` runs ``bench.replay_system replay`` (the
framework publishing precomputed frames, what ``bench core`` calls ``mocap4r2``) of this
checkout (A) and of OTHER_CHECKOUT (B, built, with its own ``scripts/env.sh``) in turn, at
the two reference shapes and rates of ``bench core``, and receives every frame here. Each
round runs A and B back to back, in alternating order, so a round's ratio A/B is one paired
sample of the machine's noise at that moment. Printed per shape: the geometric mean of the
ratios with its 95 % interval (t on the logarithms), and over both shapes together; the
same for the p99 of the frames' latency (issue 41: "p99 latency no worse than today's").

``python -m bench.ab OTHER_CHECKOUT [ROUNDS] --vrpn`` alternates each checkout's own
``bench.bench_vrpn`` instead (the stand-in, the driver process and a subscriber, 10 and 50
trackers at 1 kHz) and prints the A/B of the p99 latency from the message time (issue 41:
"VRPN at 50 trackers: p99 <= 1.5 ms"), with each run's figures.

Why not two ``bench core`` runs: a single 3 s figure varies by a factor of 1.5 on a 2-core
machine, and runs minutes apart see different loads; alternation pairs them. Used for
issue 38's "behaviour stays the same" bound (ratio <= 1.02 against the tree before the
redesign).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from bench.domain import isolate
from bench.listener import FrameListener, measure_process

ROOT = Path(__file__).resolve().parents[1]
# (title, bodies, markers per body, skeletons, rate): bench core's reference points
SHAPES = (("10 bodies, 1 kHz", 10, 10, 0, 1000.0), ("50 bodies + 2 skeletons, 2 kHz", 50, 10, 2, 2000.0))
WARMUP_S, MEASURE_S = 1.5, 3.0
# two-sided 95 % Student t quantiles by degrees of freedom (1..30); beyond, the normal's
T95: tuple[float, ...] = (
    *(12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13),
    *(2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04),
)


def command(checkout: Path, shape: tuple[int, int, int, float]) -> list[str]:
    """The replay publisher of ``checkout``, in that checkout's own environment."""
    args = " ".join(shlex.quote(str(v)) for v in (shape[0], shape[1], shape[2], shape[3]))
    return in_checkout(f"python -m bench.replay_system replay {args}")


def in_checkout(line: str) -> list[str]:
    """``line`` run in the current directory's checkout, in its own environment."""
    script = f"source scripts/env.sh >/dev/null && exec {line}"
    # a clean environment for both: this process's venv and workspace paths would
    # otherwise stay behind the other checkout's on its PYTHONPATH
    keep = ("HOME", "ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE", "RMW_IMPLEMENTATION", "LANG")
    env = [f"{key}={os.environ[key]}" for key in keep if key in os.environ]
    return ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", *env, "bash", "-c", script]


def cpu_and_p99_ms(
    receiver: FrameListener, checkout: Path, shape: tuple[int, int, int, float]
) -> tuple[float, float]:
    """CPU per frame of the publisher and the p99 of its frames' latency (receipt here
    minus header stamp), in ms; NaN where too few frames came."""
    samples, cpu = measure_process(
        command(checkout, shape), receiver, WARMUP_S, MEASURE_S, cwd=checkout, ready_line=True
    )
    if len(samples) < 10:
        return math.nan, math.nan
    frames = samples[-1][2] - samples[0][2] + 1
    latencies = sorted(now - stamp for now, stamp, _ in samples)
    p99 = 1000.0 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return 1000.0 * cpu / max(frames, 1), p99


VRPN_TRACKERS = re.compile(r"^\s*(\d+) trackers at ")
VRPN_P99 = re.compile(r"latency message time -> subscriber: p50 \S+ ms, p99 (\S+) ms")


def vrpn_p99_ms(checkout: Path) -> dict[int, float]:
    """p99 latency (ms) by tracker count of one ``bench.bench_vrpn`` run of ``checkout``."""
    run = subprocess.run(
        in_checkout("python -m bench.bench_vrpn"), cwd=checkout, capture_output=True, text=True, timeout=600
    )
    found: dict[int, float] = {}
    trackers = None
    for line in run.stdout.splitlines():
        if (match := VRPN_TRACKERS.match(line)) is not None:
            trackers = int(match.group(1))
        elif trackers is not None and (match := VRPN_P99.search(line)) is not None:
            found[trackers] = float(match.group(1))
    return found


def vrpn_rounds(other: Path, rounds: int) -> None:
    """Each checkout's VRPN bench in turn, ``rounds`` times: the p99 A/B per tracker count."""
    ratios: dict[int, list[float]] = {}
    for k in range(rounds):
        order = (ROOT, other) if k % 2 == 0 else (other, ROOT)
        figures = {tree: vrpn_p99_ms(tree) for tree in order}
        for trackers in sorted(figures[ROOT]):
            a, b = figures[ROOT][trackers], figures[other].get(trackers, math.nan)
            ratios.setdefault(trackers, []).append(a / b)
            line = f"p99 A {a:.2f} ms, B {b:.2f} ms, A/B {a / b:.3f}"
            print(f"  {trackers} trackers, round {k + 1}: {line}", flush=True)
    for trackers, values in sorted(ratios.items()):
        mean, low, high = interval(values)
        print(f"{trackers} trackers: latency p99 A/B geometric mean {mean:.3f} (95 % {low:.3f}-{high:.3f})")


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of ``ratios`` and its 95 % interval."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if not logs:
        return math.nan, math.nan, math.nan
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    t = T95[len(logs) - 2] if len(logs) - 1 <= len(T95) else 1.96
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main(argv: list[str]) -> int:
    vrpn = "--vrpn" in argv
    argv = [a for a in argv if a != "--vrpn"]
    if not argv or not (Path(argv[0]) / "scripts" / "env.sh").exists():
        usage = "usage: python -m bench.ab OTHER_CHECKOUT [ROUNDS] [--vrpn] (a built checkout)"
        print(usage, file=sys.stderr)
        return 2
    other = Path(argv[0]).resolve()
    rounds = int(argv[1]) if len(argv) > 1 else 6
    isolate()
    with open("/proc/loadavg") as handle:
        print(f"A = {ROOT}, B = {other}; {rounds} rounds; load {handle.read().split()[:3]}", flush=True)
    if vrpn:
        vrpn_rounds(other, rounds)
        with open("/proc/loadavg") as handle:
            print(f"load after: {handle.read().split()[:3]}")
        return 0
    receiver = FrameListener()
    everything: list[float] = []
    try:
        for title, *shape_values in SHAPES:
            shape = (int(shape_values[0]), int(shape_values[1]), int(shape_values[2]), float(shape_values[3]))
            ratios, p99_ratios = [], []
            for k in range(rounds):
                order = (ROOT, other) if k % 2 == 0 else (other, ROOT)
                figures = {tree: cpu_and_p99_ms(receiver, tree, shape) for tree in order}
                ratio = figures[ROOT][0] / figures[other][0]
                ratios.append(ratio)
                p99_ratios.append(figures[ROOT][1] / figures[other][1])
                print(
                    f"  {title}, round {k + 1}: A {figures[ROOT][0]:.4f} ms/frame, "
                    f"B {figures[other][0]:.4f}, A/B {ratio:.3f}; latency p99 A {figures[ROOT][1]:.2f} ms, "
                    f"B {figures[other][1]:.2f} ms",
                    flush=True,
                )
            mean, low, high = interval(ratios)
            everything += ratios
            print(f"{title}: A/B geometric mean {mean:.3f} (95 % {low:.3f}-{high:.3f})", flush=True)
            mean, low, high = interval(p99_ratios)
            print(f"{title}: latency p99 A/B geometric mean {mean:.3f} (95 % {low:.3f}-{high:.3f})")
        mean, low, high = interval(everything)
        print(f"both shapes: A/B geometric mean {mean:.3f} (95 % {low:.3f}-{high:.3f})")
        with open("/proc/loadavg") as handle:
            print(f"load after: {handle.read().split()[:3]}")
    finally:
        receiver.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    sys.exit(main(sys.argv[1:]))
