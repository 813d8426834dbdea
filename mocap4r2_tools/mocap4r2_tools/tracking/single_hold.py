"""The hold of single-marker bodies after a gap (pure numpy).

A single marker has no shape to check it by: after a gap, one found farther from the
prediction than ``marker_gate`` is as likely a stray inside the widened gate as the body's
own. :class:`SingleMarkerHold` holds it (not valid, its marker left free) and lets the fit
be accepted when a later frame, within ``CONFIRM_FRAMES``, finds a marker where one of the
last two held could have moved (``marker_gate + max_velocity * dt``): strays seldom appear
twice there, and two held markers let one frame of occlusion (the body then takes another
marker in its gate, or none) pass without starting over.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mocap4r2_tools.tracking.bodies import TrackerConfig

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

CONFIRM_FRAMES = 3  # frames within which a held single marker can be confirmed


class SingleMarkerHold:
    """The markers held for the single-marker bodies of one configuration, checked once
    per frame for all of them."""

    def __init__(self, config: TrackerConfig, single: BoolArray) -> None:
        n_bodies = len(single)
        self.single = single
        self.marker_gate = config.limits.marker_gate
        self.max_velocity = config.dynamics.max_velocity
        self.held = np.zeros((n_bodies, 2, 3))  # the last two held, newest first
        self.held_stamp = np.full((n_bodies, 2), -np.inf)

    def confirm(
        self,
        good: BoolArray,
        *,
        coasted: BoolArray,
        trans: FloatArray,
        step: FloatArray,
        stamp: float,
        frame_dt: float,
    ) -> None:
        """Clear ``good`` of the single-marker bodies whose fit (``trans``, ``step`` from
        the prediction) is held this frame rather than accepted; ``coasted``: bodies not
        seen in the previous frame, ``frame_dt``: the time since the previous frame."""
        unsure = np.flatnonzero(good & self.single & coasted & (step > self.marker_gate))
        if not len(unsure):
            return
        age = stamp - self.held_stamp[unsure]  # (U, 2)
        reach = self.marker_gate + self.max_velocity * age
        near = np.linalg.norm(trans[unsure, None, :] - self.held[unsure], axis=2) <= reach
        follows = (near & (age <= (CONFIRM_FRAMES + 0.5) * frame_dt)).any(axis=1)
        self.held[unsure, 1] = self.held[unsure, 0]
        self.held_stamp[unsure, 1] = self.held_stamp[unsure, 0]
        self.held[unsure, 0] = trans[unsure]
        self.held_stamp[unsure, 0] = stamp
        self.held_stamp[unsure[follows]] = -np.inf
        good[unsure[~follows]] = False
