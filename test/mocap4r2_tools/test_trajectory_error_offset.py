"""trajectory_error with time_offset_auto: the installed node, ground truth and an
estimate stamped 37 ms late over real DDS; the node finds the offset, publishes it on
~/time_offset, holds it once stable and evaluates with it."""

from __future__ import annotations

import time

import numpy as np
import pytest
from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from scipy.spatial.transform import Rotation
from std_msgs.msg import Float64
from support import wait_subscribed

from mocap4r2_control.timebase import time_msg
from mocap4r2_interfaces.msg import RigidBodies, RigidBody, TrajectoryError
from mocap4r2_tools.trajectory import EvalOptions, Trajectory, evaluate

TOOLS = "mocap4r2_tools"
RELIABLE = QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
T0 = 1_700_000_000.0
LATE = 0.037
FRAME = Rotation.from_euler("xyz", [0.03, -0.02, 1.1])


def motion(t: np.ndarray) -> tuple[np.ndarray, Rotation]:
    p = np.c_[1.5 * np.cos(0.7 * t) + 0.3 * np.sin(2.3 * t), np.sin(0.9 * t), 1 + 0.2 * np.sin(1.7 * t)]
    r = Rotation.from_rotvec(
        np.c_[0.2 * np.sin(1.1 * t), 0.15 * np.cos(0.8 * t), 0.6 * t + 0.4 * np.sin(0.5 * t)]
    )
    return p, r


def gt_msg(t: float, p, q) -> RigidBodies:
    msg = RigidBodies()
    msg.header.stamp = time_msg(t)
    msg.header.frame_id = "world"
    body = RigidBody(id=1, name="robot", tracking_valid=True)
    body.pose.position.x, body.pose.position.y, body.pose.position.z = (float(v) for v in p)
    o = body.pose.orientation
    o.x, o.y, o.z, o.w = (float(v) for v in q)
    msg.rigid_bodies = [body]
    return msg


def est_msg(t: float, p, q) -> Odometry:
    msg = Odometry()
    msg.header.stamp = time_msg(t)
    msg.header.frame_id = "odom"
    pose = msg.pose.pose
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in p)
    pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = (float(v) for v in q)
    return msg


def test_the_node_finds_publishes_and_holds_the_time_offset(ros, procs):
    ns = "/te_offset"
    params = {
        "gt_topic": f"{ns}/rigid_bodies",
        "gt_body": "robot",
        "est_type": "odometry",
        "est_topic": f"{ns}/odom",
        "association": "interpolate",
        "max_diff": 0.02,
        "time_offset_auto": True,
        "time_offset_window": 0.5,
        "publish_rate": 5.0,
        "qos_reliable": True,
        "output_topic": f"{ns}/trajectory_error",
    }
    proc = procs.start(TOOLS, "trajectory_error", name="te", namespace=ns, params=params)
    offsets = ros.subscribe(f"{ns}/te/time_offset", Float64, LATCHED)
    out = ros.subscribe(f"{ns}/trajectory_error", TrajectoryError)
    gt_pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    est_pub = ros.publisher(f"{ns}/odom", Odometry, RELIABLE)
    wait_subscribed(gt_pub)
    wait_subscribed(est_pub)

    # 100 Hz ground truth; a 20 Hz estimate in its own frame with 2 mm noise, stamped
    # 37 ms late; about three times faster than real time, until the node holds an offset
    rng = np.random.default_rng(5)
    sent_gt: list[tuple[float, np.ndarray, np.ndarray]] = []
    sent_est: list[tuple[float, np.ndarray, np.ndarray]] = []
    k = 0
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and not (k % 50 == 0 and "held" in proc.log()):
        s = k * 0.01
        p, r = motion(np.array([s]))
        gt_pub.publish(gt_msg(T0 + s, p[0], r.as_quat()[0]))
        sent_gt.append((T0 + s, p[0], r.as_quat()[0]))
        if k % 5 == 0:
            pe = FRAME.apply(p[0] + rng.normal(0.0, 0.002, 3)) + [1.0, 2.0, 3.0]
            qe = (FRAME * r).as_quat()[0]
            est_pub.publish(est_msg(T0 + s + LATE, pe, qe))
            sent_est.append((T0 + s + LATE, pe, qe))
        k += 1
        time.sleep(0.003)
    assert proc.wait_log("held", timeout=1.0), proc.log()[-3000:]
    out.clear()  # what was published before the offset was held
    found = [m.data for m in offsets.snapshot()]
    assert found, "nothing published on ~/time_offset"
    held = found[-1]
    assert held == pytest.approx(-LATE, abs=0.001), found
    assert all(abs(v + LATE) < 0.003 for v in found[-3:]), found

    # the evaluation with the offset held: what the offline evaluation gives with it
    def trajectory(rows) -> Trajectory:
        return Trajectory.build([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])

    gt, est = trajectory(sent_gt), trajectory(sent_est)
    options = EvalOptions(association="interpolate", max_diff=0.02, offset=held)
    expected = evaluate(gt, est, options)
    uncorrected = evaluate(gt, est, EvalOptions(association="interpolate", max_diff=0.02))
    last = out.wait_for(lambda m: m.samples >= 0.9 * len(expected.association), timeout=30)
    assert last.ate_rmse == pytest.approx(expected.ate_stats.rmse, rel=0.05)
    assert expected.ate_stats.rmse < 0.5 * uncorrected.ate_stats.rmse
    assert proc.alive()
