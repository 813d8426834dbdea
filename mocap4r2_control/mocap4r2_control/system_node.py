"""MocapSystemNode: everything ROS about a mocap system, written once for every vendor.

A vendor contributes a :class:`~mocap4r2_control.adapter.MocapAdapter`; this lifecycle
node owns its parameters, the lifecycle (configure connects, activate starts the reader
thread, deactivate joins it, cleanup disconnects, shutdown releases everything from any
state), stamps, publishing of markers / rigid_bodies / skeletons with one header and
frame number per frame, /tf, /diagnostics and the control plane.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy

from mocap4r2_interfaces.msg import Markers, MocapSystemInfo, RigidBodies, Skeletons

from .adapter import ConfigurationError, MocapAdapter
from .clock_model import TIME_SOURCES, FrameStamper
from .control_plane import STATE_LABELS, ControlPlaneMember, Outcome
from .diagnostics import FrameStatistics, Thresholds
from .frame import AssetNames, MocapFrame
from .frame_encoder import FrameEncoder
from .parameters import (
    ParameterSpec,
    check_parameters,
    declare_parameters,
    parameter_value,
    warn_unknown_parameters,
)
from .ros_logging import NodeLogRoute
from .spin import run_node
from .tf_out import TransformSender
from .timebase import split_seconds, time_msg


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

DATA_TOPICS = (
    ("markers", Markers, "mocap4r2_interfaces/msg/Markers"),
    ("rigid_bodies", RigidBodies, "mocap4r2_interfaces/msg/RigidBodies"),
    ("skeletons", Skeletons, "mocap4r2_interfaces/msg/Skeletons"),
)


class MocapSystemNode(LifecycleNode):
    """A mocap system as an rclpy lifecycle node, around one vendor adapter."""

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

        self._state_id = State.PRIMARY_STATE_UNCONFIGURED
        self._reader: threading.Thread | None = None
        self._stop_reading = threading.Event()
        self._data_publishers: dict[str, Any] = {}
        self._tf: TransformSender | None = None
        self._encoder: FrameEncoder | None = None
        self._stamper = FrameStamper(self.value("time_source"))
        self._config: dict[str, Any] = {}
        self.stats = FrameStatistics()
        self._transition_lock = threading.RLock()

        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diagnostics_timer = self.create_timer(
            self.value("diagnostics_period"), self._publish_diagnostics
        )
        self.control = ControlPlaneMember(self, self._start_requested, self._stop_requested, self._describe)
        self.control.announce()
        if self.value("autostart"):
            self._autostart_timer = self.create_timer(0.0, self._autostart)
        self.get_logger().info(f"{adapter_class.system_type} system ready (unconfigured)")

    # ================================================================ parameters
    def _declare(self, specs: Sequence[ParameterSpec]) -> None:
        self._specs.update(declare_parameters(self, specs))

    def _on_set_parameters(self, params: list[Parameter[Any]]) -> SetParametersResult:
        result = check_parameters(self._specs, params, self.get_logger())
        if result.successful and self._state_id == State.PRIMARY_STATE_ACTIVE:
            changed = ", ".join(p.name for p in params if p.name in self._specs)
            if changed:
                self.get_logger().info(f"{changed} changed; applies at the next configure")
        return result

    def value(self, name: str) -> Any:
        return parameter_value(self, self._specs[name])

    def _values(self, specs: Sequence[ParameterSpec]) -> dict[str, Any]:
        return {spec.name: self.value(spec.name) for spec in specs}

    # ================================================================ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._transition_lock, self.log_route.active():
            log = self.get_logger()
            self._config = self._values(BASE_PARAMETERS)
            try:
                adapter = self.adapter_class.from_parameters(self._values(self.adapter_class.parameters))
            except Exception as exc:  # bad combination of parameters
                log.error(f"configure failed: {exc}")
                self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
                return TransitionCallbackReturn.FAILURE
            try:
                adapter.attach(self)
                names = adapter.connect()
            except Exception as exc:
                cause = "" if isinstance(exc, ConfigurationError) else "cannot connect: "
                log.error(f"configure failed: {cause}{exc}")
                _quietly(adapter.disconnect)
                self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
                return TransitionCallbackReturn.FAILURE
            self.adapter = adapter
            self.asset_names = names if isinstance(names, AssetNames) else AssetNames()
            self._create_outputs()
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

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._transition_lock, self.log_route.active():
            try:
                self._configured_adapter().start_streaming()
            except Exception as exc:
                self.get_logger().error(f"activate failed: cannot start streaming: {exc}")
                self._announce_state(State.PRIMARY_STATE_INACTIVE)
                return TransitionCallbackReturn.FAILURE
            self.stats.activated()
            self._stop_reading.clear()
            self._reader = threading.Thread(target=self._read_loop, name="mocap4r2-reader", daemon=True)
            self._reader.start()
            self.get_logger().info("activated: streaming")
            self._announce_state(State.PRIMARY_STATE_ACTIVE)
            return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._transition_lock, self.log_route.active():
            self._stop_reader()
            if self.adapter is not None:
                _quietly(self.adapter.stop_streaming, self.get_logger())
            self.get_logger().info("deactivated")
            self._announce_state(State.PRIMARY_STATE_INACTIVE)
            return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._transition_lock, self.log_route.active():
            self._release()
            self.get_logger().info("cleaned up: disconnected")
            self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
            return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._transition_lock, self.log_route.active():
            self._release()
            self._announce_state(State.PRIMARY_STATE_FINALIZED)
            return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._transition_lock, self.log_route.active():
            self.get_logger().error(f"error while in {state.label}: releasing the connection")
            self._release()
            self._announce_state(State.PRIMARY_STATE_UNCONFIGURED)
            return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        """Stop the reader, disconnect, drop outputs; safe in any state, and twice."""
        self._stop_reader()
        if self.adapter is not None:
            _quietly(self.adapter.stop_streaming, self.get_logger())
            _quietly(self.adapter.disconnect, self.get_logger())
            self.adapter = None
        self._destroy_outputs()

    def _stop_reader(self) -> None:
        self._stop_reading.set()
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=max(5.0, 10 * self._config.get("read_timeout", 0.1)))
            if reader.is_alive():
                self.get_logger().error("the reader thread did not stop in time (adapter blocked in read)")
        self._reader = None

    def _create_outputs(self) -> None:
        cfg = self._config
        qos = QoSProfile(
            depth=cfg["qos_depth"],
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        for topic, msg_type, _ in DATA_TOPICS:
            if cfg[f"publish_{topic}"]:
                self._data_publishers[topic] = self.create_publisher(msg_type, topic, qos)
        self._tf = TransformSender(self) if cfg["publish_tf"] else None
        self._encoder = FrameEncoder(
            cfg["frame_id"],
            cfg["tf_prefix"],
            markers=cfg["publish_markers"],
            rigid_bodies=cfg["publish_rigid_bodies"],
            body_markers=cfg["rigid_body_markers"],
            skeletons=cfg["publish_skeletons"],
            tf=cfg["publish_tf"],
        )
        self.stats.thresholds = Thresholds(no_frame_error_s=cfg["no_frame_error"])
        # a new connection may be a new clock: the model starts afresh on every configure
        self._stamper = FrameStamper(cfg["time_source"])

    def _destroy_outputs(self) -> None:
        for pub in self._data_publishers.values():
            self.destroy_publisher(pub)
        self._data_publishers.clear()
        if self._tf is not None:
            self._tf.destroy()
            self._tf = None

    # ================================================================ reading
    def _read_loop(self) -> None:
        """The reader thread: read frames and publish them until told to stop."""
        name_os_thread("mocap4r2-reader")
        self.log_route.enter()
        adapter = self._configured_adapter()
        timeout = self._config["read_timeout"]
        # stamps are on the node's clock: system time, or simulation time with use_sim_time
        clock = self.get_clock()
        now: Callable[[], float] = (
            (lambda: clock.now().nanoseconds * 1e-9)
            if self.get_parameter("use_sim_time").value
            else time.time
        )
        log = self.get_logger()
        failing_since: float | None = None
        while not self._stop_reading.is_set():
            try:
                frame = adapter.read_frame(timeout)
            except Exception as exc:  # noqa: BLE001 - the adapter reconnects, we report
                self.stats.error(f"read failed: {exc}")
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.error(f"reading from the {adapter.system_type} system failed: {exc}")
                self._stop_reading.wait(min(0.5, max(timeout, 0.01)))
                continue
            if frame is None:
                continue
            arrival = now()
            if failing_since is not None:
                log.info(f"frames again after {time.monotonic() - failing_since:.1f} s")
                failing_since = None
            try:
                self.publish_frame(frame, arrival)
            except Exception as exc:  # noqa: BLE001 - a bad frame must not stop the stream
                self.stats.error(f"bad frame {getattr(frame, 'frame_number', '?')}: {exc}", bad_frame=True)
                log.error(f"dropped a bad frame: {exc}", throttle_duration_sec=5.0)

    def publish_frame(self, frame: MocapFrame, arrival: float | None = None) -> None:
        """Publish one frame on every enabled topic with one stamp and frame number."""
        frame.check()
        arrival = time.time() if arrival is None else arrival
        capture = self._stamper.stamp(
            arrival, frame.latency, frame.system_time, frame.capture_time, frame.frame_number
        )
        encoder = self._encoder
        if encoder is None:
            raise RuntimeError("no frame encoder: the system is not configured")
        encoded = encoder.encode(frame, *split_seconds(capture))
        pubs = self._data_publishers
        for topic, data in (
            ("markers", encoded.markers),
            ("rigid_bodies", encoded.rigid_bodies),
            ("skeletons", encoded.skeletons),
        ):
            if data is not None:
                pubs[topic].publish(data)  # serialized CDR, published as is
        if encoded.tf is not None and self._tf is not None:
            self._tf.send_serialized(encoded.tf)
        self.stats.record(
            frame.frame_number, arrival - capture, frame.bodies.ids, frame.bodies.names, encoded.body_valid
        )

    def _configured_adapter(self) -> MocapAdapter:
        """The adapter, which exists from configure to cleanup; used before that is a bug."""
        if self.adapter is None:
            raise RuntimeError("no adapter: the system is not configured")
        return self.adapter

    # ================================================================ control plane
    @property
    def state_id(self) -> int:
        return int(self._state_id)

    def _announce_state(self, state_id: int) -> None:
        self._state_id = state_id
        try:
            self.control.announce(last=state_id == State.PRIMARY_STATE_FINALIZED)
        except Exception as exc:  # noqa: BLE001 - shutting down
            self.get_logger().debug(f"announcement failed: {exc}")

    def _describe(self) -> MocapSystemInfo:
        info = MocapSystemInfo()
        info.type = self.adapter_class.system_type
        info.frame_id = self.value("frame_id")
        info.frame_rate = float(self.adapter.nominal_rate) if self.adapter is not None else 0.0
        info.state.id = self._state_id
        info.state.label = STATE_LABELS.get(self._state_id, "unknown")
        topics, types = [], []
        for topic, _, type_name in DATA_TOPICS:
            if self.value(f"publish_{topic}"):
                topics.append(self.resolve_topic_name(topic))
                types.append(type_name)
        if self.value("publish_tf"):
            topics.append("/tf")
            types.append("tf2_msgs/msg/TFMessage")
        topics.append("/diagnostics")
        types.append("diagnostic_msgs/msg/DiagnosticArray")
        info.topics = topics
        info.topic_types = types
        return info

    def _start_requested(self, session_id: str) -> Outcome:
        with self._transition_lock, self.log_route.active():
            state = "active"
            if self._state_id == State.PRIMARY_STATE_ACTIVE:
                state = "already active"
            elif self._state_id == State.PRIMARY_STATE_FINALIZED:
                return Outcome(False, "the system is shut down")
            else:
                unconfigured = self._state_id == State.PRIMARY_STATE_UNCONFIGURED
                if unconfigured and self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                    return Outcome(False, "configure failed (see the system's log)")
                if self.trigger_activate() != TransitionCallbackReturn.SUCCESS:
                    return Outcome(False, "activate failed (see the system's log)")
            try:  # a system streaming already still joins the session (its vendor recording)
                note = self._configured_adapter().session_started(session_id)
            except Exception as exc:  # the vendor refused: the ack says so in its words
                self.get_logger().error(f"session {session_id!r}: {exc}")
                return Outcome(False, f"{state}, but {exc}")
            return Outcome(True, state + (f"; {note}" if note else ""))

    def _stop_requested(self) -> Outcome:
        with self._transition_lock, self.log_route.active():
            if self._state_id == State.PRIMARY_STATE_ACTIVE:
                problem, note = "", ""
                try:
                    note = self._configured_adapter().session_stopped(self.control.session_id)
                except Exception as exc:  # still deactivate: the user asked to stop
                    self.get_logger().error(f"session {self.control.session_id!r}: {exc}")
                    problem = str(exc)
                if self.trigger_deactivate() != TransitionCallbackReturn.SUCCESS:
                    return Outcome(False, "deactivate failed" + (f"; {problem}" if problem else ""))
                if problem:
                    return Outcome(False, f"inactive, but {problem}")
                return Outcome(True, "inactive" + (f"; {note}" if note else ""))
            if self._state_id == State.PRIMARY_STATE_FINALIZED:
                return Outcome(False, "the system is shut down")
            return Outcome(True, f"already {STATE_LABELS.get(self._state_id, 'stopped')}")

    def _autostart(self) -> None:
        self.destroy_timer(self._autostart_timer)
        outcome = self._start_requested("")
        if not outcome.success:
            self.get_logger().error(f"autostart: {outcome.message}")

    # ================================================================ diagnostics
    def _publish_diagnostics(self) -> None:
        try:
            with self.log_route.active():
                self._report_diagnostics()
        except Exception as exc:  # noqa: BLE001 - a report must never take the node down
            self.get_logger().error(f"diagnostics report failed: {exc!r}", throttle_duration_sec=10.0)

    def _report_diagnostics(self) -> None:
        try:
            extra = self.adapter.status() if self.adapter is not None else {}
        except Exception as exc:  # noqa: BLE001
            extra = {"adapter_status_error": str(exc)}
        extra = {**extra, **self._stamper.status(), **{k: str(v) for k, v in self.control.counters().items()}}
        status = self.stats.report(
            name=f"{self.get_fully_qualified_name()}: {self.adapter_class.system_type} mocap system",
            hardware_id=self.get_fully_qualified_name(),
            active=self._state_id == State.PRIMARY_STATE_ACTIVE,
            state_label=STATE_LABELS.get(self._state_id, "unknown"),
            nominal_rate=float(self.adapter.nominal_rate) if self.adapter is not None else 0.0,
            extra={k: str(v) for k, v in extra.items()},
        )
        array = DiagnosticArray()
        array.header.stamp = time_msg()
        array.status = [status]
        self._diagnostics_pub.publish(array)

    def finish(self) -> None:
        """Leave for good: release everything and announce the finalized state."""
        if self._state_id != State.PRIMARY_STATE_FINALIZED:
            with self.log_route.active():
                self._release()
            self._announce_state(State.PRIMARY_STATE_FINALIZED)

    def create_subscription(
        self, msg_type: Any, topic: str, callback: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """A subscription whose callback logs under this node, also one an adapter creates in
        attach() (the route does not exist yet while Node.__init__ subscribes to /clock)."""
        route = getattr(self, "log_route", None)
        if route is not None:
            callback = route.wrap(callback)
        return super().create_subscription(msg_type, topic, callback, *args, **kwargs)

    def destroy_node(self) -> None:
        with self.log_route.active():
            self._release()
        self.log_route.close()
        super().destroy_node()


def name_os_thread(name: str) -> None:
    """Give the calling thread a name the OS shows (top -H, /proc/<pid>/task/*/comm),
    so a leaked reader thread can be seen from outside the process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


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
    transition waits (configure waiting for the first message) needs ``threads=2`` and
    its subscriptions in a callback group of their own."""
    return run_node(
        lambda: MocapSystemNode(adapter_class, node_name), MocapSystemNode.finish, args, threads=threads
    )
