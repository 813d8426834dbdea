"""The (re)acquisition of bodies the fit did not keep, once per frame (pure numpy).

:class:`~mocap4r2_tools.tracking.acquisition.BodySearch` says where such bodies may be in
the markers no body claimed; :class:`Reacquisition` hands its candidates out best first,
each body at most once and no marker to two bodies, and starts each body it hands out
afresh from the found pose: velocity unknown (the gap says nothing about it), counted
as a re-acquisition when the body had been found before.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import quat_from_matrix
from mocap4r2_tools.tracking.acquisition import BodySearch
from mocap4r2_tools.tracking.track_state import BodyStates, Counters

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


class Reacquisition:
    """Hands the candidates of a :class:`BodySearch` out to the bodies not tracked."""

    def __init__(self, search: BodySearch, local: FloatArray, state: BodyStates, counters: Counters) -> None:
        """``local``: the padded layouts (B, Lmax, 3) the search's slots index."""
        self.search = search
        self.local = local
        self.lmax = local.shape[1]
        self.state = state
        self.counters = counters

    def acquire(
        self,
        obs: FloatArray,
        claimed: BoolArray,
        assigned: IntArray,
        valid: BoolArray,
        error: FloatArray,
        stamp: float,
    ) -> list[int]:
        """(Re)acquire the bodies not ``valid`` from the markers not ``claimed``; returns
        the bodies acquired, whose state is reset here and whose rows of ``assigned``,
        ``valid`` and ``error`` (the fit's RMS residual) are written."""
        todo = np.flatnonzero(~valid)
        free = np.flatnonzero(~claimed)
        if not len(todo) or not len(free):
            return []
        state = self.state
        points = obs[free]
        candidates = self.search.candidates(
            todo, points, state.acquired, state.position, state.velocity, state.last_good, stamp
        )
        used = np.zeros(len(points), dtype=bool)
        done: list[int] = []
        busy = np.zeros(len(valid), dtype=bool)
        for _, body, slots, rot, pos, rms in candidates:
            picked = slots[slots >= 0]
            if busy[body] or used[picked].any():
                continue
            busy[body] = True
            used[picked] = True
            if state.acquired[body]:
                self.counters.reacquisitions[body] += 1
            state.acquired[body] = True
            state.position[body] = pos
            state.rotation[body] = rot
            state.quat[body] = quat_from_matrix(rot)
            state.offsets[body] = self.local[body] @ rot.T
            state.velocity[body] = 0.0
            state.velocity_known[body] = False
            state.last_good[body] = stamp
            row = np.full(self.lmax, -1, dtype=np.intp)
            row[: len(slots)] = np.where(slots >= 0, free[np.maximum(slots, 0)], -1)
            assigned[body] = row
            claimed[row[row >= 0]] = True
            valid[body] = True
            error[body] = rms
            done.append(body)
        return done
