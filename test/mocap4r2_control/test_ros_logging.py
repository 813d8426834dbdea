"""Per-node logging: Python `logging` records of adapters and their clients (the
"mocap4r2.*" loggers, since protocol code does not import rclpy) reach /rosout under the
name of the node whose adapter wrote them, also with two systems in one process.

The adapter here logs the way the vendor adapters do (a module-level logger, no node at
hand): from configure (the executor's thread), from the node's reader thread, from its
client's asyncio loop running in a thread of its own (as qualisys/client.py runs
qtm-rt), reached through ``run_coroutine_threadsafe``, and from the delivery of a topic
input it declares (the node subscribes on itself, as for the simulated system's arms).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

from rcl_interfaces.msg import Log
from rclpy.executors import SingleThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for, wait_subscribed

from mocap4r2_control.adapter import MocapAdapter, TopicInput
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import MocapSystemNode

LOG = logging.getLogger("mocap4r2.logtest")
CLIENT_LOG = logging.getLogger("mocap4r2.logtest.client")
NAMESPACE = "/logging_test"
# what rcl publishes /rosout with (rcl/logging_rosout.c): a late reader still gets the lines
ROSOUT_QOS = QoSProfile(
    depth=1000, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


class _LoopClient:
    """A client whose protocol runs on an asyncio loop in a thread of its own."""

    def __init__(self, who: str):
        self.who = who
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="logtest-loop", daemon=True)
        self.thread.start()

    async def _hello(self) -> None:
        CLIENT_LOG.info("client of %s connected", self.who)

    def connect(self) -> None:
        asyncio.run_coroutine_threadsafe(self._hello(), self.loop).result(WAIT)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


class LoggingAdapter(MocapAdapter):
    """Streams nothing; says who it is in every log line (its parameter ``who``, the
    node's name)."""

    system_type = "logtest"
    parameters = (ParameterSpec("who", "?", "The name this adapter logs under."),)

    def __init__(self, *, who: str = "?") -> None:
        self.who = who
        self.client: _LoopClient | None = None
        self.reading_said = False

    def topic_inputs(self) -> Sequence[TopicInput]:
        return (TopicInput("~/say", "std_msgs/msg/String", 10, False, self._heard),)

    def _heard(self, topic: str, msg: object) -> None:
        assert isinstance(msg, String)
        LOG.info("%s heard %s", self.who, msg.data)

    def connect(self) -> AssetNames:
        LOG.info("%s: connecting", self.who)
        self.client = _LoopClient(self.who)
        self.client.connect()
        return AssetNames()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        if not self.reading_said:
            LOG.warning("%s: reading", self.who)
            self.reading_said = True
        time.sleep(timeout)
        return None

    def disconnect(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def _system(ros, adapter: type[LoggingAdapter], name: str) -> MocapSystemNode:
    """A system node whose adapter says ``name`` (the node's own) in its lines."""
    return MocapSystemNode(
        adapter,
        name,
        namespace=NAMESPACE,
        context=ros.context,
        parameter_overrides=[Parameter("who", value=name)],
    )


def _lines_by_logger(rosout) -> dict[str, list[str]]:
    """The test adapters' /rosout lines so far, by the logger that published them."""
    lines: dict[str, list[str]] = {}
    for entry in rosout.snapshot():
        if entry.msg.startswith("[logtest"):
            lines.setdefault(entry.name, []).append(entry.msg)
    return lines


def test_two_systems_in_one_process_log_under_their_own_node_names(ros):
    rosout = ros.subscribe("/rosout", Log, ROSOUT_QOS)
    names = ("system_a", "system_b")
    nodes = [_system(ros, LoggingAdapter, name) for name in names]
    executor = SingleThreadedExecutor(context=ros.context)
    for node in nodes:
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    says = []
    try:
        for node in nodes:
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        for node in nodes:
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        says = [ros.publisher(f"{NAMESPACE}/{name}/say", String) for name in names]
        for say in says:
            wait_subscribed(say)
        expected = {
            f"{NAMESPACE[1:]}.{name}": {
                f"[logtest] {name}: connecting",
                f"[logtest.client] client of {name} connected",
                f"[logtest] {name}: reading",
                f"[logtest] {name} heard hello",
            }
            for name in names
        }

        def all_arrived():
            # again until heard: a volatile message sent before the reader matched is lost
            for say in says:
                say.publish(String(data="hello"))
            lines = _lines_by_logger(rosout)
            return sum(len(set(lines.get(logger, []))) for logger in expected) >= 8

        wait_for(
            all_arrived,
            WAIT,
            lambda: _lines_by_logger(rosout),
            what="four lines from each adapter",
            interval=0.25,
        )
        lines = _lines_by_logger(rosout)
        for logger, wanted in expected.items():
            assert set(lines.get(logger, [])) == wanted, (logger, lines)
    finally:
        for say in says:
            ros.node.destroy_publisher(say)
        for node in nodes:
            node.trigger_deactivate()
        executor.shutdown(timeout_sec=WAIT)
        spinner.join(WAIT)
        for node in nodes:
            node.destroy_node()


def test_a_thread_without_a_route_logs_under_the_only_node(ros):
    """A thread an adapter starts as a plain threading.Thread has no route (it starts
    with an empty context); in a process with one system its records still reach that
    system's log, as they did before routes existed."""
    rosout = ros.subscribe("/rosout", Log, ROSOUT_QOS)
    node = MocapSystemNode(LoggingAdapter, "system_alone", namespace=NAMESPACE, context=ros.context)
    try:
        worker = threading.Thread(target=LOG.error, args=("from a thread of its own",))
        worker.start()
        worker.join(WAIT)
        line = rosout.wait_for(lambda entry: entry.msg == "[logtest] from a thread of its own", WAIT)
        assert line.name == f"{NAMESPACE[1:]}.system_alone"
    finally:
        node.destroy_node()


def test_records_go_back_to_python_logging_once_the_last_node_is_gone(ros, caplog):
    """While a system lives, "mocap4r2.*" records go to its ROS log only; once the last
    one is destroyed they reach Python's own handlers again (an application's, pytest's
    capture), instead of an rclpy logger nobody reads."""
    node = MocapSystemNode(LoggingAdapter, "system_passing", namespace=NAMESPACE, context=ros.context)
    node.destroy_node()
    with caplog.at_level(logging.WARNING, logger="mocap4r2"):
        LOG.warning("after the last node")
    assert [r.getMessage() for r in caplog.records if r.name == LOG.name] == ["after the last node"]


class DebugAdapter(LoggingAdapter):
    """Says who it is at DEBUG from configure, and from a plain thread it starts there."""

    def connect(self) -> AssetNames:
        LOG.debug("%s: debug from configure", self.who)
        worker = threading.Thread(target=LOG.info, args=("%s: from a thread it started", self.who))
        worker.start()
        worker.join(WAIT)
        return AssetNames()


def test_a_nodes_log_level_governs_its_adapters_records_and_their_threads(ros):
    """Two systems in one process, one started at debug level (as --log-level debug would
    set it): its adapter's debug lines reach its log, the other's do not; a plain thread
    each adapter starts logs under its own node, not the process's unrouted logger."""
    from rclpy.logging import LoggingSeverity, set_logger_level

    rosout = ros.subscribe("/rosout", Log, ROSOUT_QOS)
    set_logger_level(f"{NAMESPACE[1:]}.system_debug", LoggingSeverity.DEBUG)
    nodes = [_system(ros, DebugAdapter, name) for name in ("system_debug", "system_info")]
    try:
        for node in nodes:
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        wanted = {
            ("logging_test.system_debug", "[logtest] system_debug: debug from configure"),
            ("logging_test.system_debug", "[logtest] system_debug: from a thread it started"),
            ("logging_test.system_info", "[logtest] system_info: from a thread it started"),
        }

        def arrived() -> set[tuple[str, str]]:
            return {(e.name, e.msg) for e in rosout.snapshot() if e.msg.startswith("[logtest")}

        wait_for(lambda: wanted <= arrived(), WAIT, arrived, what="the three lines")
        assert ("logging_test.system_info", "[logtest] system_info: debug from configure") not in arrived()
    finally:
        for node in nodes:
            node.destroy_node()
