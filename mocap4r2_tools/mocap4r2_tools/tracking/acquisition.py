"""Where bodies that are not tracked may be, found in the free markers of a frame (pure
numpy/scipy): the candidates the tracker hands out, best first, without sharing markers.

* A layout of 3 or more markers is searched by the pairwise distances of its widest (up to
  4) marker triangles, at any position and orientation; each placement is fitted to every
  marker it explains. A distinct layout is accepted anywhere.
* An identical layout (one another body shares), and any single-marker body, only near its
  anchor: ``initial_position`` before it was first seen, its last known position after
  (predicted while within ``coast_time``; the radius grows by ``max_velocity`` per second
  lost after that).
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
from scipy.spatial import cKDTree

from mocap4r2_tools.tracking.bodies import BodySpec, Dynamics, Limits
from mocap4r2_tools.tracking.kabsch import kabsch

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

# up to this many free markers are searched through their distance matrix (one array
# operation per step), more through the k-d tree (memory and time linear in the matches)
_DENSE_POINTS = 24
#: (cost, body, marker index into the points per layout slot or -1, rotation, position, rms)
Candidate = tuple[float, int, IntArray, FloatArray, FloatArray, float]
#: (marker index per layout slot or -1, rotation, position, rms)
Placement = tuple[IntArray, FloatArray, FloatArray, float]


def layout_triangles(points: FloatArray) -> list[tuple[int, int, int]]:
    """Marker triples to search a layout by; the widest first (best conditioned)."""
    if len(points) < 3:
        return []
    triples = list(itertools.combinations(range(len(points)), 3))

    def area(t: tuple[int, int, int]) -> float:
        p = points[list(t)]
        return float(np.linalg.norm(np.cross(p[1] - p[0], p[2] - p[0])))

    triples = [t for t in triples if area(t) > 1e-6]
    return sorted(triples, key=area, reverse=True)[:4]


class BodySearch:
    """The search for untracked bodies of one configuration."""

    def __init__(
        self,
        bodies: tuple[BodySpec, ...],
        *,
        limits: Limits,
        dynamics: Dynamics,
        identical: BoolArray,
        single: BoolArray,
        layout_group: IntArray,
    ) -> None:
        self.bodies = bodies
        self.limits = limits
        self.dynamics = dynamics
        self.identical = identical
        self.single = single
        self.layout_group = layout_group
        self.triangles = [layout_triangles(b.points) for b in bodies]
        # how far a marker of a body can be from the body's position (the layout's origin):
        # with the signature tolerance, the reach of a placement beyond its anchor's radius
        self.reach = (
            np.array([np.linalg.norm(b.points, axis=1).max() for b in bodies])
            + 2.0 * limits.signature_tolerance
        )

    def candidates(
        self,
        todo: IntArray,
        points: FloatArray,
        *,
        acquired: BoolArray,
        position: FloatArray,
        velocity: FloatArray,
        last_good: FloatArray,
        stamp: float,
    ) -> list[Candidate]:
        """Every placement of the bodies ``todo`` on ``points`` (the free markers), sorted
        best first; the tracker's state says where each body was."""
        lim, dyn = self.limits, self.dynamics
        candidates: list[Candidate] = []
        anchors: dict[int, tuple[FloatArray | None, float]] = {}
        for body in todo.tolist():
            anchor: FloatArray | None = None
            radius = lim.init_radius
            if acquired[body]:
                lost_for = min(stamp - last_good[body], 10.0)
                recent = lost_for <= lim.coast_time
                anchor = position[body] + (velocity[body] * lost_for if recent else 0.0)
                radius = lim.init_radius + (0.0 if recent else dyn.max_velocity * lost_for)
            elif self.bodies[body].initial_position is not None:
                anchor = self.bodies[body].initial_position
            if not self.identical[body] and not self.single[body]:
                anchor = None  # a distinct layout is recognised anywhere by its signature
            anchors[body] = (anchor, radius)
        searched: dict[int, list[Placement]] = {}
        for body, (anchor, radius) in anchors.items():
            if self.single[body]:
                near: IntArray = (
                    np.arange(len(points))
                    if anchor is None
                    else np.flatnonzero(((points - anchor) ** 2).sum(axis=1) <= radius**2)
                )
                for j in near:
                    cost = 0.0 if anchor is None else float(np.linalg.norm(points[j] - anchor))
                    candidates.append((cost, int(body), np.array([j]), np.eye(3), points[j].copy(), 0.0))
                continue
            group = int(self.layout_group[body])
            if group not in searched:
                searched[group] = self._search_group(group, anchors, points)
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
        return candidates

    def _search_group(
        self,
        group: int,
        anchors: dict[int, tuple[FloatArray | None, float]],
        points: FloatArray,
    ) -> list[Placement]:
        """The placements of one layout group, searched only among the points that can
        belong to a placement near an anchor of the group's bodies searched (all points
        when one of them has no anchor). Most frames have no free marker near a lost
        identical body, and then nothing is searched."""
        members = [b for b in anchors if self.layout_group[b] == group]
        first = members[0]
        if any(anchors[b][0] is None for b in members):
            return self.search_layout(first, points, cKDTree(points))
        centres = np.array([anchors[b][0] for b in members])
        reach = np.array([anchors[b][1] for b in members]) + self.reach[first]
        d2 = ((points[:, None, :] - centres[None]) ** 2).sum(axis=2)
        subset = np.flatnonzero((d2 <= reach**2).any(axis=1))
        if len(subset) < min(3, len(self.bodies[first].points)):
            return []
        sub_points = points[subset]
        found = self.search_layout(first, sub_points, cKDTree(sub_points))
        return [
            (np.where(slots >= 0, subset[np.maximum(slots, 0)], -1), rot, pos, rms)
            for slots, rot, pos, rms in found
        ]

    def search_layout(self, body: int, points: FloatArray, tree: cKDTree) -> list[Placement]:
        """Every placement of the body's layout on free markers, found by triangle distances.

        Every marker triple whose distances match one of the layout's triangles is fitted,
        the layout placed by that fit takes the markers within 2 tolerances of its markers,
        and is fitted again to all of them: all triples of all triangles in one batch."""
        lim = self.limits
        layout = self.bodies[body].points
        tol = lim.signature_tolerance
        triangles = np.array(self.triangles[body], dtype=np.intp).reshape(-1, 3)
        if not len(triangles) or len(points) < 3:
            return []
        small = len(points) <= _DENSE_POINTS
        if small:
            matched, corner = self._triples_dense(layout, triangles, points)
        else:
            matched, corner = self._triples_tree(layout, triangles, points, tree)
        if not len(matched):
            return []
        n = len(matched)
        eye = np.broadcast_to(np.eye(3), (n, 3, 3))
        rot, pos, _, _ = kabsch(np.ones((n, 3)), layout[corner], points[matched], eye)
        placed = np.einsum("tij,lj->tli", rot, layout) + pos[:, None, :]
        if small:
            d2 = ((placed[:, :, None, :] - points[None, None]) ** 2).sum(axis=3)
            idx = np.argmin(d2, axis=2)
            hit = np.take_along_axis(d2, idx[:, :, None], axis=2)[:, :, 0] <= (2.0 * tol) ** 2
            slots = np.where(hit, idx, -1).astype(np.intp)
        else:
            dist, idx = tree.query(placed.reshape(-1, 3), k=1, distance_upper_bound=2.0 * tol)
            slots = np.where(np.isfinite(dist), idx, -1).astype(np.intp).reshape(n, len(layout))
        seen = slots >= 0
        # a placement must explain 3 markers, each by a different layout marker
        ordered = np.sort(np.where(seen, slots, -1 - np.arange(len(layout))), axis=1)
        distinct = (np.diff(ordered, axis=1) != 0).all(axis=1)
        keep = np.flatnonzero(distinct & (seen.sum(axis=1) >= 3))
        if not len(keep):
            return []
        weights = seen[keep].astype(np.float64)
        local = np.broadcast_to(layout, (len(keep), len(layout), 3))
        rot2, pos2, rms, _ = kabsch(weights, local, points[np.maximum(slots[keep], 0)], rot[keep])
        found: dict[bytes, Placement] = {}
        for m in np.flatnonzero(rms <= lim.max_residual).tolist():
            row = slots[keep[m]]
            key = np.sort(row[row >= 0]).tobytes()
            if key not in found or found[key][3] > rms[m]:
                found[key] = (row, rot2[m], pos2[m], float(rms[m]))
        return list(found.values())

    def _triples_dense(
        self, layout: FloatArray, triangles: IntArray, points: FloatArray
    ) -> tuple[IntArray, IntArray]:
        """(marker triples, the triangle corners they match) of a few points, from their
        distance matrix: every (triangle, i, j, k) at once."""
        tol = self.limits.signature_tolerance
        sides = np.linalg.norm(
            layout[triangles] - layout[np.roll(triangles, -1, axis=1)], axis=2
        )  # ab, bc, ca
        dist = np.linalg.norm(points[:, None] - points[None], axis=2)
        n = len(points)
        close = np.abs(dist[None] - sides.T.reshape(3, -1, 1, 1)) <= tol  # (side, triangle, F, F)
        close &= ~np.eye(n, dtype=bool)
        # i-j is side ab, j-k side bc, k-i side ca
        match = close[0][:, :, :, None] & close[1][:, None, :, :] & close[2].transpose(0, 2, 1)[:, :, None, :]
        t, i, j, k = np.nonzero(match)
        return np.stack([i, j, k], axis=1), triangles[t]

    def _triples_tree(
        self, layout: FloatArray, triangles: IntArray, points: FloatArray, tree: cKDTree
    ) -> tuple[IntArray, IntArray]:
        """:meth:`_triples_dense` for many points, through the k-d tree."""
        tol = self.limits.signature_tolerance
        triples: list[IntArray] = []
        corners: list[IntArray] = []
        for a, b, c in triangles.tolist():
            d_ab = float(np.linalg.norm(layout[a] - layout[b]))
            d_ac = float(np.linalg.norm(layout[a] - layout[c]))
            d_bc = float(np.linalg.norm(layout[b] - layout[c]))
            pairs = tree.query_pairs(d_ab + tol, output_type="ndarray")
            if not len(pairs):
                continue
            pairs = np.concatenate([pairs, pairs[:, ::-1]])
            length = np.linalg.norm(points[pairs[:, 0]] - points[pairs[:, 1]], axis=1)
            pairs = pairs[np.abs(length - d_ab) <= tol]
            if not len(pairs):
                continue
            balls = tree.query_ball_point(points[pairs[:, 0]], d_ac + tol, return_sorted=True)
            counts = np.fromiter((len(x) for x in balls), dtype=np.intp, count=len(balls))
            if not counts.sum():
                continue
            third = np.fromiter(itertools.chain.from_iterable(balls), dtype=np.intp, count=int(counts.sum()))
            i, j = np.repeat(pairs[:, 0], counts), np.repeat(pairs[:, 1], counts)
            d_ik = np.linalg.norm(points[third] - points[i], axis=1)
            d_jk = np.linalg.norm(points[third] - points[j], axis=1)
            ok = (third != i) & (third != j) & (np.abs(d_ik - d_ac) <= tol) & (np.abs(d_jk - d_bc) <= tol)
            if ok.any():
                triples.append(np.stack([i[ok], j[ok], third[ok]], axis=1))
                corners.append(np.tile(np.array([a, b, c], dtype=np.intp), (int(ok.sum()), 1)))
        if not triples:
            return np.zeros((0, 3), dtype=np.intp), np.zeros((0, 3), dtype=np.intp)
        return np.concatenate(triples), np.concatenate(corners)
