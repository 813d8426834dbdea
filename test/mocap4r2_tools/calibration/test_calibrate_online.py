"""`mocap4r2 calibrate --online` over real DDS on loopback: the command runs as its own
process, this test publishes a drone body (A) and its camera (B) as PoseStamped, the node
says what is missing while the poses are few, then publishes the camera mount on
/tf_static (TFMessage, transient local as tf2_ros's static broadcaster: a subscriber that
comes later still gets it)."""

from __future__ import annotations

import sys
import time

import numpy as np
from geometry_msgs.msg import PoseStamped
from tf2_msgs.msg import TFMessage

from mocap4r2_control.tf_out import TF_STATIC_QOS
from mocap4r2_control.timebase import split_seconds
from mocap4r2_tools.calibration.synthetic import CAMERA, Corruption, drone_scene


def pose_msg(stamp: float, p, q, frame: str) -> PoseStamped:
    msg = PoseStamped()
    msg.header.stamp.sec, msg.header.stamp.nanosec = split_seconds(stamp)
    msg.header.frame_id = frame
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in p)
    o = msg.pose.orientation
    o.x, o.y, o.z, o.w = (float(v) for v in q)
    return msg


def test_online_node_says_what_is_missing_then_publishes_the_static_transform(ros, procs):
    scene = drone_scene(
        seconds=16.0, rate_a=50.0, rate_b=50.0, corruption=Corruption(seed=21, outlier_share=0.02)
    )
    cmd = [
        sys.executable,
        "-m",
        "mocap4r2_tools.calibrate_command",
        "hand_eye",
        "--online",
        "--a-topic",
        "/calib_test/body",
        "--b-topic",
        "/calib_test/camera",
        "--b-frames",
        "map",
        "cam0",
        "--update",
        "1.0",
        "--duration",
        "60",
        "--bootstrap",
        "50",
    ]
    node = procs.start_command(cmd, "calibrate_online")
    body = ros.publisher("/calib_test/body", PoseStamped, 100)
    camera = ros.publisher("/calib_test/camera", PoseStamped, 100)
    deadline = time.monotonic() + 30
    while (
        body.get_subscription_count() == 0 or camera.get_subscription_count() == 0
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert body.get_subscription_count() and camera.get_subscription_count(), node.log()
    a, b = scene.a.trajectory, scene.b.trajectory
    base = 1_700_000_000.0
    # a second of poses first: too few to calibrate from, which the node says
    for k in range(40):
        body.publish(pose_msg(base + a.stamps[k], a.positions[k], a.orientations[k], "world"))
        camera.publish(pose_msg(base + b.stamps[k], b.positions[k], b.orientations[k], "map"))
        time.sleep(0.004)
    assert node.wait_log("not yet:", timeout=30), node.log()
    for k in range(40, len(b)):
        body.publish(pose_msg(base + a.stamps[k], a.positions[k], a.orientations[k], "world"))
        camera.publish(pose_msg(base + b.stamps[k], b.positions[k], b.orientations[k], "map"))
        time.sleep(0.004)
    assert node.wait_log("motion sufficient", timeout=60), node.log()
    # subscribed only now: transient local delivers the latest static transforms
    static = ros.subscribe("/tf_static", TFMessage, qos=TF_STATIC_QOS)
    msg = static.wait_for(lambda m: any(t.child_frame_id == "cam0" for t in m.transforms), timeout=30)
    (tf,) = [t for t in msg.transforms if t.child_frame_id == "cam0"]
    assert tf.header.frame_id == "body"
    found = np.array([tf.transform.translation.x, tf.transform.translation.y, tf.transform.translation.z])
    assert np.allclose(found, CAMERA.translation, atol=3e-3), found
    q = tf.transform.rotation
    dot = abs(float(np.dot([q.x, q.y, q.z, q.w], CAMERA.rotation)))
    assert np.degrees(2 * np.arccos(min(1.0, dot))) < 0.3
    assert node.alive()
    node.stop()
    assert "static_transform_publisher" in node.log()


def test_the_collector_counts_bad_poses_and_says_what_is_missing_without_raising():
    from mocap4r2_tools.calibration import CalibrationOptions
    from mocap4r2_tools.calibration.online import PairCollector

    collector = PairCollector(max_samples=50)
    assert "0 of A and 0 of B" in collector.attempt(CalibrationOptions()).waiting_for
    assert not collector.add_a(1.0, (float("nan"), 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    assert not collector.add_b(1.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0))
    assert not collector.add_b(float("inf"), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    assert (collector.dropped_a, collector.dropped_b) == (1, 2)
    scene = drone_scene(seconds=4.0, rate_a=25.0, rate_b=25.0, corruption=Corruption(seed=1))
    a, b = scene.a.trajectory, scene.b.trajectory
    for k in range(len(a)):
        collector.add_a(a.stamps[k], a.positions[k], a.orientations[k])
        collector.add_b(b.stamps[k] + 500.0, b.positions[k], b.orientations[k])  # another clock
    assert len(collector.a) == 50  # bounded: the oldest forgotten
    attempt = collector.attempt(CalibrationOptions(offset=0.0))
    assert attempt.calibration is None and "do not overlap in time" in attempt.waiting_for
    stream_a, stream_b = collector.streams()
    assert (stream_a.dropped, stream_b.dropped) == (1, 2)


def test_a_gap_in_a_over_all_of_b_is_a_not_yet_message():
    """A's span covers B's but A has a gap over all of it: the association refuses (a
    TrajectoryInputError, not a CalibrationError); the collector says so instead of raising
    (before the fix this raised out of the online node's timer and ended it)."""
    from mocap4r2_tools.calibration import CalibrationOptions
    from mocap4r2_tools.calibration.online import PairCollector

    collector = PairCollector()
    for t in list(np.arange(0.0, 1.0, 0.04)) + list(np.arange(10.0, 11.0, 0.04)):
        collector.add_a(t, (t, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    for t in np.arange(4.0, 6.0, 0.04):
        collector.add_b(t, (t, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    attempt = collector.attempt(CalibrationOptions(offset=0.0))
    assert attempt.calibration is None and "within max_diff" in attempt.waiting_for
