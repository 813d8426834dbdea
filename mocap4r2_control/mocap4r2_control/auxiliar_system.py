"""AuxiliarSystem: lets a recorder that is not a mocap system (EMG, force plate, video)
take part in capture sessions on the control plane.

It announces itself on /mocap4r2/systems with the topics given as parameters and
answers START / STOP like any mocap system. A recorder can either watch this node's
lifecycle state (active = recording) or expose std_srvs/Trigger services that this node
calls on START and STOP (parameters ``start_service`` / ``stop_service``); the ack then
reports whether the recorder really started.
"""

from __future__ import annotations

import threading
from typing import Any

import rclpy
from lifecycle_msgs.msg import State
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.client import Client
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from std_srvs.srv import Trigger

from mocap4r2_interfaces.msg import MocapSystemInfo

from .control_plane import STATE_LABELS, ControlPlaneMember, Outcome
from .parameters import warn_unknown_parameters
from .spin import run_node

_PARAMETERS = (
    ("type", "auxiliar", "Kind of recorder announced (e.g. 'emg', 'force_plate')."),
    ("frame_id", "", "Frame of the recorder's data, if any."),
    ("frame_rate", 0.0, "Nominal sample rate in Hz, 0 if unknown."),
    ("topics", [""], "Fully qualified topics the recorder publishes."),
    ("topic_types", [""], "Types of those topics (same length as topics)."),
    ("start_service", "", "std_srvs/Trigger service called on START (empty: none)."),
    ("stop_service", "", "std_srvs/Trigger service called on STOP (empty: none)."),
    ("service_timeout", 5.0, "Seconds to wait for the recorder's service."),
    ("autostart", False, "Configure and activate at start-up."),
)


class AuxiliarSystem(LifecycleNode):
    """A lifecycle node that takes part in the control plane like a mocap system without producing frames: it
    announces itself and answers START/STOP, so tools such as a recorder start and stop with the systems."""

    def __init__(self, node_name: str = "auxiliar_system", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        for name, default, description in _PARAMETERS:
            try:
                self.declare_parameter(name, default, ParameterDescriptor(description=description))
            except Exception as exc:  # wrong type from the command line or a launch file
                self.get_logger().error(f"parameter {name}: {exc}; using the default {default!r}")
                self.declare_parameter(
                    name, default, ParameterDescriptor(description=description), ignore_override=True
                )
        warn_unknown_parameters(self)
        self.add_on_set_parameters_callback(self._check_parameters)
        problem = self._topics_problem(self._value("topics"), self._value("topic_types"))
        if problem:
            self.get_logger().error(f"{problem}; announcing no topics")
            self.set_parameters(
                [
                    rclpy.parameter.Parameter("topics", value=[""]),
                    rclpy.parameter.Parameter("topic_types", value=[""]),
                ]
            )
        self._state_id: int = State.PRIMARY_STATE_UNCONFIGURED
        self._lock = threading.RLock()
        self._clients_group = ReentrantCallbackGroup()
        self.control = ControlPlaneMember(
            self, start=self._on_start, stop=self._on_stop, describe=self._describe
        )
        self.control.announce()
        if self._value("autostart"):
            self._autostart_timer = self.create_timer(0.0, self._autostart)

    def _value(self, name: str) -> Any:
        return self.get_parameter(name).value

    @staticmethod
    def _topics_problem(topics: list[str], types: list[str]) -> str | None:
        topics = [t for t in topics if t]
        types = [t for t in types if t]
        if len(topics) != len(types):
            return f"topics ({len(topics)}) and topic_types ({len(types)}) must have the same length"
        bad = [t for t in topics if not t.startswith("/")]
        if bad:
            return f"topics must be fully qualified (start with '/'): {bad}"
        return None

    def _check_parameters(self, params: list[Parameter[Any]]) -> SetParametersResult:
        values = {p.name: p.value for p in params}
        if "topics" in values or "topic_types" in values:
            problem = self._topics_problem(
                values.get("topics", self._value("topics")),
                values.get("topic_types", self._value("topic_types")),
            )
            if problem:
                return SetParametersResult(successful=False, reason=problem)
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ lifecycle
    def _transition(self, state_id: int) -> TransitionCallbackReturn:
        self._state_id = state_id
        self.control.announce(last=state_id == State.PRIMARY_STATE_FINALIZED)
        return TransitionCallbackReturn.SUCCESS

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(State.PRIMARY_STATE_INACTIVE)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(State.PRIMARY_STATE_ACTIVE)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(State.PRIMARY_STATE_INACTIVE)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(State.PRIMARY_STATE_UNCONFIGURED)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(State.PRIMARY_STATE_FINALIZED)

    @property
    def state_id(self) -> int:
        return self._state_id

    # ------------------------------------------------------------------ control plane
    def _describe(self) -> MocapSystemInfo:
        info = MocapSystemInfo()
        info.type = self._value("type")
        info.frame_id = self._value("frame_id")
        info.frame_rate = float(self._value("frame_rate"))
        info.state.id = self._state_id
        info.state.label = STATE_LABELS.get(self._state_id, "unknown")
        info.topics = [t for t in self._value("topics") if t]
        info.topic_types = [t for t in self._value("topic_types") if t]
        return info

    def _call_recorder(self, service: str) -> Outcome | None:
        """Call the recorder's Trigger service; None when none is configured."""
        if not service:
            return None
        timeout = float(self._value("service_timeout"))
        client: Client[Trigger.Request, Trigger.Response] = self.create_client(
            Trigger, service, callback_group=self._clients_group
        )
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                return Outcome(False, f"recorder service {service} is not available")
            future = client.call_async(Trigger.Request())
            done = threading.Event()
            future.add_done_callback(lambda _: done.set())
            if not done.wait(timeout):
                return Outcome(False, f"recorder service {service} did not answer within {timeout} s")
            result = future.result()
            if result is None:  # the call was cancelled (the node is shutting down)
                return Outcome(False, f"recorder service {service} gave no answer")
            return Outcome(bool(result.success), str(result.message))
        finally:
            self.destroy_client(client)

    def _on_start(self, session_id: str) -> Outcome:
        with self._lock:
            if self._state_id == State.PRIMARY_STATE_FINALIZED:
                return Outcome(False, "the system is shut down")
            if self._state_id == State.PRIMARY_STATE_ACTIVE:
                return Outcome(True, "already active")
            recorder = self._call_recorder(self._value("start_service"))
            if recorder is not None and not recorder.success:
                return Outcome(False, f"recorder did not start: {recorder.message}")
            if self._state_id == State.PRIMARY_STATE_UNCONFIGURED:
                self.trigger_configure()
            self.trigger_activate()
            return Outcome(True, recorder.message if recorder else "active")

    def _on_stop(self) -> Outcome:
        with self._lock:
            if self._state_id == State.PRIMARY_STATE_FINALIZED:
                return Outcome(False, "the system is shut down")
            if self._state_id != State.PRIMARY_STATE_ACTIVE:
                return Outcome(True, f"already {STATE_LABELS.get(self._state_id)}")
            recorder = self._call_recorder(self._value("stop_service"))
            self.trigger_deactivate()
            if recorder is not None and not recorder.success:
                return Outcome(False, f"recorder did not stop cleanly: {recorder.message}")
            return Outcome(True, recorder.message if recorder else "inactive")

    def _autostart(self) -> None:
        self.destroy_timer(self._autostart_timer)
        outcome = self._on_start("")
        if not outcome.success:
            self.get_logger().error(f"autostart: {outcome.message}")

    def finish(self) -> None:
        """Leave for good: tell the control plane this recorder is gone."""
        if self._state_id != State.PRIMARY_STATE_FINALIZED:
            self._transition(State.PRIMARY_STATE_FINALIZED)


def main(args: list[str] | None = None) -> int:
    """Entry point of the ``auxiliar_system`` executable; returns the process exit status."""
    # two threads: a START/STOP handler waits for the recorder's Trigger service, whose
    # answer is delivered by the executor (its client is in a reentrant callback group)
    return run_node(AuxiliarSystem, AuxiliarSystem.finish, args, threads=2)


if __name__ == "__main__":
    raise SystemExit(main())
