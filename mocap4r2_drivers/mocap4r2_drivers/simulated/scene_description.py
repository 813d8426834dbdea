"""What a scene file describes, checked: the specs of its rigid bodies, skeletons and
arms, the human skeleton template, and the reading of every value of the YAML (a value
that cannot be used is a :class:`SceneError` naming its key). Pure Python + numpy; the
frames themselves are computed by :class:`~mocap4r2_drivers.simulated.scene.Scene`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mocap4r2_control.frame import AssetNames

from ..common import stable_id


class SceneError(ValueError):
    """A scene file that cannot be used, with the reason."""


@dataclass(frozen=True)
class BodySpec:
    """A rigid body of the scene and its markers."""

    id: int
    name: str
    marker_ids: np.ndarray  # (m,) stable marker ids
    marker_names: tuple[str, ...]  # "body:marker_i"
    marker_layout: np.ndarray  # (m, 3) marker positions in the body frame, metres


@dataclass(frozen=True)
class ArmSpec:
    """An arm of the scene (``arms:``): its links' poses come from a ROS topic
    (geometry_msgs/PoseArray, the tip of every link, the end effector last); the scene
    reports a rigid body ``<name>_ee`` with markers on the end effector and a skeleton
    ``<name>`` with a segment ``<name>_link<i>`` per link."""

    name: str
    link_poses_topic: str
    timeout: float  # s: older link poses make the arm untracked
    body_id: int
    body_name: str
    skeleton_id: int
    marker_ids: np.ndarray  # (4,)
    marker_names: tuple[str, ...]
    marker_layout: np.ndarray  # (4, 3) in the end effector's frame, metres


# Markers on an arm's end effector, in its frame: a few cm from the tip and not
# symmetric, so a fit of the seen markers has one answer (as a real marker plate needs).
ARM_MARKER_LAYOUT = np.array(
    [[0.04, 0.0, 0.01], [-0.03, 0.035, 0.0], [-0.02, -0.045, 0.005], [0.0, 0.01, 0.05]]
)
ARM_KEYS = ("name", "link_poses_topic", "timeout")
_TOPIC = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)+$")


@dataclass(frozen=True)
class SkeletonSpec:
    """A skeleton of the scene: its segments and their offsets from their parents."""

    id: int
    name: str
    segment_ids: np.ndarray  # (s,)
    segment_names: tuple[str, ...]
    parent_ids: np.ndarray  # (s,) NO_PARENT for the root
    offsets: np.ndarray  # (s, 3) segment origin in the parent's frame


# A human skeleton: (name, parent, offset from parent in metres, swing axis, swing
# amplitude rad, phase rad). Swings animate a walking gait at the skeleton's step rate.
HUMAN_SEGMENTS = (
    ("Hip", None, (0.0, 0.0, 0.95), None, 0.0, 0.0),
    ("Ab", "Hip", (0.0, 0.0, 0.10), (0, 1, 0), 0.05, 0.0),
    ("Chest", "Ab", (0.0, 0.0, 0.25), (0, 0, 1), 0.10, math.pi),
    ("Neck", "Chest", (0.0, 0.0, 0.20), None, 0.0, 0.0),
    ("Head", "Neck", (0.0, 0.0, 0.10), (0, 1, 0), 0.05, 0.5),
    ("LShoulder", "Chest", (0.0, 0.05, 0.15), None, 0.0, 0.0),
    ("LUArm", "LShoulder", (0.0, 0.15, 0.0), (0, 1, 0), 0.4, math.pi),
    ("LFArm", "LUArm", (0.0, 0.0, -0.28), (0, 1, 0), 0.3, math.pi + 0.5),
    ("LHand", "LFArm", (0.0, 0.0, -0.25), None, 0.0, 0.0),
    ("RShoulder", "Chest", (0.0, -0.05, 0.15), None, 0.0, 0.0),
    ("RUArm", "RShoulder", (0.0, -0.15, 0.0), (0, 1, 0), 0.4, 0.0),
    ("RFArm", "RUArm", (0.0, 0.0, -0.28), (0, 1, 0), 0.3, 0.5),
    ("RHand", "RFArm", (0.0, 0.0, -0.25), None, 0.0, 0.0),
    ("LThigh", "Hip", (0.0, 0.10, -0.05), (0, 1, 0), 0.45, 0.0),
    ("LShin", "LThigh", (0.0, 0.0, -0.43), (0, 1, 0), 0.35, -0.8),
    ("LFoot", "LShin", (0.0, 0.0, -0.42), (0, 1, 0), 0.15, 0.0),
    ("RThigh", "Hip", (0.0, -0.10, -0.05), (0, 1, 0), 0.45, math.pi),
    ("RShin", "RThigh", (0.0, 0.0, -0.43), (0, 1, 0), 0.35, math.pi - 0.8),
    ("RFoot", "RShin", (0.0, 0.0, -0.42), (0, 1, 0), 0.15, math.pi),
)


@dataclass
class SceneDescription:
    """What a mocap software would report as its model definitions."""

    bodies: list[BodySpec] = field(default_factory=list)
    skeletons: list[SkeletonSpec] = field(default_factory=list)
    unlabeled_markers: int = 0
    arms: list[ArmSpec] = field(default_factory=list)

    def asset_names(self) -> AssetNames:
        return AssetNames(
            rigid_bodies=tuple(b.name for b in self.bodies) + tuple(a.body_name for a in self.arms),
            markers=tuple(n for b in self.bodies for n in b.marker_names)
            + tuple(n for a in self.arms for n in a.marker_names),
            skeletons=tuple(s.name for s in self.skeletons) + tuple(a.name for a in self.arms),
        )


def default_scene_path() -> Path:
    """The demo scene shipped in config/ (installed share dir, else the source tree)."""
    try:
        from ament_index_python.packages import get_package_share_directory

        path = Path(get_package_share_directory("mocap4r2_drivers")) / "config" / "demo_scene.yaml"
        if path.exists():
            return path
    except Exception:  # not installed with ament: fall back to the source checkout
        pass
    return Path(__file__).resolve().parents[2] / "config" / "demo_scene.yaml"


def tracking_loss(cfg: dict[str, Any], name: str) -> tuple[float, float]:
    """An entry's ``tracking_loss: {every, duration}`` as (every, duration) s; (0, 0): never lost."""
    loss = cfg.get("tracking_loss")
    if not loss:
        return (0.0, 0.0)
    if not isinstance(loss, dict):
        raise SceneError(f"{name}: tracking_loss must be {{every: s, duration: s}}")
    where = f"{name}: tracking_loss"
    every, duration = number(loss, "every", 0.0, where), number(loss, "duration", 0.0, where)
    if every <= 0 or not 0 < duration < every:
        raise SceneError(f"{name}: tracking_loss needs every > duration > 0")
    return (every, duration)


def arm_specs(cfg: Any, bodies: list[BodySpec], skeletons: list[SkeletonSpec]) -> list[ArmSpec]:
    """The scene's ``arms:`` entries, each checked: a bad one is refused with its key."""
    if cfg is None:
        return []
    if not isinstance(cfg, list):
        raise SceneError("arms must be a list of {name, link_poses_topic, timeout} entries")
    body_names = {b.name for b in bodies}
    skeleton_names = {s.name for s in skeletons}
    body_ids = {b.id for b in bodies}
    skeleton_ids = {s.id for s in skeletons}
    out: list[ArmSpec] = []
    for i, entry in enumerate(cfg):
        name = entry_name(entry, f"arms[{i}]")
        where = f"arms[{i}] ({name})"
        unknown = sorted(set(map(str, entry)) - set(ARM_KEYS))
        if unknown:
            raise SceneError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(ARM_KEYS)})")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise SceneError(f"{where}: name must be letters, digits and _ (it names a body and links)")
        topic = entry.get("link_poses_topic")
        if not isinstance(topic, str) or not _TOPIC.match(topic):
            raise SceneError(
                f"{where}: link_poses_topic must be an absolute topic name such as "
                f"/simulated_arm/link_poses, got {topic!r}"
            )
        timeout = number(entry, "timeout", 0.5, where)
        if not 0 < timeout <= 3600:
            raise SceneError(f"{where}: timeout must be in (0, 3600] s, got {timeout}")
        body_name = f"{name}_ee"
        if body_name in body_names or name in skeleton_names:
            raise SceneError(f"{where}: {body_name!r} or {name!r} is already a body or skeleton of the scene")
        body_id, skeleton_id = stable_id(body_name), stable_id(name)
        if body_id in body_ids or skeleton_id in skeleton_ids:
            raise SceneError(f"{where}: its id collides with another body or skeleton of the scene")
        body_names.add(body_name)
        skeleton_names.add(name)
        body_ids.add(body_id)
        skeleton_ids.add(skeleton_id)
        markers = tuple(f"{body_name}:marker{j + 1}" for j in range(len(ARM_MARKER_LAYOUT)))
        out.append(
            ArmSpec(
                name=name,
                link_poses_topic=topic,
                timeout=timeout,
                body_id=body_id,
                body_name=body_name,
                skeleton_id=skeleton_id,
                marker_ids=np.asarray([stable_id(n) for n in markers], dtype=np.int32),
                marker_names=markers,
                marker_layout=ARM_MARKER_LAYOUT.copy(),
            )
        )
    return out


def expand_generated(config: dict[str, Any], bodies: list[Any]) -> list[Any]:
    """`generated_bodies: {count: N, markers_per_body: M}` adds N bodies on circles
    (used by benchmarks for 10 or 50 bodies without listing them)."""
    gen = config.get("generated_bodies")
    if not gen:
        return list(bodies)
    count = int(gen.get("count", 0))
    per_body = int(gen.get("markers_per_body", 4))
    if count < 0 or per_body < 3:
        raise SceneError("generated_bodies needs count >= 0 and markers_per_body >= 3")
    out = list(bodies)
    first_id = max([int(b.get("id", i + 1)) for i, b in enumerate(bodies)] + [0]) + 1
    for i in range(count):
        angles = np.linspace(0, 2 * math.pi, per_body, endpoint=False)
        layout = np.stack(
            [
                0.08 * np.cos(angles) * (1 + 0.1 * np.arange(per_body)),
                0.08 * np.sin(angles),
                0.01 * np.arange(per_body),
            ],
            axis=1,
        )
        out.append(
            {
                "name": f"body{first_id + i}",
                "id": first_id + i,
                "markers": layout.tolist(),
                "trajectory": {
                    "type": "circle",
                    "center": [0.0, 0.0, 0.5 + 0.02 * i],
                    "radius": 0.5 + 0.05 * i,
                    "period": 5.0 + i % 7,
                    "phase": 0.3 * i,
                },
            }
        )
    return out


def default_layout(rng: np.random.Generator) -> list[list[float]]:
    """An asymmetric 4-marker layout, as real rigid bodies need for unique labelling."""
    base = np.array([[0.10, 0.0, 0.0], [-0.08, 0.06, 0.0], [-0.05, -0.09, 0.01], [0.0, 0.02, 0.07]])
    return (base + rng.uniform(-0.01, 0.01, size=base.shape)).tolist()


def entry_name(cfg: Any, where: str) -> str:
    """The non-empty ``name`` of a list entry; a SceneError saying ``where`` otherwise."""
    if not isinstance(cfg, dict) or not isinstance(cfg.get("name"), str) or not cfg["name"]:
        raise SceneError(f"{where} needs a non-empty name")
    return cfg["name"]


def number(cfg: dict[str, Any], key: str, default: float, where: str = "") -> float:
    """cfg[key] as a number; a SceneError naming the key otherwise."""
    value = cfg.get(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        prefix = f"{where}: " if where else ""
        raise SceneError(f"{prefix}{key} must be a number, got {value!r}") from None


def positive(cfg: dict[str, Any], key: str, default: float, maximum: float) -> float:
    """cfg[key] in (0, maximum]."""
    value = number(cfg, key, default)
    if not 0 < value <= maximum:
        raise SceneError(f"{key} must be in (0, {maximum}], got {value}")
    return value


def non_negative(cfg: dict[str, Any], key: str, default: float) -> float:
    """cfg[key], finite and >= 0."""
    value = number(cfg, key, default)
    if value < 0 or not math.isfinite(value):
        raise SceneError(f"{key} must be >= 0, got {value}")
    return value


def probability(cfg: dict[str, Any], key: str, default: float) -> float:
    """cfg[key] in [0, 1]."""
    value = number(cfg, key, default)
    if not 0.0 <= value <= 1.0:
        raise SceneError(f"{key} must be a probability in [0, 1], got {value}")
    return value
