"""trajectory_monitor as a process: monitors from a file, results on the topic at the
right feedback, a mocap snapshot interpolated at the trigger stamp, and bad input
(unknown type, tolerance length mismatch, stamp going backwards, NaN joint) refused or
logged without the node dying."""
from __future__ import annotations

import math
import time

import pytest
import yaml
from geometry_msgs.msg import PoseStamped
from mocap4r2_interfaces.msg import RigidBodies, RigidBody
from motion_control_interfaces.msg import MonitorResultsStamped, TrajectoryFeedbackStamped
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

TOOLS = "mocap4r2_tools"
RELIABLE = QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
T0 = 1_700_000_100.0


def stamp_of(t: float):
    from builtin_interfaces.msg import Time

    sec = int(math.floor(t))
    return Time(sec=sec, nanosec=int(round((t - sec) * 1e9)))


def seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def wait_matched(publisher, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while publisher.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"nobody subscribed to {publisher.topic_name} within {timeout} s")
        time.sleep(0.05)


def feedback(i: int, t: float, positions=None) -> TrajectoryFeedbackStamped:
    msg = TrajectoryFeedbackStamped()
    msg.header.stamp = stamp_of(t)
    msg.header.frame_id = "arm"
    d = msg.data
    d.trajectory_id = "traj-1"
    d.executing_trajectory_size = 10
    d.executing_point_index = i
    d.ratio_of_trajectory = (i + 1) / 10
    d.time_from_start.sec, d.time_from_start.nanosec = divmod(i * 500_000_000, 1_000_000_000)
    d.current_joint_state.name = ["j1", "j2"]
    d.current_joint_state.position = positions if positions is not None else [0.1 * i, -0.1 * i]
    return msg


def test_trajectory_monitor_results_snapshots_and_bad_input(ros, procs, tmp_path):
    path = tmp_path / "monitors.yaml"
    path.write_text(yaml.safe_dump({"monitors": [
        {"monitor_id": "half", "type": "RATIO", "ratio_of_trajectory": 0.5},
        {"monitor_id": "t2", "type": "TIME", "time_from_start": 2.0},
        {"monitor_id": "pose", "type": "JOINT_STATE", "joint_state": {"name": ["j1", "j2"], "position": [0.7, -0.7]},
         "joint_state_tolerances": [0.01, 0.01]},
        {"monitor_id": "bad", "type": "SPEED"},
        {"monitor_id": "short", "type": "JOINT_STATE", "joint_state": {"position": [0.1, 0.2]},
         "joint_state_tolerances": [0.1]}]}))
    ns = "/tm"
    results = ros.subscribe(f"{ns}/trajectory_monitor/monitor_results", MonitorResultsStamped)
    snapshot = ros.subscribe(f"{ns}/trajectory_monitor/half/ee", PoseStamped, LATCHED)
    proc = procs.start(TOOLS, "trajectory_monitor", namespace=ns,
                       params={"feedback_topic": f"{ns}/feedback", "monitors_file": str(path),
                               "rigid_bodies_topic": f"{ns}/rigid_bodies", "snapshot_bodies": ["ee"]})
    assert proc.wait_log("3 monitors on /tm/feedback", timeout=30), proc.log()
    log = proc.log()
    assert "unknown trigger type 'SPEED'" in log and "the lengths must match" in log

    bodies = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    fb = ros.publisher(f"{ns}/feedback", TrajectoryFeedbackStamped, RELIABLE)
    wait_matched(bodies)
    wait_matched(fb)
    # the end effector moves along x at 0.1 m/s, 100 frames per second
    for k in range(500):
        msg = RigidBodies()
        msg.header.stamp = stamp_of(T0 + 0.01 * k)
        msg.header.frame_id = "world"
        msg.frame_number = k
        body = RigidBody(id=1, name="ee", tracking_valid=True)
        body.pose.position.x = 0.001 * k
        body.pose.orientation.w = 1.0
        msg.rigid_bodies.append(body)
        bodies.publish(msg)
    sent = []
    for i in range(10):
        t = T0 + 0.5 * i + 0.005   # between two mocap frames
        fb.publish(feedback(i, t))
        sent.append(t)
        if i == 5:
            fb.publish(feedback(5, T0))                                    # stamp going backwards
            fb.publish(feedback(5, t + 0.001, positions=[float("nan"), 0.0]))   # NaN joint
            sent.append(t + 0.001)
        time.sleep(0.01)

    got = results.wait_count(len(sent), timeout=30)
    assert [seconds(m.header.stamp) for m in got] == pytest.approx(sent, abs=1e-6)   # the backwards one dropped
    triggered = {mid: [dict((r.monitor_id, r.is_triggered) for r in m.monitor_results)[mid] for m in got]
                 for mid in ("half", "t2", "pose")}
    # one result per feedback; index 6 is the NaN feedback (point 5 again)
    assert triggered["half"] == [False] * 4 + [True] * 7
    assert triggered["t2"] == [False] * 4 + [True] * 7
    assert triggered["pose"] == [False] * 8 + [True] * 3
    assert all(len(m.monitor_results) == 3 for m in got)

    # where the end effector really was when half the trajectory was done: 2.005 s -> 0.2005 m
    pose = snapshot.wait_for(timeout=30)
    assert seconds(pose.header.stamp) == pytest.approx(T0 + 2.005, abs=1e-6)
    assert pose.header.frame_id == "world"
    # (stamps as float seconds near 1.7e9 resolve 0.24 us: 2.4e-8 m at 0.1 m/s)
    assert pose.pose.position.x == pytest.approx(0.2005, abs=1e-7)
    assert proc.wait_log("before the previous one", timeout=10), proc.log()
    assert proc.wait_log("NaN in the joint state", timeout=10), proc.log()
    assert proc.alive()
