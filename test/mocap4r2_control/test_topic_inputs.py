"""Topic inputs: an adapter declares the ROS topics it reads as data (TopicInput) and the
system node subscribes on itself, from configure to cleanup (topic_inputs.py).

A toy adapter here declares a std_msgs/String input and, like gazebo_system, waits in
``connect`` for the first message. The node is a real MocapSystemNode configured through
its lifecycle service, over real DDS, so configure occupies the node's default callback
group while the input must still be delivered; the graph (count_subscribers,
get_subscription_count) shows the subscription and shows it gone after cleanup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State
from rcl_interfaces.msg import Log
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_control.adapter import AdapterError, MocapAdapter, TopicInput
from mocap4r2_control.executors import PatientMultiThreadedExecutor
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.system_node import MocapSystemNode

NAMESPACE = "/topic_inputs_test"
ROSOUT_QOS = QoSProfile(
    depth=1000, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


class InputAdapter(MocapAdapter):
    """Reads ``poke`` (relative: the node's namespace and remappings apply) and waits in
    connect for its first message, as gazebo_system waits for the first poses."""

    system_type = "topic_input_test"
    declared: ClassVar[tuple[tuple[str, str], ...]] = (("poke", "std_msgs/msg/String"),)
    made: ClassVar[list[InputAdapter]] = []

    def __init__(self) -> None:
        self.received: list[tuple[str, str, str]] = []  # (declared topic, data, thread)
        self.first = threading.Event()
        self.disconnects = 0
        InputAdapter.made.append(self)

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> InputAdapter:
        return cls()

    def topic_inputs(self) -> Sequence[TopicInput]:
        return tuple(TopicInput(topic, kind, 10, False, self._deliver) for topic, kind in self.declared)

    def _deliver(self, topic: str, msg: object) -> None:
        assert isinstance(msg, String)
        self.received.append((topic, msg.data, threading.current_thread().name))
        self.first.set()

    def connect(self) -> AssetNames:
        if not self.first.wait(WAIT):
            raise AdapterError("no message on poke")
        return AssetNames()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        time.sleep(timeout)
        return None

    def disconnect(self) -> None:
        self.disconnects += 1


def test_declared_input_is_subscribed_on_the_node_and_gone_after_cleanup(ros):
    InputAdapter.made.clear()
    name = "inputs_node"
    node = MocapSystemNode(
        InputAdapter,
        name,
        namespace=NAMESPACE,
        context=ros.context,
        cli_args=["--ros-args", "-r", "poke:=poked"],  # a remapping applies to the input
    )
    topic = f"{NAMESPACE}/poked"
    executor = PatientMultiThreadedExecutor(num_threads=2, context=ros.context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    publisher = ros.publisher(topic, String, 10)
    stop = threading.Event()

    def publish() -> None:
        i = 0
        while not stop.is_set():
            publisher.publish(String(data=f"poke {i}"))
            i += 1
            stop.wait(0.05)

    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    try:
        assert ros.node.count_subscribers(topic) == 0, "nothing subscribes before configure"
        # through the lifecycle service: configure runs on the executor, in the node's
        # default group, and waits in connect for a message delivered in the inputs' group
        assert ros.change_state(f"{NAMESPACE}/{name}", "configure")
        (adapter,) = InputAdapter.made
        assert adapter.received, "connect returned after the first message"
        assert {t for t, _, _ in adapter.received} == {"poke"}, "handed over with the declared topic"
        assert all(data.startswith("poke ") for _, data, _ in adapter.received)
        assert [s.topic_name for s in node.subscriptions if s.topic_name == topic] == [topic]
        wait_for(lambda: ros.node.count_subscribers(topic) == 1, WAIT, what=f"one subscriber on {topic}")
        wait_for(lambda: publisher.get_subscription_count() == 1, WAIT, what="our publisher matched")
        count = len(adapter.received)
        wait_for(
            lambda: len(adapter.received) > count + 3, WAIT, what="messages keep coming while configured"
        )

        assert ros.change_state(f"{NAMESPACE}/{name}", "cleanup")
        assert adapter.disconnects == 1
        assert not [s for s in node.subscriptions if s.topic_name == topic]
        wait_for(lambda: ros.node.count_subscribers(topic) == 0, WAIT, what=f"no subscriber on {topic}")
        wait_for(lambda: publisher.get_subscription_count() == 0, WAIT, what="our publisher unmatched")
        # and a second configure subscribes again (a new adapter, a new subscription)
        assert ros.change_state(f"{NAMESPACE}/{name}", "configure")
        assert len(InputAdapter.made) == 2 and InputAdapter.made[1].received
        wait_for(lambda: ros.node.count_subscribers(topic) == 1, WAIT, what="subscribed again")
        assert ros.change_state(f"{NAMESPACE}/{name}", "shutdown")
        wait_for(lambda: ros.node.count_subscribers(topic) == 0, WAIT, what="none after shutdown")
    finally:
        stop.set()
        sender.join(WAIT)
        ros.node.destroy_publisher(publisher)
        executor.shutdown(timeout_sec=WAIT)
        spinner.join(WAIT)
        node.destroy_node()


@pytest.mark.parametrize(
    ("topic", "type_name", "reason"),
    [
        (
            "poke",
            "std_msgs/msg/NoSuchMessage",
            "message type 'std_msgs/msg/NoSuchMessage': std_msgs.msg has no message 'NoSuchMessage'",
        ),
        (
            "poke",
            "no_such_package/msg/Thing",
            "message type 'no_such_package/msg/Thing': package 'no_such_package' not found",
        ),
        ("poke", "TFMessage", "message type 'TFMessage' is not of the form 'package/msg/Name'"),
        ("poke", "std_msgs/srv/String", "is not of the form 'package/msg/Name'"),
        ("bad topic!", "std_msgs/msg/String", "cannot subscribe to 'bad topic!' (std_msgs/msg/String): "),
    ],
    ids=["unknown_message", "unknown_package", "no_package", "not_a_message", "bad_topic"],
)
def test_an_input_that_cannot_be_subscribed_fails_configure_with_the_reason(ros, topic, type_name, reason):
    """The first, good input is declared before the bad one: nothing is left subscribed,
    connect is never called, the adapter is released, and the node lives on."""
    InputAdapter.made.clear()
    rosout = ros.subscribe("/rosout", Log, ROSOUT_QOS)
    name = f"inputs_bad_{abs(hash((topic, type_name))) % 10**6}"

    class BadInput(InputAdapter):
        declared = (("first", "std_msgs/msg/String"), (topic, type_name))

        def connect(self) -> AssetNames:
            raise AssertionError("connect must not be called when an input cannot be subscribed")

    node = MocapSystemNode(BadInput, name, namespace=NAMESPACE, context=ros.context)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.state_id == State.PRIMARY_STATE_UNCONFIGURED
        assert node.adapter is None and InputAdapter.made[0].disconnects == 1
        assert not [s for s in node.subscriptions if s.topic_name.startswith(NAMESPACE)], [
            s.topic_name for s in node.subscriptions
        ]
        line = rosout.wait_for(
            lambda entry: entry.name == f"{NAMESPACE[1:]}.{name}" and "configure failed" in entry.msg, WAIT
        )
        assert line.msg.startswith("configure failed: ") and reason in line.msg, line.msg
        assert "cannot connect" not in line.msg, "a configuration error, not a failure to connect"
    finally:
        node.destroy_node()


class Refusing(InputAdapter):
    """Raises on every message saying "boom", as an adapter whose conversion meets a
    message it cannot take."""

    def _deliver(self, topic: str, msg: object) -> None:
        assert isinstance(msg, String)
        if msg.data.endswith("boom"):
            raise ValueError(f"cannot take {msg.data!r}")
        super()._deliver(topic, msg)


def test_a_message_deliver_raises_on_is_dropped_counted_and_the_node_lives_on(ros):
    """An exception out of a subscription callback would end the executor's spin (and the
    node's process with it): the node drops that message, logs it once per topic and
    counts it in /diagnostics, and the next messages are delivered."""
    InputAdapter.made.clear()
    name = "inputs_refusing"
    rosout = ros.subscribe("/rosout", Log, ROSOUT_QOS)
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray)
    node = MocapSystemNode(
        Refusing,
        name,
        namespace=NAMESPACE,
        context=ros.context,
        parameter_overrides=[Parameter("diagnostics_period", value=0.2)],
    )
    topic = f"{NAMESPACE}/poke"
    executor = PatientMultiThreadedExecutor(num_threads=2, context=ros.context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    publisher = ros.publisher(topic, String, 10)
    stop = threading.Event()

    def publish() -> None:
        i = 0
        while not stop.is_set():
            boom = i % 2 == 1
            publisher.publish(String(data=f"poke {i}" + (" boom" if boom else "")))
            i += 1
            stop.wait(0.05)

    sender = threading.Thread(target=publish, daemon=True)
    sender.start()
    try:
        assert ros.change_state(f"{NAMESPACE}/{name}", "configure")
        (adapter,) = InputAdapter.made
        wait_for(lambda: len(adapter.received) >= 5, WAIT, what="the good messages after the bad ones")
        assert spinner.is_alive(), "the executor still spins"
        assert all(not data.endswith("boom") for _, data, _ in adapter.received)

        def errors_reported() -> int:
            for array in diagnostics.snapshot():
                for status in array.status:
                    if status.hardware_id == f"{NAMESPACE}/{name}":
                        values = {kv.key: kv.value for kv in status.values}
                        if int(values.get("topic_input_errors", "0")) >= 3:
                            return int(values["topic_input_errors"])
            return 0

        wait_for(errors_reported, WAIT, what="topic_input_errors on /diagnostics")
        dropped = [
            entry.msg
            for entry in rosout.snapshot()
            if entry.name == f"{NAMESPACE[1:]}.{name}" and "dropping a message" in entry.msg
        ]
        assert len(dropped) == 1 and "on poke" in dropped[0] and "cannot take" in dropped[0], dropped
        assert ros.change_state(f"{NAMESPACE}/{name}", "cleanup")
    finally:
        stop.set()
        sender.join(WAIT)
        ros.node.destroy_publisher(publisher)
        executor.shutdown(timeout_sec=WAIT)
        spinner.join(WAIT)
        node.destroy_node()
