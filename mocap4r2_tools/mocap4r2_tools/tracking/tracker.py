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
from scipy.spatial import cKDTree

from mocap4r2_control.rotation import quat_from_matrix
from mocap4r2_tools.tracking.acquisition import BodySearch
from mocap4r2_tools.tracking.bodies import (
    TrackerConfig,
    check_identical_starts,
    layout_groups,
    padded_layouts,
)
from mocap4r2_tools.tracking.kabsch import kabsch

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

_UNGATED = 1e9  # cost of a pairing outside its gate: never preferred to leaving a marker out
_NEIGHBOURS = 4  # observed markers considered per predicted marker


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
        self.layout_group, self.identical = layout_groups(self.bodies)
        self.search = BodySearch(
            self.bodies, config.limits, config.dynamics, self.identical, self.single, self.layout_group
        )
        self.position = np.zeros((n_bodies, 3))
        self.rotation = np.tile(np.eye(3), (n_bodies, 1, 1))
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
        finite: BoolArray = np.asarray(np.isfinite(raw).all(axis=1))
        self.counters.nan_markers += int(raw.shape[0] - finite.sum())
        if raw.shape[0] > lim.max_markers:
            self.counters.refused_frames += 1
            finite[:] = False
        index_of = np.flatnonzero(finite)
        obs = raw[index_of]
        if self.last_stamp is not None and not stamp > self.last_stamp:
            self.counters.bad_stamps += 1
            stamp = self.last_stamp + 1e-6
        self.previous_stamp = self.last_stamp
        self.last_stamp = stamp
        n_bodies = len(self.bodies)
        since = stamp - self.last_good
        dyn = cfg.dynamics
        dt = np.where(self.acquired & (since <= lim.coast_time), since, 0.0)
        gate = (
            lim.marker_gate
            + 0.5 * dyn.max_acceleration * dt**2
            + np.minimum(dyn.max_angular_velocity * dt, np.pi) * self.radius
            + np.where(self.velocity_known, 0.0, dyn.max_velocity * dt)
        )
        gate = np.minimum(gate, lim.init_radius)
        frame_dt = stamp - self.previous_stamp if self.previous_stamp is not None else np.inf
        seen_last_frame = since <= 1.5 * frame_dt
        tracked = self.acquired & (since <= lim.coast_time) & ((gate <= self.half_spacing) | seen_last_frame)
        claimed = np.zeros(len(obs), dtype=bool)
        assigned = np.full((n_bodies, self.lmax), -1, dtype=np.intp)

        if tracked.any() and len(obs):
            pred_p = self.position + self.velocity * dt[:, None]
            rows = np.flatnonzero((self.slot & tracked[:, None]).ravel())
            body_of = rows // self.lmax
            predicted = (
                np.einsum("kij,kj->ki", self.rotation[body_of], self.local.reshape(-1, 3)[rows])
                + pred_p[body_of]
            )
            tree = cKDTree(obs)
            k = min(_NEIGHBOURS, len(obs))
            found = tree.query(predicted, k=k, distance_upper_bound=float(gate.max()))
            dist = np.asarray(found[0], dtype=np.float64).reshape(len(rows), k)
            near = np.asarray(found[1], dtype=np.intp).reshape(len(rows), k)
            inside = dist <= gate[body_of][:, None]
            if inside.any():
                cols, col_of = np.unique(near[inside], return_inverse=True)
                cost = np.full((len(rows), len(cols)), _UNGATED)
                r_idx = np.nonzero(inside)[0]
                cost[r_idx, col_of] = dist[inside] ** 2
                ri, ci = linear_sum_assignment(cost)
                keep = cost[ri, ci] < _UNGATED
                flat = assigned.reshape(-1)
                flat[rows[ri[keep]]] = cols[ci[keep]]
            rms = self._fit_tracked(obs, assigned, tracked, pred_p, dt, claimed, stamp)
        else:
            rms = np.full(n_bodies, np.nan)
        valid: BoolArray = np.asarray((assigned >= 0).any(axis=1))
        error = np.where(valid, rms, np.nan)
        # a single marker has no signature: while its gate was offered in the assignment, any
        # other free marker near it is as likely a stray or another body's as its own
        searchable = valid | ~(self.single & tracked)
        settled = valid | ~searchable  # _acquire marks the bodies it acquires in here
        reacquired = self._acquire(obs, claimed, assigned, settled, error, stamp)
        valid = settled & searchable
        strays = index_of[~claimed]
        out_assigned = np.append(index_of, -1)[assigned]  # -1 (no marker) picks the -1 appended
        quats = quat_from_matrix(self.rotation)
        quats[self.single] = (0.0, 0.0, 0.0, 1.0)
        return FrameResult(
            self.position.copy(), quats, valid, error, out_assigned, strays, np.asarray(reacquired, np.intp)
        )

    def _fit_tracked(
        self,
        obs: FloatArray,
        assigned: IntArray,
        tracked: BoolArray,
        pred_p: FloatArray,
        dt: FloatArray,
        claimed: BoolArray,
        stamp: float,
    ) -> FloatArray:
        """Fit, refine and check the tracked bodies; returns their RMS residuals."""
        lim, dyn = self.config.limits, self.config.dynamics
        weights = (assigned >= 0).astype(np.float64)
        observed = obs[np.maximum(assigned, 0)]
        rot, trans, rms, count = kabsch(weights, self.local, observed, self.rotation)
        # refinement 1: markers far off the fit (a ghost that won the assignment) are dropped
        fitted = np.einsum("bij,blj->bli", rot, self.local) + trans[:, None]
        off = np.linalg.norm(fitted - observed, axis=2)
        outlier = (weights > 0) & (off > 2.0 * lim.max_residual) & (count[:, None] > 3)
        if outlier.any():
            worst = np.argmax(np.where(weights > 0, off, -1.0), axis=1)
            drop = outlier[np.arange(len(worst)), worst]
            assigned[np.flatnonzero(drop), worst[drop]] = -1
        # refinement 2: free markers the fitted pose explains join the fit
        taken = np.zeros(len(obs), dtype=bool)
        taken[assigned[assigned >= 0]] = True
        missing = self.slot & (assigned < 0) & tracked[:, None] & (count[:, None] >= 3)
        if missing.any() and (~taken).any():
            free = np.flatnonzero(~taken)
            hits = cKDTree(obs[free]).query(fitted[missing], k=1, distance_upper_bound=2.0 * lim.max_residual)
            d = np.asarray(hits[0], dtype=np.float64)
            j = np.asarray(hits[1], dtype=np.intp)
            ok = np.isfinite(d)
            cand = free[j[ok]]
            _, first = np.unique(cand, return_index=True)
            where = np.argwhere(missing)[ok][first]
            assigned[where[:, 0], where[:, 1]] = cand[first]
        if outlier.any() or missing.any():
            weights = (assigned >= 0).astype(np.float64)
            observed = obs[np.maximum(assigned, 0)]
            rot, trans, rms, count = kabsch(weights, self.local, observed, self.rotation)
        # checks: enough markers, residual, and the motion since the last good pose
        need = np.where(self.single, 1, 2)
        step = np.linalg.norm(trans - pred_p, axis=1)
        allowed = (
            lim.marker_gate
            + 0.5 * dyn.max_acceleration * dt**2
            + np.where(self.velocity_known, 0.0, dyn.max_velocity * dt)
        )
        rel = np.einsum("bji,bjk->bik", self.rotation, rot)
        angle = np.arccos(np.clip((np.trace(rel, axis1=1, axis2=2) - 1.0) / 2.0, -1.0, 1.0))
        noise_angle = 2.0 * lim.marker_gate / np.maximum(self.radius, 1e-3)
        spin_ok = (angle <= dyn.max_angular_velocity * dt + noise_angle) | self.single
        good = tracked & (count >= need) & (rms <= lim.max_residual) & (step <= allowed) & spin_ok
        self.counters.rejected_fits += int((tracked & (count >= need) & ~good).sum())
        assigned[~good] = -1
        claimed[assigned[assigned >= 0]] = True
        if good.any():
            g = np.flatnonzero(good)
            raw_v = (trans[g] - self.position[g]) / np.maximum(dt[g], 1e-9)[:, None]
            blend = np.where(self.velocity_known[g], 0.5, 1.0)[:, None]
            was_known = self.velocity_known[g] | (dt[g] > 0)
            self.velocity[g] = blend * raw_v + (1.0 - blend) * self.velocity[g]
            self.velocity_known[g] = was_known
            self.position[g] = trans[g]
            self.rotation[g] = np.where(self.single[g, None, None], np.eye(3), rot[g])
            self.last_good[g] = stamp
        return rms

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
