"""What a calibration tells the user: the transforms as a ``static_transform_publisher``
line and a URDF ``<origin>``, each value with its standard deviation, a JSON object, and
residual plots.

Uncertainty is given per parameter, as standard deviations (1 sigma; about 95 % of the
truth lies within 1.96 sigma): the translation along the parent frame's axes (m) and
the rotation about the child frame's own axes (rad/deg: small rotations, which unlike
roll/pitch/yaw angles are well defined near any orientation).

Which transforms are printed, with the frames named by ``Frames`` (each stream's parent
frame and child frame):

* hand_eye: X, B's child (camera, tool) in A's child (body, flange);
* robot_world: X as for hand-eye, and the robot base in the mocap frame (Y inverted, its
  covariance carried through the inversion), the edge a TF tree rooted in the mocap
  frame needs;
* frame_to_frame: X, B's parent frame in A's parent frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mocap4r2_control.geometry import Transform
from mocap4r2_control.rotation import FloatArray, quat_to_matrix, quat_to_rpy_one

from .solve import Calibration


@dataclass(frozen=True)
class Frames:
    """Parent and child frame of each stream's poses."""

    a_parent: str
    a_child: str
    b_parent: str
    b_child: str


DEFAULT_FRAMES = {
    "hand_eye": Frames("world", "body", "map", "camera"),
    "robot_world": Frames("base_link", "flange", "world", "tool"),
    "frame_to_frame": Frames("world", "body", "world2", "body"),
}


@dataclass(frozen=True, eq=False)
class NamedTransform:
    """One transform to publish: parent -> child, with its 6 x 6 covariance in
    (rotation about the child's axes (rad), translation in the parent frame (m))."""

    label: str
    parent: str
    child: str
    pose: Transform
    covariance: FloatArray

    @property
    def sigma_rotation(self) -> FloatArray:
        out: FloatArray = np.sqrt(np.clip(np.diag(self.covariance)[0:3], 0.0, None))
        return out

    @property
    def sigma_translation(self) -> FloatArray:
        out: FloatArray = np.sqrt(np.clip(np.diag(self.covariance)[3:6], 0.0, None))
        return out

    @property
    def rpy(self) -> tuple[float, float, float]:
        return quat_to_rpy_one(self.pose.rotation)


def transforms(cal: Calibration, frames: Frames | None = None) -> list[NamedTransform]:
    """The transforms of ``cal`` to publish (see the module doc)."""
    frames = frames or DEFAULT_FRAMES[cal.kind]
    cov = cal.refined.covariance_reported
    x = NamedTransform("X", frames.a_child, frames.b_child, cal.x, cov[0:6, 0:6])
    if cal.kind == "frame_to_frame":
        return [NamedTransform("X", frames.a_parent, frames.b_parent, cal.x, cov[0:6, 0:6])]
    if cal.kind == "hand_eye" or cal.y is None:
        return [x]
    y_inv, cov_inv = inverse_with_covariance(cal.y, cov[6:12, 6:12])
    return [x, NamedTransform("Y^-1", frames.b_parent, frames.a_parent, y_inv, cov_inv)]


def inverse_with_covariance(pose: Transform, covariance: FloatArray) -> tuple[Transform, FloatArray]:
    """The inverse of one transform and its covariance, to first order: with local
    coordinates (w, v) of T = (R exp(w), t + v), those of T^-1 are w' = -R w and
    v' = -R^T v - [R^T t]x w."""
    r = quat_to_matrix(pose.rotation)
    u = r.T @ pose.translation
    skew = np.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])
    jac = np.zeros((6, 6))
    jac[0:3, 0:3] = -r
    jac[3:6, 0:3] = -skew
    jac[3:6, 3:6] = -r.T
    return pose.inverse(), jac @ covariance @ jac.T


def static_transform_publisher(t: NamedTransform) -> str:
    """The ``ros2 run tf2_ros static_transform_publisher`` line publishing ``t``."""
    p, q = t.pose.translation, t.pose.rotation
    return (
        "ros2 run tf2_ros static_transform_publisher "
        f"--x {p[0]:.6f} --y {p[1]:.6f} --z {p[2]:.6f} "
        f"--qx {q[0]:.9f} --qy {q[1]:.9f} --qz {q[2]:.9f} --qw {q[3]:.9f} "
        f"--frame-id {t.parent} --child-frame-id {t.child}"
    )


def urdf_origin(t: NamedTransform) -> str:
    """The URDF ``<origin>`` of a joint from ``t.parent`` to ``t.child``."""
    p = t.pose.translation
    rpy = t.rpy
    return f'<origin xyz="{p[0]:.6f} {p[1]:.6f} {p[2]:.6f}" rpy="{rpy[0]:.9f} {rpy[1]:.9f} {rpy[2]:.9f}"/>'


def residual_rms(cal: Calibration) -> tuple[float, float]:
    """(translation mm, rotation deg) rms of the residuals of the pairs not counted as outliers."""
    res = cal.refined.residuals[~cal.refined.outliers]
    if res.shape[0] == 0:
        return math.nan, math.nan
    trans = float(np.sqrt(np.mean(np.sum(res[:, 3:6] ** 2, axis=1)))) * 1e3
    rot = math.degrees(float(np.sqrt(np.mean(np.sum(res[:, 0:3] ** 2, axis=1)))))
    return trans, rot


def offset_sigma(cal: Calibration) -> float | None:
    """The offset's reported standard deviation (s), None when it was not estimated."""
    names = cal.refined.names
    if "offset" not in names:
        return None
    return float(cal.refined.sigma[names.index("offset")])


def to_dict(cal: Calibration, frames: Frames | None = None) -> dict[str, Any]:
    """Everything printed, as one JSON-ready dict."""
    trans_rms, rot_rms = residual_rms(cal)
    out_transforms = []
    for t in transforms(cal, frames):
        out_transforms.append(
            {
                "name": t.label,
                "parent": t.parent,
                "child": t.child,
                "translation": [float(v) for v in t.pose.translation],
                "quaternion_xyzw": [float(v) for v in t.pose.rotation],
                "rpy": list(t.rpy),
                "sigma_translation_m": [float(v) for v in t.sigma_translation],
                "sigma_rotation_rad": [float(v) for v in t.sigma_rotation],
                "static_transform_publisher": static_transform_publisher(t),
                "urdf_origin": urdf_origin(t),
            }
        )
    refined = cal.refined
    return {
        "kind": cal.kind,
        "transforms": out_transforms,
        "offset_s": cal.offset,
        "offset_sigma_s": offset_sigma(cal),
        "offset_start_s": cal.start_offset,
        "offset_found_by": cal.offset_found_by,
        "pairs": len(cal.pairs),
        "outliers": cal.outliers,
        "start_trimmed": cal.trimmed,
        "dropped_a": cal.dropped_a,
        "dropped_b": cal.dropped_b,
        "residual_rms_mm": trans_rms,
        "residual_rms_deg": rot_rms,
        "parameters": refined.names,
        "sigma": [float(v) for v in refined.sigma],
        "sigma_covariance": [float(v) for v in refined.sigma_cov],
        "sigma_bootstrap": [float(v) for v in refined.sigma_boot],
        "bootstrap_coverage_95": refined.coverage,
        "solve_s": cal.solve_s,
        "notes": list(cal.notes),
    }


def summary_lines(cal: Calibration, frames: Frames | None = None) -> list[str]:
    """The human-readable result."""
    equation = {"hand_eye": "A X = X B", "robot_world": "A X = Y B", "frame_to_frame": "A = X B"}[cal.kind]
    lines = [f"{cal.kind} ({equation}): {len(cal.pairs)} pose pairs, {cal.outliers} counted as outliers"]
    sigma = offset_sigma(cal)
    spread = f" +- {sigma * 1e3:.2f}" if sigma is not None else " (fixed)"
    lines.append(
        f"time offset: {cal.offset * 1e3:+.2f}{spread} ms added to B's stamps "
        f"(start {cal.start_offset * 1e3:+.2f} ms, {cal.offset_found_by})"
    )
    for t in transforms(cal, frames):
        p, st = t.pose.translation, t.sigma_translation * 1e3
        rpy, sr = np.degrees(t.rpy), np.degrees(t.sigma_rotation)
        lines += [
            "",
            f"{t.label}: {t.child} in {t.parent}",
            "  translation  " + "  ".join(f"{a} {v:+.5f} m +- {s:.2f} mm" for a, v, s in zip("xyz", p, st)),
            "  rotation     " + "  ".join(f"{a} {v:+.4f} deg" for a, v in zip(("roll", "pitch", "yaw"), rpy)),
            "  rotation sd  "
            + "  ".join(f"about {a} {s:.4f} deg" for a, s in zip("xyz", sr))
            + f" (of {t.child})",
            "  " + static_transform_publisher(t),
            "  " + urdf_origin(t),
        ]
    trans_rms, rot_rms = residual_rms(cal)
    lines += [
        "",
        f"residuals (inliers): {trans_rms:.3f} mm, {rot_rms:.4f} deg rms; bootstrap: "
        f"{cal.refined.coverage * 100:.0f} % inside the covariance's 95 % interval; "
        f"solved in {cal.solve_s:.2f} s",
    ]
    if cal.dropped_a or cal.dropped_b:
        lines.append(f"left out (NaN or untracked): {cal.dropped_a} poses of A, {cal.dropped_b} of B")
    lines += [f"note: {note}" for note in cal.notes]
    return lines


def write_plots(cal: Calibration, directory: Path) -> list[Path]:
    """PNG plots of the residuals over time and their distribution into ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    res = cal.refined.residuals
    times = cal.pairs.stamps - cal.pairs.stamps[0]
    trans = np.linalg.norm(res[:, 3:6], axis=1) * 1e3
    rot = np.degrees(np.linalg.norm(res[:, 0:3], axis=1))
    out = cal.refined.outliers
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for row, (values, unit) in enumerate(
        ((trans, "translation residual (mm)"), (rot, "rotation residual (deg)"))
    ):
        axes[row, 0].plot(times[~out], values[~out], ".", markersize=3, label="pairs")
        axes[row, 0].plot(times[out], values[out], "rx", markersize=5, label="outliers")
        axes[row, 0].set_xlabel("time (s)")
        axes[row, 0].set_ylabel(unit)
        axes[row, 0].set_yscale("log")
        axes[row, 0].legend()
        axes[row, 1].hist(values[~out], bins=40)
        axes[row, 1].set_xlabel(unit + ", inliers")
    fig.suptitle(f"mocap4r2 calibrate {cal.kind}: {len(cal.pairs)} pairs, {cal.outliers} outliers")
    fig.tight_layout()
    path = directory / f"calibration_{cal.kind}_residuals.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]
