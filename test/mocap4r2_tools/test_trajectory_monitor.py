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
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from support import wait_for, wait_round_trip, wait_subscribed

from mocap4r2_interfaces.msg import RigidBodies, RigidBody
from motion_control_interfaces.msg import MonitorResultsStamped, TrajectoryFeedbackStamped

TOOLS = "mocap4r2_tools"
RELIABLE = QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
T0 = 1_700_000_100.0


def stamp_of(t: float):
    from builtin_interfaces.msg import Time

    sec = int(math.floor(t))
    return Time(sec=sec, nanosec=int(round((t - sec) * 1e9)))


def seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def feedback(
    i: int, t: float, positions=None, trajectory_id: str = "traj-1", frame_id: str = "arm"
) -> TrajectoryFeedbackStamped:
    msg = TrajectoryFeedbackStamped()
    msg.header.stamp = stamp_of(t)
    msg.header.frame_id = frame_id
    d = msg.data
    d.trajectory_id = trajectory_id
    d.executing_trajectory_size = 10
    d.executing_point_index = i
    d.ratio_of_trajectory = (i + 1) / 10
    d.time_from_start.sec, d.time_from_start.nanosec = divmod(i * 500_000_000, 1_000_000_000)
    d.current_joint_state.name = ["j1", "j2"]
    d.current_joint_state.position = positions if positions is not None else [0.1 * i, -0.1 * i]
    return msg


PROBE = "probe"  # trajectory id and header frame of probe feedback, and so of its results


def wait_results_flowing(fb_pub, results) -> None:
    """Probe feedback (a trajectory of its own, at ratio 0.1 and time 0: no monitor
    triggers) until a result of it comes back; from then on the monitor's volatile
    results reach us (see support.wait_round_trip). Results of probes have frame PROBE."""
    probe = feedback(0, T0 - 100.0, trajectory_id=PROBE, frame_id=PROBE)
    wait_round_trip(
        lambda: fb_pub.publish(probe),
        lambda: any(m.header.frame_id == PROBE for m in results.snapshot()),
        what="the result of a probe feedback",
    )


def results_of(results, count: int) -> list[MonitorResultsStamped]:
    """The first ``count`` results that are not of probes, waiting for them."""

    def enough():
        got = [m for m in results.snapshot() if m.header.frame_id != PROBE]
        return got[:count] if len(got) >= count else None

    return wait_for(enough, 30, results._describe, what=f"{count} results")


def test_trajectory_monitor_results_snapshots_and_bad_input(ros, procs, tmp_path):
    path = tmp_path / "monitors.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "monitors": [
                    {"monitor_id": "half", "type": "RATIO", "ratio_of_trajectory": 0.5},
                    {"monitor_id": "t2", "type": "TIME", "time_from_start": 2.0},
                    {
                        "monitor_id": "pose",
                        "type": "JOINT_STATE",
                        "joint_state": {"name": ["j1", "j2"], "position": [0.7, -0.7]},
                        "joint_state_tolerances": [0.01, 0.01],
                    },
                    {"monitor_id": "bad", "type": "SPEED"},
                    {
                        "monitor_id": "short",
                        "type": "JOINT_STATE",
                        "joint_state": {"position": [0.1, 0.2]},
                        "joint_state_tolerances": [0.1],
                    },
                ]
            }
        )
    )
    ns = "/tm"
    results = ros.subscribe(f"{ns}/trajectory_monitor/monitor_results", MonitorResultsStamped)
    snapshot = ros.subscribe(f"{ns}/trajectory_monitor/half/ee", PoseStamped, LATCHED)
    proc = procs.start(
        TOOLS,
        "trajectory_monitor",
        namespace=ns,
        params={
            "feedback_topic": f"{ns}/feedback",
            "monitors_file": str(path),
            "rigid_bodies_topic": f"{ns}/rigid_bodies",
            "snapshot_bodies": ["ee"],
            "snapshot_wait": 10.0,
        },
    )
    assert proc.wait_log("3 monitors on /tm/feedback", timeout=30), proc.log()
    log = proc.log()
    assert "unknown trigger type 'SPEED'" in log and "the lengths must match" in log

    bodies = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    fb = ros.publisher(f"{ns}/feedback", TrajectoryFeedbackStamped, RELIABLE)
    wait_subscribed(bodies)
    wait_subscribed(fb)
    # the results are volatile: those published before the node's writer matched our
    # reader are lost (CI received 5 of 11, a make test-load run none)
    wait_results_flowing(fb, results)
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
        t = T0 + 0.5 * i + 0.005  # between two mocap frames
        fb.publish(feedback(i, t))
        sent.append(t)
        if i == 5:
            fb.publish(feedback(5, T0))  # stamp going backwards
            fb.publish(feedback(5, t + 0.001, positions=[float("nan"), 0.0]))  # NaN joint
            sent.append(t + 0.001)
        time.sleep(0.01)

    got = results_of(results, len(sent))
    assert [seconds(m.header.stamp) for m in got] == pytest.approx(
        sent, abs=1e-6
    )  # the backwards one dropped
    triggered = {
        mid: [dict((r.monitor_id, r.is_triggered) for r in m.monitor_results)[mid] for m in got]
        for mid in ("half", "t2", "pose")
    }
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


def test_trajectory_monitor_takes_the_monitors_of_the_arms_goals(ros, procs):
    """Monitors from the goals simulated_arm accepts (its ~/accepted_goals), not from a
    file: results false then true at the right feedback, the snapshot at the trigger, and
    a goal's bad monitors refused with the reason while its good one is kept."""
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectoryPoint

    from motion_control_interfaces.action import QueueTrajectory
    from motion_control_interfaces.msg import Monitor, TriggerCondition

    ns = "/tmg"
    arm = f"{ns}/simulated_arm"
    monitor = f"{ns}/trajectory_monitor"
    arm_proc = procs.start(TOOLS, "simulated_arm", namespace=ns, params={"rate": 50.0})
    mon_proc = procs.start(
        TOOLS,
        "trajectory_monitor",
        namespace=ns,
        params={
            "feedback_topic": f"{arm}/trajectory_feedback",
            "goals_topic": f"{arm}/accepted_goals",
            "rigid_bodies_topic": f"{ns}/rigid_bodies",
            "snapshot_bodies": ["ee"],
            "snapshot_wait": 10.0,
        },
    )
    # the mocap system here is the commanded end effector itself, relayed as a rigid body
    # at the arm's stamp: the snapshot must then be the arm's pose at the trigger exactly
    bodies = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)

    def relay(msg: PoseStamped) -> None:
        out = RigidBodies()
        out.header = msg.header
        body = RigidBody(id=1, name="ee", tracking_valid=True)
        body.pose = msg.pose
        out.rigid_bodies.append(body)
        bodies.publish(out)

    ee = ros.subscribe(f"{arm}/ee_pose", PoseStamped)
    relay_sub = ros.node.create_subscription(PoseStamped, f"{arm}/ee_pose", relay, RELIABLE)
    fb = ros.subscribe(f"{arm}/trajectory_feedback", TrajectoryFeedbackStamped)
    results = ros.subscribe(f"{monitor}/monitor_results", MonitorResultsStamped)
    snapshot = ros.subscribe(f"{monitor}/half/ee", PoseStamped, LATCHED)
    assert mon_proc.wait_log("and the monitors of the goals on /tmg/simulated_arm/accepted_goals"), (
        mon_proc.log()
    )
    wait_subscribed(bodies)
    wait_for(
        lambda: (
            ros.node.count_publishers(f"{arm}/trajectory_feedback")
            and ros.node.count_subscribers(f"{arm}/accepted_goals") >= 1
        ),
        what="the monitor node on the arm's topics",
    )
    for collector in (ee, fb):  # volatile topics: the first rows must not be lost
        collector.wait_matched()
    # the arm publishes ee_pose even when idle: one received means its writers have
    # matched this process's readers (feedback is only published during a goal)
    ee.wait_for(timeout=30)
    probes = ros.publisher(f"{arm}/trajectory_feedback", TrajectoryFeedbackStamped, RELIABLE)
    wait_subscribed(probes)
    wait_results_flowing(probes, results)

    final = [0.5, -0.3, 0.2]
    g = QueueTrajectory.Goal(trajectory_id="loop-1")
    g.trajectory.joint_names = ["joint1", "joint2", "joint3"]
    for i in range(6):
        s = i / 5
        p = JointTrajectoryPoint(positions=[v * s for v in final], velocities=[0.0] * 3)
        t = 1.5 * s
        p.time_from_start = Duration(sec=int(t), nanosec=int((t % 1) * 1e9))
        g.trajectory.points.append(p)
    cond = TriggerCondition
    g.monitors = [
        Monitor(monitor_id="half", trigger_condition=cond(type=cond.RATIO, ratio_of_trajectory=0.5)),
        Monitor(
            monitor_id="t06",
            trigger_condition=cond(type=cond.TIME, time_from_start=Duration(nanosec=600_000_000)),
        ),
        Monitor(
            monitor_id="end", trigger_condition=cond(type=cond.JOINT_STATE, joint_state_tolerances=[0.01] * 3)
        ),
    ]
    g.monitors[2].trigger_condition.joint_state.name = ["joint1", "joint2", "joint3"]
    g.monitors[2].trigger_condition.joint_state.position = final
    client = ros.action_client(QueueTrajectory, f"{arm}/queue_trajectory")
    # the arm's accepted-goals writer must have matched the monitor's reader before the goal
    # whose monitors are checked: a goal reaching the monitor after its feedback began joins
    # late (seen under load: a last result without monitors, 10 results of loop-1, a result
    # against the wrong feedback). A goal without monitors, run first, proves that path.
    warm = QueueTrajectory.Goal(trajectory_id="warm-up")
    warm.trajectory.joint_names = list(g.trajectory.joint_names)
    for i in range(3):
        t = 0.1 * i
        warm.trajectory.points.append(
            JointTrajectoryPoint(
                positions=[0.0] * 3, velocities=[0.0] * 3, time_from_start=Duration(nanosec=int(t * 1e9))
            )
        )
    warm_send = client.send_goal_async(warm)
    warm_handle = wait_for(lambda: warm_send.done() and warm_send.result(), what="goal warm-up answered")
    assert warm_handle.accepted, arm_proc.log()
    warm_done = warm_handle.get_result_async()
    wait_for(lambda: warm_done.done() and warm_done.result(), what="warm-up finished")
    assert mon_proc.wait_log("goal 'warm-up': 0 of 0 monitors accepted"), mon_proc.log()
    send = client.send_goal_async(g)
    handle = wait_for(lambda: send.done() and send.result(), what="goal loop-1 answered")
    assert handle.accepted, arm_proc.log()
    done = handle.get_result_async()
    assert wait_for(lambda: done.done() and done.result(), what="loop-1 finished").result.is_finished
    assert mon_proc.wait_log("goal 'loop-1': 3 of 3 monitors accepted"), mon_proc.log()

    # the result may overtake the last feedback (another topic): wait for the feedback at the end
    end = fb.wait_for(lambda m: m.data.trajectory_id == "loop-1" and m.data.ratio_of_trajectory == 1.0)
    last_key = (end.header.stamp.sec, end.header.stamp.nanosec)
    feedback = {
        (m.header.stamp.sec, m.header.stamp.nanosec): m.data
        for m in fb.snapshot()
        if m.data.trajectory_id == "loop-1"
    }
    got = results.wait_for(lambda m: (m.header.stamp.sec, m.header.stamp.nanosec) == last_key)
    assert {r.monitor_id for r in got.monitor_results} == {"half", "t06", "end"}
    rows = [
        (
            feedback[(m.header.stamp.sec, m.header.stamp.nanosec)],
            {r.monitor_id: r.is_triggered for r in m.monitor_results},
        )
        for m in results.snapshot()
        if (m.header.stamp.sec, m.header.stamp.nanosec) in feedback
    ]
    assert len(rows) > 30, f"{len(rows)} results of loop-1"

    def expected(d, mid):
        if mid == "half":
            return d.ratio_of_trajectory >= 0.5
        if mid == "t06":
            return d.time_from_start.sec + d.time_from_start.nanosec * 1e-9 >= 0.6
        return all(abs(a - b) <= 0.01 for a, b in zip(d.current_joint_state.position, final))

    for mid in ("half", "t06", "end"):
        seen = [(expected(d, mid), hit[mid]) for d, hit in rows if mid in hit]
        assert all(want == hit for want, hit in seen), (mid, seen)
        assert seen[0][1] is False and seen[-1][1] is True, (mid, seen)

    # the snapshot: the end effector at the first feedback with half the trajectory done
    first_half = min(k for k, d in feedback.items() if d.ratio_of_trajectory >= 0.5)
    pose = snapshot.wait_for()
    assert (pose.header.stamp.sec, pose.header.stamp.nanosec) == first_half
    commanded = ee.wait_for(lambda m: (m.header.stamp.sec, m.header.stamp.nanosec) == first_half)
    assert pose.pose.position.x == pytest.approx(commanded.pose.position.x, abs=1e-9)
    assert pose.pose.position.z == pytest.approx(commanded.pose.position.z, abs=1e-9)

    # a goal with bad monitors, straight on the goals topic: each refused with its reason,
    # the good one kept, the node alive
    goals = ros.publisher(f"{arm}/accepted_goals", QueueTrajectory.Goal, LATCHED)
    bad = QueueTrajectory.Goal(trajectory_id="bad-monitors")
    bad.monitors = [
        Monitor(monitor_id="odd", trigger_condition=cond(type=9)),
        Monitor(
            monitor_id="short", trigger_condition=cond(type=cond.JOINT_STATE, joint_state_tolerances=[0.1])
        ),
        Monitor(monitor_id="ok", trigger_condition=cond(type=cond.RATIO, ratio_of_trajectory=0.2)),
    ]
    bad.monitors[1].trigger_condition.joint_state.position = [0.1, 0.2]
    goals.publish(bad)
    assert mon_proc.wait_log("goal 'bad-monitors': 1 of 3 monitors accepted"), mon_proc.log()
    log = mon_proc.log()
    assert "unknown trigger type 9" in log and "the lengths must match" in log
    assert mon_proc.alive() and arm_proc.alive()
    client.destroy()
    ros.node.destroy_subscription(relay_sub)


def test_trajectory_monitor_goal_after_feedback_and_repeated_ids(ros, procs):
    """A goal that arrives after its trajectory's first feedback adds its monitors from the
    next feedback on; a monitor_id repeated in a goal and a goal seen twice are refused
    with the reason."""
    from motion_control_interfaces.action import QueueTrajectory
    from motion_control_interfaces.msg import Monitor
    from motion_control_interfaces.msg import TriggerCondition as C

    ns = "/tml"
    proc = procs.start(
        TOOLS,
        "trajectory_monitor",
        namespace=ns,
        params={"feedback_topic": f"{ns}/feedback", "goals_topic": f"{ns}/goals"},
    )
    results = ros.subscribe(f"{ns}/trajectory_monitor/monitor_results", MonitorResultsStamped)
    assert proc.wait_log(f"and the monitors of the goals on {ns}/goals"), proc.log()
    fb = ros.publisher(f"{ns}/feedback", TrajectoryFeedbackStamped, RELIABLE)
    goals = ros.publisher(f"{ns}/goals", QueueTrajectory.Goal, LATCHED)
    wait_subscribed(fb)
    wait_subscribed(goals)
    wait_results_flowing(fb, results)  # the one result of this feedback must not be lost

    fb.publish(feedback(0, T0))  # ratio 0.1, before the goal
    first = results_of(results, 1)[0]
    assert list(first.monitor_results) == []
    goal = QueueTrajectory.Goal(trajectory_id="traj-1")
    goal.monitors = [
        Monitor(monitor_id="r3", trigger_condition=C(type=C.RATIO, ratio_of_trajectory=0.3)),
        Monitor(monitor_id="r3", trigger_condition=C(type=C.RATIO, ratio_of_trajectory=0.9)),
    ]
    goals.publish(goal)
    assert proc.wait_log("goal 'traj-1': 1 of 2 monitors accepted"), proc.log()
    assert "monitor_id 'r3' is already used" in proc.log()
    goals.publish(goal)
    assert proc.wait_log("goal 'traj-1' seen before"), proc.log()
    for i in range(1, 5):  # ratios 0.2 .. 0.5
        fb.publish(feedback(i, T0 + 0.5 * i))
    got = results_of(results, 5)
    assert [[(r.monitor_id, r.is_triggered) for r in m.monitor_results] for m in got[1:]] == [
        [("r3", False)],
        [("r3", True)],
        [("r3", True)],
        [("r3", True)],
    ]
    assert proc.alive()
