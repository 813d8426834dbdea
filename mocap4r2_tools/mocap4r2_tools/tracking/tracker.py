"""Follow rigid bodies through unlabeled marker clouds, identical bodies included.

Per frame (:meth:`Tracker.update`):

1. predict every body seen within ``coast_time`` at constant velocity from its last good
   pose, and gate each predicted marker by what the dynamics allow since then;
2. assign markers to ALL bodies' layout markers at once (one linear_sum_assignment over
   the gated squared distances), so two identical bodies crossing each other cannot both
   take the same marker, and the cheaper global pairing wins over a greedy one;
3. fit each body (weighted Kabsch over its assigned markers; with fewer than 3, the
   prior orientation and a translation), then refine: drop markers far off the fit, take
   free markers that the fitted pose explains, fit again;
4. accept a fit only if its RMS residual and the motion since the last good pose are
   within the limits; markers of a refused fit go back to the free pool;
5. (re)acquire bodies not tracked from the free markers: a layout is searched by the
   pairwise distances of its marker triangles (any position, any orientation); identical
   bodies and single-marker bodies only near their ``initial_position`` or last known
   position. Bodies that can take each other's placements (identical layouts, single
   markers) get them by one assignment per group; the others best first; never a marker
   to two bodies.

Markers left over are strays (ghosts, other objects). Times are the frames' own stamps,
never the host clock. A single-marker body reports the identity orientation.

This module holds steps 1 and 2 and runs the frame; each other step is one call per frame
for all bodies at once: :mod:`.tracked_fit` (steps 3 and 4, with :mod:`.single_hold` for
single-marker bodies after a gap), :mod:`.reacquisition` (step 5, with :mod:`.acquisition`'s
search). :mod:`.track_state` holds the per-body motion state they share and the counters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from mocap4r2_tools.tracking.acquisition import BodySearch
from mocap4r2_tools.tracking.bodies import (
    TrackerConfig,
    check_identical_starts,
    layout_groups,
    padded_layouts,
)
from mocap4r2_tools.tracking.kernels import MarkerIndex, pair_alone
from mocap4r2_tools.tracking.reacquisition import Reacquisition
from mocap4r2_tools.tracking.single_hold import SingleMarkerHold
from mocap4r2_tools.tracking.track_state import BodyStates, Counters
from mocap4r2_tools.tracking.tracked_fit import NEIGHBOURS, TrackedFit

__all__ = ["Counters", "FrameResult", "Tracker"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

_UNGATED = 1e9  # cost of a pairing outside its gate: never preferred to leaving a marker out
# overlapping gates of up to this many predicted markers are solved as one matrix (a
# block-diagonal matrix has the optimum of its blocks); more are split into the connected
# parts of the gate graph, as linear_sum_assignment's time grows with the cube of its size
_ONE_MATRIX_ROWS = 24


@dataclass
class FrameResult:
    """One frame's output; arrays are indexed by body (order of the config)."""

    positions: FloatArray  # (B, 3)
    orientations: FloatArray  # (B, 4) x, y, z, w; identity for single-marker bodies
    valid: BoolArray  # (B,) tracking_valid
    mean_error: FloatArray  # (B,) RMS residual of the fit (m); NaN when not valid
    assigned: IntArray  # (B, Lmax) index into the frame's markers per layout marker, -1 = none
    strays: IntArray  # indices of markers given to no body
    reacquired: IntArray  # bodies (re)acquired in this frame


class Tracker:
    """The tracking state of a set of bodies; feed it frames in stamp order."""

    def __init__(self, config: TrackerConfig) -> None:
        check_identical_starts(config.bodies)
        self.config = config
        self.bodies = config.bodies
        n_bodies = len(self.bodies)
        self.sizes, self.local, self.slot = padded_layouts(self.bodies)
        self.lmax = self.local.shape[1]
        self.radius = np.linalg.norm(self.local, axis=2).max(axis=1)
        # half the closest spacing of two markers of a layout: a wider gate lets the
        # assignment permute a body's own markers, so such a body is searched by signature
        self.half_spacing = np.full(n_bodies, np.inf)
        for i, body in enumerate(self.bodies):
            if len(body.points) > 1:
                d = np.linalg.norm(body.points[:, None] - body.points[None], axis=2)
                self.half_spacing[i] = 0.5 * d[np.triu_indices(len(d), 1)].min()
        self.single = self.sizes == 1
        self.any_single = bool(self.single.any())
        self.layout_group, self.identical = layout_groups(self.bodies)
        self.search = BodySearch(
            self.bodies,
            limits=config.limits,
            dynamics=config.dynamics,
            identical=self.identical,
            single=self.single,
            layout_group=self.layout_group,
        )
        # per layout marker (flat index into (B, Lmax)) and its body
        self.slot_rows = np.flatnonzero(self.slot.ravel())
        self.slot_body = self.slot_rows // self.lmax
        self.state = BodyStates(self.local)
        self.last_stamp: float | None = None
        self.previous_stamp: float | None = None
        self.counters = Counters(reacquisitions=[0] * n_bodies)
        # the phases after the assignment, each called once per frame
        self.hold = SingleMarkerHold(config, self.single) if self.any_single else None
        self.tracked_fit = TrackedFit(
            config,
            local=self.local,
            slot=self.slot,
            radius=self.radius,
            single=self.single,
            state=self.state,
            counters=self.counters,
            hold=self.hold,
        )
        self.reacquisition = Reacquisition(self.search, self.local, self.state, self.counters)

    # ------------------------------------------------------------------ frame
    def update(self, markers: npt.ArrayLike, stamp: float) -> FrameResult:
        """Track one frame: markers (M, 3) in metres, any order; stamp in seconds."""
        cfg, lim = self.config, self.config.limits
        self.counters.frames += 1
        raw = np.asarray(markers, dtype=np.float64).reshape(-1, 3)
        all_finite = bool(np.isfinite(raw).all()) and raw.shape[0] <= lim.max_markers
        if not all_finite:
            finite: BoolArray = np.asarray(np.isfinite(raw).all(axis=1))
            self.counters.nan_markers += int(raw.shape[0] - finite.sum())
            if raw.shape[0] > lim.max_markers:
                self.counters.refused_frames += 1
                finite[:] = False
        index_of = np.flatnonzero(finite) if not all_finite else None
        obs = raw if index_of is None else raw[index_of]
        if self.last_stamp is not None and not stamp > self.last_stamp:
            self.counters.bad_stamps += 1
            stamp = self.last_stamp + 1e-6
        self.previous_stamp = self.last_stamp
        self.last_stamp = stamp
        n_bodies = len(self.bodies)
        state = self.state
        since = stamp - state.last_good
        dyn = cfg.dynamics
        recent = state.acquired & (since <= lim.coast_time)
        dt = np.where(recent, since, 0.0)
        # how far from its prediction a body may be: noise and model error, the acceleration
        # bound, and the speed bound while the velocity is not known yet
        allowed = lim.marker_gate + 0.5 * dyn.max_acceleration * dt**2
        allowed += np.where(state.velocity_known, 0.0, dyn.max_velocity * dt)
        # each of its markers, also turned at most max_angular_velocity
        gate = np.minimum(
            allowed + np.minimum(dyn.max_angular_velocity * dt, np.pi) * self.radius, lim.init_radius
        )
        frame_dt = stamp - self.previous_stamp if self.previous_stamp is not None else np.inf
        seen_last_frame = since <= 1.5 * frame_dt
        tracked = recent & ((gate <= self.half_spacing) | seen_last_frame)
        claimed = np.zeros(len(obs), dtype=bool)
        assigned = np.full((n_bodies, self.lmax), -1, dtype=np.intp)

        if tracked.any() and len(obs):
            pred_p = state.position + state.velocity * dt[:, None]
            rows = self.slot_rows if tracked.all() else self.slot_rows[tracked[self.slot_body]]
            body_of = rows // self.lmax
            # the layout as last fitted (kept by the fit) moved to the predicted position
            predicted = state.offsets.reshape(-1, 3)[rows] + pred_p[body_of]
            index = MarkerIndex(obs)
            self._assign(
                index, n_obs=len(obs), rows=rows, predicted=predicted, gate=gate[body_of], assigned=assigned
            )
            coasted = tracked & ~seen_last_frame
            rms = self.tracked_fit.fit(
                obs,
                index,
                assigned=assigned,
                tracked=tracked,
                coasted=coasted,
                pred_p=pred_p,
                dt=dt,
                gate=gate,
                allowed=allowed,
                claimed=claimed,
                stamp=stamp,
                frame_dt=frame_dt,
            )
        else:
            rms = np.full(n_bodies, np.nan)
        valid: BoolArray = np.asarray((assigned >= 0).any(axis=1))
        error = np.where(valid, rms, np.nan)
        # a single marker has no signature: while its gate was offered in the assignment, any
        # other free marker near it is as likely a stray or another body's as its own
        if self.any_single:
            searchable = valid | ~(self.single & tracked)
            settled = valid | ~searchable  # acquire() marks the bodies it acquires in here
            reacquired = self.reacquisition.acquire(
                obs, claimed=claimed, assigned=assigned, valid=settled, error=error, stamp=stamp
            )
            valid = settled & searchable
        else:
            reacquired = self.reacquisition.acquire(
                obs, claimed=claimed, assigned=assigned, valid=valid, error=error, stamp=stamp
            )
        out_assigned: IntArray = assigned
        if index_of is None:
            strays = np.flatnonzero(~claimed)
        else:
            strays = index_of[~claimed]
            out_assigned = np.append(index_of, -1)[assigned]  # -1 (no marker) picks the -1 appended
        quats = state.quat.copy()  # a single-marker body's stays the identity (its rotation's)
        return FrameResult(
            state.position.copy(), quats, valid, error, out_assigned, strays, np.asarray(reacquired, np.intp)
        )

    def _assign(
        self,
        index: MarkerIndex,
        *,
        n_obs: int,
        rows: IntArray,
        predicted: FloatArray,
        gate: FloatArray,
        assigned: IntArray,
    ) -> None:
        """The global gated assignment of observed markers to the predicted layout markers
        ``rows`` (flat indices into ``assigned``), written into ``assigned``.

        It is the minimum-cost matching among those with the most pairs inside their
        gates, solved per connected part of the gate graph: a predicted marker with one
        marker in its gate that no other gate holds (the usual case while tracking) is
        paired directly (compiled: :func:`.kernels.pair_alone`); only the markers and
        predictions whose gates overlap go through linear_sum_assignment, and a part of the
        graph never changes another's optimum."""
        k = min(NEIGHBOURS, n_obs)
        dist, near = index.query(predicted, gate, k)  # within each row's own gate, nearest first
        shared: IntArray = pair_alone(near, n_obs, rows, assigned.reshape(-1))
        if not len(shared):
            return
        flat = assigned.reshape(-1)
        inside = near < n_obs
        in_shared = inside[shared]
        cols, col_of = np.unique(near[shared][in_shared], return_inverse=True)
        r_idx = np.nonzero(in_shared)[0]
        sq = dist[shared][in_shared] ** 2
        parts: list[tuple[IntArray, IntArray]]
        if len(shared) <= _ONE_MATRIX_ROWS:
            parts = [(np.arange(len(shared)), np.arange(len(cols)))]
        else:
            graph = coo_matrix(
                (np.ones(len(r_idx)), (r_idx, len(shared) + col_of)), shape=(len(shared) + len(cols),) * 2
            )
            _, label = connected_components(graph, directed=False)
            parts = [
                (np.flatnonzero(label[: len(shared)] == c), np.flatnonzero(label[len(shared) :] == c))
                for c in np.unique(label[: len(shared)])
            ]
        cost = np.full((len(shared), len(cols)), _UNGATED)
        cost[r_idx, col_of] = sq
        for part_rows, part_cols in parts:
            block = cost[np.ix_(part_rows, part_cols)]
            ri, ci = linear_sum_assignment(block)
            keep = block[ri, ci] < _UNGATED
            flat[rows[shared[part_rows[ri[keep]]]]] = cols[part_cols[ci[keep]]]
