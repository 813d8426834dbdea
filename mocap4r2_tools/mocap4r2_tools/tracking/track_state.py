"""What the tracker's phases share: every body's motion state and the tracker's counters.

The phases (:mod:`.tracker`'s prediction and assignment, :mod:`.tracked_fit`'s fit and
checks, :mod:`.reacquisition`'s hand-out of found bodies) each read and write these arrays
for all bodies at once, in place; one object holds them so that no phase keeps a copy that
could go stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass
class Counters:
    """What the tracker handled and refused since it started."""

    frames: int = 0
    nan_markers: int = 0
    refused_frames: int = 0  # frames with more markers than limits.max_markers
    bad_stamps: int = 0  # stamps not after the previous one
    rejected_fits: int = 0  # fits refused by the residual or dynamics check
    reacquisitions: list[int] = field(default_factory=list)  # per body


class BodyStates:
    """The motion state of every body, one row per body (order of the config): its last
    good pose, its velocity, and when it was last seen. Rows are written in place."""

    def __init__(self, local: FloatArray) -> None:
        """``local``: the padded layouts (B, Lmax, 3), to keep ``offsets`` in step."""
        n_bodies = len(local)
        self.position: FloatArray = np.zeros((n_bodies, 3))
        self.rotation: FloatArray = np.tile(np.eye(3), (n_bodies, 1, 1))
        self.quat: FloatArray = np.tile([0.0, 0.0, 0.0, 1.0], (n_bodies, 1))  # of rotation, x y z w
        # the layout turned by the rotation (as last fitted): the prediction adds a position
        self.offsets: FloatArray = np.einsum("bij,blj->bli", self.rotation, local)
        self.velocity: FloatArray = np.zeros((n_bodies, 3))
        self.velocity_known: BoolArray = np.zeros(n_bodies, dtype=bool)
        self.acquired: BoolArray = np.zeros(n_bodies, dtype=bool)  # found at least once
        self.last_good: FloatArray = np.full(n_bodies, -np.inf)  # stamp of the last good pose
