"""launch_testing: ``ros2 launch mocap4r2_drivers replay.launch.py`` plays a recorded session (written
for the test as session_recorder writes one; the shipped parameters with loop on), then every launched process
exits cleanly when launch shuts down."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mocap4r2_drivers" / "replay"))
from launch_harness import ProbeCase, include, launch_test_module


def actions():
    from session_fixture import record_session  # test/mocap4r2_drivers/replay

    # a folder of this run's own (launch_testing gives the description no tmp_path)
    out = Path(tempfile.mkdtemp(prefix="lt_replay_"))
    folder, _, _ = record_session(out, frames=240)
    # the shipped parameters with loop on, so the session plays while the cases run
    params = out / "replay.yaml"
    shipped = Path(__file__).resolve().parents[2] / "config" / "replay.yaml"
    params.write_text(shipped.read_text().replace("loop: false", "loop: true"))
    assert "loop: true" in params.read_text(), "config/replay.yaml no longer says loop: false"
    return [
        include(
            "mocap4r2_drivers",
            "replay.launch.py",
            namespace="lt_replay",
            autostart="true",
            file=str(folder),
            system_params=str(params),
        )
    ]


generate_test_description, TestShutdown = launch_test_module(actions)


class TestRunning(ProbeCase):
    def test_the_recorded_bodies_are_published_again(self):
        from mocap4r2_interfaces.msg import RigidBodies

        msg = self.probe.first_message(RigidBodies, "/lt_replay/rigid_bodies", timeout=45.0)
        self.assertIn("drone1", [b.name for b in msg.rigid_bodies])

    def test_the_system_announces_itself_active(self):
        info = self.probe.announcement(
            "/lt_replay/replay_system", timeout=45.0, accept=lambda i: i.state.label == "active"
        )
        self.assertEqual(info.type, "replay")
