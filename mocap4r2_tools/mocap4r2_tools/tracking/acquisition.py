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

    def candidates(
        self,
        todo: IntArray,
        points: FloatArray,
        acquired: BoolArray,
        position: FloatArray,
        velocity: FloatArray,
        last_good: FloatArray,
        stamp: float,
    ) -> list[Candidate]:
        """Every placement of the bodies ``todo`` on ``points`` (the free markers), sorted
        best first; the tracker's state says where each body was."""
        lim, dyn = self.limits, self.dynamics
        tree = cKDTree(points)
        candidates: list[Candidate] = []
        searched: dict[int, list[Placement]] = {}
        for body in todo:
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
                searched[group] = self.search_layout(body, points, tree)
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

    def search_layout(self, body: int, points: FloatArray, tree: cKDTree) -> list[Placement]:
        """Every placement of the body's layout on free markers, found by triangle distances."""
        lim = self.limits
        layout = self.bodies[body].points
        tol = lim.signature_tolerance
        found: dict[bytes, Placement] = {}
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
                    rot, pos, _, _ = kabsch(
                        w, layout[[a, b, c]][None], points[[i, j, k]][None], np.eye(3)[None]
                    )
                    placed = layout @ rot[0].T + pos[0]
                    dist, idx = tree.query(placed, k=1, distance_upper_bound=2.0 * tol)
                    slots = np.where(np.isfinite(dist), idx, -1).astype(np.intp)
                    if len(set(slots[slots >= 0].tolist())) < (slots >= 0).sum() or (slots >= 0).sum() < 3:
                        continue
                    weights = (slots >= 0).astype(np.float64)[None]
                    rot2, pos2, rms, _ = kabsch(
                        weights, layout[None], points[np.maximum(slots, 0)][None], rot
                    )
                    if rms[0] > lim.max_residual:
                        continue
                    key = np.sort(slots[slots >= 0]).tobytes()
                    if key not in found or found[key][3] > rms[0]:
                        found[key] = (slots, rot2[0], pos2[0], float(rms[0]))
        return list(found.values())
