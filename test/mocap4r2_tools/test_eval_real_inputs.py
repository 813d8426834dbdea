"""`mocap4r2 eval` on inputs as real datasets ship them, compared with evo on the same files.

Public ground truth and estimates are not always strictly increasing: a mocap log
rounded to 0.1 ms can repeat a stamp, an estimator can publish a pose late. evo reads
such files as they are (evo.tools.file_interface.read_tum_trajectory_file keeps every
row, in file order) and associates each pose of the sparser trajectory with the nearest
pose of the denser one. We warn, keep duplicates as evo does, and sort out-of-order rows;
ATE then equals evo's. evo's RPE on an unsorted file relates rows in file order (not a
motion), so RPE is compared with evo on the sorted file.

Also: a huge file that starts as valid text and continues as NUL bytes fails fast with
a clear error and bounded memory (a sparse file, so the test needs no disk).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

evo_metrics = pytest.importorskip("evo.core.metrics", reason="evo is the reference implementation")
from evo.core import sync as evo_sync  # noqa: E402 - after importorskip (evo)
from evo.core.sync_method import SyncMethod  # noqa: E402 - after importorskip (evo)
from evo.tools import file_interface as evo_files  # noqa: E402 - after importorskip (evo)

from mocap4r2_tools import eval_command as eval_cli  # noqa: E402 - after importorskip (evo)

STATS = ("rmse", "mean", "median", "std", "min", "max", "sse")
TOL = 1e-9


def write_rows(path: Path, stamps, positions, quats_xyzw) -> None:
    """A TUM file exactly as given (no sorting), stamps with 4 decimals like TUM RGB-D."""
    with open(path, "w") as handle:
        handle.write("# timestamp tx ty tz qx qy qz qw\n")
        for t, p, q in zip(stamps, positions, quats_xyzw):
            handle.write(f"{t:.4f} " + " ".join(f"{v:.9f}" for v in (*p, *q)) + "\n")


def motion(t: np.ndarray):
    s = t - 1_300_000_000.0
    pos = np.c_[1.5 * np.cos(0.6 * s), np.sin(1.2 * s), 0.3 + 0.05 * np.sin(s)]
    rot = Rotation.from_rotvec(np.c_[0.05 * np.sin(s), 0.05 * np.cos(s), 0.6 * s + np.pi / 2])
    return pos, rot


def make_estimate(stamps: np.ndarray, seed: int):
    rng = np.random.default_rng(seed)
    pos, rot = motion(stamps)
    frame = Rotation.from_euler("xyz", [0.02, -0.03, 0.8])
    est_pos = frame.apply(pos) + [0.5, -1.0, 0.1] + rng.normal(0, 0.01, pos.shape)
    est_rot = frame * rot * Rotation.from_rotvec(rng.normal(0, 0.01, pos.shape))
    return est_pos, est_rot.as_quat()


@pytest.fixture()
def gt_with_duplicate(tmp_path):
    """100 Hz ground truth with one stamp written twice, with two different poses (as in
    a TUM RGB-D groundtruth.txt), and a 30 Hz estimate that comes near it from both sides."""
    t = 1_300_000_000.0 + np.round(np.arange(0.0, 20.0, 0.01), 4)
    pos, rot = motion(t)
    quat = rot.as_quat()
    dup = 700
    t = np.insert(t, dup + 1, t[dup])
    pos = np.insert(pos, dup + 1, pos[dup] + [0.003, -0.002, 0.001], axis=0)
    quat = np.insert(quat, dup + 1, quat[dup], axis=0)
    gt_path = tmp_path / "groundtruth.txt"
    write_rows(gt_path, t, pos, quat)
    est_t = 1_300_000_000.0 + np.round(np.arange(0.002, 19.9, 1 / 30), 4)
    # two estimate stamps next to the duplicate, one on each side
    est_t = np.sort(np.r_[est_t, t[dup] - 0.003, t[dup] + 0.004])
    est_path = tmp_path / "estimate.txt"
    write_rows(est_path, est_t, *make_estimate(est_t, 1))
    return gt_path, est_path


@pytest.fixture()
def est_out_of_order(tmp_path):
    """200 Hz ground truth and a 20 Hz estimate with a few non-increasing stamps: two rows
    swapped, a pose published late (earlier than the row before) and a repeated stamp."""
    t = 1_300_000_000.0 + np.round(np.arange(0.0, 20.0, 0.005), 4)
    pos, rot = motion(t)
    gt_path = tmp_path / "gt.txt"
    write_rows(gt_path, t, pos, rot.as_quat())
    est_t = 1_300_000_000.0 + np.round(np.arange(0.001, 19.9, 0.05), 4)
    est_pos, est_q = make_estimate(est_t, 2)
    order = np.arange(est_t.size)
    order[[40, 41]] = order[[41, 40]]  # swapped
    order = np.r_[order[:100], order[101:150], order[100], order[150:]]  # row 100 late
    est_t, est_pos, est_q = est_t[order], est_pos[order], est_q[order]
    est_t = np.insert(est_t, 200, est_t[200])  # repeated stamp
    est_pos = np.insert(est_pos, 200, est_pos[200] + 0.002, axis=0)
    est_q = np.insert(est_q, 200, est_q[200], axis=0)
    est_path = tmp_path / "est.txt"
    write_rows(est_path, est_t, est_pos, est_q)
    return gt_path, est_path


def run_json(capsys, gt: Path, est: Path, *extra: str) -> tuple[dict, str]:
    code = eval_cli.main(["--gt", str(gt), "--est", str(est), "--json", *extra])
    out = capsys.readouterr()
    assert code == 0, f"eval refused the files: {out.err}"
    return json.loads(out.out), out.err


def evo_ate(gt: Path, est: Path, method: SyncMethod, max_diff: float, align: str):
    ref = evo_files.read_tum_trajectory_file(str(gt))
    e = evo_files.read_tum_trajectory_file(str(est))
    ref, e = evo_sync.associate_trajectories(ref, e, sync_method=method, max_diff=max_diff)
    if align != "none":
        e.align(ref, correct_scale=align == "sim3")
    ape = evo_metrics.APE(evo_metrics.PoseRelation.translation_part)
    ape.process_data((ref, e))
    return ref.num_poses, ape.get_all_statistics(), (ref, e)


@pytest.mark.parametrize("association", ["nearest", "interpolate"])
@pytest.mark.parametrize("align", ["none", "se3"])
def test_duplicate_ground_truth_stamp_is_evaluated_like_evo(capsys, gt_with_duplicate, association, align):
    gt, est = gt_with_duplicate
    ours, err = run_json(
        capsys, gt, est, "--association", association, "--max-diff", "0.006", "--align", align
    )
    assert "ground truth" in err and "duplicate stamp 1300000007.000000000 s" in err, err
    assert "kept" in err, err
    method = SyncMethod.nearest_time if association == "nearest" else SyncMethod.interpolation
    pairs, theirs, _ = evo_ate(gt, est, method, 0.006, align)
    assert ours["samples"] == pairs > 500
    for name in STATS:
        assert ours[f"ate_{name}"] == pytest.approx(theirs[name], abs=TOL), name


def test_out_of_order_estimate_is_sorted_with_a_warning_and_evaluated_like_evo(
    capsys, est_out_of_order, tmp_path
):
    gt, est = est_out_of_order
    ours, err = run_json(capsys, gt, est, "--max-diff", "0.003", "--align", "se3")
    assert "estimate: 2 rows are earlier than the row before" in err and "reordered" in err, err
    assert "duplicate stamp" in err, err
    pairs, theirs, _ = evo_ate(gt, est, SyncMethod.nearest_time, 0.003, "se3")
    assert ours["samples"] == pairs > 350
    for name in STATS:
        assert ours[f"ate_{name}"] == pytest.approx(theirs[name], abs=TOL), name
    # RPE: evo on the same rows in time order (a stable sort keeps the repeated rows in
    # file order, as we do)
    lines = [line for line in est.read_text().splitlines() if not line.startswith("#")]
    lines.sort(key=lambda line: float(line.split()[0]))
    sorted_est = tmp_path / "est_sorted.txt"
    sorted_est.write_text("\n".join(lines) + "\n")
    _, _, (ref, e) = evo_ate(gt, sorted_est, SyncMethod.nearest_time, 0.003, "se3")
    rpe = evo_metrics.RPE(
        evo_metrics.PoseRelation.translation_part, 1, evo_metrics.Unit.frames, pairs_from_reference=True
    )
    rpe.process_data((ref, e))
    assert ours["rpe_trans"]["count"] == rpe.error.size > 300
    assert ours["rpe_trans"]["rmse"] == pytest.approx(
        rpe.get_statistic(evo_metrics.StatisticsType.rmse), abs=TOL
    )


def test_a_sorted_file_gets_no_warning(capsys, tmp_path):
    t = 1_300_000_000.0 + np.arange(0.0, 5.0, 0.01)
    pos, rot = motion(t)
    write_rows(tmp_path / "a.txt", t, pos, rot.as_quat())
    _, err = run_json(capsys, tmp_path / "a.txt", tmp_path / "a.txt", "--align", "none")
    assert err == ""


# runs the command given as its arguments and prints, last on stderr, its exit status and
# its peak RSS in KiB (RUSAGE_CHILDREN of this small process: that one child)
_PEAK_OF_CHILD = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
)


def test_huge_file_of_nul_bytes_after_a_valid_head_fails_fast_with_bounded_memory(tmp_path):
    good = tmp_path / "est.txt"
    t = 1_300_000_000.0 + np.arange(0.0, 5.0, 0.01)
    pos, rot = motion(t)
    write_rows(good, t, pos, rot.as_quat())
    huge = tmp_path / "huge.txt"
    write_rows(huge, t, pos, rot.as_quat())  # ~40 KB of valid text ...
    with open(huge, "r+b") as handle:
        handle.truncate(2 * 1024**3)  # ... then 2 GB of NULs, sparse on disk
    # the evaluation's own peak: a small Python starts it and reports its children's peak.
    # Measured from this test process, a forked child's peak counts the pages it shared with
    # this (by then large) pytest process before exec: CI runs read 682 and 690 MiB that way
    run = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, sys.executable, "-m", "mocap4r2_tools.eval_command"]
        + ["--gt", str(huge), "--est", str(good)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    *stderr_lines, peak_line = run.stderr.rstrip("\n").split("\n")
    stderr_text = "\n".join(stderr_lines)
    code, peak_kib = (int(v) for v in peak_line.split())
    assert code == 1, stderr_text[-2000:]
    assert "Traceback" not in stderr_text, stderr_text[-2000:]
    assert "not a text file" in stderr_text and "NUL byte at offset" in stderr_text, stderr_text
    assert peak_kib < 600 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"
