"""simulated_arm's tracked tool: ~/tool_pose is the end effector (~/ee_pose, the flange)
composed with the ``tool_offset`` parameter, stamp for stamp, while the arm moves (the
known answer `mocap4r2 calibrate` recovers from the two streams)."""

from __future__ import annotations

import time

import numpy as np
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseStamped
from trajectory_msgs.msg import JointTrajectoryPoint

from mocap4r2_control.geometry import Transform
from motion_control_interfaces.action import QueueTrajectory

OFFSET = [0.03, -0.02, 0.11, 0.2, -0.1, 0.35, 0.9]


def swing() -> QueueTrajectory.Goal:
    goal = QueueTrajectory.Goal()
    goal.trajectory_id = "tool-swing"
    goal.trajectory.joint_names = ["joint1", "joint2", "joint3"]
    for i in range(5):
        s = i / 4
        point = JointTrajectoryPoint()
        point.positions = [0.8 * s, -0.5 * s, 0.6 * s]
        point.velocities = [0.0, 0.0, 0.0]
        point.time_from_start = Duration(sec=int(2 * s), nanosec=int((2 * s % 1) * 1e9))
        goal.trajectory.points.append(point)
    return goal


def as_poses(msg: PoseStamped) -> Transform:
    p, q = msg.pose.position, msg.pose.orientation
    return Transform(np.array([p.x, p.y, p.z]), np.array([q.x, q.y, q.z, q.w]))


def test_tool_pose_is_the_flange_composed_with_the_tool_offset(ros, procs):
    node = procs.start(
        "mocap4r2_tools", "simulated_arm", namespace="/tool_arm", params={"rate": 50.0, "tool_offset": OFFSET}
    )
    ee = ros.subscribe("/tool_arm/simulated_arm/ee_pose", PoseStamped)
    tool = ros.subscribe("/tool_arm/simulated_arm/tool_pose", PoseStamped)
    client = ros.action_client(QueueTrajectory, "/tool_arm/simulated_arm/queue_trajectory")
    sent = client.send_goal_async(swing())
    deadline = time.monotonic() + 30
    while not sent.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent.done() and sent.result().accepted, node.log()
    time.sleep(2.5)  # the swing
    flange = {(m.header.stamp.sec, m.header.stamp.nanosec): m for m in ee.snapshot()}
    pairs = [
        (flange[k], m)
        for m in tool.snapshot()
        if (k := (m.header.stamp.sec, m.header.stamp.nanosec)) in flange
    ]
    assert len(pairs) > 50, node.log()
    offset = Transform(np.array(OFFSET[:3]), np.array(OFFSET[3:]) / np.linalg.norm(OFFSET[3:]))
    turned = 0
    for f, t in pairs:
        expected = as_poses(f) * offset
        found = as_poses(t)
        assert np.allclose(found.translation, expected.translation, atol=1e-9)
        assert abs(abs(float(np.dot(found.rotation, expected.rotation))) - 1.0) < 1e-12
        turned += abs(as_poses(f).rotation[3]) < 0.99  # the flange has turned: the offset rotated with it
    assert turned > 10
