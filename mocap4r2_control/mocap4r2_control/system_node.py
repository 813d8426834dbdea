"""MocapSystemNode: everything ROS about a mocap system, written once for every vendor.

A vendor contributes a :class:`~mocap4r2_control.adapter.MocapAdapter`; this lifecycle
node owns its parameters, the lifecycle (configure connects, activate starts the reader
thread, deactivate joins it, cleanup disconnects, shutdown releases everything from any
state), stamps, publishing of markers / rigid_bodies / skeletons with one header and
frame number per frame, /tf, /diagnostics and the control plane.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from lifecycle_msgs.msg import State
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter

from .adapter import ConfigurationError, MocapAdapter
from .bodies_pass import load as load_bodies_pass
from .clock_model import TIME_SOURCES
from .diagnostics import FrameStatistics
from .frame import AssetNames
from .frame_output import FrameOutput
from .frame_reader import FrameReader
from .markers_pass import load as load_markers_pass
from .parameters import (
    ParameterSpec,
    check_parameters,
    declare_parameters,
    parameter_value,
    warn_unknown_parameters,
)
from .pass_through import NOT_OFFERED
from .ros_logging import NodeLogRoute
from .service_offers import ServiceOffers
from .spin import run_node
from .system_control import SystemControl
from .system_diagnostics import SystemDiagnostics
from .topic_inputs import TopicSubscriptions

__all__ = ["BASE_PARAMETERS", "MocapSystemNode", "run_system"]


def _valid_frame_id(value: str) -> str | None:
    if not value or value.startswith("/") or " " in value:
        return f"frame_id must be a non-empty tf frame name without a leading '/' or spaces, got {value!r}"
    return None


def _valid_prefix(value: str) -> str | None:
    if value.startswith("/") or " " in value:
        return f"tf_prefix must not start with '/' or contain spaces, got {value!r}"
    return None


BASE_PARAMETERS: tuple[ParameterSpec, ...] = (
    ParameterSpec(
        "frame_id",
        "world",
        "Frame of the published data (header.frame_id and /tf parent).",
        check=_valid_frame_id,
    ),
    ParameterSpec(
        "publish_tf", False, "Publish frame_id -> tf_prefix + body name on /tf for every tracked body."
    ),
    ParameterSpec("tf_prefix", "", "Prefix of the /tf child frame of each body.", check=_valid_prefix),
    ParameterSpec("publish_markers", True, "Publish the markers topic."),
    ParameterSpec("publish_rigid_bodies", True, "Publish the rigid_bodies topic."),
    ParameterSpec("publish_skeletons", True, "Publish the skeletons topic."),
    ParameterSpec("rigid_body_markers", True, "Include each body's markers in rigid_bodies."),
    ParameterSpec("autostart", False, "Configure and activate at start-up, without a lifecycle manager."),
    ParameterSpec(
        "read_timeout",
        0.1,
        "Longest a read may block, s (bounds the reaction to deactivate).",
        min_value=0.001,
        max_value=5.0,
    ),
    ParameterSpec(
        "diagnostics_period", 1.0, "Period of /diagnostics reports, s.", min_value=0.05, max_value=60.0
    ),
    ParameterSpec(
        "no_frame_error",
        1.0,
        "Seconds without a frame, while active, that make diagnostics ERROR.",
        min_value=0.01,
        max_value=600.0,
    ),
    ParameterSpec(
        "qos_reliable", True, "Reliable data topics (false: best effort, for lossy Wi-Fi consumers)."
    ),
    ParameterSpec("qos_depth", 10, "History depth of the data topics.", min_value=1, max_value=10000),
    ParameterSpec(
        "time_source",
        "auto",
        "How frames are stamped: auto (the clock model where the system hands its own clock, "
        "arrival elsewhere), system (the clock model) or arrival (arrival minus the reported latency).",
        choices=TIME_SOURCES,
    ),
)


class MocapSystemNode(LifecycleNode):
    """A mocap system as an rclpy lifecycle node, around one vendor adapter.

    The node owns the parameters and the lifecycle; what it sends is a
    :class:`~mocap4r2_control.frame_output.FrameOutput` fed by a
    :class:`~mocap4r2_control.frame_reader.FrameReader` thread, its control-plane answers
    are a :class:`~mocap4r2_control.system_control.SystemControl` and its /diagnostics a
    :class:`~mocap4r2_control.system_diagnostics.SystemDiagnostics`.
    """

    def __init__(self, adapter_class: type[MocapAdapter], node_name: str, **kwargs: Any):
        super().__init__(node_name, **kwargs)
        self.adapter_class = adapter_class
        self.adapter: MocapAdapter | None = None
        self.asset_names = AssetNames()
        self._specs: dict[str, ParameterSpec] = {}
        self._declare(BASE_PARAMETERS)
        self._declare(adapter_class.parameters)
        warn_unknown_parameters(self)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        # adapters' and clients' Python log records, under this node's name
        self.log_route = NodeLogRoute(self.get_logger())
        # the encoder's compiled passes are loaded (0.6 s from numba's cache, 1-2 s each to
        # compile) before the node is up, never in configure: there, after connect, a
        # vendor's socket would queue that long of frames, published late on activate
        # (optitrack's first report read 0.5-1 s of latency); a system whose frames never
        # hold markers does without the markers pass
        load_bodies_pass()
        if adapter_class.frames_have_markers:
            load_markers_pass()

        self._state_id = State.PRIMARY_STATE_UNCONFIGURED
        self._config: dict[str, Any] = {}
        self.stats = FrameStatistics()
        self.output = FrameOutput(self, self.stats, self.value("time_source"))
        self.reader = FrameReader(self, self.stats, self.log_route.enter)
        # the adapter's topic inputs, subscribed on this node from configure to cleanup
        self.inputs = TopicSubscriptions(self)
        # and the services it offers, on this node over the same span
        self.offers = ServiceOffers(self, self.log_route.wrap)
        self.transition_lock = threading.RLock()

        self.diagnostics = SystemDiagnostics(self, self, self.value("diagnostics_period"))
        self.answers = SystemControl(self, self)
        self.control = self.answers.member
        self.control.announce()
        if self.value("autostart"):
            self._autostart_timer = self.create_timer(0.0, self._autostart)
        self.get_logger().info(f"{adapter_class.system_type} system ready (unconfigured)")

    # ================================================================ parameters
    def _declare(self, specs: Sequence[ParameterSpec]) -> None:
        self._specs.update(declare_parameters(self, specs))

    def _on_set_parameters(self, params: list[Parameter[Any]]) -> SetParametersResult:
        result = check_parameters(self._specs, params, self.get_logger())
        adapter = self.adapter
        taken: set[str] = set()
        if result.successful and adapter is not None:
            own = {spec.name for spec in self.adapter_class.parameters}
            values = {p.name: p.value for p in params if p.name in own}
            if values:
                taken = set(adapter.parameters_changed(values))
        if result.successful and self._state_id == State.PRIMARY_STATE_ACTIVE:
            changed = ", ".join(p.name for p in params if p.name in self._specs and p.name not in taken)
            if changed:
                self.get_logger().info(f"{changed} changed; applies at the next configure")
        return result

    def value(self, name: str) -> Any:
        return parameter_value(self, self._specs[name])

    def _values(self, specs: Sequence[ParameterSpec]) -> dict[str, Any]:
        return {spec.name: self.value(spec.name) for spec in specs}

    # ================================================================ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.transition_lock, self.log_route.active():
            log = self.get_logger()
            self._config = self._values(BASE_PARAMETERS)
            try:
                adapter = self.adapter_class.from_parameters(self._values(self.adapter_class.parameters))
            except Exception as exc:  # bad combination of parameters
                log.error(f"configure failed: {exc}")
                self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
                return TransitionCallbackReturn.FAILURE
            try:
                self.inputs.open(adapter.topic_inputs())
                self.offers.open(adapter.service_offers())
                names = adapter.connect()
                # what connect learnt may name more (the simulated scene's arms)
                self.inputs.add(adapter.topic_inputs())
                self.offers.add(adapter.service_offers())
            except Exception as exc:
                cause = "" if isinstance(exc, ConfigurationError) else "cannot connect: "
                log.error(f"configure failed: {cause}{exc}")
                self.inputs.close()
                self.offers.close()
                _quietly(adapter.disconnect)
                self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
                return TransitionCallbackReturn.FAILURE
            self.adapter = adapter
            self.asset_names = names if isinstance(names, AssetNames) else AssetNames()
            self.output.open(self._config, compiled_markers=self.adapter_class.frames_have_markers)
            self._decide_pass_through(adapter)
            log.info(
                f"configured: {len(self.asset_names.rigid_bodies)} rigid bodies, "
                f"{len(self.asset_names.markers)} markers, {len(self.asset_names.skeletons)} skeletons"
                + (
                    f" ({', '.join(self.asset_names.rigid_bodies[:8])}"
                    f"{'...' if len(self.asset_names.rigid_bodies) > 8 else ''})"
                    if self.asset_names.rigid_bodies
                    else ""
                )
            )
            self._announce_state(State.PRIMARY_STATE_INACTIVE)
            return TransitionCallbackReturn.SUCCESS

    def _decide_pass_through(self, adapter: MocapAdapter) -> None:
        """Whether the adapter's frames carry their recorded messages, for the node to
        publish as they are: the node's own output parameters decide (pass_through.py)."""
        problem = self.output.pass_through.decide(self._config, adapter)
        if problem != NOT_OFFERED:
            self.get_logger().info(
                "the recorded messages are published as they are"
                if not problem
                else f"every frame is encoded ({problem})"
            )

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.transition_lock, self.log_route.active():
            try:
                self.configured_adapter().start_streaming()
            except Exception as exc:
                self.get_logger().error(f"activate failed: cannot start streaming: {exc}")
                self._announce_state(State.PRIMARY_STATE_INACTIVE)
                return TransitionCallbackReturn.FAILURE
            self.stats.activated()
            self.reader.start(self.configured_adapter(), self._config["read_timeout"], self.output.publish)
            self.get_logger().info("activated: streaming")
            self._announce_state(State.PRIMARY_STATE_ACTIVE)
            return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.transition_lock, self.log_route.active():
            self._stop_reader()
            if self.adapter is not None:
                _quietly(self.adapter.stop_streaming, self.get_logger())
            self.get_logger().info("deactivated")
            self._announce_state(State.PRIMARY_STATE_INACTIVE)
            return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.transition_lock, self.log_route.active():
            self._release()
            self.get_logger().info("cleaned up: disconnected")
            self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
            return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.transition_lock, self.log_route.active():
            self._release()
            self._announce_state(State.PRIMARY_STATE_FINALIZED)
            return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.transition_lock, self.log_route.active():
            self.get_logger().error(f"error while in {state.label}: releasing the connection")
            self._release()
            self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
            return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        """Stop the reader, unsubscribe the inputs, withdraw the services, disconnect, drop
        outputs; safe in any state, and twice."""
        self._stop_reader()
        self.inputs.close()
        self.offers.close()
        if self.adapter is not None:
            _quietly(self.adapter.stop_streaming, self.get_logger())
            _quietly(self.adapter.disconnect, self.get_logger())
            self.adapter = None
        self.output.close()

    def _stop_reader(self) -> None:
        self.reader.stop(join_timeout=max(5.0, 10 * self._config.get("read_timeout", 0.1)))

    def configured_adapter(self) -> MocapAdapter:
        """The adapter, which exists from configure to cleanup; used before that is a bug."""
        if self.adapter is None:
            raise RuntimeError("no adapter: the system is not configured")
        return self.adapter

    @property
    def state_id(self) -> int:
        return int(self._state_id)

    def _announce_state(self, state_id: int) -> None:
        self._state_id = state_id
        try:
            self.control.announce(last=state_id == State.PRIMARY_STATE_FINALIZED)
        except Exception as exc:  # noqa: BLE001 - shutting down
            self.get_logger().debug(f"announcement failed: {exc}")

    def _autostart(self) -> None:
        self.destroy_timer(self._autostart_timer)
        outcome = self.answers.start("")
        if not outcome.success:
            self.get_logger().error(f"autostart: {outcome.message}")

    def finish(self) -> None:
        """Leave for good: release everything and announce the finalized state."""
        if self._state_id != State.PRIMARY_STATE_FINALIZED:
            with self.log_route.active():
                self._release()
            self._announce_state(State.PRIMARY_STATE_FINALIZED)

    def create_subscription(
        self, msg_type: Any, topic: str, callback: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """A subscription whose callback logs under this node, also those of the adapter's
        topic inputs (the route does not exist yet while Node.__init__ subscribes to /clock)."""
        route = getattr(self, "log_route", None)
        if route is not None:
            callback = route.wrap(callback)
        return super().create_subscription(msg_type, topic, callback, *args, **kwargs)

    def destroy_node(self) -> None:
        with self.log_route.active():
            self._release()
        self.log_route.close()
        super().destroy_node()


def _quietly(call: Callable[[], object], logger: Any = None) -> None:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - releasing must go on
        if logger is not None:
            logger.warning(f"{getattr(call, '__name__', 'release')} failed: {exc}")


def run_system(
    adapter_class: type[MocapAdapter], node_name: str, args: list[str] | None = None, threads: int = 1
) -> int:
    """The whole main() of a system executable: spin until Ctrl-C or SIGTERM, then
    release the system (reader thread, connection) whatever state it is in and tell the
    control plane it is finalized. One executor thread by default: frames are published
    by the reader thread, and the executor's callbacks (control requests, lifecycle
    services, the diagnostics timer) share the node's mutually exclusive default group
    anyway. An adapter fed by subscriptions on this node that must receive while a
    transition waits (configure waiting for the first message of a topic input, which
    the node subscribes in a callback group of their own) needs ``threads=2``."""
    return run_node(
        lambda: MocapSystemNode(adapter_class, node_name), MocapSystemNode.finish, args, threads=threads
    )
