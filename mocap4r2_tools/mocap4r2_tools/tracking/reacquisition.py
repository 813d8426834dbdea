"""The (re)acquisition of bodies the fit did not keep, once per frame (numpy/scipy).

:class:`~mocap4r2_tools.tracking.acquisition.BodySearch` says where such bodies may be in
the markers no body claimed; :class:`Reacquisition` hands its candidates out, each body at
most once and no marker to two bodies, and starts each body it hands out afresh from the
found pose: velocity unknown (the gap says nothing about it), counted as a re-acquisition
when the body had been found before.

Which placements are taken is decided best first: a body whose own markers are hidden
stays unplaced rather than push another body off its placement (an assignment that placed
as many bodies as it could would chain one body onto the next one's markers). Which body
takes which of them, among bodies that can take each other's placements (identical
layouts; single-marker bodies, which any marker fits), is then one assignment for the
group (:func:`regroup`): handed out best first alone, twins each standing nearer the
other's anchor started with swapped names (the nearest pair went first, and the other twin
took what was left).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

from mocap4r2_control.rotation import quat_from_matrix
from mocap4r2_tools.tracking.acquisition import BodySearch, Candidate
from mocap4r2_tools.tracking.track_state import BodyStates, Counters

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


#: a pair the assignment must not make (no such candidate): above any sum of real costs
_FORBIDDEN = 1e12
SINGLE_GROUP = -1  # every single-marker body can take any free marker


def _key(candidate: Candidate) -> bytes:
    """A placement's identity: the markers it takes (the same for every body of a group)."""
    slots = candidate[2]
    return np.sort(slots[slots >= 0]).tobytes()


def regroup(candidates: list[Candidate], chosen: list[int]) -> list[int]:
    """The ``chosen`` candidates (indices, handed out best first, bodies of one group)
    given to the same bodies and placements again by one assignment: the least sum of
    costs (distance to each body's anchor and residual, with the markers a placement
    explains first) over every pairing of those bodies with those placements that the
    candidates allow (a placement beyond a body's radius is no candidate of it)."""
    bodies = [candidates[i][1] for i in chosen]
    column = {_key(candidates[i]): c for c, i in enumerate(chosen)}
    row = {body: r for r, body in enumerate(bodies)}
    cost: FloatArray = np.full((len(chosen), len(chosen)), _FORBIDDEN)
    index: IntArray = np.full((len(chosen), len(chosen)), -1, dtype=np.intp)
    for i, candidate in enumerate(candidates):
        r, c = row.get(candidate[1]), column.get(_key(candidate))
        if r is not None and c is not None and candidate[0] < cost[r, c]:
            cost[r, c] = candidate[0]
            index[r, c] = i
    rows, cols = linear_sum_assignment(cost)  # the best-first pairing is one of the allowed ones
    return [int(i) for i in index[rows, cols]]


class Reacquisition:
    """Hands the candidates of a :class:`BodySearch` out to the bodies not tracked."""

    def __init__(self, search: BodySearch, local: FloatArray, state: BodyStates, counters: Counters) -> None:
        """``local``: the padded layouts (B, Lmax, 3) the search's slots index."""
        self.search = search
        self.local = local
        self.lmax = local.shape[1]
        self.state = state
        self.counters = counters
        # bodies that can take each other's placements share a group
        self.group = np.where(search.single, SINGLE_GROUP, search.layout_group)

    def acquire(
        self,
        obs: FloatArray,
        *,
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
            todo,
            points,
            acquired=state.acquired,
            position=state.position,
            velocity=state.velocity,
            last_good=state.last_good,
            stamp=stamp,
        )
        used = np.zeros(len(points), dtype=bool)
        busy = np.zeros(len(valid), dtype=bool)
        groups: dict[int, list[int]] = defaultdict(list)
        for i, (_, body, slots, _, _, _) in enumerate(candidates):
            picked = slots[slots >= 0]
            if busy[body] or used[picked].any():
                continue
            busy[body] = True
            used[picked] = True
            groups[int(self.group[body])].append(i)
        chosen: list[int] = []
        for members in groups.values():
            chosen += regroup(candidates, members) if len(members) > 1 else members
        done: list[int] = []
        for _, body, slots, rot, pos, rms in (candidates[i] for i in sorted(chosen)):
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
