"""launch_testing: ``ros2 launch mocap4r2_tools tools.launch.py`` starts the tools over the simulated system
in /sim, then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, include, launch_test_module

generate_test_description, TestShutdown = launch_test_module(
    lambda: [
        include("mocap4r2_drivers", "simulated.launch.py", namespace="sim", autostart="true"),
        include("mocap4r2_tools", "tools.launch.py"),
    ]
)


class TestRunning(ProbeCase):
    def test_marker_viz_draws_the_system(self):
        from visualization_msgs.msg import MarkerArray

        msg = self.probe.first_message(MarkerArray, "/marker_viz/markers", timeout=45.0)
        self.assertTrue(msg.markers)

    def test_robot_ground_truth_publishes_odometry(self):
        from nav_msgs.msg import Odometry

        self.probe.first_message(Odometry, "/robot_ground_truth/odom", timeout=45.0)
