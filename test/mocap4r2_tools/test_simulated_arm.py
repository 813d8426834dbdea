"""simulated_arm through an rclpy action client, as `ros2 action send_goal` would use it:
accepted and rejected goals, the queue order, the status service, monitor results at
the right feedback, bad goals refused with the reason without the node dying, every
accepted goal on ~/accepted_goals for a late subscriber, and the commanded end-effector
pose on ~/ee_pose."""

from __future__ import annotations

import math
import time

import pytest
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseArray, PoseStamped
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from support import wait_for
from trajectory_msgs.msg import JointTrajectoryPoint

from motion_control_interfaces.action import QueueTrajectory
from motion_control_interfaces.msg import (
    Monitor,
    MonitorResultsStamped,
    TrajectoryFeedbackStamped,
    TriggerCondition,
)
from motion_control_interfaces.srv import GetTrajectoryStatus

NS = "/arm"
NODE = f"{NS}/simulated_arm"


def wait(future, timeout=30.0, what="future"):
    deadline = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not done within {timeout} s")
        time.sleep(0.01)
    return future.result()


def goal(tid: str, seconds: float = 1.0, points: int = 3, velocities: bool = True, monitors=(), nan=False):
    g = QueueTrajectory.Goal()
    g.trajectory_id = tid
    g.trajectory.joint_names = ["joint1", "joint2", "joint3"]
    for i in range(points):
        p = JointTrajectoryPoint()
        s = i / (points - 1)
        p.positions = [0.5 * s, -0.3 * s, float("nan") if nan and i == 1 else 0.2 * s]
        p.velocities = [0.0, 0.0, 0.0] if velocities else []
        t = seconds * s
        p.time_from_start = Duration(sec=int(t), nanosec=int((t % 1) * 1e9))
        g.trajectory.points.append(p)
    g.monitors = list(monitors)
    return g


def ratio_monitor(mid: str, ratio: float, kind: int = TriggerCondition.RATIO) -> Monitor:
    return Monitor(monitor_id=mid, trigger_condition=TriggerCondition(type=kind, ratio_of_trajectory=ratio))


def status(ros, tid: str) -> int:
    return ros.call(
        GetTrajectoryStatus,
        f"{NODE}/get_trajectory_status",
        GetTrajectoryStatus.Request(trajectory_id=tid),
        timeout=20,
    ).status


def test_simulated_arm_goals_queue_status_and_monitors(ros, procs):
    proc = procs.start("mocap4r2_tools", "simulated_arm", namespace=NS, params={"rate": 50.0})
    feedback = ros.subscribe(f"{NODE}/trajectory_feedback", TrajectoryFeedbackStamped)
    results = ros.subscribe(f"{NODE}/monitor_results", MonitorResultsStamped)
    client = ros.action_client(QueueTrajectory, f"{NODE}/queue_trajectory")

    R = GetTrajectoryStatus.Response
    first = wait(
        client.send_goal_async(goal("A", 1.5, points=6, monitors=[ratio_monitor("half", 0.5)])), what="goal A"
    )
    second = wait(client.send_goal_async(goal("B", 0.6)), what="goal B")
    assert first.accepted and second.accepted
    deadline = time.monotonic() + 20
    while status(ros, "A") != R.EXECUTING:
        assert time.monotonic() < deadline, "A never executing"
    assert status(ros, "B") == R.IN_QUEUE
    assert status(ros, "nobody") == R.UNKNOWN

    # bad goals: each refused, with the reason in the log
    bad = {
        "too few points": goal("C", points=2),
        "empty id": goal(""),
        "duplicate id": goal("A"),
        "no velocities": goal("D", velocities=False),
        "unknown monitor type": goal("E", monitors=[ratio_monitor("m", 0.5, kind=9)]),
        "NaN position": goal("F", nan=True),
        "ratio out of range": goal("G", monitors=[ratio_monitor("m", 1.5)]),
    }
    for what, g in bad.items():
        assert not wait(client.send_goal_async(g), what=what).accepted, what
    for reason in (
        "at least 3 points",
        "non-empty",
        "already used",
        "velocities are required",
        "unknown trigger type 9",
        "not finite",
        "ratio_of_trajectory must be in",
    ):
        assert reason in proc.log(), reason

    result_a = wait(first.get_result_async(), what="result A").result
    result_b = wait(second.get_result_async(), what="result B").result
    assert result_a.is_finished and result_b.is_finished
    assert status(ros, "A") == R.FINISHED and status(ros, "B") == R.FINISHED

    # queue order: every feedback of A before any of B
    ids = [m.data.trajectory_id for m in feedback.snapshot()]
    assert "A" in ids and "B" in ids
    assert max(i for i, x in enumerate(ids) if x == "A") < min(i for i, x in enumerate(ids) if x == "B")
    # the monitor: false while the ratio is below 0.5, true from the first feedback at 0.5 on
    ratio_at = {
        (m.header.stamp.sec, m.header.stamp.nanosec): m.data.ratio_of_trajectory
        for m in feedback.snapshot()
        if m.data.trajectory_id == "A"
    }
    pairs = [
        (ratio_at[(m.header.stamp.sec, m.header.stamp.nanosec)], m.monitor_results[0].is_triggered)
        for m in results.snapshot()
        if (m.header.stamp.sec, m.header.stamp.nanosec) in ratio_at
    ]
    assert pairs and all(hit == (ratio >= 0.5) for ratio, hit in pairs), pairs
    assert any(hit for _, hit in pairs) and any(not hit for _, hit in pairs)

    # a subscriber joining after the goals were accepted still gets them (transient
    # local), the accepted ones only, monitors included
    latched = QoSProfile(
        depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    accepted = ros.subscribe(f"{NODE}/accepted_goals", QueueTrajectory.Goal, latched)
    got = accepted.wait_count(2)
    wait_for(lambda: accepted.quiet(1.0), what="a second without further accepted goals")
    assert [g.trajectory_id for g in accepted.snapshot()] == ["A", "B"]
    assert [m.monitor_id for m in got[0].monitors] == ["half"]
    assert got[0].monitors[0].trigger_condition.ratio_of_trajectory == pytest.approx(0.5)
    assert len(got[0].trajectory.points) == 6
    assert proc.alive()
    client.destroy()


def tip(joints, links=(0.3, 0.25, 0.2)):
    """The end effector of the default arm, written out by hand: joint 1 yaws a vertical
    first link, joints 2 and 3 pitch (about y: a positive angle tips x towards -z)."""
    yaw, a, b = joints
    reach = links[1] * math.cos(a) + links[2] * math.cos(a + b)
    height = links[0] - links[1] * math.sin(a) - links[2] * math.sin(a + b)
    return math.cos(yaw) * reach, math.sin(yaw) * reach, height


def key(header):
    return header.stamp.sec, header.stamp.nanosec


def test_simulated_arm_ee_pose_is_the_commanded_tip(ros, procs):
    ns = "/arm_ee"
    node = f"{ns}/simulated_arm"
    proc = procs.start(
        "mocap4r2_tools", "simulated_arm", namespace=ns, params={"rate": 50.0, "frame_id": "lab"}
    )
    ee = ros.subscribe(f"{node}/ee_pose", PoseStamped)
    links = ros.subscribe(f"{node}/link_poses", PoseArray)
    joints = ros.subscribe(f"{node}/joint_states", JointState)
    client = ros.action_client(QueueTrajectory, f"{node}/queue_trajectory")
    handle = wait(client.send_goal_async(goal("move", 1.0, points=5)), what="goal move")
    assert handle.accepted
    assert wait(handle.get_result_async(), what="result move").result.is_finished
    # the pose after the goal: links and joints of the same tick carry the same stamp
    at_end = joints.wait_for(lambda j: abs(j.position[0] - 0.5) < 1e-9)
    last = ee.wait_for(lambda m: key(m.header) == key(at_end.header))

    by_stamp = {key(m.header): m for m in links.snapshot()}
    js_by_stamp = {key(m.header): m for m in joints.snapshot()}
    pairs = [
        (m, by_stamp[key(m.header)], js_by_stamp[key(m.header)])
        for m in ee.snapshot()
        if key(m.header) in by_stamp and key(m.header) in js_by_stamp
    ]
    assert len(pairs) > 20, (
        f"{len(pairs)} ee_pose messages with link_poses and joint_states of the same stamp"
    )
    moved = set()
    for pose, array, js in pairs:
        assert pose.header.frame_id == "lab" == array.header.frame_id
        assert pose.pose == array.poses[-1]
        p = pose.pose.position
        assert (p.x, p.y, p.z) == pytest.approx(tip(js.position), abs=1e-9)
        moved.add(round(p.x, 4))
    assert len(moved) > 5, "the end effector did not move during the goal"
    # the end of the goal: joints (0.5, -0.3, 0.2)
    assert (last.pose.position.x, last.pose.position.y, last.pose.position.z) == pytest.approx(
        tip((0.5, -0.3, 0.2)), abs=1e-9
    )
    assert proc.alive()
    client.destroy()


def _demo_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
    spec = importlib.util.spec_from_file_location("mocap4r2_demo_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demos_looping_goal_is_executed_and_its_monitors_trigger(ros, procs):
    """The goal `make demo` queues: velocities are the derivative of the positions (the
    arm interpolates with both), a loop starts and ends at rest at zero, and the arm
    accepts it, finishes it back at zero, with all three monitors triggered."""
    demo = _demo_module()
    for s in (0.1, 0.37, 0.5, 0.8):
        h = 1e-6
        ahead, _ = demo.arm_loop(s + h)
        behind, _ = demo.arm_loop(s - h)
        _, velocity = demo.arm_loop(s)
        numeric = [(a - b) / (2 * h * demo.ARM_LOOP_SECONDS) for a, b in zip(ahead, behind)]
        assert velocity == pytest.approx(numeric, abs=1e-6)
    assert demo.arm_loop(0.0) == (
        [0.0, 0.0, 0.0],
        pytest.approx([0.4 * 2 * math.pi / demo.ARM_LOOP_SECONDS, 0, 0]),
    )
    assert demo.arm_loop(1.0)[0] == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)
    assert demo.arm_loop(0.5)[0] == pytest.approx(list(demo.ARM_TOP), abs=1e-12)

    ns = "/arm_demo"
    node = f"{ns}/simulated_arm"
    proc = procs.start("mocap4r2_tools", "simulated_arm", namespace=ns, params={"rate": 50.0})
    results = ros.subscribe(f"{node}/monitor_results", MonitorResultsStamped)
    feedback = ros.subscribe(f"{node}/trajectory_feedback", TrajectoryFeedbackStamped)
    sender = demo.ArmGoals(ros.node, f"{node}/queue_trajectory")
    wait_for(sender.client.server_is_ready, what="the arm's action server")
    sender.pump()
    sender.pump()
    sender.pump()  # at most two outstanding
    assert sender.sent == 2
    wait_for(
        lambda: sender.finished >= 1,
        timeout=60,
        describe=lambda: (sender.accepted, sender.refused, proc.log()),
    )
    assert sender.refused == 0
    done = results.wait_for(
        lambda m: (
            {r.monitor_id: r.is_triggered for r in m.monitor_results}
            == {"half": True, "t1_5": True, "top": True}
        )
    )
    assert done is not None
    assert any(not r.is_triggered for m in results.snapshot() for r in m.monitor_results)
    # the end of loop-1 is the start of loop-2: back at zero, the loops chain without a jump
    end = feedback.wait_for(lambda m: m.data.trajectory_id == "loop-1" and m.data.ratio_of_trajectory == 1.0)
    assert list(end.data.current_joint_state.position) == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    middle = [
        m
        for m in feedback.snapshot()
        if m.data.trajectory_id == "loop-1" and max(abs(v) for v in m.data.current_joint_state.position) > 0.3
    ]
    assert middle, "loop-1 never moved the joints"
    sender.client.destroy()
    assert proc.alive()
