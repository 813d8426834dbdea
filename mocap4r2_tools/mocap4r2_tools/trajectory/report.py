"""Results as a JSON object (the TrajectoryError fields plus more statistics), as text,
and as matplotlib PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .evaluation import EvaluationResult

if TYPE_CHECKING:  # matplotlib is imported only when plots are asked for
    from matplotlib.figure import Figure

Array = npt.NDArray[np.float64]

PLOT_FILES = ("trajectory_top.png", "trajectory_side.png", "ate.png", "rpe.png")


def to_dict(result: EvaluationResult) -> dict[str, Any]:
    """One JSON-ready object: the mocap4r2_interfaces/TrajectoryError fields first
    (same names and units), then the other statistics and the options used."""
    ate = result.ate_stats
    quat = result.alignment.quaternion()
    trans = result.alignment.translation
    opts = result.options
    return {
        "samples": len(result.association),
        "ate_rmse": ate.rmse,
        "ate_mean": ate.mean,
        "ate_max": ate.max,
        "rpe_trans_rmse": result.rpe_trans_stats.rmse,
        "rpe_rot_rmse": result.rpe_rot_stats.rmse,
        "aligned": result.aligned,
        "alignment": {
            "position": {"x": float(trans[0]), "y": float(trans[1]), "z": float(trans[2])},
            "orientation": {
                "x": float(quat[0]),
                "y": float(quat[1]),
                "z": float(quat[2]),
                "w": float(quat[3]),
            },
        },
        "alignment_scale": result.alignment.scale,
        "ate_median": ate.median,
        "ate_std": ate.std,
        "ate_min": ate.min,
        "ate_sse": ate.sse,
        "rpe_pairs": result.rpe_trans_stats.count,
        "rpe_trans": result.rpe_trans_stats.as_dict(),
        "rpe_rot": result.rpe_rot_stats.as_dict(),
        "gt_poses": result.association.gt_total,
        "est_poses": result.association.est_total,
        "duration": result.gt.duration,
        "options": {
            "association": opts.association,
            "max_diff": opts.max_diff,
            "offset": opts.offset,
            "align": opts.align,
            "align_first_n": opts.align_first_n,
            "rpe_delta": opts.rpe_delta,
            "rpe_unit": opts.rpe_unit,
            "rpe_all_pairs": opts.rpe_all_pairs,
        },
    }


def summary_rows(result: EvaluationResult) -> list[tuple[str, str]]:
    """(label, value) rows of a human-readable summary."""
    a = result.ate_stats
    t = result.rpe_trans_stats
    r = result.rpe_rot_stats
    al = result.alignment
    unit = {"frames": "frames", "m": "m", "s": "s"}[result.options.rpe_unit]
    rows = [
        (
            "pose pairs",
            f"{len(result.association)} (of {result.association.est_total} estimate, "
            f"{result.association.gt_total} ground truth poses)",
        ),
        ("alignment", al.method + (f", scale {al.scale:.6f}" if al.method == "sim3" else "")),
    ]
    if al.method != "none":
        yaw = np.degrees(np.arctan2(al.rotation[1, 0], al.rotation[0, 0]))
        rows.append(("  translation", "[" + ", ".join(f"{v:.4f}" for v in al.translation) + "] m"))
        rows.append(("  yaw", f"{yaw:.3f} deg"))
    rows += [
        ("ATE rmse / mean / median", f"{a.rmse:.6f} / {a.mean:.6f} / {a.median:.6f} m"),
        ("ATE std / min / max", f"{a.std:.6f} / {a.min:.6f} / {a.max:.6f} m"),
        (
            f"RPE step {result.options.rpe_delta:g} {unit}",
            f"{t.count} {'pairs' if result.options.rpe_all_pairs else 'consecutive pairs'}",
        ),
        ("RPE trans rmse / mean / max", f"{t.rmse:.6f} / {t.mean:.6f} / {t.max:.6f} m"),
        (
            "RPE rot rmse / mean / max",
            f"{np.degrees(r.rmse):.4f} / {np.degrees(r.mean):.4f} / {np.degrees(r.max):.4f} deg",
        ),
    ]
    return rows


def write_plots(result: EvaluationResult, directory: str | Path, max_points: int = 200_000) -> list[Path]:
    """trajectory_top.png, trajectory_side.png (after alignment), ate.png (over time),
    rpe.png (histograms). Long trajectories are thinned evenly to ``max_points`` for drawing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    gt = result.gt
    est = result.est_aligned
    rows = _thin(len(gt), max_points)
    t0 = gt.stamps[0]
    label = "estimate" + (f" ({result.alignment.method} aligned)" if result.aligned else "")
    written = []

    for filename, (a, b), title in (
        ("trajectory_top.png", (0, 1), "top view"),
        ("trajectory_side.png", (0, 2), "side view"),
    ):
        fig, ax = plt.subplots(figsize=(7, 6))
        ax.plot(gt.positions[rows, a], gt.positions[rows, b], "-", lw=1.2, color="0.25", label="ground truth")
        ax.plot(est.positions[rows, a], est.positions[rows, b], "-", lw=1.0, color="tab:blue", label=label)
        ax.set_xlabel("xyz"[a] + " [m]")
        ax.set_ylabel("xyz"[b] + " [m]")
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_title(f"trajectories, {title}")
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        written.append(_save(fig, directory / filename))

    fig, ax = plt.subplots(figsize=(9, 4))
    stats = result.ate_stats
    ax.plot(*_break_gaps(gt.stamps[rows] - t0, result.ate[rows]), lw=0.8, color="tab:red")
    ax.axhline(stats.rmse, color="k", ls="--", lw=1, label=f"rmse {stats.rmse:.4f} m")
    ax.axhline(stats.mean, color="0.5", ls=":", lw=1, label=f"mean {stats.mean:.4f} m")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("ATE [m]")
    ax.set_title("absolute trajectory error over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    written.append(_save(fig, directory / "ate.png"))

    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
    unit = result.options.rpe_unit
    for ax, values, xlabel, color in (
        (ax_t, result.rpe_trans, "translation error [m]", "tab:green"),
        (ax_r, np.degrees(result.rpe_rot), "rotation error [deg]", "tab:purple"),
    ):
        if values.size:
            ax.hist(values, bins=min(60, max(5, values.size // 5)), color=color, alpha=0.85)
        else:
            ax.text(0.5, 0.5, "no RPE pairs", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("pairs")
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"relative pose error, step {result.options.rpe_delta:g} {unit} ({result.rpe_trans.size} pairs)"
    )
    written.append(_save(fig, directory / "rpe.png"))
    return written


def _break_gaps(t: Array, y: Array) -> tuple[Array, Array]:
    """NaN inserted where the time step exceeds 5 median steps, so a gap (tracking loss,
    no estimate) shows as a gap instead of a straight line across it."""
    if t.size < 3:
        return t, y
    steps = np.diff(t)
    gaps = np.flatnonzero(steps > 5.0 * np.median(steps)) + 1
    return np.insert(t, gaps, np.nan), np.insert(y.astype(float), gaps, np.nan)


def _thin(n: int, max_points: int) -> npt.NDArray[np.int64]:
    if n <= max_points:
        return np.arange(n)
    return np.linspace(0, n - 1, max_points).astype(np.int64)


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
