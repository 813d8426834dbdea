"""The (re)acquisition of bodies the fit did not keep, once per frame (numpy/scipy).

:class:`~mocap4r2_tools.tracking.acquisition.BodySearch` says where such bodies may be in
the markers no body claimed; :class:`Reacquisition` hands its candidates out, each body at
most once and no marker to two bodies, and starts each body it hands out afresh from the
found pose: velocity unknown (the gap says nothing about it), counted as a re-acquisition
when the body had been found before.

Bodies that can take each other's placements (identical layouts; single-marker bodies,
which any marker fits) get them by one assignment for the group (:func:`group_assignment`):
handed out best first, twins placed nearer each other's anchor started with swapped names
(the nearest pair went first, and the other twin took what was left). Other bodies, and
what the assignment could not place, are handed out best first as before.
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


def group_assignment(candidates: list[Candidate], members: list[int]) -> list[int]:
    """The candidates (indices into ``candidates``) that place the group's bodies all at
    once: the most bodies placed, then the least sum of costs (the cost already puts the
    markers a placement explains first, then its distance to the anchor and residual),
    with no marker in two placements. A placement found for several bodies is one column;
    when the cheapest assignment gives two bodies placements that share a marker (two
    readings of overlapping markers), the dearer of them is dropped and it is solved
    again (at most once per placement)."""
    bodies = sorted({candidates[i][1] for i in members})
    row = {body: r for r, body in enumerate(bodies)}
    keys: dict[bytes, int] = {}
    markers: list[IntArray] = []
    wide: FloatArray = np.full((len(bodies), len(members)), _FORBIDDEN)
    where: IntArray = np.full((len(bodies), len(members)), -1, dtype=np.intp)
    for i in members:
        value, body, slots = candidates[i][0], candidates[i][1], candidates[i][2]
        picked = np.sort(slots[slots >= 0])
        column = keys.setdefault(picked.tobytes(), len(keys))
        if column == len(markers):
            markers.append(picked)
        if value < wide[row[body], column]:
            wide[row[body], column] = value
            where[row[body], column] = i
    cost, index = wide[:, : len(keys)], where[:, : len(keys)]
    while True:
        solved: tuple[IntArray, IntArray] = linear_sum_assignment(cost)
        real = cost[solved] < _FORBIDDEN
        rows, cols = solved[0][real], solved[1][real]
        clash = _first_clash([markers[c] for c in cols])
        if clash is None:
            return [int(i) for i in index[rows, cols]]
        first, second = cols[clash[0]], cols[clash[1]]
        dearer = first if cost[rows[clash[0]], first] > cost[rows[clash[1]], second] else second
        cost[:, dearer] = _FORBIDDEN


def _first_clash(placements: list[IntArray]) -> tuple[int, int] | None:
    """The first two of ``placements`` (marker indices) that share a marker, or None."""
    owner: dict[int, int] = {}
    for k, picked in enumerate(placements):
        for marker in picked.tolist():
            if marker in owner:
                return owner[marker], k
            owner[marker] = k
    return None


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

    def _assigned_first(self, candidates: list[Candidate]) -> list[Candidate]:
        """``candidates`` (best first) in the order they are handed out: per group of
        bodies that can take each other's placements, the pairs of its assignment
        (:func:`group_assignment`), with the candidates of bodies alone in their group,
        best first; then the rest, best first, for what the assignment could not place
        (a marker taken by a body of another group meanwhile)."""
        groups: dict[int, list[int]] = defaultdict(list)
        for i, candidate in enumerate(candidates):
            groups[int(self.group[candidate[1]])].append(i)
        first: list[int] = []
        for members in groups.values():
            if len({candidates[i][1] for i in members}) < 2:
                first += members
            else:
                first += group_assignment(candidates, members)
        chosen = set(first)
        return [candidates[i] for i in sorted(first)] + [
            c for i, c in enumerate(candidates) if i not in chosen
        ]

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
        for _, body, slots, rot, pos, rms in self._assigned_first(candidates):
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
