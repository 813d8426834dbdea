"""Body definitions for the tracker: marker layouts, bodies, dynamics and limits.

A layout is a list of marker positions in the body's frame (metres). One marker gives a
position-only body (its orientation is reported as identity: one point has none); three or
more non-collinear markers give a full pose. Two markers, or collinear ones, leave the
rotation about their line unobservable and are refused. Bodies may share a layout
("identical" bodies, as in a swarm): the tracker then tells them apart only by where they
are, so two identical bodies may not be given the same ``initial_position``.

Everything malformed raises :class:`ConfigError` with the reason, before any tracking.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

FloatArray = npt.NDArray[np.float64]

# markers closer than this inside one layout cannot be told apart by any mocap system
MIN_MARKER_SPACING_M = 1e-3


class ConfigError(ValueError):
    """A body definition the tracker refuses; the message says why."""


@dataclass(frozen=True)
class Dynamics:
    """What the bodies can do; it sizes the gates around each prediction."""

    max_velocity: float = 3.0  # m/s
    max_angular_velocity: float = 20.0  # rad/s
    max_acceleration: float = 30.0  # m/s^2


@dataclass(frozen=True)
class Limits:
    """Tolerances; the defaults suit millimetre-accurate systems."""

    marker_gate: float = 0.01  # m: marker noise plus what the motion model misses
    max_residual: float = 0.004  # m: RMS residual above which a fit is not trusted
    signature_tolerance: float = 0.002  # m: pairwise-distance slack when searching a layout
    coast_time: float = 0.5  # s: how long an unseen body is still predicted and gated
    init_radius: float = 0.3  # m: search radius around initial_position / last known position
    max_markers: int = 20000  # markers per frame above which the frame is refused


@dataclass(frozen=True)
class BodySpec:
    """One body: its name and id, and the layout it carries."""

    name: str
    body_id: int
    layout_name: str
    points: FloatArray  # (n, 3) marker positions in the body frame
    initial_position: FloatArray | None = None


@dataclass(frozen=True)
class TrackerConfig:
    """Everything the tracker is configured with."""

    bodies: tuple[BodySpec, ...]
    dynamics: Dynamics = field(default_factory=Dynamics)
    limits: Limits = field(default_factory=Limits)


def _vector(value: Any, what: str) -> FloatArray:
    try:
        out = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}: not numbers ({value!r})") from exc
    if out.shape != (3,) or not np.all(np.isfinite(out)):
        raise ConfigError(f"{what}: expected 3 finite numbers, got {value!r}")
    return out


def check_layout(name: str, value: Any) -> FloatArray:
    """The layout as an (n, 3) array, or ConfigError saying what is wrong with it."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) < 1:
        raise ConfigError(f"layout {name!r}: needs at least 1 marker")
    points = np.stack([_vector(p, f"layout {name!r} marker {i}") for i, p in enumerate(value)])
    n = len(points)
    if n == 2:
        raise ConfigError(
            f"layout {name!r}: 2 markers leave the rotation about their line unobservable; use 1 or >= 3"
        )
    if n >= 2:
        d = np.linalg.norm(points[:, None] - points[None], axis=2)
        i, j = np.triu_indices(n, 1)
        close = np.flatnonzero(d[i, j] < MIN_MARKER_SPACING_M)
        if close.size:
            a, b = int(i[close[0]]), int(j[close[0]])
            raise ConfigError(f"layout {name!r}: markers {a} and {b} are duplicated (closer than 1 mm)")
    if n >= 3:
        centred = points - points.mean(axis=0)
        singular = np.linalg.svd(centred, compute_uv=False)
        if singular[1] < MIN_MARKER_SPACING_M:
            raise ConfigError(f"layout {name!r}: markers are collinear, the orientation is not observable")
    return points


def _positive(section: Mapping[str, Any], key: str, default: float, what: str) -> float:
    raw = section.get(key, default)
    try:
        value = float(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}.{key}: not a number ({raw!r})") from exc
    if not math.isfinite(value) or value <= 0.0:
        raise ConfigError(f"{what}.{key}: must be a finite number > 0, got {raw!r}")
    return value


def parse_config(data: Any) -> TrackerConfig:
    """A TrackerConfig from the parsed YAML (see docs/tracking.md), or ConfigError."""
    if not isinstance(data, Mapping):
        raise ConfigError("bodies file: expected a mapping with 'layouts' and 'bodies'")
    layouts_raw = data.get("layouts")
    if not isinstance(layouts_raw, Mapping) or not layouts_raw:
        raise ConfigError("bodies file: 'layouts' must be a non-empty mapping name -> list of [x, y, z]")
    layouts = {str(k): check_layout(str(k), v) for k, v in layouts_raw.items()}
    bodies_raw = data.get("bodies")
    if not isinstance(bodies_raw, Sequence) or isinstance(bodies_raw, str) or not bodies_raw:
        raise ConfigError("bodies file: 'bodies' must be a non-empty list")
    bodies: list[BodySpec] = []
    for index, raw in enumerate(bodies_raw):
        if not isinstance(raw, Mapping):
            raise ConfigError(f"bodies[{index}]: expected a mapping with name, id, layout")
        name = raw.get("name")
        if not isinstance(name, str) or not name or ":" in name:
            raise ConfigError(f"bodies[{index}]: 'name' must be a non-empty string without ':'")
        body_id = raw.get("id", index + 1)
        if not isinstance(body_id, int) or isinstance(body_id, bool) or body_id < 0:
            raise ConfigError(f"body {name!r}: 'id' must be an integer >= 0, got {body_id!r}")
        layout = raw.get("layout")
        if layout not in layouts:
            raise ConfigError(f"body {name!r}: unknown layout {layout!r} (known: {sorted(layouts)})")
        initial = raw.get("initial_position")
        start = None if initial is None else _vector(initial, f"body {name!r} initial_position")
        bodies.append(BodySpec(name, body_id, str(layout), layouts[str(layout)], start))
    names = [b.name for b in bodies]
    ids = [b.body_id for b in bodies]
    for label, values in (("name", names), ("id", ids)):
        seen: set[object] = set()
        for v in values:
            if v in seen:
                raise ConfigError(f"two bodies share the {label} {v!r}")
            seen.add(v)
    check_identical_starts(bodies)
    dyn_raw = data.get("dynamics", {}) or {}
    lim_raw = data.get("limits", {}) or {}
    if not isinstance(dyn_raw, Mapping) or not isinstance(lim_raw, Mapping):
        raise ConfigError("bodies file: 'dynamics' and 'limits' must be mappings")
    d0, l0 = Dynamics(), Limits()
    dynamics = Dynamics(
        *(_positive(dyn_raw, k, getattr(d0, k), "dynamics") for k in Dynamics.__dataclass_fields__)
    )
    limit_values = {k: _positive(lim_raw, k, getattr(l0, k), "limits") for k in Limits.__dataclass_fields__}
    limits = Limits(**{**limit_values, "max_markers": int(limit_values["max_markers"])})  # type: ignore[arg-type]
    return TrackerConfig(tuple(bodies), dynamics, limits)


def check_identical_starts(bodies: Sequence[BodySpec]) -> None:
    """Identical bodies (same marker layout) given the same initial position cannot be told apart."""
    for i, a in enumerate(bodies):
        for b in bodies[i + 1 :]:
            if a.initial_position is None or b.initial_position is None:
                continue
            same_layout = a.points.shape == b.points.shape and np.allclose(a.points, b.points)
            if same_layout and np.linalg.norm(a.initial_position - b.initial_position) < 1e-6:
                raise ConfigError(
                    f"bodies {a.name!r} and {b.name!r} are identical and share initial_position "
                    f"{a.initial_position.tolist()}: nothing would tell them apart"
                )


def padded_layouts(
    bodies: Sequence[BodySpec],
) -> tuple[npt.NDArray[np.intp], FloatArray, npt.NDArray[np.bool_]]:
    """Every layout in one (B, Lmax, 3) array: (marker counts, points zero-padded, which
    slots are markers), so per-frame work runs on all bodies at once."""
    sizes = np.array([len(b.points) for b in bodies], dtype=np.intp)
    lmax = int(sizes.max())
    local = np.zeros((len(bodies), lmax, 3))
    for i, body in enumerate(bodies):
        local[i, : len(body.points)] = body.points
    slot = np.arange(lmax)[None, :] < sizes[:, None]
    return sizes, local, slot


def layout_groups(bodies: Sequence[BodySpec]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """(group, identical): bodies with the same layout share a group number, and a body
    is identical when another shares its group (only position tells them apart)."""
    keys = [(b.points.shape, b.points.round(6).tobytes()) for b in bodies]
    group = np.array([keys.index(k) for k in keys], dtype=np.intp)
    return group, np.bincount(group)[group] > 1


def load_config(path: str | Path) -> TrackerConfig:
    """parse_config of a YAML file; unreadable or malformed YAML is a ConfigError too."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"bodies file {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"bodies file {str(path)!r}: not YAML ({exc})") from exc
    return parse_config(data)
