"""launch_testing: ``ros2 launch mocap4r2_drivers gazebo.launch.py`` starts gazebo_system (bridge:=false: no
Gazebo here), which announces itself, then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, include, launch_test_module

generate_test_description, TestShutdown = launch_test_module(
    lambda: [
        include("mocap4r2_drivers", "gazebo.launch.py", namespace="lt_gz", bridge="false"),
    ]
)


class TestRunning(ProbeCase):
    def test_the_system_announces_itself(self):
        info = self.probe.announcement("/lt_gz/gazebo_system")
        self.assertEqual(info.type, "gazebo")
        self.assertEqual(info.state.label, "unconfigured")
