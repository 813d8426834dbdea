"""launch_testing: ``ros2 launch mocap4r2_drivers vrpn.launch.py`` streams from a VRPN server stand-in
(vrpn_simulator), then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, after_ready, include, launch_test_module, stand_in

PORT = "43883"  # not VRPN's 3883, which a server on the machine may hold


def actions():
    server = stand_in("vrpn_simulator", "--port", PORT)
    # the system configures at once (autostart): start it when the stand-in listens
    return [
        server,
        after_ready(
            server,
            "vrpn_simulator",
            include("mocap4r2_drivers", "vrpn.launch.py", namespace="lt_vrpn", autostart="true", port=PORT),
        ),
    ]


generate_test_description, TestShutdown = launch_test_module(actions)


class TestRunning(ProbeCase):
    def test_rigid_bodies_arrive_from_the_stand_in(self):
        from mocap4r2_interfaces.msg import RigidBodies

        msg = self.probe.first_message(RigidBodies, "/lt_vrpn/rigid_bodies", timeout=45.0)
        self.assertIn("drone1", [b.name for b in msg.rigid_bodies])

    def test_the_system_announces_itself_active(self):
        info = self.probe.announcement(
            "/lt_vrpn/vrpn_system", timeout=45.0, accept=lambda i: i.state.label == "active"
        )
        self.assertEqual(info.type, "vrpn")
