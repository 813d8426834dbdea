"""launch_testing: ``ros2 launch mocap4r2_drivers simulated.launch.py`` streams the simulated system
(autostart), then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, include, launch_test_module

generate_test_description, TestShutdown = launch_test_module(
    lambda: [
        include("mocap4r2_drivers", "simulated.launch.py", namespace="lt_sim", autostart="true"),
    ]
)


class TestRunning(ProbeCase):
    def test_the_three_data_topics_carry_one_frame(self):
        from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

        bodies = self.probe.first_message(RigidBodies, "/lt_sim/rigid_bodies")
        self.assertTrue(bodies.rigid_bodies, "no rigid body in the demo scene's frame")
        self.probe.first_message(Markers, "/lt_sim/markers")
        self.probe.first_message(Skeletons, "/lt_sim/skeletons")

    def test_the_system_announces_itself_active(self):
        # autostart: unconfigured first, then inactive, then active
        info = self.probe.announcement(
            "/lt_sim/simulated_system", timeout=45.0, accept=lambda i: i.state.label == "active"
        )
        self.assertEqual(info.state.label, "active")
        self.assertEqual(info.type, "sim")
