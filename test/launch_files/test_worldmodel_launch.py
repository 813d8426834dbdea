"""launch_testing: ``ros2 launch mocap4r2_tools worldmodel.launch.py`` serves the world
model of the simulated system's bodies on worldmodel/objects. Then every launched
process exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, include, launch_test_module

generate_test_description, TestShutdown = launch_test_module(
    lambda: [
        include("mocap4r2_drivers", "simulated.launch.py", namespace="sim", autostart="true"),
        include("mocap4r2_tools", "worldmodel.launch.py"),
    ]
)


class TestRunning(ProbeCase):
    def test_the_object_model_holds_the_tracked_bodies(self):
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

        from hector_worldmodel_msgs.msg import ObjectModel

        latched = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
        )
        # the server publishes its (empty) model once at start, before the system streams,
        # then again on each change: wait for a model that holds bodies
        model = self.probe.first_message(
            ObjectModel, "/worldmodel/objects", timeout=45.0, qos=latched, accept=lambda m: bool(m.objects)
        )
        self.assertTrue(model.objects)
