"""launch_testing: ``ros2 launch mocap4r2_drivers vicon.launch.py`` starts vicon_system, which announces
itself (without a Vicon server it stays unconfigured), then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, include, launch_test_module

generate_test_description, TestShutdown = launch_test_module(
    lambda: [
        include("mocap4r2_drivers", "vicon.launch.py", namespace="lt_vicon"),
    ]
)


class TestRunning(ProbeCase):
    def test_the_system_announces_itself(self):
        info = self.probe.announcement("/lt_vicon/vicon_system")
        self.assertEqual(info.type, "vicon")
        self.assertEqual(info.state.label, "unconfigured")
