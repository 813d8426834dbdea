"""Service offers: an adapter declares the ROS services it answers as data (ServiceOffer)
and the system node creates them on itself, from configure to cleanup (service_offers.py).

A toy adapter offers ``~/greet`` (std_srvs/Trigger), ``~/boom`` (Trigger, its handler
raises) and ``~/void`` (std_srvs/Empty, its handler raises), only once connected, as the
marker tracker offers ``~/teach``. The node is a real MocapSystemNode configured through
its lifecycle service, and the services are called over real DDS. Its parameter
``greeting`` is read per request (``parameters_changed``), as the teach parameters are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

from lifecycle_msgs.msg import State
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from std_srvs.srv import Empty, Trigger
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_control.adapter import MocapAdapter, ServiceOffer
from mocap4r2_control.executors import PatientMultiThreadedExecutor
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import MocapSystemNode

NAMESPACE = "/service_offers_test"


class OfferingAdapter(MocapAdapter):
    system_type = "service_offer_test"
    parameters = (ParameterSpec("greeting", "hello", "What ~/greet answers."),)
    greet_type: ClassVar[str] = "std_srvs/srv/Trigger"
    made: ClassVar[list[OfferingAdapter]] = []

    def __init__(self, *, greeting: str = "hello") -> None:
        self.greeting = greeting
        self.connected = False
        self.requests = 0
        OfferingAdapter.made.append(self)

    def parameters_changed(self, values: Mapping[str, Any]) -> Collection[str]:
        if "greeting" in values:
            self.greeting = values["greeting"]
            return ("greeting",)
        return ()

    def service_offers(self) -> Sequence[ServiceOffer]:
        if not self.connected:
            return ()
        return (
            ServiceOffer("~/greet", self.greet_type, self._greet),
            ServiceOffer("~/boom", "std_srvs/srv/Trigger", self._boom),
            ServiceOffer("~/void", "std_srvs/srv/Empty", self._boom),
        )

    def _greet(self, request: Any, response: Any) -> Any:
        self.requests += 1
        response.success, response.message = True, f"{self.greeting} {self.requests}"
        return response

    def _boom(self, request: Any, response: Any) -> Any:
        raise ValueError("no answer here")

    def connect(self) -> AssetNames:
        self.connected = True
        return AssetNames()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        time.sleep(timeout)
        return None

    def disconnect(self) -> None:
        self.connected = False


def _offered(ros: Any, node_path: str) -> set[str]:
    return {name for name, _ in ros.node.get_service_names_and_types() if name.startswith(f"{node_path}/")}


def test_offered_services_answer_fail_safely_and_are_gone_after_cleanup(ros):
    OfferingAdapter.made.clear()
    name = "offering"
    path = f"{NAMESPACE}/{name}"
    node = MocapSystemNode(OfferingAdapter, name, namespace=NAMESPACE, context=ros.context)
    executor = PatientMultiThreadedExecutor(num_threads=2, context=ros.context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    ours = {f"{path}/greet", f"{path}/boom", f"{path}/void"}
    try:
        assert not _offered(ros, path) & ours, "nothing offered before configure"
        assert ros.change_state(path, "configure")
        assert node.offers.count == 3, "offered once connected, each once although asked twice"
        wait_for(lambda: ours <= _offered(ros, path), WAIT, what="the offered services on the graph")
        answer = ros.call(Trigger, f"{path}/greet", Trigger.Request())
        assert answer.success and answer.message == "hello 1"
        # a parameter the adapter takes at once applies to the next request
        assert node.set_parameters([Parameter("greeting", value="hi")])[0].successful
        assert ros.call(Trigger, f"{path}/greet", Trigger.Request()).message == "hi 2"
        # a handler raising: answered as a failure with the reason, and the node lives on
        failed = ros.call(Trigger, f"{path}/boom", Trigger.Request())
        assert not failed.success and "no answer here" in failed.message, failed.message
        assert isinstance(ros.call(Empty, f"{path}/void", Empty.Request()), Empty.Response)
        assert spinner.is_alive() and node.offers.status() == {"service_errors": "2"}
        assert ros.call(Trigger, f"{path}/greet", Trigger.Request()).message == "hi 3"

        assert ros.change_state(path, "cleanup")
        assert node.offers.count == 0
        wait_for(lambda: not _offered(ros, path) & ours, WAIT, what="the services withdrawn")
    finally:
        executor.shutdown(timeout_sec=WAIT)
        spinner.join(WAIT)
        node.destroy_node()


def test_an_offer_of_an_unknown_type_fails_configure_and_releases_the_adapter(ros):
    OfferingAdapter.made.clear()

    class Unknown(OfferingAdapter):
        greet_type = "std_srvs/srv/NoSuchService"

    node = MocapSystemNode(Unknown, "offering_bad", namespace=NAMESPACE, context=ros.context)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.state_id == State.PRIMARY_STATE_UNCONFIGURED
        (adapter,) = OfferingAdapter.made
        assert not adapter.connected and node.adapter is None and node.offers.count == 0
    finally:
        node.destroy_node()
