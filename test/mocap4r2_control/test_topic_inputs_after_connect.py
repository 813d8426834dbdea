"""Topic inputs known only once ``connect`` has run, and raw inputs (topic_inputs.py).

The simulated system's arms are read from the scene in ``connect``, so the node asks the
adapter for its inputs again after a successful ``connect`` and subscribes those not yet
subscribed; the marker tracker reads its source's Markers as their CDR bytes
(``TopicInput(raw=True)``). A toy adapter here does both through a real MocapSystemNode
configured by its lifecycle service, over real DDS: the bytes delivered are those rclpy
serializes for the message published, an input declared both times is subscribed once,
and every input is gone after cleanup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lifecycle_msgs.msg import State
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.serialization import serialize_message
from std_msgs.msg import String
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_control.adapter import MocapAdapter, TopicInput
from mocap4r2_control.executors import PatientMultiThreadedExecutor
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.system_node import MocapSystemNode

NAMESPACE = "/topic_inputs_late_test"


class LateAdapter(MocapAdapter):
    """Declares ``early`` (deserialized) always, and ``late`` (raw bytes) once connected."""

    system_type = "topic_input_late_test"
    late_type: ClassVar[str] = "std_msgs/msg/String"
    made: ClassVar[list[LateAdapter]] = []

    def __init__(self) -> None:
        self.connected = False
        self.asked = 0
        self.early: list[object] = []
        self.late: list[object] = []
        self.disconnects = 0
        LateAdapter.made.append(self)

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> LateAdapter:
        return cls()

    def topic_inputs(self) -> Sequence[TopicInput]:
        self.asked += 1
        inputs = [TopicInput("early", "std_msgs/msg/String", 10, False, self._early)]
        if self.connected:
            inputs.append(TopicInput("late", self.late_type, 10, False, self._late, raw=True))
        return inputs

    def _early(self, topic: str, msg: object) -> None:
        self.early.append(msg)

    def _late(self, topic: str, msg: object) -> None:
        self.late.append(msg)

    def connect(self) -> AssetNames:
        self.connected = True
        return AssetNames()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        time.sleep(timeout)
        return None

    def disconnect(self) -> None:
        self.connected = False
        self.disconnects += 1


def _ours(node: MocapSystemNode) -> list[str]:
    return sorted(s.topic_name for s in node.subscriptions if s.topic_name.startswith(NAMESPACE))


def test_an_input_declared_after_connect_is_subscribed_raw_and_released(ros):
    LateAdapter.made.clear()
    name = "late_node"
    node = MocapSystemNode(LateAdapter, name, namespace=NAMESPACE, context=ros.context)
    executor = PatientMultiThreadedExecutor(num_threads=2, context=ros.context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    early_topic, late_topic = f"{NAMESPACE}/early", f"{NAMESPACE}/late"
    early_pub = ros.publisher(early_topic, String, 10)
    late_pub = ros.publisher(late_topic, String, 10)
    try:
        assert ros.change_state(f"{NAMESPACE}/{name}", "configure")
        (adapter,) = LateAdapter.made
        assert adapter.asked == 2, "asked before connect and again after it"
        # early was declared both times and is subscribed once; late only after connect
        assert _ours(node) == [early_topic, late_topic]
        wait_for(lambda: late_pub.get_subscription_count() == 1, WAIT, what="late matched")
        wait_for(lambda: early_pub.get_subscription_count() == 1, WAIT, what="early matched")
        sent = String(data="the bytes, as they were sent")

        def both_delivered() -> bool:
            late_pub.publish(sent)
            early_pub.publish(sent)
            return bool(adapter.late and adapter.early)

        wait_for(both_delivered, WAIT, interval=0.1, what="a message on each input")
        # raw: the serialized message, bytes for bytes (CDR header included)
        assert isinstance(adapter.late[0], bytes) and adapter.late[0] == serialize_message(sent)
        assert isinstance(adapter.early[0], String) and adapter.early[0].data == sent.data

        assert ros.change_state(f"{NAMESPACE}/{name}", "cleanup")
        assert adapter.disconnects == 1 and _ours(node) == []
        wait_for(lambda: ros.node.count_subscribers(late_topic) == 0, WAIT, what="late unsubscribed")
        wait_for(lambda: ros.node.count_subscribers(early_topic) == 0, WAIT, what="early unsubscribed")
    finally:
        ros.node.destroy_publisher(early_pub)
        ros.node.destroy_publisher(late_pub)
        executor.shutdown(timeout_sec=WAIT)
        spinner.join(WAIT)
        node.destroy_node()


def test_an_input_after_connect_that_cannot_be_subscribed_fails_configure(ros):
    """The adapter connected, so it is disconnected again, and nothing is left subscribed
    (the early input neither)."""
    LateAdapter.made.clear()

    class BadLate(LateAdapter):
        late_type = "std_msgs/msg/NoSuchMessage"

    node = MocapSystemNode(BadLate, "late_bad", namespace=NAMESPACE, context=ros.context)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.state_id == State.PRIMARY_STATE_UNCONFIGURED
        (adapter,) = LateAdapter.made
        assert adapter.disconnects == 1 and not adapter.connected and node.adapter is None
        assert _ours(node) == [] and node.inputs.count == 0
    finally:
        node.destroy_node()
