"""The tracking core on swarms: `python -m bench tracking [--json FILE]`.

Cases: 16 and 49 identical 4-marker bodies and 49 single-marker bodies, at 120, 360 and
1000 Hz (CASE names like identical49_4m_1000hz, single49_1000hz). The bodies fly circles
of 0.8 m radius about the same centre, half of them each way round, each at its own height
(8 cm apart) and phase, so they cross each other in plan view all the time, at 1.5 m/s,
spinning about z at 2 rad/s from a random start orientation. Markers get 0.2 mm Gaussian
noise, each is hidden in 5 % of frames, 6 strays appear anywhere in every frame, and every
body in turn disappears completely for 0.2 s once per case (within coast_time: a longer
absence of an identical body makes its identity a guess, see docs/tracking.md).

Figures per case (the tracker is Tracker.update, timed alone, after its compiled kernels are
loaded or compiled: kernels.warm_up, as the marker_tracker node does at configure):
* core_ms_p50 / core_ms_p99: CPU of one frame, ms (the thread's CPU time, so time the
  shared machine gives other processes is not counted; wall_ms_p99 is the wall time);
* position_rms_mm against the truth, over frames the body is reported valid;
* floor_rms_mm: the same noisy markers fitted with their TRUE labels (Kabsch, or the
  marker itself for single-marker bodies), over the same frames; rms_over_floor;
* orientation_rms_deg (4-marker cases);
* swaps: times a valid body is reported nearer another body's true position than its own;
* tracked_ratio: valid frames / trackable frames (>= 3 markers of a 4-marker body, or its
  one marker, visible);
* reacquire_frames_max: after each complete disappearance, the trackable frames from the
  first one until the body is valid again (the random 5 % occlusion goes on after the
  disappearance, and frames in which it hides a single-marker body, or leaves a 4-marker
  body fewer than 3 markers, are frames no tracker could use);
  reacquire_all_frames_max counts every frame from the first trackable one, trackable
  or not.
* reference_ms_p50: a fixed k-d tree + eigh workload timed right after the case, and
  load_average (1 minute) at its end: the machine is shared, and CPU per frame grows with
  the load (its other processes share the cores' caches and execution units).
Targets (issue 25): 49 x 4 at 1 kHz core p99 <= 1 ms; 0 swaps; rms_over_floor <= 1.1;
re-acquisition <= 3 frames. Prints figures next to the targets; asserts nothing.
MOCAP4R2_BENCH_TRACKING_SECONDS sets the simulated duration per case (default 4 s; the
issue's "0 swaps over 60 s" wants 60).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

from mocap4r2_tools.tracking import kernels
from mocap4r2_tools.tracking.bodies import parse_config
from mocap4r2_tools.tracking.tracker import Tracker

JSON_ENV = "MOCAP4R2_BENCH_JSON"
SECONDS_ENV = "MOCAP4R2_BENCH_TRACKING_SECONDS"
# Crazyflie-sized and deliberately asymmetric, so the orientation is defined
LAYOUT = np.array([[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]])
NOISE_M, OCCLUSION, STRAYS, GONE_S = 2e-4, 0.05, 6, 0.2
RADIUS_M, SPEED, SPIN = 0.8, 1.5, 2.0
CASES = [
    (kind, n, rate)
    for kind, n in (("identical", 16), ("identical", 49), ("single", 49))
    for rate in (120, 360, 1000)
]


def case_name(kind: str, n: int, rate: int) -> str:
    return f"{kind}{n}_4m_{rate}hz" if kind == "identical" else f"{kind}{n}_{rate}hz"


def truth(n: int, t: float, start: Rotation) -> tuple[np.ndarray, Rotation]:
    i = np.arange(n)
    direction = np.where(i % 2 == 0, 1.0, -1.0)
    angle = 2 * np.pi * i / n + direction * SPEED / RADIUS_M * t
    position = np.stack([RADIUS_M * np.cos(angle), RADIUS_M * np.sin(angle), 0.5 + 0.08 * i], axis=1)
    spin = Rotation.from_rotvec(np.outer(np.ones(n) * SPIN * t, [0, 0, 1]))
    return position, spin * start


def labeled_fits(layout: np.ndarray, noisy: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """Positions from Kabsch of each body's visible markers with their true labels (the best
    a tracker can do), all bodies at once; bodies with fewer than 3 visible markers get NaN."""
    w = visible.astype(np.float64)[:, :, None]
    count = w.sum(axis=1)
    cl = (w * layout).sum(axis=1) / np.maximum(count, 1.0)
    cs = (w * noisy).sum(axis=1) / np.maximum(count, 1.0)
    h = np.einsum("bli,blj->bij", w * (layout - cl[:, None]), noisy - cs[:, None])
    u, _, vt = np.linalg.svd(h)
    d = np.ones((len(h), 3))
    d[:, 2] = np.sign(np.linalg.det(np.einsum("bji,bkj->bik", vt, u)))
    rot = np.einsum("bji,bj,bkj->bik", vt, d, u)
    out = cs - np.einsum("bij,bj->bi", rot, cl)
    out[count[:, 0] < 3] = np.nan
    return out


def reference_ms(repeats: int = 500) -> float:
    """p50 CPU of a fixed numpy/scipy workload a frame of the 49-body case also does (a k-d
    tree of 202 points queried for 196, one batched eigh of 49 4x4 matrices): on a shared
    machine it says how much slower this run's moment was than a quiet one (about 0.2 ms)."""
    rng = np.random.default_rng(0)
    points = rng.uniform(-1, 1, (202, 3))
    queries = points[:196] + 1e-4
    sym = rng.normal(size=(49, 4, 4))
    sym = sym + sym.transpose(0, 2, 1)
    times = []
    for _ in range(repeats):
        began = time.thread_time()
        cKDTree(points).query(queries, k=4, distance_upper_bound=0.01)
        np.linalg.eigh(sym)
        times.append(time.thread_time() - began)
    return round(float(np.median(times)) * 1e3, 3)


def run_case(kind: str, n: int, rate: int, seconds: float) -> dict[str, Any]:
    rng = np.random.default_rng(n * 1000 + rate)
    layout = LAYOUT if kind == "identical" else np.zeros((1, 3))
    markers_per = len(layout)
    start = Rotation.random(n, random_state=rate) if kind == "identical" else Rotation.identity(n)
    p0, _ = truth(n, 0.0, start)
    bodies = [{"name": f"b{i}", "layout": "l", "initial_position": p0[i].tolist()} for i in range(n)]
    tracker = Tracker(parse_config({"layouts": {"l": layout.tolist()}, "bodies": bodies}))
    kernels.warm_up()  # numba compiles (or loads) on first call: not a frame's cost
    frames = int(seconds * rate)
    gone_frames = int(GONE_S * rate)
    # body k disappears at an evenly spread frame after the first half second
    spacing = max(1, (frames - rate - gone_frames) // max(n, 1))
    # in an order that keeps bodies gone at the same time apart on the circle (stride 7)
    order = np.argsort((np.arange(n) * 7) % n, kind="stable")
    gone_start = (rate // 2 + order * spacing).astype(int)
    cpu: list[float] = []
    wall: list[float] = []
    pos_err: list[float] = []
    floor_err: list[float] = []
    ang_err: list[float] = []
    swaps = valid_count = trackable_count = 0
    reacquire: list[int] = []
    waiting = np.full(n, -1)  # frame a body became trackable after its disappearance, until valid
    usable = np.zeros(n, dtype=int)  # trackable frames since, while waiting
    reacquire_all: list[int] = []
    was_swapped = np.zeros(n, dtype=bool)
    reacq_started = np.zeros(n, dtype=bool)
    for frame in range(frames):
        t = frame / rate
        position, rotation = truth(n, t, start)
        local = np.broadcast_to(layout, (n, markers_per, 3))
        world = np.einsum("bij,blj->bli", rotation.as_matrix(), local) + position[:, None]
        noisy = world + rng.normal(0, NOISE_M, world.shape)
        visible = rng.random((n, markers_per)) > OCCLUSION
        hidden = (frame >= gone_start) & (frame < gone_start + gone_frames)
        visible[hidden] = False
        cloud = np.vstack([noisy[visible], rng.uniform([-1.5, -1.5, 0], [1.5, 1.5, 5], (STRAYS, 3))])
        cloud = cloud[rng.permutation(len(cloud))]
        began, began_wall = time.thread_time(), time.perf_counter()
        result = tracker.update(cloud, t)
        cpu.append(time.thread_time() - began)
        wall.append(time.perf_counter() - began_wall)
        seen = visible.sum(axis=1)
        trackable = seen >= min(3, markers_per)
        trackable_count += int(trackable.sum())
        valid_count += int((result.valid & trackable).sum())
        # the first trackable frame after the disappearance (the other occlusions go on)
        back = (frame >= gone_start + gone_frames) & (frame < gone_start + 2 * gone_frames) & trackable
        starting = back & ~reacq_started
        waiting[starting] = frame
        usable[starting] = 0
        reacq_started |= back
        done = (waiting >= 0) & result.valid
        reacquire += usable[done].tolist()
        reacquire_all += (frame - waiting[done]).tolist()
        waiting[done] = -1
        usable[(waiting >= 0) & trackable] += 1
        ok = np.flatnonzero(result.valid)
        if len(ok):
            err = result.positions[ok] - position[ok]
            dists = np.linalg.norm(result.positions[ok][:, None] - position[None], axis=2)
            swapped = np.argmin(dists, axis=1) != ok
            swaps += int((swapped & ~was_swapped[ok]).sum())
            was_swapped[:] = False
            was_swapped[ok] = swapped
            use = trackable[ok]
            floor_p = noisy[ok, 0] if markers_per == 1 else labeled_fits(layout, noisy[ok], visible[ok])
            floor_err += np.sum((floor_p[use] - position[ok][use]) ** 2, axis=1).tolist()
            pos_err += np.sum(err[use] ** 2, axis=1).tolist()
            if markers_per > 1:
                q = Rotation.from_quat(result.orientations[ok])
                ang_err += np.degrees((q * rotation[ok].inv()).magnitude()).tolist()
    cpu_ms = np.array(cpu) * 1e3
    pos_rms = float(np.sqrt(np.mean(pos_err))) * 1e3 if pos_err else float("nan")
    floor_rms = float(np.sqrt(np.mean(floor_err))) * 1e3 if floor_err else float("nan")
    return {
        "core_ms_p50": round(float(np.percentile(cpu_ms, 50)), 3),
        "core_ms_p99": round(float(np.percentile(cpu_ms, 99)), 3),
        # wall time of the same calls: on a loaded machine it adds the time other processes had the core
        "wall_ms_p99": round(float(np.percentile(np.array(wall) * 1e3, 99)), 3),
        "position_rms_mm": round(pos_rms, 4),
        "floor_rms_mm": round(floor_rms, 4),
        "rms_over_floor": round(pos_rms / floor_rms, 3),
        "orientation_rms_deg": round(float(np.sqrt(np.mean(np.square(ang_err)))), 3) if ang_err else 0.0,
        "swaps": swaps,
        "tracked_ratio": round(valid_count / max(trackable_count, 1), 4),
        "reacquire_frames_max": int(max(reacquire)) if reacquire else -1,
        "reacquire_all_frames_max": int(max(reacquire_all)) if reacquire_all else -1,
        "frames": frames,
        "reference_ms_p50": reference_ms(),
    }


def run(json_path: str | None = None, cases: list[tuple[str, int, int]] | None = None) -> dict[str, Any]:
    json_path = json_path or os.environ.get(JSON_ENV) or None
    seconds = float(os.environ.get(SECONDS_ENV, "4"))
    out: dict[str, Any] = {"cases": {}, "seconds_per_case": seconds}
    print(f"{seconds:g} s of crossings per case; targets: p99 <= 1 ms (49x4 at 1 kHz), 0 swaps,")
    print("rms_over_floor <= 1.1, reacquire <= 3 frames")
    header = (
        "case                      p50ms  p99ms  pos_mm floor_mm ratio  ori_deg swaps tracked reacq"
        " (all)  ref_ms load"
    )
    print(header)
    for kind, n, rate in cases or CASES:
        name = case_name(kind, n, rate)
        fig = run_case(kind, n, rate, seconds)
        fig["load_average"] = round(os.getloadavg()[0], 2)  # the machine is shared: the 1-minute load
        out["cases"][name] = fig
        print(
            f"{name:24s} {fig['core_ms_p50']:6.3f} {fig['core_ms_p99']:6.3f} {fig['position_rms_mm']:7.4f} "
            f"{fig['floor_rms_mm']:7.4f} {fig['rms_over_floor']:6.3f} {fig['orientation_rms_deg']:7.3f} "
            f"{fig['swaps']:5d} {fig['tracked_ratio']:7.4f} {fig['reacquire_frames_max']:5d} "
            f"{fig['reacquire_all_frames_max']:5d} {fig['reference_ms_p50']:6.3f} {fig['load_average']:4.1f}",
            flush=True,
        )
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(out, handle, indent=2)
        print(f"figures written to {json_path}")
    return out


if __name__ == "__main__":
    run()


def crossing_picture(path: str, n: int = 6, rate: int = 120) -> None:
    """docs/tracking/crossing.png: n identical bodies flying through one point, top view.

    Lines are the truth, dots the tracker's positions coloured by the body it reports."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(1)
    phase = np.pi * np.arange(n) / n  # one body per line through the centre
    heights = 1.0 + 0.05 * np.arange(n)
    start = Rotation.random(n, random_state=1)

    def where(t: float) -> np.ndarray:
        radial = 0.6 - 1.0 * t
        return np.stack([radial * np.cos(phase), radial * np.sin(phase), heights], axis=1)

    first = where(0.0)
    bodies = [{"name": f"cf{i}", "layout": "l", "initial_position": first[i].tolist()} for i in range(n)]
    tracker = Tracker(parse_config({"layouts": {"l": LAYOUT.tolist()}, "bodies": bodies}))
    times = np.arange(int(1.2 * rate)) / rate
    truth_xy = np.array([where(t)[:, :2] for t in times])
    tracked = np.full((len(times), n, 2), np.nan)
    for k, t in enumerate(times):
        world = np.einsum("bij,lj->bli", start.as_matrix(), LAYOUT) + where(t)[:, None]
        noisy = world + rng.normal(0, NOISE_M, world.shape)
        visible = rng.random(noisy.shape[:2]) > OCCLUSION
        cloud = np.vstack([noisy[visible], rng.uniform(-0.7, 0.7, (STRAYS, 3)) + [0, 0, 1]])
        result = tracker.update(cloud[rng.permutation(len(cloud))], float(t))
        tracked[k, result.valid] = result.positions[result.valid, :2]
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    for i in range(n):
        (line,) = ax.plot(truth_xy[:, i, 0], truth_xy[:, i, 1], lw=0.8, alpha=0.6)
        ax.plot(tracked[::3, i, 0], tracked[::3, i, 1], ".", ms=3, color=line.get_color(), label=f"cf{i}")
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_title(f"{n} identical bodies through one point, 5 cm apart in height", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
