"""What a marker-based mocap system makes of true poses, written once for every emulated
system (the simulated scene and the Gazebo emulator).

Given each body's true pose and its marker layout, one frame's observation is: the
markers in the world plus Gaussian noise; each marker occluded with its probability (and
every marker of a body that cannot be seen at all); a body tracked when 3 or more of its
markers are seen; a residual per seen marker (the length of its noise) and a mean error
per body (their mean over the seen markers, -1 when none is seen).

Random draws come from the caller's generator in a fixed order (noise, then occlusion),
so a frame stays a pure function of the generator's seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mocap4r2_control.rotation import quat_from_matrix, quat_rotate


@dataclass
class MarkerObservation:
    """One emulated frame of markers for n bodies with m markers in all (arrays indexed by marker, or by body
    where noted)."""

    positions: np.ndarray  # (m, 3) world positions with noise, NaN where occluded
    noise: np.ndarray  # (m, 3) the noise added
    occluded: np.ndarray  # (m,) bool
    residuals: np.ndarray  # (m,) float32, -1 where occluded
    visible: np.ndarray  # (n,) markers seen per body
    valid: np.ndarray  # (n,) bool: seen at all and 3 or more markers seen
    mean_errors: np.ndarray  # (n,) float32


def observe_markers(
    rng: np.random.Generator,
    layout: np.ndarray,
    *,
    marker_body: np.ndarray,
    positions: np.ndarray,
    orientations: np.ndarray,
    noise: float,
    occlusion: float | np.ndarray,
    hidden: np.ndarray,
) -> MarkerObservation:
    """One frame's markers of ``n`` bodies (``positions`` (n, 3), ``orientations`` (n, 4)
    x y z w); ``layout`` (m, 3) in the body frames, ``marker_body`` (m,) the body of each
    marker; ``occlusion`` a probability, per marker or for all; ``hidden`` (n,) bodies no
    camera can see in this frame."""
    offsets, draws = draw_marker_randomness(rng, layout.shape[0], noise)
    seen = observe_markers_batch(
        layout,
        marker_body,
        positions=positions[None],
        orientations=orientations[None],
        offsets=offsets[None],
        draws=draws[None],
        occlusion=occlusion,
        hidden=np.asarray(hidden)[None],
    )
    return MarkerObservation(
        *(
            a[0]
            for a in (
                seen.positions,
                seen.noise,
                seen.occluded,
                seen.residuals,
                seen.visible,
                seen.valid,
                seen.mean_errors,
            )
        )
    )


def draw_marker_randomness(rng: np.random.Generator, m: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """The random draws of one frame's ``m`` markers, in their fixed order: Gaussian
    noise (m, 3), then one uniform draw per marker that decides its occlusion."""
    offsets = rng.normal(0.0, noise, size=(m, 3)) if noise > 0 else np.zeros((m, 3))
    return offsets, rng.random(m)


def observe_markers_batch(
    layout: np.ndarray,
    marker_body: np.ndarray,
    *,
    positions: np.ndarray,
    orientations: np.ndarray,
    offsets: np.ndarray,
    draws: np.ndarray,
    occlusion: float | np.ndarray,
    hidden: np.ndarray,
) -> MarkerObservation:
    """:func:`observe_markers` for ``B`` frames at once, the draws made beforehand (see
    :func:`draw_marker_randomness`): ``positions`` (B, n, 3), ``orientations`` (B, n, 4),
    ``offsets`` (B, m, 3), ``draws`` (B, m), ``hidden`` (B, n). Every output gains the
    leading axis B; each frame's values are those of the one-frame call with its draws."""
    m = layout.shape[0]
    batch, n = positions.shape[0], positions.shape[1]
    world = quat_rotate(orientations[:, marker_body], layout) + positions[:, marker_body]
    world += offsets
    occluded = draws < occlusion
    occluded |= hidden[:, marker_body]
    # per-frame bincounts in one call: bin b * n + body
    bins = (np.arange(batch)[:, None] * n + marker_body[None, :])[~occluded]
    visible = np.bincount(bins, minlength=batch * n).reshape(batch, n)
    valid = ~hidden & (visible >= 3)
    residuals = np.linalg.norm(offsets, axis=-1).astype(np.float32)
    mean_errors = np.zeros((batch, n), dtype=np.float32)
    if n and m:
        sums = np.bincount(bins, weights=residuals[~occluded], minlength=batch * n).reshape(batch, n)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_errors = np.where(visible > 0, sums / np.maximum(visible, 1), -1.0).astype(np.float32)
    elif n:
        mean_errors[:] = -1.0
    world[occluded] = np.nan
    residuals[occluded] = -1.0
    return MarkerObservation(world, offsets, occluded, residuals, visible, valid, mean_errors)


def fit_pose(layout: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The rigid transform (position (3,), quaternion x y z w) that best maps ``layout``
    (k, 3, body frame) onto ``observed`` (k, 3, world) in the least-squares sense (the
    Kabsch/Umeyama solution without scale), as a mocap system fits a rigid body to the
    markers it sees; rows with NaN are left out. None when fewer than 3 rows remain.
    The result is the pose of the body frame itself, not of the markers' centroid."""
    keep = np.all(np.isfinite(observed), axis=1)
    if int(keep.sum()) < 3:
        return None
    a = layout[keep]
    b = observed[keep]
    ca, cb = a.mean(axis=0), b.mean(axis=0)
    u, _, vt = np.linalg.svd((a - ca).T @ (b - cb))
    d = np.sign(np.linalg.det(vt.T @ u.T))
    rot = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    quat = quat_from_matrix(rot)
    return cb - rot @ ca, quat / np.linalg.norm(quat)
