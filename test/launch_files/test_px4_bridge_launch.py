"""launch_testing: ``ros2 launch mocap4r2_tools px4_bridge.launch.py`` starts px4_bridge
over the simulated system; with no vehicle answering it keeps running and says why in
/diagnostics. Then every launched process exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, include, launch_test_module

generate_test_description, TestShutdown = launch_test_module(
    lambda: [
        include("mocap4r2_drivers", "simulated.launch.py", namespace="sim", autostart="true"),
        # a port where no vehicle listens: the bridge must wait and report, not die
        include("mocap4r2_tools", "px4_bridge.launch.py", body="drone1", connection="udpout:127.0.0.1:14999"),
    ]
)


class TestRunning(ProbeCase):
    def test_the_bridge_reports_the_missing_vehicle(self):
        from diagnostic_msgs.msg import DiagnosticArray

        self.probe.first_message(
            DiagnosticArray,
            "/diagnostics",
            timeout=45.0,
            accept=lambda m: any(s.name.startswith("/px4_bridge") for s in m.status),
        )
