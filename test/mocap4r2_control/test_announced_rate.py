"""The rate a system announces on /mocap4r2/systems follows the rate its adapter knows:
a system that learns it from its frames (the marker_tracker measures its source's) is
announced with 0 while unconfigured and inactive, and must be announced again once its
frames have told it the rate."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rclpy.lifecycle import TransitionCallbackReturn
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import spinning

from mocap4r2_control.adapter import MocapAdapter
from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS, SYSTEMS_TOPIC
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_interfaces.msg import MocapSystemInfo

NAMESPACE = "/announced_rate_test"


class LearningAdapter(MocapAdapter):
    """Knows its rate only after its first frames, as a tracker measuring its source does."""

    system_type = "ratetest"

    def __init__(self) -> None:
        self.frames = 0

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> LearningAdapter:
        return cls()

    def connect(self) -> AssetNames:
        return AssetNames()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        time.sleep(0.004)
        self.frames += 1
        return MocapFrame(frame_number=self.frames)

    @property
    def nominal_rate(self) -> float:
        return 250.0 if self.frames >= 2 else 0.0

    def disconnect(self) -> None:
        pass


def test_the_announced_rate_follows_the_rate_learned_from_frames(ros):
    from mocap4r2_control.system_node import MocapSystemNode

    systems = ros.subscribe(SYSTEMS_TOPIC, MocapSystemInfo, SYSTEMS_LISTENER_QOS)
    node = MocapSystemNode(LearningAdapter, "learner", namespace=NAMESPACE, context=ros.context)
    name = f"{NAMESPACE}/learner"
    with spinning(ros.context, node):
        try:
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            active = systems.wait_for(lambda m: m.system == name and m.state.label == "active", WAIT)
            assert active.frame_rate == 0.0  # announced at activation, before any frame
            learned = systems.wait_for(lambda m: m.system == name and m.frame_rate > 0.0, WAIT)
            assert learned.frame_rate == 250.0 and learned.state.label == "active"
        finally:
            node.trigger_deactivate()
    node.destroy_node()
