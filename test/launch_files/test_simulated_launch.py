"""launch_testing: ``ros2 launch mocap4r2_drivers simulated.launch.py`` streams the simulated system (autostart), then every launched process
exits cleanly when launch shuts down."""
from __future__ import annotations

import sys
import unittest
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from launch_harness import CLEAN_EXIT_CODES, SKIP_REASON, TopicProbe, include  # noqa: E402

launch_testing = pytest.importorskip("launch_testing", reason=SKIP_REASON)
pytest.importorskip("launch_ros", reason=SKIP_REASON)

import launch_testing.asserts  # noqa: E402
from launch import LaunchDescription  # noqa: E402


@pytest.mark.launch_test
def generate_test_description():
    return LaunchDescription([
        include("mocap4r2_drivers", "simulated.launch.py", namespace="lt_sim", autostart="true"),
        launch_testing.actions.ReadyToTest(),
    ]), {}


class TestRunning(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.probe = TopicProbe("lt_probe_simulated")

    @classmethod
    def tearDownClass(cls):
        cls.probe.close()

    def test_the_three_data_topics_carry_one_frame(self):
        from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

        bodies = self.probe.first_message(RigidBodies, "/lt_sim/rigid_bodies")
        self.assertTrue(bodies.rigid_bodies, "no rigid body in the demo scene's frame")
        self.probe.first_message(Markers, "/lt_sim/markers")
        self.probe.first_message(Skeletons, "/lt_sim/skeletons")

    def test_the_system_announces_itself_active(self):
        info = self.probe.announcement("/lt_sim/simulated_system")
        self.assertEqual(info.state.label, "active")
        self.assertEqual(info.type, "sim")


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_every_process_exits_cleanly(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=CLEAN_EXIT_CODES)
