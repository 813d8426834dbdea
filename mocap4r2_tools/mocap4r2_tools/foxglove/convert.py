"""The mocap4r2 interfaces as Foxglove's own schemas: a pure conversion, no rclpy.

Foxglove's 3D panel draws its own schemas (SceneUpdate, FrameTransforms) and cannot draw
``mocap4r2_interfaces`` messages, so the live node (:mod:`.node`), the export and the
recorder all pass the messages through these functions. They read the fields only
(``header``, ``markers``, ``rigid_bodies``, ...), so a ROS message and the same message
read from a bag by ``rosbags`` convert alike, and the tests run them without ROS.

What is drawn:

* markers: one entity per kind and system (``<system>/markers/labeled``, ``unlabeled``,
  ``occluded``), a sphere per marker;
* rigid bodies: one entity per body (``<system>/bodies/<name>``) whose axes (x red, y
  green, z blue) are a line list posed at the body's pose, with its name above it;
  untracked bodies grey, named "(not tracked)"; a body without a usable pose is left out;
* skeletons: one entity per skeleton, segments as lines from parent to child and joints
  as spheres;
* /tf: one FrameTransform per transform;
* /diagnostics: one Log per status, and for each mocap system's status (those with a
  ``rate_hz`` value) a JSON record of its figures that Foxglove's Plot panel draws.

Every timestamp is the message's own header stamp (the suite's capture time), never the
time of conversion; :func:`stamp_ns` is the log time the node and the MCAP use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from foxglove.messages import (
    Color,
    Duration,
    FrameTransform,
    FrameTransforms,
    KeyValuePair,
    LinePrimitive,
    LinePrimitiveLineType,
    Log,
    LogLevel,
    Point3,
    Pose,
    Quaternion,
    SceneEntity,
    SceneUpdate,
    SpherePrimitive,
    TextPrimitive,
    Timestamp,
    Vector3,
)

from mocap4r2_control.diagnostic_values import reported_number
from mocap4r2_control.geometry import MIN_QUATERNION_NORM, pose_msg_arrays
from mocap4r2_control.rotation import FloatArray

MARKERS = "mocap4r2_interfaces/msg/Markers"
RIGID_BODIES = "mocap4r2_interfaces/msg/RigidBodies"
SKELETONS = "mocap4r2_interfaces/msg/Skeletons"
TF = "tf2_msgs/msg/TFMessage"
DIAGNOSTICS = "diagnostic_msgs/msg/DiagnosticArray"
#: the message types converted, and what each becomes
CONVERTED = (MARKERS, RIGID_BODIES, SKELETONS, TF, DIAGNOSTICS)

#: Foxglove topics: everything under one prefix so a bag's own topics keep their names
PREFIX = "/foxglove"
TF_TOPIC = f"{PREFIX}/tf"
LOG_TOPIC = f"{PREFIX}/diagnostics"
STATS_PREFIX = f"{PREFIX}/stats"

#: JSON schema of a system's figures (the stats channels), for Foxglove's Plot panel
STATS_SCHEMA: dict[str, Any] = {
    "title": "mocap4r2.SystemStats",
    "type": "object",
    "properties": {
        "timestamp": {
            "type": "object",
            "properties": {"sec": {"type": "integer"}, "nsec": {"type": "integer"}},
        },
        "system": {"type": "string"},
        "level": {"type": "integer", "description": "0 OK, 1 WARN, 2 ERROR, 3 STALE"},
        "rate_hz": {"type": ["number", "null"]},
        "nominal_rate_hz": {"type": ["number", "null"]},
        "latency_mean_ms": {"type": ["number", "null"]},
        "latency_max_ms": {"type": ["number", "null"]},
        "dropped_frames": {"type": ["number", "null"], "description": "in the last diagnostics period"},
        "dropped_frames_total": {"type": ["number", "null"]},
        "tracking_ratio_min": {"type": ["number", "null"], "description": "worst body, last period"},
        "tracking_ratio_mean": {"type": ["number", "null"]},
        "tracking_ratio": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}

_LEVELS = {0: LogLevel.Info, 1: LogLevel.Warning, 2: LogLevel.Error, 3: LogLevel.Warning}


@dataclass(frozen=True)
class Style:
    """Sizes of what is drawn (the node's parameters), in metres; ``lifetime`` (s, 0 =
    forever) lets a system that stops fade out instead of freezing."""

    marker_size: float = 0.03
    axis_length: float = 0.15
    line_width: float = 0.01
    text_size: float = 0.08
    lifetime: float = 1.0


DEFAULT_STYLE = Style()

#: the colours as (r, g, b, a), read by scene_wire too (an SDK Color has no getters)
RGBA = {
    "labeled": (0.1, 0.9, 0.2, 1.0),
    "unlabeled": (1.0, 0.85, 0.1, 1.0),
    "occluded": (0.9, 0.1, 0.1, 0.35),
    "untracked": (0.55, 0.55, 0.55, 0.6),
    "x": (0.9, 0.1, 0.1, 1.0),
    "y": (0.1, 0.8, 0.1, 1.0),
    "z": (0.1, 0.3, 1.0, 1.0),
    "skeleton": (1.0, 0.55, 0.1, 1.0),
    "text": (1.0, 1.0, 1.0, 1.0),
}


def _rgba(name: str) -> Color:
    r, g, b, a = RGBA[name]
    return Color(r=r, g=g, b=b, a=a)


LABELED = _rgba("labeled")
UNLABELED = _rgba("unlabeled")
OCCLUDED = _rgba("occluded")
UNTRACKED = _rgba("untracked")
AXES = (_rgba("x"), _rgba("y"), _rgba("z"))
SKELETON = _rgba("skeleton")
TEXT = _rgba("text")
_KIND_COLORS = {"labeled": LABELED, "unlabeled": UNLABELED, "occluded": OCCLUDED}
_ORIGIN = Point3(x=0.0, y=0.0, z=0.0)
_IDENTITY = Quaternion(x=0.0, y=0.0, z=0.0, w=1.0)
_UINT32 = 1 << 32


# ---------------------------------------------------------------------- time
def stamp_ns(stamp: Any) -> int:
    """Nanoseconds of a builtin_interfaces/Time, clamped to what Foxglove's unsigned
    time holds (a negative or absurd stamp from a bad publisher becomes 0 or the
    largest, never an exception)."""
    ns = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
    return min(max(ns, 0), _UINT32 * 1_000_000_000 - 1)


def timestamp(stamp: Any) -> Timestamp:
    """Foxglove's Timestamp of a builtin_interfaces/Time (clamped as :func:`stamp_ns`)."""
    ns = stamp_ns(stamp)
    return Timestamp(ns // 1_000_000_000, ns % 1_000_000_000)


def _lifetime(style: Style) -> Duration | None:
    return Duration.from_secs(style.lifetime) if style.lifetime > 0 else None


# ---------------------------------------------------------------------- scene
def topic_for(source_topic: str) -> str:
    """The Foxglove topic of a converted source topic (``/sim/rigid_bodies`` ->
    ``/foxglove/sim/rigid_bodies``)."""
    return PREFIX + (source_topic if source_topic.startswith("/") else "/" + source_topic)


def system_of(source_topic: str) -> str:
    """The system (namespace) a data topic belongs to: ``/sim/markers`` -> ``sim``."""
    return source_topic.rsplit("/", 1)[0].strip("/") or "root"


def _vec(p: Any) -> Vector3:
    return Vector3(x=float(p.x), y=float(p.y), z=float(p.z))


def _point(p: Any) -> Point3:
    return Point3(x=float(p.x), y=float(p.y), z=float(p.z))


def _finite(p: Any) -> bool:
    return math.isfinite(p.x) and math.isfinite(p.y) and math.isfinite(p.z)


def marker_kind(marker: Any) -> str:
    """``occluded``, ``unlabeled`` (no id and no name) or ``labeled``: marker_viz's rule."""
    if marker.occluded:
        return "occluded"
    if marker.id == -1 and not marker.name:
        return "unlabeled"
    return "labeled"


def markers_scene(msg: Any, system: str, style: Style = DEFAULT_STYLE) -> SceneUpdate:
    """A Markers message: spheres in three entities (labeled, unlabeled, occluded), so
    each can be hidden in Foxglove's topic tree; an empty kind is an entity without
    spheres (it clears what the previous frame drew). Non-finite positions are left out.
    The definition in the SDK's objects; :mod:`.scene_wire` writes the same faster."""
    groups: dict[str, list[SpherePrimitive]] = {"labeled": [], "unlabeled": [], "occluded": []}
    size = Vector3(x=style.marker_size, y=style.marker_size, z=style.marker_size)
    for marker in msg.markers:
        p = marker.position
        if not _finite(p):
            continue
        kind = marker_kind(marker)
        color = _KIND_COLORS[kind]
        groups[kind].append(
            SpherePrimitive(pose=Pose(position=_vec(p), orientation=_IDENTITY), size=size, color=color)
        )
    ts = timestamp(msg.header.stamp)
    frame = msg.header.frame_id
    lifetime = _lifetime(style)
    return SceneUpdate(
        entities=[
            SceneEntity(
                timestamp=ts,
                frame_id=frame,
                id=f"{system}/markers/{kind}",
                lifetime=lifetime,
                spheres=spheres,
                metadata=[KeyValuePair(key="frame_number", value=str(msg.frame_number))],
            )
            for kind, spheres in groups.items()
        ]
    )


def usable_poses(poses: list[Any]) -> tuple[FloatArray, FloatArray]:
    """(positions (n, 3), unit quaternions (n, 4)) of geometry_msgs Poses, with the rows
    :func:`mocap4r2_control.geometry.usable_pose` would refuse (a non-finite value, a
    quaternion too short to normalise) set to NaN: the same rule for a whole frame at
    once, as one numpy pass rather than one per body."""
    if not poses:
        return np.zeros((0, 3)), np.zeros((0, 4))
    rows = np.array(
        [
            (p.position.x, p.position.y, p.position.z, q.x, q.y, q.z, q.w)
            for p in poses
            for q in (p.orientation,)
        ],
        dtype=np.float64,
    )
    return usable_rows(rows)


def usable_rows(rows: FloatArray) -> tuple[FloatArray, FloatArray]:
    """:func:`usable_poses` of poses as rows (x, y, z, qx, qy, qz, qw); ``rows`` is
    changed in place."""
    if not len(rows):
        return np.zeros((0, 3)), np.zeros((0, 4))
    norms = np.linalg.norm(rows[:, 3:], axis=1)
    bad = ~(np.isfinite(rows).all(axis=1) & (norms > MIN_QUATERNION_NORM))
    quats = rows[:, 3:] / np.where(bad, 1.0, norms)[:, None]
    rows[bad] = np.nan
    quats[bad] = np.nan
    return rows[:, :3], quats


@functools.lru_cache(maxsize=16)
def _axis_points(length: float) -> list[Point3]:
    return [
        _ORIGIN,
        Point3(x=length, y=0.0, z=0.0),
        _ORIGIN,
        Point3(x=0.0, y=length, z=0.0),
        _ORIGIN,
        Point3(x=0.0, y=0.0, z=length),
    ]


_AXIS_COLORS = [c for c in AXES for _ in (0, 1)]
_GREY_AXES = [UNTRACKED] * 6


def body_entity(
    body: Any,
    position: Sequence[float],
    quaternion: Sequence[float],
    *,
    system: str,
    ts: Timestamp,
    frame: str,
    style: Style,
    lifetime: Duration | None,
) -> SceneEntity:
    """One rigid body at a usable pose: its axes as a line list posed at the body's pose
    (so the pose travels unchanged), and its name above it."""
    x, y, z = position
    qx, qy, qz, qw = quaternion
    length = style.axis_length
    tracked = bool(body.tracking_valid)
    axes = LinePrimitive(
        type=LinePrimitiveLineType.LineList,
        pose=Pose(
            position=Vector3(x=x, y=y, z=z),
            orientation=Quaternion(x=qx, y=qy, z=qz, w=qw),
        ),
        thickness=style.line_width,
        points=_axis_points(length),
        colors=_AXIS_COLORS if tracked else _GREY_AXES,
    )
    label = TextPrimitive(
        pose=Pose(position=Vector3(x=x, y=y, z=z + length + style.text_size), orientation=_IDENTITY),
        billboard=True,
        font_size=style.text_size,
        color=TEXT if tracked else UNTRACKED,
        text=body.name if tracked else f"{body.name} (not tracked)",
    )
    return SceneEntity(
        timestamp=ts,
        frame_id=frame,
        id=f"{system}/bodies/{body.name or body.id}",
        lifetime=lifetime,
        lines=[axes],
        texts=[label],
        metadata=[_TRACKED if tracked else _NOT_TRACKED],
    )


_TRACKED = KeyValuePair(key="tracking_valid", value="true")
_NOT_TRACKED = KeyValuePair(key="tracking_valid", value="false")


def bodies_scene(msg: Any, system: str, style: Style = DEFAULT_STYLE) -> SceneUpdate:
    """A RigidBodies message: one entity per body with a usable pose (the others are
    left out: nothing sensible to draw). The definition of the scene in the SDK's objects;
    the node and the exports write the same message faster (:mod:`.scene_wire`)."""
    ts = timestamp(msg.header.stamp)
    frame = msg.header.frame_id
    lifetime = _lifetime(style)
    bodies = list(msg.rigid_bodies)
    positions, quats = usable_poses([b.pose for b in bodies])
    usable = ~np.isnan(positions[:, 0])
    return SceneUpdate(
        entities=[
            body_entity(body, p, q, system=system, ts=ts, frame=frame, style=style, lifetime=lifetime)
            for body, p, q, ok in zip(bodies, positions.tolist(), quats.tolist(), usable.tolist())
            if ok
        ]
    )


def skeletons_scene(msg: Any, system: str, style: Style = DEFAULT_STYLE) -> SceneUpdate:
    """A Skeletons message: per skeleton, lines from each segment to its parent and a
    sphere per joint (grey where not tracked)."""
    ts = timestamp(msg.header.stamp)
    frame = msg.header.frame_id
    size = Vector3(x=style.marker_size, y=style.marker_size, z=style.marker_size)
    entities = []
    for index, skeleton in enumerate(msg.skeletons):
        segments = [s for s in skeleton.segments if _finite(s.pose.position)]
        positions = {s.id: s.pose.position for s in segments}
        points: list[Point3] = []
        colors: list[Color] = []
        joints = []
        for segment in segments:
            tracked = skeleton.tracking_valid and segment.tracking_valid
            color = SKELETON if tracked else UNTRACKED
            joints.append(
                SpherePrimitive(
                    pose=Pose(position=_vec(segment.pose.position), orientation=_IDENTITY),
                    size=size,
                    color=color,
                )
            )
            parent = positions.get(segment.parent_id)
            if parent is not None:
                points += [_point(parent), _point(segment.pose.position)]
                colors += [color, color]
        lines = [
            LinePrimitive(
                type=LinePrimitiveLineType.LineList,
                pose=Pose(position=Vector3(x=0.0, y=0.0, z=0.0), orientation=_IDENTITY),
                thickness=style.line_width,
                points=points,
                colors=colors,
            )
        ]
        entities.append(
            SceneEntity(
                timestamp=ts,
                frame_id=frame,
                id=f"{system}/skeletons/{skeleton.name or skeleton.id or index}",
                lifetime=_lifetime(style),
                lines=lines if points else [],
                spheres=joints,
                metadata=[KeyValuePair(key="name", value=str(skeleton.name))],
            )
        )
    return SceneUpdate(entities=entities)


def scene(type_name: str, msg: Any, system: str, style: Style = DEFAULT_STYLE) -> SceneUpdate:
    """The SceneUpdate of a Markers, RigidBodies or Skeletons message (by its type name)."""
    if type_name == MARKERS:
        return markers_scene(msg, system, style)
    if type_name == RIGID_BODIES:
        return bodies_scene(msg, system, style)
    if type_name == SKELETONS:
        return skeletons_scene(msg, system, style)
    raise ValueError(f"no scene for {type_name}")


# ---------------------------------------------------------------------- /tf
def frame_transforms(msg: Any) -> FrameTransforms:
    """A tf2_msgs/TFMessage as FrameTransforms; a transform with a non-finite value is
    left out."""
    out = []
    for t in msg.transforms:
        pose = pose_msg_arrays(t.transform)
        if pose is None:
            continue
        (x, y, z), (qx, qy, qz, qw) = pose
        out.append(
            FrameTransform(
                timestamp=timestamp(t.header.stamp),
                parent_frame_id=t.header.frame_id,
                child_frame_id=t.child_frame_id,
                translation=Vector3(x=float(x), y=float(y), z=float(z)),
                rotation=Quaternion(x=float(qx), y=float(qy), z=float(qz), w=float(qw)),
            )
        )
    return FrameTransforms(transforms=out)


# ---------------------------------------------------------------------- /diagnostics
def level_of(level: Any) -> int:
    """A DiagnosticStatus level as an int (rclpy gives bytes, rosbags an int)."""
    return level[0] if isinstance(level, (bytes, bytearray)) else int(level)


def logs(msg: Any) -> list[Log]:
    """One Log per status of a DiagnosticArray, stamped with the array's stamp: the
    status name as the log's name, the message and its values as the text."""
    ts = timestamp(msg.header.stamp)
    out = []
    for status in msg.status:
        values = ", ".join(f"{kv.key}={kv.value}" for kv in status.values[:40])
        text = status.message + (f" ({values})" if values else "")
        out.append(
            Log(
                timestamp=ts,
                level=_LEVELS.get(level_of(status.level), LogLevel.Unknown),
                message=text[:4000],
                name=status.name or status.hardware_id,
            )
        )
    return out


def stats_topic(hardware_id: str) -> str:
    """The stats topic of a system (its hardware id, e.g. ``/sim/simulated_system``)."""
    name = "/".join(part for part in hardware_id.split("/") if part) or "unnamed"
    return f"{STATS_PREFIX}/{name}"


def system_stats(msg: Any) -> list[tuple[str, dict[str, Any]]]:
    """(stats topic, figures) for each mocap system's status in a DiagnosticArray: the
    rate, latency, dropped frames and tracking ratios it reports, as numbers (null where
    the system has none yet). Statuses without ``rate_hz`` (tools) give none."""
    ns = stamp_ns(msg.header.stamp)
    out = []
    for status in msg.status:
        values = {kv.key: kv.value for kv in status.values}
        if "rate_hz" not in values:
            continue
        ratios = {
            key.split("/", 1)[1]: r
            for key, text in values.items()
            if key.startswith("tracking_ratio/") and (r := reported_number(text)) is not None
        }
        record = {
            "timestamp": {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000},
            "system": status.hardware_id or status.name,
            "level": level_of(status.level),
            "rate_hz": reported_number(values.get("rate_hz")),
            "nominal_rate_hz": reported_number(values.get("nominal_rate_hz")),
            "latency_mean_ms": reported_number(values.get("latency_mean_ms")),
            "latency_max_ms": reported_number(values.get("latency_max_ms")),
            "dropped_frames": reported_number(values.get("dropped_frames")),
            "dropped_frames_total": reported_number(values.get("dropped_frames_total")),
            "tracking_ratio_min": min(ratios.values()) if ratios else None,
            "tracking_ratio_mean": sum(ratios.values()) / len(ratios) if ratios else None,
            "tracking_ratio": ratios,
        }
        out.append((stats_topic(status.hardware_id or status.name), record))
    return out


def source_kind(type_name: str) -> str | None:
    """Which conversion a source type gets: ``scene``, ``tf``, ``diagnostics`` or None."""
    if type_name in (MARKERS, RIGID_BODIES, SKELETONS):
        return "scene"
    if type_name == TF:
        return "tf"
    if type_name == DIAGNOSTICS:
        return "diagnostics"
    return None


def converted_topics(topics: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (topic, type) pairs among ``topics`` that have a Foxglove form."""
    return [(t, ty) for t, ty in topics if source_kind(ty) is not None]
