"""launch_testing: ``ros2 launch mocap4r2_drivers optitrack.launch.py`` streams from a Motive stand-in (natnet_simulator, unicast), then every launched process
exits cleanly when launch shuts down."""
from __future__ import annotations

import sys
import unittest
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import CLEAN_EXIT_CODES, SKIP_REASON, TopicProbe, include, stand_in  # noqa: E402

launch_testing = pytest.importorskip("launch_testing", reason=SKIP_REASON)
pytest.importorskip("launch_ros", reason=SKIP_REASON)

import launch_testing.asserts  # noqa: E402
from launch import LaunchDescription  # noqa: E402


@pytest.mark.launch_test
def generate_test_description():
    return LaunchDescription([
        stand_in("natnet_simulator", "--unicast"),
        include("mocap4r2_drivers", "optitrack.launch.py", namespace="lt_opti", autostart="true",
                connection_type="unicast"),
        launch_testing.actions.ReadyToTest(),
    ]), {}


class TestRunning(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.probe = TopicProbe("lt_probe_optitrack")

    @classmethod
    def tearDownClass(cls):
        cls.probe.close()

    def test_rigid_bodies_arrive_from_the_stand_in(self):
        from mocap4r2_interfaces.msg import RigidBodies

        msg = self.probe.first_message(RigidBodies, "/lt_opti/rigid_bodies", timeout=45.0)
        self.assertIn("drone1", [b.name for b in msg.rigid_bodies])


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_every_process_exits_cleanly(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=CLEAN_EXIT_CODES)
