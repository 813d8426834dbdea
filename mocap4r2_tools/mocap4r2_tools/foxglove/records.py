"""Converted messages as what a sink writes: topic, schema, encoding and bytes.

The live server, the export and the recorder all write the same records, so a channel
looks alike wherever it is read: a SceneUpdate channel has Foxglove's own protobuf schema
(``foxglove.SceneUpdate``, the FileDescriptorSet the SDK ships) whether it comes from the
WebSocket or from an MCAP file. No rclpy here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from foxglove.messages import FrameTransforms, Log, SceneUpdate

from . import convert, scene_wire
from .convert import DEFAULT_STYLE, Style


@dataclass(frozen=True)
class SchemaSpec:
    """A channel's schema: Foxglove's name, its encoding and its text/bytes, and the
    encoding of the channel's messages."""

    name: str
    encoding: str
    data: bytes
    message_encoding: str


def _protobuf(cls: Any) -> SchemaSpec:
    schema = cls.get_schema()
    return SchemaSpec(schema.name, schema.encoding, bytes(schema.data), "protobuf")


SCENE_UPDATE = _protobuf(SceneUpdate)
FRAME_TRANSFORMS = _protobuf(FrameTransforms)
LOG = _protobuf(Log)
STATS = SchemaSpec(
    str(convert.STATS_SCHEMA["title"]), "jsonschema", json.dumps(convert.STATS_SCHEMA).encode(), "json"
)


@dataclass(frozen=True)
class Record:
    """One message for a Foxglove sink; ``log_time`` is the source header stamp (ns)."""

    topic: str
    schema: SchemaSpec
    data: bytes
    log_time: int


def records(topic: str, type_name: str, msg: Any, style: Style = DEFAULT_STYLE) -> list[Record]:
    """The Foxglove records of one message of ``topic`` (of ROS type ``type_name``):
    a SceneUpdate for Markers, RigidBodies and Skeletons, FrameTransforms for /tf, Logs
    and system figures for /diagnostics; [] for any other type. Raises (AttributeError,
    TypeError, ValueError, OverflowError) on a malformed message; the caller counts it."""
    kind = convert.source_kind(type_name)
    if kind == "scene":
        system = convert.system_of(topic)
        # bodies and markers, the hot scenes, through the wire writer (the same message as
        # convert's SDK objects would encode, at a fraction of the cost)
        if type_name == convert.RIGID_BODIES:
            data = scene_wire.bodies_scene(msg, system, style)
        elif type_name == convert.MARKERS:
            data = scene_wire.markers_scene(msg, system, style)
        else:
            data = convert.scene(type_name, msg, system, style).encode()
        return [Record(convert.topic_for(topic), SCENE_UPDATE, data, convert.stamp_ns(msg.header.stamp))]
    if kind == "tf":
        transforms = convert.frame_transforms(msg)
        if not msg.transforms:
            return []
        log_time = convert.stamp_ns(msg.transforms[0].header.stamp)
        return [Record(convert.TF_TOPIC, FRAME_TRANSFORMS, transforms.encode(), log_time)]
    if kind == "diagnostics":
        log_time = convert.stamp_ns(msg.header.stamp)
        out = [Record(convert.LOG_TOPIC, LOG, log.encode(), log_time) for log in convert.logs(msg)]
        for stats_topic, figures in convert.system_stats(msg):
            out.append(Record(stats_topic, STATS, json.dumps(figures).encode(), log_time))
        return out
    return []


def records_raw(
    topic: str,
    type_name: str,
    data: bytes,
    deserialize: Callable[[bytes, str], Any],
    style: Style = DEFAULT_STYLE,
) -> list[Record]:
    """:func:`records` of a serialized message: RigidBodies and Markers read in place
    from the CDR (:func:`.scene_wire.bodies_frame_cdr`, :func:`.scene_wire.markers_frame_cdr`:
    the heaviest messages to deserialize, a Python object per body or marker), every
    other type through ``deserialize(data, type_name)``. Raises like :func:`records`, or
    :class:`.scene_wire.BadCdr` for bytes that are not the RigidBodies or Markers they
    claim to be."""
    if type_name == convert.RIGID_BODIES:
        bodies = scene_wire.bodies_frame_cdr(data, topic)
        update = scene_wire.bodies_scene_of(bodies, convert.system_of(topic), style)
        return [Record(convert.topic_for(topic), SCENE_UPDATE, update, bodies.stamp_ns)]
    if type_name == convert.MARKERS:
        markers = scene_wire.markers_frame_cdr(data, topic)
        update = scene_wire.markers_scene_of(markers, convert.system_of(topic), style)
        return [Record(convert.topic_for(topic), SCENE_UPDATE, update, markers.stamp_ns)]
    return records(topic, type_name, deserialize(data, type_name), style)
