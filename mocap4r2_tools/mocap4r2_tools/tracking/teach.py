"""Teach a body from the live point cloud instead of measuring its markers by hand (pure
numpy/scipy): the one cluster of markers at a place, held still for about a second, is
averaged into a layout and written into a bodies file.

* The cluster: the finite markers within ``radius`` of ``near`` (or of the markers' median
  when no place is given: then every marker of the frame must be within ``radius`` of it,
  so a stray or a second object is refused rather than taught).
* The frames are kept (at most ``MAX_FRAMES``) and, at the end, those with the most common
  number of markers are matched to the first of them by a linear assignment (the body does
  not move while it is taught, the markers come in any order) and averaged; a frame with
  another number of markers (an occlusion, a stray) is skipped and counted, and so is one
  whose markers moved more than ``max_motion``.
* The layout: origin at the centroid; axes the world's (the body as it is placed) or its
  principal axes (PCA: the first along the widest spread, right-handed, each pointing to
  the side with the marker farthest along it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml
from scipy.optimize import linear_sum_assignment

from mocap4r2_tools.tracking.bodies import ConfigError, check_layout, parse_config

FloatArray = npt.NDArray[np.float64]


class TeachError(ValueError):
    """A cloud or a bodies file the layout cannot be taught from or into; says why."""


MAX_FRAMES = 20_000  # frames kept while teaching: 10 s at 2 kHz


@dataclass
class Teacher:
    """Collects frames of one cluster and averages them."""

    near: FloatArray | None = None
    radius: float = 0.15
    max_motion: float = 0.005
    clusters: list[FloatArray] = field(default_factory=list)
    frames: int = 0  # frames averaged by the last layout()
    skipped: dict[str, int] = field(default_factory=dict)

    def _skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def add(self, markers: npt.ArrayLike) -> bool:
        """One frame's markers (M, 3); True when its cluster was kept."""
        given: FloatArray = np.asarray(markers, dtype=np.float64).reshape(-1, 3)
        points: FloatArray = given[np.isfinite(given).all(axis=1)]
        if not len(points):
            self._skip("no marker")
            return False
        centre = np.asarray(self.near if self.near is not None else np.median(points, axis=0))
        distance = np.linalg.norm(points - centre, axis=1)
        cluster = points[distance <= self.radius]
        if self.near is None and len(cluster) < len(points):
            self._skip("markers outside the cluster (give --near)")
            return False
        if not len(cluster):
            self._skip("no marker near the place")
            return False
        if len(self.clusters) >= MAX_FRAMES:
            self._skip("beyond the frames kept")
            return False
        self.clusters.append(cluster)
        return True

    def _average(self) -> FloatArray:
        counts = np.bincount([len(c) for c in self.clusters])
        size = int(np.argmax(counts))  # the most common number of markers (ties: the fewest)
        same = [c for c in self.clusters if len(c) == size]
        reference = same[0]
        total = reference.copy()
        used = 1
        for cluster in same[1:]:
            cost = np.linalg.norm(reference[:, None] - cluster[None], axis=2)
            rows, cols = linear_sum_assignment(cost)
            if cost[rows, cols].max() <= self.max_motion:
                total[rows] += cluster[cols]
                used += 1
        self.frames = used
        # set, not added: layout() may be asked again (other axes) on the same frames
        for reason, count in (
            ("another number of markers", len(self.clusters) - len(same)),
            ("markers moved", len(same) - used),
        ):
            if count:
                self.skipped[reason] = count
        averaged: FloatArray = total / used
        return averaged

    def layout(self, axes: str = "pca") -> tuple[FloatArray, FloatArray]:
        """The averaged layout in the body frame, and where its origin is (the centroid)."""
        if not self.clusters:
            raise TeachError(f"no frame with the cluster (skipped: {self.skipped or 'none'})")
        mean = self._average()
        centroid = mean.mean(axis=0)
        local = mean - centroid
        if axes == "pca" and len(local) >= 3:
            _, _, vt = np.linalg.svd(local, full_matrices=False)
            basis = vt.copy()
            for i in range(2):  # each axis toward the marker farthest along it
                along = local @ basis[i]
                if along[np.argmax(np.abs(along))] < 0:
                    basis[i] = -basis[i]
            basis[2] = np.cross(basis[0], basis[1])
            local = local @ basis.T
        elif axes not in ("pca", "world"):
            raise TeachError(f"axes must be 'pca' or 'world', got {axes!r}")
        try:
            check_layout("taught", local.tolist())
        except ConfigError as exc:
            raise TeachError(str(exc)) from None
        return local, centroid


class TeachingWindow:
    """A :class:`Teacher` fed by another thread (the marker_tracker's reader) for
    ``seconds`` of the frames' own stamps; :meth:`wait` returns when they are in."""

    def __init__(self, teacher: Teacher, seconds: float) -> None:
        self.teacher = teacher
        self.seconds = seconds
        self.first_stamp: float | None = None
        self.frames = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._open = True

    def add(self, markers: FloatArray, stamp: float) -> None:
        """One frame's markers (the feeding thread); ignored once full or closed."""
        with self._lock:
            if not self._open:
                return
            if self.first_stamp is None:
                self.first_stamp = stamp
            self.frames += 1
            self.teacher.add(markers)
            if stamp - self.first_stamp >= self.seconds:
                self._open = False
                self._done.set()

    def wait(self, timeout: float) -> bool:
        """True when the window filled within ``timeout`` s; the window is closed after."""
        full = self._done.wait(timeout)
        with self._lock:  # a frame being added finishes first: the teacher is ours after
            self._open = False
        return full


def layout_entry(layout: FloatArray) -> list[list[float]]:
    """A layout as the bodies file writes it (micrometres: more is noise)."""
    return [[round(float(v), 6) for v in p] for p in layout]


def taught_text(name: str, layout: FloatArray, position: FloatArray) -> str:
    """The YAML of a taught layout and its body, as it goes into a bodies file."""
    entry = {"name": name, "layout": name, "initial_position": [round(float(v), 6) for v in position]}
    return yaml.safe_dump(
        {"layouts": {name: layout_entry(layout)}, "bodies": [entry]}, sort_keys=False, default_flow_style=None
    )


def write_body(path: Path, name: str, layout: FloatArray, position: FloatArray) -> dict[str, Any]:
    """Add layout ``name`` and a body ``name`` (next free id, initial_position ``position``)
    to the bodies file at ``path`` (created if missing); the result must parse. Returns it."""
    data: dict[str, Any] = {"layouts": {}, "bodies": []}
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise TeachError(f"bodies file {str(path)!r}: {exc}") from None
        if loaded is not None:
            if not isinstance(loaded, dict):
                raise TeachError(f"bodies file {str(path)!r}: not a mapping with layouts and bodies")
            data = loaded
    layouts = data.setdefault("layouts", {}) or {}
    bodies = data.setdefault("bodies", []) or []
    data["layouts"], data["bodies"] = layouts, bodies
    if name in layouts or any(isinstance(b, dict) and b.get("name") == name for b in bodies):
        raise TeachError(f"{name!r} is already in {str(path)!r}: choose another name")
    ids = [b.get("id", i + 1) for i, b in enumerate(bodies) if isinstance(b, dict)]
    layouts[name] = layout_entry(layout)
    bodies.append(
        {
            "name": name,
            "id": max([int(i) for i in ids if isinstance(i, int)] + [0]) + 1,
            "layout": name,
            "initial_position": [round(float(v), 6) for v in position],
        }
    )
    try:
        parse_config(data)
    except ConfigError as exc:
        raise TeachError(f"the bodies file would not be valid: {exc}") from None
    path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    return data
