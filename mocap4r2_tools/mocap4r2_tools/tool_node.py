"""What the tool nodes share: declared, described and validated parameters, main(), and
reading one named body of a RigidBodies stream.

Parameters are :class:`~mocap4r2_control.parameters.ParameterSpec`, declared with the
same policy as a mocap system's (:mod:`mocap4r2_control.parameters`).
Parameters marked ``read_only`` (topics, types) need a restart; the others are applied
at once through :meth:`ToolNode.on_parameters_changed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.parameter import Parameter

from mocap4r2_control.geometry import pose_msg_arrays
from mocap4r2_control.parameters import (
    ParameterSpec,
    check_parameters,
    declare_parameters,
    parameter_value,
    warn_unknown_parameters,
)
from mocap4r2_control.spin import run_node
from mocap4r2_control.timebase import stamp_to_seconds


class ToolNode(Node):
    """Base of the tool nodes: declares and validates the parameters from their specs, warns about unknown
    ones, and applies changes through on_parameters_changed."""

    def __init__(self, node_name: str, specs: Sequence[ParameterSpec], **kwargs: Any):
        super().__init__(node_name, **kwargs)
        self._specs = declare_parameters(self, specs)
        warn_unknown_parameters(self)
        self.add_on_set_parameters_callback(
            lambda params: check_parameters(self._specs, params, self.get_logger())
        )
        self.add_post_set_parameters_callback(self._after_change)

    def _after_change(self, params: list[Parameter]) -> None:
        names = {p.name for p in params if p.name in self._specs}
        if names and getattr(self, "_ready", False):
            self.on_parameters_changed(names)

    def value(self, name: str) -> Any:
        return parameter_value(self, self._specs[name])

    def values(self) -> dict[str, Any]:
        return {name: self.value(name) for name in self._specs}

    def mark_ready(self) -> None:
        """From now on parameter changes reach on_parameters_changed."""
        self._ready = True

    def on_parameters_changed(self, names: set[str]) -> None:
        """Apply changed (validated, not read-only) parameters."""


def run_tool(make_node: Callable[[], Node], args: list[str] | None = None) -> int:
    """main() of a tool: spin until Ctrl-C/SIGTERM, leave cleanly."""
    # one thread: the tools keep state across callbacks and need no locks, and a
    # single-threaded executor sleeps while nothing arrives (see mocap4r2_control.spin)
    return run_node(make_node, None, args, threads=1)


def body_row(bodies: Sequence[Any], name: str, hint: int) -> int:
    """Row of the rigid body called ``name`` in a RigidBodies message, -1 when absent.
    ``hint`` is the row it had in the previous frame, tried first: a system's body order
    rarely changes, so a tool following one body does not search every frame."""
    if 0 <= hint < len(bodies) and bodies[hint].name == name:
        return hint
    return next((row for row, body in enumerate(bodies) if body.name == name), -1)


@dataclass
class BodyReading:
    """What one RigidBodies message says of a followed body: ``status`` is one of
    FollowedBody's statuses; position, quaternion (x, y, z, w) and stamp (s) are set
    when it is TRACKED."""

    status: str
    position: np.ndarray | None = None
    quaternion: np.ndarray | None = None
    stamp: float = 0.0


class FollowedBody:
    """One named body of a RigidBodies stream, read the way every tool that follows a
    single body (robot_ground_truth, px4_bridge) must read it: found by name (its row
    of the previous frame tried first), tracked, with a usable pose, and a stamp after
    the last one used. What the tool does with a body that is missing or lost is its
    own; the reason comes back as the status. Keeps what diagnostics report: when the
    last message came, its frame, and the bodies present when the followed one was not."""

    TRACKED = "tracked"
    MISSING = "missing"  # not in the message
    NOT_TRACKED = "not_tracked"  # tracking_valid false
    BAD_POSE = "bad_pose"  # flagged tracked, but NaN or a zero quaternion
    STALE = "stale_stamp"  # not after the last stamp used: ignored, logged

    def __init__(self, logger: Any):
        self._logger = logger
        self._row = 0
        self.last_message = 0.0  # monotonic time of the last message
        self.last_stamp: float | None = None
        self.mocap_frame = ""
        self.known_bodies: list[str] = []  # at most 50 names, when the body was missing

    def read(self, msg: Any, name: str, now: float) -> BodyReading:
        self.last_message = now
        self.mocap_frame = msg.header.frame_id
        bodies = msg.rigid_bodies
        row = self._row = body_row(bodies, name, self._row)
        if row < 0:
            self.known_bodies = [b.name for b in bodies][:50]
            return BodyReading(self.MISSING)
        body = bodies[row]
        if not body.tracking_valid:
            return BodyReading(self.NOT_TRACKED)
        pose = pose_msg_arrays(body.pose)
        if pose is None:
            return BodyReading(self.BAD_POSE)
        stamp = stamp_to_seconds(msg.header.stamp)
        if self.last_stamp is not None and stamp <= self.last_stamp:
            self._logger.warning(
                f"body {name!r}: stamp {stamp:.6f} not after the last one, ignored", throttle_duration_sec=5.0
            )
            return BodyReading(self.STALE)
        self.last_stamp = stamp
        return BodyReading(self.TRACKED, pose[0], pose[1], stamp)


def frame_check(name: str, allow_empty: bool = False) -> Callable[[str], str | None]:
    """A parameter check accepting a tf frame name (no leading "/", no spaces; empty only when allowed)."""

    def check(value: str) -> str | None:
        if (not value and not allow_empty) or value.startswith("/") or " " in value:
            return f"{name} must be a tf frame name without a leading '/' or spaces, got {value!r}"
        return None

    return check


def topic_check(name: str) -> Callable[[str], str | None]:
    """A parameter check accepting a topic name (not empty, no spaces, no trailing "/")."""

    def check(value: str) -> str | None:
        if not value or " " in value or value.endswith("/"):
            return f"{name} must be a topic name, got {value!r}"
        return None

    return check


def topic_parameter(name: str, default: str, description: str) -> ParameterSpec:
    """A topic name parameter: checked as one, and read only (its subscription or
    publisher is made once)."""
    return ParameterSpec(name, default, description, check=topic_check(name), read_only=True)


def frame_parameter(name: str, default: str, description: str, read_only: bool = False) -> ParameterSpec:
    """A tf frame name parameter, checked as one."""
    return ParameterSpec(name, default, description, check=frame_check(name), read_only=read_only)


def followed_body_parameters(carrier: str) -> tuple[ParameterSpec, ParameterSpec]:
    """The parameters of a tool that follows one body (see FollowedBody): the mocap
    system's RigidBodies topic, and the name of the body on ``carrier`` (robot, vehicle)."""
    return (
        topic_parameter("rigid_bodies_topic", "rigid_bodies", "RigidBodies topic of the mocap system."),
        ParameterSpec("body", "", f"Name of the rigid body on the {carrier}."),
    )


#: the period of a tool's /diagnostics, and whether it subscribes reliably
DIAGNOSTICS_PERIOD = ParameterSpec(
    "diagnostics_period", 1.0, "Period of /diagnostics reports, s.", min_value=0.05, max_value=60.0
)
QOS_RELIABLE = ParameterSpec(
    "qos_reliable", True, "Reliable subscription (false: best effort).", read_only=True
)


def vector_check(name: str, length: int) -> Callable[[list], str | None]:
    """A parameter check accepting a list of exactly ``length`` numbers."""

    def check(value: list) -> str | None:
        if len(value) != length or not all(isinstance(v, (int, float)) for v in value):
            return f"{name} must be a list of {length} numbers, got {value!r}"
        return None

    return check
