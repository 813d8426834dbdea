"""launch_testing: ``ros2 launch mocap4r2_tools tools.launch.py`` starts the tools over the simulated system in /sim, then every launched process
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
        include("mocap4r2_drivers", "simulated.launch.py", namespace="sim", autostart="true"),
        include("mocap4r2_tools", "tools.launch.py"),
        launch_testing.actions.ReadyToTest(),
    ]), {}


class TestRunning(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.probe = TopicProbe("lt_probe_tools")

    @classmethod
    def tearDownClass(cls):
        cls.probe.close()

    def test_marker_viz_draws_the_system(self):
        from visualization_msgs.msg import MarkerArray

        msg = self.probe.first_message(MarkerArray, "/marker_viz/markers", timeout=45.0)
        self.assertTrue(msg.markers)

    def test_robot_ground_truth_publishes_odometry(self):
        from nav_msgs.msg import Odometry

        self.probe.first_message(Odometry, "/robot_ground_truth/odom", timeout=45.0)


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_every_process_exits_cleanly(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info, allowable_exit_codes=CLEAN_EXIT_CODES)
