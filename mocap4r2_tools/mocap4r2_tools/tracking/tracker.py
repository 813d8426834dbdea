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

import itertools
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment
from scipy.spatial import cKDTree

from mocap4r2_control.rotation import quat_from_axis_angle, quat_from_matrix, quat_to_matrix
from mocap4r2_tools.tracking.bodies import TrackerConfig, check_identical_starts

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


def _kabsch(
    weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Weighted rigid fits for a batch: rotations, translations, RMS residuals, counts.

    local/observed (B, L, 3), weights (B, L) 0/1. Bodies with fewer than 3 weighted,
    non-collinear markers keep their prior rotation and get only a translation."""
    count = weights.sum(axis=1)
    safe = np.maximum(count, 1.0)[:, None]
    w = weights[:, :, None]
    c_local = (w * local).sum(axis=1) / safe
    c_obs = (w * observed).sum(axis=1) / safe
    a = (local - c_local[:, None]) * w
    b = observed - c_obs[:, None]
    h = np.einsum("bli,blj->bij", a, b)
    u, s, vt = np.linalg.svd(h)
    det = np.linalg.det(np.einsum("bji,bkj->bik", vt, u))
    d = np.ones((len(count), 3))
    d[:, 2] = np.sign(det) + (det == 0)
    rot = np.einsum("bji,bj,bkj->bik", vt, d, u)
    full = (count >= 3) & (s[:, 1] > 1e-4 * np.maximum(s[:, 0], 1e-12))
    rot = np.where(full[:, None, None], rot, prior)
    two = np.flatnonzero(count == 2)
    if len(two):
        # two markers fix the direction of their line: turn the prior by the least rotation
        # that lays the line where it is seen (the roll about the line stays the prior's)
        first = np.argmax(weights[two] > 0, axis=1)
        second = weights.shape[1] - 1 - np.argmax(weights[two, ::-1] > 0, axis=1)
        seen = observed[two, second] - observed[two, first]
        was = np.einsum("bij,bj->bi", prior[two], local[two, second] - local[two, first])
        axis = np.cross(was, seen)
        sin = np.linalg.norm(axis, axis=1)
        cos = np.einsum("bi,bi->b", was, seen)
        turn = quat_to_matrix(
            quat_from_axis_angle(axis / np.maximum(sin, 1e-300)[:, None], np.arctan2(sin, cos))
        )
        rot[two] = np.einsum("bij,bjk->bik", turn, prior[two])
    trans = c_obs - np.einsum("bij,bj->bi", rot, c_local)
    fitted = np.einsum("bij,blj->bli", rot, local) + trans[:, None]
    sq = ((fitted - observed) ** 2).sum(axis=2) * weights
    rms = np.sqrt(sq.sum(axis=1) / safe[:, 0])
    return rot, trans, rms, count


class Tracker:
    """The tracking state of a set of bodies; feed it frames in stamp order."""

    def __init__(self, config: TrackerConfig) -> None:
        check_identical_starts(config.bodies)
        self.config = config
        self.bodies = config.bodies
        n_bodies = len(self.bodies)
        self.sizes = np.array([len(b.points) for b in self.bodies], dtype=np.intp)
        self.lmax = int(self.sizes.max())
        self.local = np.zeros((n_bodies, self.lmax, 3))
        self.slot = np.zeros((n_bodies, self.lmax), dtype=bool)
        for i, b in enumerate(self.bodies):
            self.local[i, : len(b.points)] = b.points
            self.slot[i, : len(b.points)] = True
        self.radius = np.linalg.norm(self.local, axis=2).max(axis=1)
        # half the closest spacing of two markers of a layout: a wider gate lets the
        # assignment permute a body's own markers, so such a body is searched by signature
        self.half_spacing = np.full(n_bodies, np.inf)
        for i, body in enumerate(self.bodies):
            if len(body.points) > 1:
                d = np.linalg.norm(body.points[:, None] - body.points[None], axis=2)
                self.half_spacing[i] = 0.5 * d[np.triu_indices(len(d), 1)].min()
        self.single = self.sizes == 1
        # bodies whose layout another body shares: only position tells them apart
        keys = [(b.points.shape, b.points.round(6).tobytes()) for b in self.bodies]
        self.layout_group = np.array([keys.index(k) for k in keys], dtype=np.intp)
        counts = np.bincount(self.layout_group)
        self.identical = counts[self.layout_group] > 1
        self.triangles = [self._triangles(b.points) for b in self.bodies]
        self.position = np.zeros((n_bodies, 3))
        self.rotation = np.tile(np.eye(3), (n_bodies, 1, 1))
        self.velocity = np.zeros((n_bodies, 3))
        self.velocity_known = np.zeros(n_bodies, dtype=bool)
        self.acquired = np.zeros(n_bodies, dtype=bool)
        self.last_good = np.full(n_bodies, -np.inf)
        self.last_stamp: float | None = None
        self.previous_stamp: float | None = None
        self.counters = Counters(reacquisitions=[0] * n_bodies)

    @staticmethod
    def _triangles(points: FloatArray) -> list[tuple[int, int, int]]:
        """Marker triples to search a layout by; the widest first (best conditioned)."""
        if len(points) < 3:
            return []
        triples = list(itertools.combinations(range(len(points)), 3))

        def area(t: tuple[int, int, int]) -> float:
            p = points[list(t)]
            return float(np.linalg.norm(np.cross(p[1] - p[0], p[2] - p[0])))

        triples = [t for t in triples if area(t) > 1e-6]
        return sorted(triples, key=area, reverse=True)[:4]

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
        rot, trans, rms, count = _kabsch(weights, self.local, observed, self.rotation)
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
            rot, trans, rms, count = _kabsch(weights, self.local, observed, self.rotation)
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
        lim, dyn = self.config.limits, self.config.dynamics
        todo = np.flatnonzero(~valid)
        free = np.flatnonzero(~claimed)
        if not len(todo) or not len(free):
            return []
        points = obs[free]
        tree = cKDTree(points)
        # candidates: (cost, body, marker indices into points per layout slot, rotation, position, rms)
        candidates: list[tuple[float, int, IntArray, FloatArray, FloatArray, float]] = []
        searched: dict[int, list[tuple[IntArray, FloatArray, FloatArray, float]]] = {}
        for body in todo:
            anchor: FloatArray | None = None
            radius = lim.init_radius
            if self.acquired[body]:
                lost_for = min(stamp - self.last_good[body], 10.0)
                recent = lost_for <= lim.coast_time
                anchor = self.position[body] + (self.velocity[body] * lost_for if recent else 0.0)
                radius = lim.init_radius + (0.0 if recent else dyn.max_velocity * lost_for)
            elif self.bodies[body].initial_position is not None:
                anchor = self.bodies[body].initial_position
            if not self.identical[body] and not self.single[body]:
                anchor = None  # a distinct layout is recognised anywhere by its signature
            if self.single[body]:
                near: IntArray = (
                    np.arange(len(points))
                    if anchor is None
                    else np.asarray(tree.query_ball_point(anchor, radius), dtype=np.intp)
                )
                for j in near:
                    cost = 0.0 if anchor is None else float(np.linalg.norm(points[j] - anchor))
                    candidates.append((cost, int(body), np.array([j]), np.eye(3), points[j].copy(), 0.0))
                continue
            group = int(self.layout_group[body])
            if group not in searched:
                searched[group] = self._search_layout(body, points, tree)
            for slots, rot, pos, rms in searched[group]:
                distance = 0.0 if anchor is None else float(np.linalg.norm(pos - anchor))
                if distance > radius:
                    continue
                # a placement explaining more markers wins over a nearer one: a layout with
                # similar distances also fits 3 of its markers in a wrong order
                missing = int((slots < 0).sum())
                cost = missing * 1e3 + distance + rms
                candidates.append((cost, int(body), slots, rot, pos, rms))
        candidates.sort(key=lambda c: c[0])
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

    def _search_layout(
        self, body: int, points: FloatArray, tree: cKDTree
    ) -> list[tuple[IntArray, FloatArray, FloatArray, float]]:
        """Every placement of the body's layout on free markers, found by triangle distances."""
        lim = self.config.limits
        layout = self.bodies[body].points
        tol = lim.signature_tolerance
        found: dict[bytes, tuple[IntArray, FloatArray, FloatArray, float]] = {}
        for a, b, c in self.triangles[body]:
            d_ab = float(np.linalg.norm(layout[a] - layout[b]))
            d_ac = float(np.linalg.norm(layout[a] - layout[c]))
            d_bc = float(np.linalg.norm(layout[b] - layout[c]))
            pairs = tree.query_pairs(d_ab + tol, output_type="ndarray")
            if not len(pairs):
                continue
            pairs = np.concatenate([pairs, pairs[:, ::-1]])
            length = np.linalg.norm(points[pairs[:, 0]] - points[pairs[:, 1]], axis=1)
            pairs = pairs[np.abs(length - d_ab) <= tol]
            for i, j in pairs:
                for k in tree.query_ball_point(points[i], d_ac + tol):
                    if k in (i, j):
                        continue
                    if abs(np.linalg.norm(points[k] - points[i]) - d_ac) > tol:
                        continue
                    if abs(np.linalg.norm(points[k] - points[j]) - d_bc) > tol:
                        continue
                    w = np.ones((1, 3))
                    rot, pos, _, _ = _kabsch(
                        w, layout[[a, b, c]][None], points[[i, j, k]][None], np.eye(3)[None]
                    )
                    placed = layout @ rot[0].T + pos[0]
                    dist, idx = tree.query(placed, k=1, distance_upper_bound=2.0 * tol)
                    slots = np.where(np.isfinite(dist), idx, -1).astype(np.intp)
                    if len(set(slots[slots >= 0].tolist())) < (slots >= 0).sum() or (slots >= 0).sum() < 3:
                        continue
                    weights = (slots >= 0).astype(np.float64)[None]
                    rot2, pos2, rms, _ = _kabsch(
                        weights, layout[None], points[np.maximum(slots, 0)][None], rot
                    )
                    if rms[0] > lim.max_residual:
                        continue
                    key = np.sort(slots[slots >= 0]).tobytes()
                    if key not in found or found[key][3] > rms[0]:
                        found[key] = (slots, rot2[0], pos2[0], float(rms[0]))
        return list(found.values())
