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
   position. Candidates are handed out best first without sharing markers.

Markers left over are strays (ghosts, other objects). Times are the frames' own stamps,
never the host clock. A single-marker body reports the identity orientation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from mocap4r2_control.rotation import quat_from_matrix
from mocap4r2_tools.tracking.acquisition import BodySearch
from mocap4r2_tools.tracking.bodies import (
    TrackerConfig,
    check_identical_starts,
    layout_groups,
    padded_layouts,
)
from mocap4r2_tools.tracking.kabsch import fit_batch

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

_UNGATED = 1e9  # cost of a pairing outside its gate: never preferred to leaving a marker out
_NEIGHBOURS = 4  # observed markers considered per predicted marker
# overlapping gates of up to this many predicted markers are solved as one matrix (a
# block-diagonal matrix has the optimum of its blocks); more are split into the connected
# parts of the gate graph, as linear_sum_assignment's time grows with the cube of its size
_ONE_MATRIX_ROWS = 24
_CONFIRM_FRAMES = 3  # frames within which a held single marker can be confirmed


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


@dataclass
class Counters:
    """What the tracker handled and refused since it started."""

    frames: int = 0
    nan_markers: int = 0
    refused_frames: int = 0  # frames with more markers than limits.max_markers
    bad_stamps: int = 0  # stamps not after the previous one
    rejected_fits: int = 0  # fits refused by the residual or dynamics check
    reacquisitions: list[int] = field(default_factory=list)  # per body


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
        # a single-marker body's marker held after a gap until the next frame confirms it
        self.held = np.zeros((n_bodies, 2, 3))  # the last two held, newest first
        self.held_stamp = np.full((n_bodies, 2), -np.inf)
        self.need = np.where(self.single, 1, 2)  # markers a fit needs to be accepted
        # the angle a fit may turn beyond the dynamics: marker noise seen at the layout's radius
        self.noise_angle = 2.0 * config.limits.marker_gate / np.maximum(self.radius, 1e-3)
        self.layout_group, self.identical = layout_groups(self.bodies)
        self.search = BodySearch(
            self.bodies, config.limits, config.dynamics, self.identical, self.single, self.layout_group
        )
        # per layout marker (flat index into (B, Lmax)) and its body
        self.slot_rows = np.flatnonzero(self.slot.ravel())
        self.slot_body = self.slot_rows // self.lmax
        self.position = np.zeros((n_bodies, 3))
        self.rotation = np.tile(np.eye(3), (n_bodies, 1, 1))
        self.quat = np.tile([0.0, 0.0, 0.0, 1.0], (n_bodies, 1))  # of self.rotation, x y z w
        self.offsets = np.einsum("bij,blj->bli", self.rotation, self.local)  # rotation @ layout
        self.velocity = np.zeros((n_bodies, 3))
        self.velocity_known = np.zeros(n_bodies, dtype=bool)
        self.acquired = np.zeros(n_bodies, dtype=bool)
        self.last_good = np.full(n_bodies, -np.inf)
        self.last_stamp: float | None = None
        self.previous_stamp: float | None = None
        self.counters = Counters(reacquisitions=[0] * n_bodies)

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
        since = stamp - self.last_good
        dyn = cfg.dynamics
        recent = self.acquired & (since <= lim.coast_time)
        dt = np.where(recent, since, 0.0)
        # how far from its prediction a body may be: noise and model error, the acceleration
        # bound, and the speed bound while the velocity is not known yet
        allowed = lim.marker_gate + 0.5 * dyn.max_acceleration * dt**2
        allowed += np.where(self.velocity_known, 0.0, dyn.max_velocity * dt)
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
            pred_p = self.position + self.velocity * dt[:, None]
            rows = self.slot_rows if tracked.all() else self.slot_rows[tracked[self.slot_body]]
            body_of = rows // self.lmax
            # the layout as last fitted (kept by the fit) moved to the predicted position
            predicted = self.offsets.reshape(-1, 3)[rows] + pred_p[body_of]
            tree = cKDTree(obs)
            self._assign(tree, len(obs), rows, predicted, gate[body_of], assigned)
            coasted = tracked & ~seen_last_frame
            rms = self._fit_tracked(
                obs, tree, assigned, tracked, coasted, pred_p, dt, gate, allowed, claimed, stamp
            )
        else:
            rms = np.full(n_bodies, np.nan)
        valid: BoolArray = np.asarray((assigned >= 0).any(axis=1))
        error = np.where(valid, rms, np.nan)
        # a single marker has no signature: while its gate was offered in the assignment, any
        # other free marker near it is as likely a stray or another body's as its own
        if self.any_single:
            searchable = valid | ~(self.single & tracked)
            settled = valid | ~searchable  # _acquire marks the bodies it acquires in here
            reacquired = self._acquire(obs, claimed, assigned, settled, error, stamp)
            valid = settled & searchable
        else:
            reacquired = self._acquire(obs, claimed, assigned, valid, error, stamp)
        out_assigned: IntArray = assigned
        if index_of is None:
            strays = np.flatnonzero(~claimed)
        else:
            strays = index_of[~claimed]
            out_assigned = np.append(index_of, -1)[assigned]  # -1 (no marker) picks the -1 appended
        quats = self.quat.copy()  # a single-marker body's stays the identity (its rotation's)
        return FrameResult(
            self.position.copy(), quats, valid, error, out_assigned, strays, np.asarray(reacquired, np.intp)
        )

    def _assign(
        self,
        tree: cKDTree,
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
        paired directly; only the markers and predictions whose gates overlap go through
        linear_sum_assignment, and a part of the graph never changes another's optimum."""
        k = min(_NEIGHBOURS, n_obs)
        found = tree.query(predicted, k=k, distance_upper_bound=float(gate.max()))
        dist = np.asarray(found[0], dtype=np.float64).reshape(len(rows), k)
        near = np.asarray(found[1], dtype=np.intp).reshape(len(rows), k)
        inside = dist <= gate[:, None]  # the neighbours come nearest first: a prefix per row
        uses = np.bincount(near[inside], minlength=n_obs)
        first = np.minimum(near[:, 0], n_obs - 1)  # out-of-range "no neighbour" made indexable
        some = inside[:, 0]
        alone = some & (uses[first] == 1) if k == 1 else some & ~inside[:, 1] & (uses[first] == 1)
        flat = assigned.reshape(-1)
        flat[rows[alone]] = first[alone]
        shared = np.flatnonzero(some & ~alone)
        if not len(shared):
            return
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

    def _fit_tracked(
        self,
        obs: FloatArray,
        tree: cKDTree,
        assigned: IntArray,
        tracked: BoolArray,
        coasted: BoolArray,
        pred_p: FloatArray,
        dt: FloatArray,
        gate: FloatArray,
        allowed: FloatArray,
        claimed: BoolArray,
        stamp: float,
    ) -> FloatArray:
        """Fit, refine and check the tracked bodies (``coasted``: not seen in the previous
        frame; ``allowed``: how far from the prediction a fit may be); returns their RMS
        residuals."""
        lim, dyn = self.config.limits, self.config.dynamics
        seen = assigned >= 0
        observed = obs[np.maximum(assigned, 0)]
        fit = fit_batch(seen.astype(np.float64), self.local, observed, self.rotation)
        rot, trans, rms, count, fitted, sq, quat, full = fit
        changed: BoolArray | None = None
        # refinement 1: markers far off the fit (a ghost that won the assignment) are dropped
        far = sq > (2.0 * lim.max_residual) ** 2
        if far.any():
            worst = np.argmax(sq, axis=1)
            drop = far[np.arange(len(worst)), worst] & (count > 3)
            assigned[np.flatnonzero(drop), worst[drop]] = -1
            changed = drop
        # how far the fit moved and turned from the prediction (also the checks below)
        step_sq, angle = self._motion(rot, trans, pred_p)
        # refinement 2: free markers the fitted pose explains join the fit (the nearest
        # marker not taken among the k-d tree's neighbours of the fitted position)
        missing = ~seen & self.slot & (tracked & (count >= 3))[:, None]
        if missing.any():
            # a free marker within 2 max_residual of a fitted marker whose gate (around the
            # prediction) held that whole ball was offered to the assignment already, which
            # pairs every free marker inside a gate left empty: only the others are looked
            # up. A fitted marker is at most step + angle * radius from its prediction.
            drift = np.sqrt(step_sq) + angle * self.radius + 2.0 * lim.max_residual
            missing &= (drift > gate)[:, None]
            if missing.any():
                body, slot = np.nonzero(missing)
                changed = self._take_explained(obs, tree, assigned, fitted, body, slot, changed)
        if changed is not None and changed.any():
            c = np.flatnonzero(changed)
            weights_c = (assigned[c] >= 0).astype(np.float64)
            refit = fit_batch(weights_c, self.local[c], obs[np.maximum(assigned[c], 0)], self.rotation[c])
            rot[c], trans[c], rms[c], count[c], fitted[c], _, quat[c], full[c] = refit
            step_sq, angle = self._motion(rot, trans, pred_p)
        # checks: enough markers, residual, and the motion since the last good pose
        spin_ok = (angle <= dyn.max_angular_velocity * dt + self.noise_angle) | self.single
        enough = tracked & (count >= self.need)
        good = enough & (rms <= lim.max_residual) & (step_sq <= allowed**2) & spin_ok
        self.counters.rejected_fits += int(enough.sum() - good.sum())
        if self.any_single:
            self._confirm_singles(good, coasted, trans, np.sqrt(step_sq), stamp)
        assigned[~good] = -1
        claimed[assigned[assigned >= 0]] = True
        g = np.flatnonzero(good)
        if len(g):
            known = self.velocity_known[g]
            raw_v = (trans[g] - self.position[g]) / np.maximum(dt[g], 1e-9)[:, None]
            # a known velocity is smoothed (half the new estimate), an unknown one taken
            self.velocity[g] = np.where(known[:, None], 0.5 * (raw_v + self.velocity[g]), raw_v)
            self.velocity_known[g] = known | (dt[g] > 0)
            self.position[g] = trans[g]
            self.rotation[g] = rot[g]  # a single marker's stays the identity: the fit keeps its prior
            # the quaternion: the fit's where it fitted the rotation, converted where the
            # rotation came from the prior turned by 2 markers, kept where it is the prior
            self.quat[g] = np.where(full[g, None], quat[g], self.quat[g])
            turned = g[~full[g] & (count[g] == 2)]
            if len(turned):
                self.quat[turned] = quat_from_matrix(rot[turned])
            # a single marker's layout is the origin: its offsets are 0 whatever rot is
            self.offsets[g] = fitted[g] - trans[g, None, :]
            self.last_good[g] = stamp
        return rms

    def _motion(
        self, rot: FloatArray, trans: FloatArray, pred_p: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """Squared distance of the fits from the predicted positions, and the angle they
        turned since the last good pose (trace(R_last^T R) = sum of R_last * R)."""
        step_v = trans - pred_p
        cos_turn = (np.einsum("bij,bij->b", self.rotation, rot) - 1.0) / 2.0
        return np.einsum("bi,bi->b", step_v, step_v), np.arccos(np.clip(cos_turn, -1.0, 1.0))

    def _take_explained(
        self,
        obs: FloatArray,
        tree: cKDTree,
        assigned: IntArray,
        fitted: FloatArray,
        body: IntArray,
        slot: IntArray,
        changed: BoolArray | None,
    ) -> BoolArray:
        """Layout markers (body, slot) not seen take the nearest free marker within
        2 max_residual of where the fit puts them; returns the bodies changed."""
        out = np.zeros(len(assigned), dtype=bool) if changed is None else changed
        taken = np.zeros(len(obs) + 1, dtype=bool)  # + the tree's "no neighbour" index
        taken[assigned[assigned >= 0]] = True
        taken[-1] = True
        k = min(_NEIGHBOURS, len(obs))
        hits = tree.query(fitted[body, slot], k=k, distance_upper_bound=2.0 * self.config.limits.max_residual)
        j = np.asarray(hits[1], dtype=np.intp).reshape(-1, k)
        free = ~taken[j]
        has = free.any(axis=1)
        if has.any():
            cand = j[np.arange(len(j)), np.argmax(free, axis=1)][has]
            _, first = np.unique(cand, return_index=True)
            b, s = body[has][first], slot[has][first]
            assigned[b, s] = cand[first]
            out[b] = True
        return out

    def _confirm_singles(
        self, good: BoolArray, coasted: BoolArray, trans: FloatArray, step: FloatArray, stamp: float
    ) -> None:
        """A single marker has no shape to check it by: after a gap, one found farther from
        the prediction than ``marker_gate`` is as likely a stray inside the widened gate as
        the body's own. It is held (not valid, its marker left free) and the body is accepted
        when a later frame, within ``_CONFIRM_FRAMES``, finds a marker where one of the last
        two held could have moved (``marker_gate + max_velocity * dt``): strays seldom appear
        twice there, and two held markers let one frame of occlusion (the body then takes
        another marker in its gate, or none) pass without starting over."""
        lim = self.config.limits
        unsure = np.flatnonzero(good & self.single & coasted & (step > lim.marker_gate))
        if not len(unsure):
            return
        frame_dt = stamp - self.previous_stamp if self.previous_stamp is not None else np.inf
        age = stamp - self.held_stamp[unsure]  # (U, 2)
        reach = lim.marker_gate + self.config.dynamics.max_velocity * age
        near = np.linalg.norm(trans[unsure, None, :] - self.held[unsure], axis=2) <= reach
        follows = (near & (age <= (_CONFIRM_FRAMES + 0.5) * frame_dt)).any(axis=1)
        self.held[unsure, 1] = self.held[unsure, 0]
        self.held_stamp[unsure, 1] = self.held_stamp[unsure, 0]
        self.held[unsure, 0] = trans[unsure]
        self.held_stamp[unsure, 0] = stamp
        self.held_stamp[unsure[follows]] = -np.inf
        good[unsure[~follows]] = False

    # ------------------------------------------------------------ acquisition
    def _acquire(
        self,
        obs: FloatArray,
        claimed: BoolArray,
        assigned: IntArray,
        valid: BoolArray,
        error: FloatArray,
        stamp: float,
    ) -> list[int]:
        """(Re)acquire the bodies not valid from the markers not claimed (acquisition.py
        finds the candidates); returns the bodies acquired, whose state is reset here."""
        todo = np.flatnonzero(~valid)
        free = np.flatnonzero(~claimed)
        if not len(todo) or not len(free):
            return []
        points = obs[free]
        candidates = self.search.candidates(
            todo, points, self.acquired, self.position, self.velocity, self.last_good, stamp
        )
        used = np.zeros(len(points), dtype=bool)
        done: list[int] = []
        busy = np.zeros(len(self.bodies), dtype=bool)
        for _, body, slots, rot, pos, rms in candidates:
            picked = slots[slots >= 0]
            if busy[body] or used[picked].any():
                continue
            busy[body] = True
            used[picked] = True
            if self.acquired[body]:
                self.counters.reacquisitions[body] += 1
            self.acquired[body] = True
            self.position[body] = pos
            self.rotation[body] = rot
            self.quat[body] = quat_from_matrix(rot)
            self.offsets[body] = self.local[body] @ rot.T
            self.velocity[body] = 0.0
            self.velocity_known[body] = False
            self.last_good[body] = stamp
            row = np.full(self.lmax, -1, dtype=np.intp)
            row[: len(slots)] = np.where(slots >= 0, free[np.maximum(slots, 0)], -1)
            assigned[body] = row
            claimed[row[row >= 0]] = True
            valid[body] = True
            error[body] = rms
            done.append(body)
        return done
