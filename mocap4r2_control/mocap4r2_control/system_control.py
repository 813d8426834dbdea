"""A mocap system's answers to the control plane: what it announces, and what START and
STOP do to its lifecycle.

START configures (if needed) and activates the system, then tells the adapter the
session started; STOP tells the adapter the session stopped and deactivates. Each
answer is an :class:`~mocap4r2_control.control_plane.Outcome` the control plane acks.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from lifecycle_msgs.msg import State
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node

from mocap4r2_interfaces.msg import MocapSystemInfo

from .adapter import MocapAdapter
from .control_plane import STATE_LABELS, ControlPlaneMember, Outcome
from .frame_output import DATA_TOPICS
from .ros_logging import NodeLogRoute


class ControlledSystem(Protocol):
    """What the answers read and drive of a system (MocapSystemNode is one): its adapter,
    parameters, lifecycle state and transitions. Declared here, so that this module
    does not import the node that owns it."""

    adapter: MocapAdapter | None
    adapter_class: type[MocapAdapter]
    transition_lock: threading.RLock
    log_route: NodeLogRoute

    @property
    def state_id(self) -> int: ...

    def value(self, name: str) -> Any: ...

    def configured_adapter(self) -> MocapAdapter: ...

    def trigger_configure(self) -> TransitionCallbackReturn: ...

    def trigger_activate(self) -> TransitionCallbackReturn: ...

    def trigger_deactivate(self) -> TransitionCallbackReturn: ...


RATE_CHECK_PERIOD_S = 1.0
RATE_CHANGE = 0.01  # relative change of the rate that is announced


class SystemControl:
    """The control-plane member of one system node and its START/STOP handlers."""

    def __init__(self, node: Node, system: ControlledSystem):
        """``node`` is the ROS side (services, timers, the log), ``system`` the lifecycle
        and adapter it answers for (MocapSystemNode passes itself for both)."""
        self.ros = node
        self.node = system
        self.member = ControlPlaneMember(node, start=self.start, stop=self.stop, describe=self.describe)
        self.announced_rate = 0.0
        # a system that learns its rate from the frames (a tracker, a relay) knows it only
        # after the announcements of its state changes: the announcement follows it
        self._rate_timer = node.create_timer(RATE_CHECK_PERIOD_S, self.follow_rate)

    def follow_rate(self) -> None:
        """Announce again when the adapter's rate moved more than RATE_CHANGE from the one
        announced last (a rate known only once frames arrive, a source that changed rate)."""
        adapter = self.node.adapter
        rate = float(adapter.nominal_rate) if adapter is not None else 0.0
        if abs(rate - self.announced_rate) > RATE_CHANGE * max(rate, self.announced_rate):
            try:
                self.member.announce()
            except Exception as exc:  # noqa: BLE001 - the next check tries again
                self.ros.get_logger().debug(f"announcement failed: {exc}")

    def describe(self) -> MocapSystemInfo:
        node = self.node
        info = MocapSystemInfo()
        info.type = node.adapter_class.system_type
        info.frame_id = node.value("frame_id")
        info.frame_rate = float(node.adapter.nominal_rate) if node.adapter is not None else 0.0
        self.announced_rate = info.frame_rate
        info.state.id = node.state_id
        info.state.label = STATE_LABELS.get(node.state_id, "unknown")
        topics, types = [], []
        for topic, _, type_name in DATA_TOPICS:
            if node.value(f"publish_{topic}"):
                topics.append(self.ros.resolve_topic_name(topic))
                types.append(type_name)
        if node.value("publish_tf"):
            topics.append("/tf")
            types.append("tf2_msgs/msg/TFMessage")
        topics.append("/diagnostics")
        types.append("diagnostic_msgs/msg/DiagnosticArray")
        info.topics = topics
        info.topic_types = types
        return info

    def start(self, session_id: str) -> Outcome:
        node = self.node
        with node.transition_lock, node.log_route.active():
            state = "active"
            if node.state_id == State.PRIMARY_STATE_ACTIVE:
                state = "already active"
            elif node.state_id == State.PRIMARY_STATE_FINALIZED:
                return Outcome(False, "the system is shut down")
            else:
                unconfigured = node.state_id == State.PRIMARY_STATE_UNCONFIGURED
                if unconfigured and node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                    return Outcome(False, "configure failed (see the system's log)")
                if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
                    return Outcome(False, "activate failed (see the system's log)")
            try:  # a system streaming already still joins the session (its vendor recording)
                note = node.configured_adapter().session_started(session_id)
            except Exception as exc:  # the vendor refused: the ack says so in its words
                self.ros.get_logger().error(f"session {session_id!r}: {exc}")
                return Outcome(False, f"{state}, but {exc}")
            return Outcome(True, state + (f"; {note}" if note else ""))

    def stop(self) -> Outcome:
        node = self.node
        with node.transition_lock, node.log_route.active():
            if node.state_id == State.PRIMARY_STATE_ACTIVE:
                problem, note = "", ""
                try:
                    note = node.configured_adapter().session_stopped(self.member.session_id)
                except Exception as exc:  # still deactivate: the user asked to stop
                    self.ros.get_logger().error(f"session {self.member.session_id!r}: {exc}")
                    problem = str(exc)
                if node.trigger_deactivate() != TransitionCallbackReturn.SUCCESS:
                    return Outcome(False, "deactivate failed" + (f"; {problem}" if problem else ""))
                if problem:
                    return Outcome(False, f"inactive, but {problem}")
                return Outcome(True, "inactive" + (f"; {note}" if note else ""))
            if node.state_id == State.PRIMARY_STATE_FINALIZED:
                return Outcome(False, "the system is shut down")
            return Outcome(True, f"already {STATE_LABELS.get(node.state_id, 'stopped')}")
