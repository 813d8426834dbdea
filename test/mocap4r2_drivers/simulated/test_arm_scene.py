"""A simulated mocap system whose scene has an arm, end to end over DDS: simulated_arm
(the installed executable) executes a QueueTrajectory goal and publishes its link poses,
simulated_system (the installed executable) sees the end effector through markers and
publishes ``arm_ee``: untracked before the arm publishes, then following the arm's forward
kinematics within the marker noise's effect on the fit (a bad ``arms:`` entry:
test_scene_errors.py)."""

from __future__ import annotations

import time

import numpy as np
import yaml
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseArray
from support import wait_for
from trajectory_msgs.msg import JointTrajectoryPoint

from mocap4r2_interfaces.msg import RigidBodies, Skeletons
from mocap4r2_tools.motion.arm import forward_kinematics
from motion_control_interfaces.action import QueueTrajectory

SIM = ("mocap4r2_drivers", "simulated_system")
ARM_NS = "/h17arm"
ARM_NODE = f"{ARM_NS}/simulated_arm"
SYS_NS = "/armscene"


def stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


FINAL = [0.8, -0.5, 0.6]  # joint positions at the end of the goal
LINKS = [0.3, 0.25, 0.2]  # simulated_arm's default link lengths


def scene(topic: str) -> dict:
    return {
        "seed": 4,
        "rate": 120.0,
        "latency": 0.004,
        "latency_jitter": 0.0,
        "noise": 0.0005,
        "occlusion": 0.01,
        "dropped_frames": 0.0,
        "unlabeled_markers": 0,
        "arms": [{"name": "arm", "link_poses_topic": topic, "timeout": 0.5}],
    }


def arm_goal(seconds: float = 2.0, points: int = 5) -> QueueTrajectory.Goal:
    g = QueueTrajectory.Goal()
    g.trajectory_id = "sweep"
    g.trajectory.joint_names = ["joint1", "joint2", "joint3"]
    for i in range(points):
        s = i / (points - 1)
        p = JointTrajectoryPoint(positions=[v * s for v in FINAL], velocities=[0.0, 0.0, 0.0])
        t = seconds * s
        p.time_from_start = Duration(sec=int(t), nanosec=int((t % 1) * 1e9))
        g.trajectory.points.append(p)
    return g


def arm_ee(msg: RigidBodies):
    return next((b for b in msg.rigid_bodies if b.name == "arm_ee"), None)


def distance_to_path(point: np.ndarray, path: np.ndarray) -> float:
    """Distance from a point to the polyline through the path's samples."""
    a, b = path[:-1], path[1:]
    ab = b - a
    t = np.clip(np.einsum("ij,ij->i", point - a, ab) / np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-18), 0, 1)
    return float(np.min(np.linalg.norm(a + t[:, None] * ab - point, axis=1)))


def test_the_arm_end_effector_is_measured_along_its_forward_kinematics(ros, procs, tmp_path):
    path = tmp_path / "arm_scene.yaml"
    path.write_text(yaml.safe_dump(scene(f"{ARM_NODE}/link_poses")))
    bodies = ros.subscribe(f"{SYS_NS}/rigid_bodies", RigidBodies)
    skeletons = ros.subscribe(f"{SYS_NS}/skeletons", Skeletons)
    links = ros.subscribe(f"{ARM_NODE}/link_poses", PoseArray)
    system = procs.start(*SIM, name="sim", namespace=SYS_NS, params={"scene": str(path), "autostart": True})

    # streaming, the arm not there yet: arm_ee declared and untracked, with finite values
    first = bodies.wait_for(lambda m: arm_ee(m) is not None)
    b = arm_ee(first)
    assert not b.tracking_valid, system.log()
    assert all(np.isfinite([b.pose.position.x, b.pose.position.y, b.pose.position.z, b.pose.orientation.w]))
    assert not any(arm_ee(m).tracking_valid for m in bodies.snapshot() if arm_ee(m) is not None)

    arm = procs.start("mocap4r2_tools", "simulated_arm", namespace=ARM_NS, params={"rate": 50.0})
    bodies.wait_for(lambda m: arm_ee(m) is not None and arm_ee(m).tracking_valid)
    client = ros.action_client(QueueTrajectory, f"{ARM_NODE}/queue_trajectory")
    # the motion's span by capture stamps, not by arrival: on a loaded machine this
    # process may still be reading frames of before the goal when the result comes
    sent_at = time.time()
    sent = client.send_goal_async(arm_goal())
    handle = wait_for(lambda: sent.done() and (sent.result(),), what="goal response")[0]
    assert handle.accepted
    result_future = handle.get_result_async()
    wait_for(lambda: result_future.done(), what="goal result", describe=arm.log)
    assert result_future.result().result.is_finished
    finished_at = time.time()
    bodies.wait_for(lambda m: stamp(m) > finished_at)
    moving_frames = [m for m in bodies.snapshot() if sent_at <= stamp(m) <= finished_at]

    # at rest at the end: the measured end effector is the forward kinematics of the
    # final joints, to within the fit's error (mm, not cm: not the markers' centroid)
    ee_final = forward_kinematics(FINAL, LINKS)[-1][0]
    links.wait_for(
        lambda m: (
            len(m.poses) == 3
            and np.allclose(
                [m.poses[-1].position.x, m.poses[-1].position.y, m.poses[-1].position.z], ee_final, atol=1e-6
            )
        )
    )

    # the system may get the arm's last poses after we do (a loaded machine): rest starts
    # at the system's first frame composed from them, which its skeleton shows exactly
    # (the arm's segments are the link poses it received, without noise)
    def composed_at_rest(m) -> bool:
        s = next((s for s in m.skeletons if s.name == "arm" and s.tracking_valid), None)
        return (
            s is not None
            and len(s.segments) == 3
            and bool(
                np.allclose(
                    [
                        s.segments[-1].pose.position.x,
                        s.segments[-1].pose.position.y,
                        s.segments[-1].pose.position.z,
                    ],
                    ee_final,
                    atol=1e-6,
                )
            )
        )

    rest_frame = skeletons.wait_for(composed_at_rest).frame_number

    def rest_samples():
        return [
            m
            for m in bodies.snapshot()
            if m.frame_number >= rest_frame and arm_ee(m) and arm_ee(m).tracking_valid
        ]

    wait_for(
        lambda: len(rest_samples()) >= 30, what="30 frames at rest", describe=lambda: len(rest_samples())
    )
    rest = np.array(
        [
            [arm_ee(m).pose.position.x, arm_ee(m).pose.position.y, arm_ee(m).pose.position.z]
            for m in rest_samples()
        ]
    )
    errors = np.linalg.norm(rest - ee_final, axis=1)
    assert np.median(errors) < 0.0015 and errors.max() < 0.004, errors
    assert errors.max() > 0, "no noise at all: not a measurement"

    # during the motion: every tracked sample lies on the arm's end-effector path (from
    # the link poses the arm published) within a few mm, and the path was covered
    ee_path = np.array(
        [
            [m.poses[-1].position.x, m.poses[-1].position.y, m.poses[-1].position.z]
            for m in links.snapshot()
            if len(m.poses) == 3
        ]
    )
    moving = np.array(
        [
            [arm_ee(m).pose.position.x, arm_ee(m).pose.position.y, arm_ee(m).pose.position.z]
            for m in moving_frames
            if arm_ee(m) and arm_ee(m).tracking_valid
        ]
    )
    assert len(moving) > 100, len(moving)
    off_path = [distance_to_path(p, ee_path) for p in moving]
    assert np.median(off_path) < 0.0015 and max(off_path) < 0.005, sorted(off_path)[-5:]
    assert np.linalg.norm(moving.max(axis=0) - moving.min(axis=0)) > 0.2, "the end effector hardly moved"

    # the skeleton: one segment per link, named and chained
    skel = skeletons.wait_for(lambda m: any(s.name == "arm" and s.tracking_valid for s in m.skeletons))
    arm_skel = next(s for s in skel.skeletons if s.name == "arm")
    assert [s.name for s in arm_skel.segments] == ["arm_link1", "arm_link2", "arm_link3"]

    # the arm gone: its poses go stale and arm_ee turns untracked, its last pose kept
    arm.stop()
    stale_from = len(bodies.snapshot())

    def first_stale():
        return next(
            (m for m in bodies.snapshot()[stale_from:] if arm_ee(m) and not arm_ee(m).tracking_valid), None
        )

    stale = wait_for(first_stale, what="arm_ee untracked after the arm stopped", describe=system.log)
    p = arm_ee(stale).pose.position
    assert np.linalg.norm(np.array([p.x, p.y, p.z]) - ee_final) < 0.004
    assert system.alive()
    client.destroy()
