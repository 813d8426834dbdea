"""launch_testing: ``ros2 launch mocap4r2_drivers demo_bringup.launch.py`` brings up the simulated system and
the tools (rviz:=false), then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, include, launch_test_module

generate_test_description, TestShutdown = launch_test_module(
    lambda: [
        include("mocap4r2_drivers", "demo_bringup.launch.py", rviz="false"),
    ]
)


class TestRunning(ProbeCase):
    def test_the_system_streams_and_marker_viz_draws_it(self):
        from visualization_msgs.msg import MarkerArray

        from mocap4r2_interfaces.msg import RigidBodies

        self.probe.first_message(RigidBodies, "/sim/rigid_bodies", timeout=45.0)
        self.probe.first_message(MarkerArray, "/marker_viz/markers", timeout=45.0)
