"""launch_testing: ``ros2 launch mocap4r2_drivers qualisys.launch.py`` streams from a QTM stand-in
(qtm_simulator), then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import ProbeCase, after_ready, include, launch_test_module, stand_in


def actions():
    qtm = stand_in("qtm_simulator", "--port", "42222")
    # the system configures at once (autostart): start it when the stand-in listens
    return [
        qtm,
        after_ready(
            qtm,
            "qtm_simulator",
            include(
                "mocap4r2_drivers", "qualisys.launch.py", namespace="lt_qtm", autostart="true", port="42222"
            ),
        ),
    ]


generate_test_description, TestShutdown = launch_test_module(actions)


class TestRunning(ProbeCase):
    def test_rigid_bodies_arrive_from_the_stand_in(self):
        from mocap4r2_interfaces.msg import RigidBodies

        msg = self.probe.first_message(RigidBodies, "/lt_qtm/rigid_bodies", timeout=45.0)
        self.assertIn("drone1", [b.name for b in msg.rigid_bodies])
