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

from mocap4r2_control.geometry import quat_rotate


@dataclass
class MarkerObservation:
    positions: np.ndarray     # (m, 3) world positions with noise, NaN where occluded
    noise: np.ndarray         # (m, 3) the noise added
    occluded: np.ndarray      # (m,) bool
    residuals: np.ndarray     # (m,) float32, -1 where occluded
    visible: np.ndarray       # (n,) markers seen per body
    valid: np.ndarray         # (n,) bool: seen at all and 3 or more markers seen
    mean_errors: np.ndarray   # (n,) float32


def observe_markers(rng: np.random.Generator, layout: np.ndarray, marker_body: np.ndarray,
                    positions: np.ndarray, orientations: np.ndarray, noise: float,
                    occlusion: float | np.ndarray, hidden: np.ndarray) -> MarkerObservation:
    """One frame's markers of ``n`` bodies (``positions`` (n, 3), ``orientations`` (n, 4)
    x y z w); ``layout`` (m, 3) in the body frames, ``marker_body`` (m,) the body of each
    marker; ``occlusion`` a probability, per marker or for all; ``hidden`` (n,) bodies no
    camera can see in this frame."""
    m = layout.shape[0]
    n = len(positions)
    world = quat_rotate(orientations[marker_body], layout) + positions[marker_body]
    offsets = rng.normal(0.0, noise, size=(m, 3)) if noise > 0 else np.zeros((m, 3))
    world += offsets
    occluded = rng.random(m) < occlusion
    occluded |= hidden[marker_body]
    visible = np.bincount(marker_body[~occluded], minlength=n)
    valid = ~hidden & (visible >= 3)
    residuals = np.linalg.norm(offsets, axis=1).astype(np.float32)
    mean_errors = np.zeros(n, dtype=np.float32)
    if n:
        sums = np.bincount(marker_body[~occluded], weights=residuals[~occluded], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_errors = np.where(visible > 0, sums / np.maximum(visible, 1), -1.0).astype(np.float32)
    world[occluded] = np.nan
    residuals[occluded] = -1.0
    return MarkerObservation(world, offsets, occluded, residuals, visible, valid, mean_errors)
