"""Trajectory error: ours vs evo in the same run, and the online node's per-sample cost.

Measured end to end from arrays (building the trajectories included) and from TUM
files: association (nearest), se3 alignment, ATE statistics; RPE over 1 frame,
translation and rotation. evo takes minutes for RPE on a million poses, so its RPE is
timed on 100 k poses only, as printed. Figures only: nothing is asserted about speed.

The `mocap4r2 eval` section times the whole command on two TUM files (read both,
associate, se3 align, ATE, RPE 1 frame, JSON written) against evo doing the same through
its Python API (each file read once, which favours evo over running evo_ape and evo_rpe).
evo is timed at EVAL_SIZES_EVO only (a million poses take evo many minutes); ours also
at a million. MOCAP4R2_BENCH_EVO_1M=1 adds evo at a million (slow).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from mocap4r2_tools import eval_command
from mocap4r2_tools.trajectory import RunningATE, RunningRPE, StreamAssociator, Trajectory
from mocap4r2_tools.trajectory.alignment import align
from mocap4r2_tools.trajectory.association import associate
from mocap4r2_tools.trajectory.io import read_tum, write_tum
from mocap4r2_tools.trajectory.metrics import ErrorStats, ate_errors, rpe_errors, rpe_pairs
from mocap4r2_tools.trajectory.time_offset import estimate_time_offset

SIZES = (100_000, 1_000_000)
EVO_RPE_MAX = 100_000
EVAL_SIZES = (100_000, 1_000_000)
EVAL_SIZES_EVO = (100_000,)


def make_arrays(n: int, seed: int = 0):
    """n ground truth poses at 1 kHz and n estimate poses (other frame, noise, 0.1 ms offset)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) * 0.001
    pos = np.c_[3 * np.cos(t / 10), 2 * np.sin(t / 5), 1 + 0.3 * np.sin(t / 7)]
    rot = Rotation.from_rotvec(np.c_[0.1 * np.sin(t), 0.1 * np.cos(t), t / 10])
    frame = Rotation.from_euler("xyz", [0.1, -0.2, 0.9])
    est_pos = frame.apply(pos + rng.normal(0, 0.01, (n, 3))) + [1.0, 2.0, 3.0]
    est_rot = frame * rot * Rotation.from_rotvec(rng.normal(0, 0.005, (n, 3)))
    return (t, pos, rot.as_quat()), (t + 0.0001, est_pos, est_rot.as_quat())


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """Wall seconds of fn(*args); the arguments are passed, not captured, so a call in a
    loop times the loop's current values."""
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def cpu_timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """CPU seconds of this process (every thread): on a shared machine wall time measures
    the neighbours as much as the code."""
    start = time.process_time()
    value = fn(*args)
    return time.process_time() - start, value


def read_both(gt_path: Path, est_path: Path) -> tuple[Trajectory, Trajectory]:
    return read_tum(gt_path), read_tum(est_path)


# ------------------------------------------------------------------ ours
def ours_ate(gt_arrays, est_arrays) -> float:
    gt = Trajectory.build(*gt_arrays)
    est = Trajectory.build(*est_arrays)
    pairs = associate(gt, est, max_diff=0.0005)
    alignment = align(pairs.gt, pairs.est, "se3")
    return ErrorStats.of(ate_errors(pairs.gt, alignment.apply(pairs.est))).rmse


def ours_auto_ate(gt_arrays, est_arrays) -> tuple[float, float]:
    """ours_ate with the time offset found from the data first (--offset auto)."""
    gt = Trajectory.build(*gt_arrays)
    est = Trajectory.build(*est_arrays)
    found = estimate_time_offset(gt, est)
    pairs = associate(gt, est, max_diff=0.0005, offset=found.offset)
    alignment = align(pairs.gt, pairs.est, "se3")
    return found.offset, ErrorStats.of(ate_errors(pairs.gt, alignment.apply(pairs.est))).rmse


def ours_rpe(gt_arrays, est_arrays) -> tuple[float, float]:
    gt = Trajectory.build(*gt_arrays)
    est = Trajectory.build(*est_arrays)
    pairs = associate(gt, est, max_diff=0.0005)
    starts, ends = rpe_pairs(pairs.gt, 1, "frames")
    trans, rot = rpe_errors(pairs.gt, pairs.est, starts, ends)
    return ErrorStats.of(trans).rmse, ErrorStats.of(rot).rmse


def ours_files(gt_path: Path, est_path: Path) -> float:
    gt, est = read_tum(gt_path), read_tum(est_path)
    pairs = associate(gt, est, max_diff=0.0005)
    alignment = align(pairs.gt, pairs.est, "se3")
    return ErrorStats.of(ate_errors(pairs.gt, alignment.apply(pairs.est))).rmse


# ------------------------------------------------------------------ evo (reference)
def _evo(arrays):
    from evo.core.trajectory import PoseTrajectory3D

    t, p, q = arrays
    return PoseTrajectory3D(p, np.roll(q, 1, axis=1), t)  # evo wants w, x, y, z


def evo_ate(gt_arrays, est_arrays) -> float:
    from evo.core import metrics, sync

    ref, est = sync.associate_trajectories(_evo(gt_arrays), _evo(est_arrays), max_diff=0.0005)
    est = copy.deepcopy(est)
    est.align(ref)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    return ape.get_statistic(metrics.StatisticsType.rmse)


def evo_rpe(gt_arrays, est_arrays) -> tuple[float, float]:
    from evo.core import metrics, sync

    ref, est = sync.associate_trajectories(_evo(gt_arrays), _evo(est_arrays), max_diff=0.0005)
    out = []
    for relation in (metrics.PoseRelation.translation_part, metrics.PoseRelation.rotation_angle_rad):
        rpe = metrics.RPE(relation, 1, metrics.Unit.frames, pairs_from_reference=True)
        rpe.process_data((ref, est))
        out.append(rpe.get_statistic(metrics.StatisticsType.rmse))
    return out[0], out[1]


def evo_files(gt_path: Path, est_path: Path) -> float:
    from evo.tools import file_interface

    gt = file_interface.read_tum_trajectory_file(str(gt_path))
    est = file_interface.read_tum_trajectory_file(str(est_path))
    t, p, q = gt.timestamps, gt.positions_xyz, np.roll(gt.orientations_quat_wxyz, -1, axis=1)
    te, pe, qe = est.timestamps, est.positions_xyz, np.roll(est.orientations_quat_wxyz, -1, axis=1)
    return evo_ate((t, p, q), (te, pe, qe))


def ours_command(gt_path: Path, est_path: Path, out: Path) -> dict:
    """The whole `mocap4r2 eval --gt --est --json FILE` (defaults: nearest within 10 ms,
    se3, RPE 1 frame), as a user runs it, minus the interpreter start."""
    with contextlib.redirect_stdout(io.StringIO()):  # the summary table it prints
        code = eval_command.main(
            ["--gt", str(gt_path), "--est", str(est_path), "--json", str(out), "--progress", "never"]
        )
    if code != 0:
        raise RuntimeError(f"mocap4r2 eval exited with {code}")
    data = json.loads(out.read_text())
    return {
        "ate": data["ate_rmse"],
        "rpe_trans": data["rpe_trans"]["rmse"],
        "rpe_rot": data["rpe_rot"]["rmse"],
        "pairs": data["samples"],
    }


def evo_command(gt_path: Path, est_path: Path) -> dict:
    """What evo_ape + evo_rpe compute for the same options (max_diff 0.01, se3 alignment,
    APE translation, RPE 1 frame translation and angle), each file read once."""
    from evo.core import metrics, sync
    from evo.tools import file_interface

    ref = file_interface.read_tum_trajectory_file(str(gt_path))
    est = file_interface.read_tum_trajectory_file(str(est_path))
    ref, est = sync.associate_trajectories(ref, est, max_diff=0.01)
    est.align(ref)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    out = {"ate": ape.get_statistic(metrics.StatisticsType.rmse), "pairs": est.num_poses}
    for key, relation in (
        ("rpe_trans", metrics.PoseRelation.translation_part),
        ("rpe_rot", metrics.PoseRelation.rotation_angle_rad),
    ):
        rpe = metrics.RPE(relation, 1, metrics.Unit.frames, all_pairs=False)
        rpe.process_data((ref, est))
        out[key] = rpe.get_statistic(metrics.StatisticsType.rmse)
    return out


def eval_command_vs_evo() -> None:
    print(
        "`mocap4r2 eval` from TUM files (read both, associate, se3 align, ATE, RPE 1 frame trans+rot), "
        "CPU seconds:"
    )
    evo_sizes = set(EVAL_SIZES_EVO) | (
        {1_000_000} if os.environ.get("MOCAP4R2_BENCH_EVO_1M") == "1" else set()
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n in EVAL_SIZES:
            gt_arrays, est_arrays = make_arrays(n)
            gt_path, est_path, out = Path(tmp) / "gt.tum", Path(tmp) / "est.tum", Path(tmp) / "out.json"
            write_tum(gt_path, Trajectory.build(*gt_arrays))
            write_tum(est_path, Trajectory.build(*est_arrays))
            size = (gt_path.stat().st_size + est_path.stat().st_size) / 1e6
            t_read, _ = cpu_timed(read_both, gt_path, est_path)
            t_ours, a = cpu_timed(ours_command, gt_path, est_path, out)
            print(
                f"  {n:>9,} poses ({size:.0f} MB)  ours {t_ours:6.2f} s (of which reading {t_read:.2f} s)",
                flush=True,
            )
            if n not in evo_sizes:
                print(
                    f"  {n:>9,} poses  evo not run at this size (many minutes; "
                    "MOCAP4R2_BENCH_EVO_1M=1 runs it)",
                    flush=True,
                )
                continue
            t_evo, b = cpu_timed(evo_command, gt_path, est_path)
            diff = max(abs(a[k] - b[k]) for k in ("ate", "rpe_trans", "rpe_rot"))
            print(
                f"  {n:>9,} poses  evo  {t_evo:6.2f} s -> ours {t_evo / t_ours:5.1f}x faster "
                f"(pairs {a['pairs']} / {b['pairs']}, max |diff| of ATE/RPE rmse {diff:.1e})",
                flush=True,
            )


# ------------------------------------------------------------------ the node's update
def node_update_cost(pairs: int = 20_000, gt_per_pair: int = 10) -> dict[str, float]:
    """Per-sample cost of the trajectory_error core: 1 kHz ground truth, 100 Hz estimate."""
    (t, p, q), (te, pe, qe) = make_arrays(pairs * gt_per_pair, seed=1)
    stream = StreamAssociator(max_diff=0.0005)
    ate = RunningATE("se3")
    rpe = RunningRPE(1, "frames")
    gt_cost = 0.0
    pair_cost = 0.0
    made = 0
    for i in range(len(t)):
        start = time.perf_counter()
        got = stream.add_gt(t[i], p[i], q[i])
        gt_cost += time.perf_counter() - start
        if i % gt_per_pair == 0:
            start = time.perf_counter()
            got += stream.add_est(te[i] - 0.0001, pe[i], qe[i])
            for pair in got:
                ate.add(pair.gt_position, pair.gt_orientation, pair.est_position, pair.est_orientation)
                rpe.add(
                    pair.stamp, pair.gt_position, pair.gt_orientation, pair.est_position, pair.est_orientation
                )
                made += 1
            pair_cost += time.perf_counter() - start
    snap_time, _ = timed(lambda: [ate.snapshot() for _ in range(100)])
    return {
        "gt_us": 1e6 * gt_cost / len(t),
        "pair_us": 1e6 * pair_cost / max(made, 1),
        "snapshot_us": 1e4 * snap_time,
        "pairs": made,
    }


def run() -> None:
    eval_command_vs_evo()
    print(
        "end to end from arrays: build trajectories, associate (nearest), se3 align, ATE; "
        "RPE 1 frame (trans+rot)"
    )
    for n in SIZES:
        gt_arrays, est_arrays = make_arrays(n)
        t_ours_ate, rmse_ours = timed(ours_ate, gt_arrays, est_arrays)
        t_ours_rpe, rpe_ours = timed(ours_rpe, gt_arrays, est_arrays)
        print(f"  {n:>9,} pose pairs  ours: ATE {t_ours_ate:6.2f} s, RPE {t_ours_rpe:6.2f} s", flush=True)
        t_evo_ate, rmse_evo = timed(evo_ate, gt_arrays, est_arrays)
        print(
            f"  {n:>9,} pose pairs  evo:  ATE {t_evo_ate:6.2f} s   -> ours {t_evo_ate / t_ours_ate:5.1f}x "
            "faster "
            f"(ATE rmse ours {rmse_ours:.9f}, evo {rmse_evo:.9f}, |diff| {abs(rmse_ours - rmse_evo):.1e})",
            flush=True,
        )
        t_auto, (found, rmse_auto) = timed(ours_auto_ate, gt_arrays, est_arrays)
        print(
            f"  {n:>9,} pose pairs  ours with --offset auto (offset found, then ATE): {t_auto:6.2f} s "
            f"= {t_auto / t_evo_ate:.2f}x evo's plain ATE (found {found * 1e3:+.4f} ms, true -0.1000 ms; "
            f"ATE rmse {rmse_auto:.9f})",
            flush=True,
        )
        if n <= EVO_RPE_MAX:
            t_evo_rpe, rpe_evo = timed(evo_rpe, gt_arrays, est_arrays)
            diff = max(abs(a - b) for a, b in zip(rpe_ours, rpe_evo))
            print(
                f"  {n:>9,} pose pairs  evo:  RPE {t_evo_rpe:6.2f} s   -> ours "
                f"{t_evo_rpe / t_ours_rpe:5.1f}x faster "
                f"(max |diff| of trans/rot rmse {diff:.1e})",
                flush=True,
            )
            total = (t_evo_ate + t_evo_rpe) / (t_ours_ate + t_ours_rpe)
            print(
                f"  {n:>9,} pose pairs  ATE+RPE end to end: ours {t_ours_ate + t_ours_rpe:.2f} s, "
                f"evo {t_evo_ate + t_evo_rpe:.2f} s -> {total:.1f}x",
                flush=True,
            )
        else:
            print(
                f"  {n:>9,} pose pairs  evo:  RPE not run (minutes); ours ATE+RPE "
                f"{t_ours_ate + t_ours_rpe:.2f} s",
                flush=True,
            )

    print("end to end from TUM files (read both, associate, se3 align, ATE):")
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            gt_arrays, est_arrays = make_arrays(n)
            gt_path, est_path = Path(tmp) / "gt.tum", Path(tmp) / "est.tum"
            write_tum(gt_path, Trajectory.build(*gt_arrays))
            write_tum(est_path, Trajectory.build(*est_arrays))
            t_ours, a = timed(ours_files, gt_path, est_path)
            t_evo, b = timed(evo_files, gt_path, est_path)
            print(
                f"  {n:>9,} poses  ours {t_ours:6.2f} s, evo {t_evo:6.2f} s -> {t_evo / t_ours:5.1f}x "
                f"(|diff| {abs(a - b):.1e})",
                flush=True,
            )

    cost = node_update_cost()
    print(f"online node core ({cost['pairs']:,} pairs, 1 kHz ground truth, 100 Hz estimate):")
    print(
        f"  per ground-truth sample {cost['gt_us']:.1f} us, per pose pair (association + ATE + RPE sums) "
        f"{cost['pair_us']:.1f} us, per published snapshot {cost['snapshot_us']:.0f} us",
        flush=True,
    )
    budget = cost["gt_us"] * 1000 + cost["pair_us"] * 100
    print(
        f"  -> {budget / 1e4:.2f} % of one core for 1 kHz ground truth with a 100 Hz estimate, memory bounded"
    )


if __name__ == "__main__":
    run()
