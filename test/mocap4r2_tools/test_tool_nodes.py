"""trajectory_error, robot_ground_truth and marker_viz end to end: real processes, real
DDS on loopback, inputs published from the test harness node (and, last, the
simulated_system feeding all three)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped, TransformStamped
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.qos import QoSProfile, ReliabilityPolicy
from scipy.spatial.transform import Rotation
from std_srvs.srv import Trigger
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for, wait_subscribed
from tf2_msgs.msg import TFMessage
from visualization_msgs.msg import Marker, MarkerArray

from mocap4r2_control.control_plane import SYSTEMS_QOS, SYSTEMS_TOPIC
from mocap4r2_control.tf_out import TF_QOS, TF_STATIC_QOS
from mocap4r2_interfaces.msg import (
    Marker as MocapMarker,
)
from mocap4r2_interfaces.msg import (
    Markers,
    MocapSystemInfo,
    RigidBodies,
    RigidBody,
    Segment,
    Skeleton,
    Skeletons,
    TrajectoryError,
)
from mocap4r2_interfaces.srv import SetOrigin
from mocap4r2_tools.trajectory import EvalOptions, Trajectory, evaluate

TOOLS = "mocap4r2_tools"
RELIABLE = QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE)
T0 = 1_700_000_000.0


# ------------------------------------------------------------------ helpers
def stamp_of(t: float):
    from builtin_interfaces.msg import Time

    sec = int(math.floor(t))
    return Time(sec=sec, nanosec=int(round((t - sec) * 1e9)))


def seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def set_pose(pose, p, q) -> None:
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in p)
    pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = (float(v) for v in q)


def bodies_msg(t: float, bodies: list[tuple[str, object, object, bool]], frame: str = "world") -> RigidBodies:
    msg = RigidBodies()
    msg.header.stamp = stamp_of(t)
    msg.header.frame_id = frame
    for i, (name, p, q, valid) in enumerate(bodies):
        body = RigidBody()
        body.id = i + 1
        body.name = name
        body.tracking_valid = valid
        set_pose(body.pose, p, q)
        msg.rigid_bodies.append(body)
    return msg


def wait_matched(publisher, timeout: float = WAIT) -> None:
    wait_subscribed(publisher, timeout)
    # our writer has matched; whether the remote reader has matched our writer yet cannot
    # be observed from here, so give it a moment before a burst
    time.sleep(0.2)


def wait_publisher(ros, topic: str, timeout: float = WAIT) -> None:
    """Until the node under test publishes ``topic`` and our subscriptions to it have
    matched its publisher (so they get it all)."""
    ours = [sub for sub in ros._subs if sub.topic_name == topic]

    def matched():
        return ros.node.count_publishers(topic) > 0 and all(sub.get_publisher_count() > 0 for sub in ours)

    wait_for(
        matched,
        timeout,
        lambda: (ros.node.count_publishers(topic), [sub.get_publisher_count() for sub in ours]),
        what=f"a matched publisher of {topic}",
    )


def set_parameter(ros, node: str, name: str, value: float):
    request = SetParameters.Request()
    request.parameters = [
        ParameterMsg(name=name, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value))
    ]
    return ros.call(SetParameters, f"{node}/set_parameters", request).results[0]


def wavy(n: int, rate: float, t0: float = T0) -> Trajectory:
    t = t0 + np.arange(n) / rate
    s = t - t0
    pos = np.c_[1.5 * np.cos(0.8 * s), np.sin(1.6 * s), 1.0 + 0.2 * np.sin(s)]
    rot = Rotation.from_rotvec(np.c_[0.1 * np.sin(s), 0.1 * np.cos(s), 0.8 * s])
    return Trajectory.build(t, pos, rot.as_quat())


FRAME = Rotation.from_euler("xyz", [0.03, -0.02, 1.1])
SHIFT = np.array([2.0, -1.0, 0.3])


def estimate_of(gt: Trajectory, every: int = 5, noise: float = 0.01) -> Trajectory:
    rng = np.random.default_rng(4)
    rows = np.arange(0, len(gt), every)
    inv = FRAME.inv()
    pos = inv.apply(gt.positions[rows] - SHIFT) + rng.normal(0, noise, (rows.size, 3))
    rot = (
        inv
        * Rotation.from_quat(gt.orientations)[rows]
        * Rotation.from_rotvec(rng.normal(0, noise, (rows.size, 3)))
    )
    return Trajectory.build(gt.stamps[rows] + 0.0005, pos, rot.as_quat())


# ------------------------------------------------------------------ trajectory_error
EST_TYPES = {
    "pose": PoseStamped,
    "pose_cov": PoseWithCovarianceStamped,
    "odometry": Odometry,
    "tf": TFMessage,
}
# /tf is one topic for the whole test session: frame names of this test alone, so no other
# test's transforms (live or latched on /tf_static) can join its chain
TF_MAP, TF_ODOM, TF_BASE = "te_map", "te_odom", "te_base_link"


def est_message(kind: str, t: float, p, q):
    if kind == "tf":
        edge = TransformStamped()
        edge.header.stamp = stamp_of(t)
        edge.header.frame_id = TF_ODOM
        edge.child_frame_id = TF_BASE
        tr = edge.transform
        tr.translation.x, tr.translation.y, tr.translation.z = (float(v) for v in p)
        tr.rotation.x, tr.rotation.y, tr.rotation.z, tr.rotation.w = (float(v) for v in q)
        return TFMessage(transforms=[edge])
    msg = EST_TYPES[kind]()
    msg.header.stamp = stamp_of(t)
    msg.header.frame_id = "odom"
    set_pose(msg.pose if kind == "pose" else msg.pose.pose, p, q)
    return msg


def probe_until(publish, answered, start: float, what: str, interval: float) -> list[float]:
    """Probe samples stamped from ``start`` (far before the data) are published every
    ``interval`` s until ``answered()``; returns their stamps.

    Our writer seeing the node's reader does not mean its reader has matched our writer
    yet, nor its writers our readers, and a reliable reader loses what comes before: a
    test's first samples are lost until both sides have matched, which only an answer
    proves."""
    stamps: list[float] = []

    def probe() -> bool:
        stamps.append(start + 0.01 * len(stamps))
        publish(stamps[-1])
        return answered()

    wait_for(probe, what=what, interval=interval)
    return stamps


def prime_and_reset(ros, out, gt_pub, est_pub, est_type: str, reset: str) -> None:
    """Probe pairs until the node has paired one (both readers deliver: until both
    subscriptions have matched, estimates sent go unpaired); once it has paired the last one
    sent (each topic arrives in order: nothing of the probes is left to come), it is reset."""
    p, q = (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)

    def publish(t: float) -> None:
        gt_pub.publish(bodies_msg(t, [("robot", p, q, True)]))
        est_pub.publish(est_message(est_type, t, p, q))

    def paired() -> bool:
        latest = out.snapshot()
        return bool(latest) and latest[-1].samples > 0

    sent = probe_until(publish, paired, T0 - 100.0, "a probe pair counted by the node", 0.2)
    out.wait_for(lambda m: abs(seconds(m.header.stamp) - sent[-1]) < 1e-6, timeout=WAIT)
    assert ros.call(Trigger, reset, Trigger.Request()).success
    out.clear()
    out.wait_for(lambda m: m.samples == 0, timeout=WAIT)


@pytest.mark.parametrize("est_type", ["odometry", "pose", "pose_cov", "tf"])
def test_trajectory_error_equals_the_offline_evaluation(ros, procs, est_type):
    ns = f"/te_{est_type}"
    # a static map -> odom in front of the estimator's odom -> base_link
    static = (np.array([0.5, 0.0, 0.0]), Rotation.from_euler("z", 0.3))
    params = {
        "gt_topic": f"{ns}/rigid_bodies",
        "gt_body": "robot",
        "est_type": est_type,
        "est_topic": f"{ns}/estimate",
        "est_parent_frame": TF_MAP,
        "est_child_frame": TF_BASE,
        "align": "se3",
        "rpe_delta": 5.0,
        "rpe_unit": "frames",
        "max_diff": 0.002,
        "publish_rate": 10.0,
        "qos_reliable": True,
        "output_topic": f"{ns}/trajectory_error",
    }
    proc = procs.start(TOOLS, "trajectory_error", name="te", namespace=ns, params=params)
    out = ros.subscribe(f"{ns}/trajectory_error", TrajectoryError)
    gt_pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    if est_type == "tf":
        est_pub = ros.publisher("/tf", TFMessage, TF_QOS)
        static_pub = ros.publisher("/tf_static", TFMessage, TF_STATIC_QOS)
        edge = TransformStamped()
        edge.header.frame_id, edge.child_frame_id = TF_MAP, TF_ODOM
        edge.transform.translation.x = float(static[0][0])
        q = static[1].as_quat()
        (
            edge.transform.rotation.x,
            edge.transform.rotation.y,
            edge.transform.rotation.z,
            edge.transform.rotation.w,
        ) = (float(v) for v in q)
        static_msg = TFMessage(transforms=[edge])
    else:
        est_pub = ros.publisher(f"{ns}/estimate", EST_TYPES[est_type], RELIABLE)
    wait_matched(gt_pub)
    wait_matched(est_pub)
    first = out.wait_for(timeout=WAIT)
    assert first.samples == 0 and not first.aligned and math.isfinite(first.ate_rmse)
    if est_type != "tf":  # (the tf chain is only complete later, on purpose)
        prime_and_reset(ros, out, gt_pub, est_pub, est_type, f"{ns}/te/reset")

    gt = wavy(600, 100.0)
    est = estimate_of(gt)
    k = 0
    for i in range(len(gt)):
        if est_type == "tf" and i == 100:
            # map -> odom only after the first 20 estimates, as when a latched static
            # transform reaches the node late: those estimates are held, not lost (a
            # make test-load run formed 119 of 120 pairs when it came late by chance)
            static_pub.publish(static_msg)
        gt_pub.publish(
            bodies_msg(
                gt.stamps[i],
                [
                    ("other", (0, 0, 0), (0, 0, 0, 1), True),
                    ("robot", gt.positions[i], gt.orientations[i], True),
                ],
            )
        )
        while k < len(est) and est.stamps[k] <= gt.stamps[i]:
            est_pub.publish(est_message(est_type, est.stamps[k], est.positions[k], est.orientations[k]))
            k += 1
        time.sleep(0.0015)
    last = out.wait_for(lambda m: m.samples == len(est), timeout=30)

    if est_type == "tf":  # what the node sees: map -> base_link
        est = Trajectory.build(
            est.stamps,
            static[1].apply(est.positions) + static[0],
            (static[1] * Rotation.from_quat(est.orientations)).as_quat(),
        )
    expected = evaluate(gt, est, EvalOptions(max_diff=0.002, align="se3", rpe_delta=5, rpe_unit="frames"))
    assert last.aligned
    assert last.header.frame_id == "world"
    assert last.ate_rmse == pytest.approx(expected.ate_stats.rmse, rel=1e-9)
    assert last.ate_mean == pytest.approx(expected.ate_stats.mean, rel=1e-9)
    assert last.ate_max == pytest.approx(expected.ate_stats.max, rel=1e-9)
    assert last.rpe_trans_rmse == pytest.approx(expected.rpe_trans_stats.rmse, rel=1e-9)
    assert last.rpe_rot_rmse == pytest.approx(expected.rpe_rot_stats.rmse, rel=1e-9)
    a = last.alignment
    assert np.allclose([a.position.x, a.position.y, a.position.z], expected.alignment.translation, atol=1e-9)
    got = Rotation.from_quat([a.orientation.x, a.orientation.y, a.orientation.z, a.orientation.w])
    assert (got.inv() * Rotation.from_matrix(expected.alignment.rotation)).magnitude() < 1e-9
    assert 0.01 < last.ate_rmse < 0.03  # the 1 cm per axis noise put in
    assert abs(seconds(last.header.stamp) - expected.gt.stamps[-1]) < 1e-6
    assert proc.alive()


def test_trajectory_error_degenerate_reset_and_parameters(ros, procs):
    ns = "/te_misc"
    params = {
        "gt_topic": f"{ns}/rigid_bodies",
        "gt_body": "robot",
        "est_type": "pose",
        "est_topic": f"{ns}/est",
        "align": "bogus",
        "rpe_unit": "parsecs",
        "publish_rate": 20.0,
        "qos_reliable": True,
        "output_topic": f"{ns}/trajectory_error",
    }
    proc = procs.start(TOOLS, "trajectory_error", name="te", namespace=ns, params=params)
    out = ros.subscribe(f"{ns}/trajectory_error", TrajectoryError)
    gt_pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    est_pub = ros.publisher(f"{ns}/est", PoseStamped, RELIABLE)
    wait_matched(gt_pub)
    wait_matched(est_pub)
    assert proc.wait_log("parameter align must be one of", timeout=WAIT)
    assert proc.wait_log("parameter rpe_unit must be one of", timeout=WAIT)

    # a robot standing still: not aligned (the reason is logged), finite numbers
    for i in range(100):
        t = T0 + i * 0.01
        gt_pub.publish(bodies_msg(t, [("robot", (1.0, 2.0, 0.0), (0, 0, 0, 1), True)]))
        if i % 4 == 0:
            est_pub.publish(est_message("pose", t, (0.0, 0.0, 0.0), (0, 0, 0, 1)))
        time.sleep(0.002)
    still = out.wait_for(lambda m: m.samples >= 20, timeout=WAIT)
    assert not still.aligned
    assert still.ate_rmse == pytest.approx(math.sqrt(5.0), abs=1e-12)  # unaligned: |(1, 2, 0)|
    assert all(
        math.isfinite(v)
        for v in (still.ate_rmse, still.ate_mean, still.ate_max, still.rpe_trans_rmse, still.rpe_rot_rmse)
    )
    assert proc.wait_log("not aligned: the", timeout=WAIT)

    # untracked samples are not ground truth: the pair count does not move
    count = out.wait_for(lambda m: m.samples >= 25, timeout=WAIT).samples
    for i in range(100, 140):
        t = T0 + i * 0.01
        gt_pub.publish(bodies_msg(t, [("robot", (5.0, 5.0, 5.0), (0, 0, 0, 1), False)]))
        if i % 4 == 0:
            est_pub.publish(est_message("pose", t, (0.0, 0.0, 0.0), (0, 0, 0, 1)))
        time.sleep(0.002)
    time.sleep(0.5)  # deliberately lets time pass: the untracked samples must not add pairs
    out.clear()
    assert out.wait_for(timeout=WAIT).samples == count

    # runtime changes: a bad value is refused with the reason, a good one restarts the evaluation
    refused = set_parameter(ros, f"{ns}/te", "max_diff", -1.0)
    assert not refused.successful and "max_diff must be >= 0.0" in refused.reason
    reply = ros.call(Trigger, f"{ns}/te/reset", Trigger.Request())
    assert reply.success and f"cleared {count} pose pairs" == reply.message
    out.clear()
    assert out.wait_for(timeout=WAIT).samples == 0
    assert proc.alive()


def _edge(parent: str, child: str, t: float, xyz, yaw: float) -> TransformStamped:
    edge = TransformStamped()
    edge.header.stamp = stamp_of(t)
    edge.header.frame_id, edge.child_frame_id = parent, child
    edge.transform.translation.x, edge.transform.translation.y, edge.transform.translation.z = map(float, xyz)
    q = Rotation.from_euler("z", yaw).as_quat()
    (
        edge.transform.rotation.x,
        edge.transform.rotation.y,
        edge.transform.rotation.z,
        edge.transform.rotation.w,
    ) = map(float, q)
    return edge


def test_tf_chain_holds_estimates_until_the_static_edge_arrives():
    """Estimates (odom -> base_link) that come before map -> odom are held and given back,
    composed and in order, once it arrives; beyond the bound the oldest are dropped and
    counted. Before, they were lost (the node formed 119 of 120 pairs)."""
    from mocap4r2_tools.trajectory_error import TfChain

    chain = TfChain("map", "base_link", max_held=3)
    assert chain.update(_edge("odom", "base_link", 1.0, (1, 0, 0), 0.0), static=False) == []
    assert chain.update(_edge("odom", "base_link", 2.0, (2, 0, 0), 0.5), static=False) == []
    assert chain.held == 2 and chain.dropped == 0
    assert chain.update(_edge("other", "thing", 2.5, (0, 0, 0), 0.0), static=False) == []  # unrelated edge
    ready = chain.update(_edge("map", "odom", 0.0, (0, 1, 0), np.pi / 2), static=True)
    assert [r[0] for r in ready] == pytest.approx([1.0, 2.0], abs=1e-9)
    # map -> odom turns x into y and shifts by (0, 1, 0)
    np.testing.assert_allclose(ready[0][1], [0.0, 2.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(ready[1][1], [0.0, 3.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(
        Rotation.from_quat(ready[1][2]).as_euler("xyz")[2], np.pi / 2 + 0.5, atol=1e-12
    )
    assert chain.held == 0
    # with the chain complete an estimate is known at once
    (now,) = chain.update(_edge("odom", "base_link", 3.0, (0, 0, 0), 0.0), static=False)
    np.testing.assert_allclose(now[1], [0.0, 1.0, 0.0], atol=1e-12)

    # bounded: a chain that never completes keeps only the newest max_held
    lost = TfChain("map", "base_link", max_held=3)
    for k in range(5):
        assert lost.update(_edge("odom", "base_link", float(k), (k, 0, 0), 0.0), static=False) == []
    assert lost.held == 3 and lost.dropped == 2
    ready = lost.update(_edge("map", "odom", 0.0, (0, 0, 0), 0.0), static=True)
    assert [r[0] for r in ready] == [2.0, 3.0, 4.0]
    # a broken edge (zero quaternion) is ignored, not an estimate
    bad = _edge("odom", "base_link", 9.0, (0, 0, 0), 0.0)
    bad.transform.rotation.w = 0.0
    assert lost.update(bad, static=False) == [] and lost.held == 0


# ------------------------------------------------------------------ robot_ground_truth
OFFSET_XYZ = np.array([0.1, 0.0, 0.2])
OFFSET_YAW = math.pi / 2
SPEED, YAW_RATE = 0.5, 0.2


def body_pose(t: float):
    s = t - T0
    yaw = YAW_RATE * s
    return np.array([SPEED * s, 0.0, 0.3]), Rotation.from_euler("z", yaw)


def base_pose(t: float):
    p, r = body_pose(t)
    return p + r.apply(OFFSET_XYZ), r * Rotation.from_euler("z", OFFSET_YAW)


def odom_pose(msg: Odometry):
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    return np.array([p.x, p.y, p.z]), Rotation.from_quat([q.x, q.y, q.z, q.w])


def assert_odometry_of(received: list, sent: list[float]) -> None:
    """Odometry for the samples sent after the first (which has no twist yet), in order,
    each stamped as its mocap sample. A message DDS lost on the way to this process (the
    publisher keeps a bounded history) may be missing, never one of another stamp."""
    stamps = [seconds(m.header.stamp) for m in received]
    indices = [min(range(len(sent)), key=lambda i: abs(sent[i] - t)) for t in stamps]
    assert all(abs(sent[i] - t) < 1e-9 for i, t in zip(indices, stamps)), (stamps, sent)
    assert 0 not in indices and indices == sorted(set(indices)) and indices[-1] == len(sent) - 1, indices
    assert len(indices) >= (len(sent) - 1) // 2, indices


def test_robot_ground_truth_odometry_tf_origin_and_tracking_loss(ros, procs):
    ns = "/rg"
    params = {
        "rigid_bodies_topic": f"{ns}/rigid_bodies",
        "body": "robot",
        "root_frame": "world",
        "robot_frame": "base_link",
        "offset_xyz": [float(v) for v in OFFSET_XYZ],
        "offset_rpy": [0.0, 0.0, OFFSET_YAW],
        "twist_window": 0.0,
        "odom_topic": f"{ns}/odom",
        "timeout": 0.3,
        "diagnostics_period": 0.2,
    }
    proc = procs.start(TOOLS, "robot_ground_truth", name="robot_gt", namespace=ns, params=params)
    odom = ros.subscribe(f"{ns}/odom", Odometry)
    tf = ros.subscribe("/tf", TFMessage, TF_QOS)
    diag = ros.subscribe("/diagnostics", DiagnosticArray)
    pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    wait_matched(pub)
    wait_publisher(ros, f"{ns}/odom")

    def send(i: int, valid: bool = True, present: bool = True) -> float:
        t = T0 + i * 0.01
        p, r = body_pose(t)
        bodies = [("table", (1.0, 1.0, 0.0), (0, 0, 0, 1), True)]
        if present:
            bodies.append(("robot", p, r.as_quat(), valid))
        pub.publish(bodies_msg(t, bodies))
        time.sleep(0.003)
        return t

    # probes until their odometry comes back (a make test-load run received none of the
    # 50 samples' odometry without), and their last /tf; one untracked probe then makes
    # the node start over, as it is at the data's first sample; what they left is cleared
    probes = probe_until(
        lambda t: pub.publish(bodies_msg(t, [("robot", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), True)])),
        lambda: any(seconds(m.header.stamp) < T0 - 1.0 for m in odom.snapshot()),
        T0 - 50.0,
        "odometry of a probe sample",
        0.1,
    )
    odom.wait_for(lambda m: seconds(m.header.stamp) == pytest.approx(probes[-1], abs=1e-6), timeout=WAIT)
    tf.wait_for(
        lambda m: any(seconds(e.header.stamp) == pytest.approx(probes[-1], abs=1e-6) for e in m.transforms),
        timeout=WAIT,
    )
    diag.clear()
    pub.publish(bodies_msg(T0 - 1.0, [("robot", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), False)]))
    diag.wait_for(
        lambda m: any("not tracked" in s.message and "robot" in s.name for s in m.status), timeout=WAIT
    )
    odom.clear()
    tf.clear()

    sent = [send(i) for i in range(50)]
    odom.wait_for(lambda m: seconds(m.header.stamp) == pytest.approx(sent[-1], abs=1e-6), timeout=WAIT)
    first = odom.snapshot()

    # the first sample has no twist yet: odometry starts with the second, each stamped as the mocap
    assert_odometry_of(first, sent)
    for m in first:
        t = seconds(m.header.stamp)
        p, r = odom_pose(m)
        ep, er = base_pose(t)
        assert np.allclose(p, ep, atol=1e-9) and (r.inv() * er).magnitude() < 1e-9
        assert (m.header.frame_id, m.child_frame_id) == ("world", "base_link_gt")
        # the base moves at v along the body x axis plus w x (R offset): in the base frame
        tw = m.twist.twist
        assert tw.angular.z == pytest.approx(YAW_RATE, abs=1e-9)
        world_velocity = np.array([SPEED, 0, 0]) + np.cross(
            [0, 0, YAW_RATE], body_pose(t)[1].apply(OFFSET_XYZ)
        )
        expected = base_pose(t)[1].apply(world_velocity, inverse=True)
        assert np.allclose([tw.linear.x, tw.linear.y, tw.linear.z], expected, atol=2e-3)
    tf_msg = tf.wait_for(
        lambda m: any(e.child_frame_id == "base_link_gt" for e in m.transforms), timeout=WAIT
    )
    edge = next(e for e in tf_msg.transforms if e.child_frame_id == "base_link_gt")
    assert edge.header.frame_id == "world"
    t_edge = seconds(edge.header.stamp)
    assert min(abs(t_edge - s) for s in sent) < 1e-6  # the mocap stamp
    tr = edge.transform.translation
    assert np.allclose([tr.x, tr.y, tr.z], base_pose(t_edge)[0], atol=1e-9)

    # tracking loss: nothing published for the lost samples, diagnostics say why (not the
    # untracked probe's: the node has been tracking since)
    diag.wait_for(
        lambda m: any(s.level == DiagnosticStatus.OK and "tracking" in s.message for s in m.status),
        timeout=WAIT,
    )
    odom.clear()
    diag.clear()
    lost = [send(i, valid=False) for i in range(50, 80)]
    status = diag.wait_for(
        lambda m: any("not tracked" in s.message and "robot" in s.name for s in m.status), timeout=WAIT
    ).status[0]
    assert status.level in (DiagnosticStatus.WARN, DiagnosticStatus.ERROR)
    time.sleep(0.5)  # deliberately lets time pass: nothing may be published for lost samples
    assert odom.snapshot() == []
    refused = ros.call(SetOrigin, f"{ns}/robot_gt/set_origin", SetOrigin.Request(use_current=True))
    assert not refused.success and "not tracked" in refused.message
    missing = [send(i, present=False) for i in range(80, 90)]
    diag.wait_for(
        lambda m: any("not in rigid_bodies" in s.message and "table" in s.message for s in m.status),
        timeout=WAIT,
    )
    assert odom.snapshot() == [] and lost and missing

    # back: the first fresh sample gives /tf only, odometry resumes with the second
    back = [send(i) for i in range(90, 100)]
    odom.wait_for(lambda m: seconds(m.header.stamp) == pytest.approx(back[-1], abs=1e-6), timeout=WAIT)
    assert_odometry_of(odom.snapshot(), back)
    diag.wait_for(
        lambda m: any(s.level == DiagnosticStatus.OK and "tracking" in s.message for s in m.status),
        timeout=WAIT,
    )

    # origin at the current pose: from now on poses are relative to it
    reply = ros.call(SetOrigin, f"{ns}/robot_gt/set_origin", SetOrigin.Request(use_current=True))
    assert reply.success, reply.message
    origin_p, origin_r = base_pose(back[-1])
    odom.clear()
    after = [send(i) for i in range(100, 110)]
    odom.wait_for(lambda m: seconds(m.header.stamp) == pytest.approx(after[-1], abs=1e-6), timeout=WAIT)
    for m in odom.snapshot():
        p, r = odom_pose(m)
        ep, er = base_pose(seconds(m.header.stamp))
        assert np.allclose(p, origin_r.apply(ep - origin_p, inverse=True), atol=1e-9)
        assert (r.inv() * origin_r.inv() * er).magnitude() < 1e-9
        assert m.twist.twist.angular.z == pytest.approx(YAW_RATE, abs=1e-9)  # the twist does not jump

    # an explicit origin, and a refused one
    request = SetOrigin.Request(use_current=False)
    set_pose(request.origin, (1.0, 2.0, 0.0), Rotation.from_euler("z", 0.5).as_quat())
    assert ros.call(SetOrigin, f"{ns}/robot_gt/set_origin", request).success
    bad = SetOrigin.Request(use_current=False)
    set_pose(bad.origin, (0, 0, 0), (0, 0, 0, 0))
    reply = ros.call(SetOrigin, f"{ns}/robot_gt/set_origin", bad)
    assert not reply.success and "unit quaternion" in reply.message
    # a NaN position is refused for what it is (the orientation is fine)
    nan_position = SetOrigin.Request(use_current=False)
    set_pose(nan_position.origin, (float("nan"), 0.0, 0.0), (0, 0, 0, 1))
    reply = ros.call(SetOrigin, f"{ns}/robot_gt/set_origin", nan_position)
    assert not reply.success and "position" in reply.message and "orientation" not in reply.message, (
        reply.message
    )
    odom.clear()
    final = [send(i) for i in range(110, 115)]
    m = odom.wait_for(lambda m: seconds(m.header.stamp) == pytest.approx(final[-1], abs=1e-6), timeout=WAIT)
    p, _ = odom_pose(m)
    ep, _ = base_pose(final[-1])
    assert np.allclose(p, Rotation.from_euler("z", 0.5).apply(ep - [1.0, 2.0, 0.0], inverse=True), atol=1e-9)
    assert proc.alive()


def test_robot_ground_truth_without_a_body_reports_and_survives(ros, procs):
    proc = procs.start(
        TOOLS,
        "robot_ground_truth",
        name="robot_gt",
        namespace="/rg_none",
        params={
            "rigid_bodies_topic": "/rg_none/rigid_bodies",
            "offset_xyz": [1.0, 2.0],
            "diagnostics_period": 0.2,
        },
    )
    diag = ros.subscribe("/diagnostics", DiagnosticArray)
    assert proc.wait_log("offset_xyz must be a list of 3 numbers", timeout=WAIT)
    assert proc.wait_log("parameter body is empty", timeout=WAIT)
    status = diag.wait_for(
        lambda m: any(s.name.startswith("/rg_none/robot_gt") for s in m.status), timeout=WAIT
    ).status[0]
    assert status.level == DiagnosticStatus.ERROR and "body is empty" in status.message
    assert proc.alive()


# ------------------------------------------------------------------ marker_viz
def markers_msg(t: float) -> Markers:
    msg = Markers()
    msg.header.stamp = stamp_of(t)
    msg.header.frame_id = "world"
    specs = [
        (101, "a:m1", (0, 0, 1), False),
        (102, "a:m2", (0.1, 0, 1), False),
        (103, "a:m3", (0, 0.1, 1), False),
        (-1, "", (2, 2, 0.5), False),
        (-1, "", (2, 2.5, 0.5), False),
        (104, "a:m4", (0.1, 0.1, 1), True),
    ]
    for marker_id, name, p, occluded in specs:
        m = MocapMarker(id=marker_id, name=name, occluded=occluded, residual=-1.0)
        m.position.x, m.position.y, m.position.z = (float(v) for v in p)
        msg.markers.append(m)
    return msg


def skeletons_msg(t: float) -> Skeletons:
    msg = Skeletons()
    msg.header.stamp = stamp_of(t)
    msg.header.frame_id = "world"
    sk = Skeleton(id=7, name="walker", tracking_valid=True)
    for seg_id, parent, z, valid in ((1, -1, 1.0, True), (2, 1, 1.4, True), (3, 2, 1.6, False)):
        seg = Segment(id=seg_id, name=f"s{seg_id}", parent_id=parent, tracking_valid=valid)
        set_pose(seg.pose, (0.0, 0.0, z), (0, 0, 0, 1))
        sk.segments.append(seg)
    msg.skeletons.append(sk)
    return msg


def by_ns(array: MarkerArray) -> dict[str, list[Marker]]:
    out: dict[str, list[Marker]] = {}
    for m in array.markers:
        out.setdefault(m.ns, []).append(m)
    return out


def test_marker_viz_draws_markers_bodies_and_skeletons(ros, procs):
    proc = procs.start(
        TOOLS,
        "marker_viz",
        name="viz",
        namespace="/mv",
        params={
            "systems": ["/mvsys"],
            "discover": False,
            "rate": 5.0,
            "axis_length": 0.2,
            "lifetime": 0.5,
            "output_topic": "/mv/markers",
        },
    )
    out = ros.subscribe("/mv/markers", MarkerArray)
    pubs = [
        ros.publisher("/mvsys/markers", Markers, RELIABLE),
        ros.publisher("/mvsys/rigid_bodies", RigidBodies, RELIABLE),
        ros.publisher("/mvsys/skeletons", Skeletons, RELIABLE),
    ]
    for pub in pubs:
        wait_matched(pub)
    yaw = Rotation.from_euler("z", math.pi / 2)
    start = time.monotonic()
    for i in range(100):  # 100 Hz input for about a second
        t = T0 + i * 0.01
        pubs[0].publish(markers_msg(t))
        pubs[1].publish(
            bodies_msg(
                t, [("a", (1.0, 0.0, 1.0), yaw.as_quat(), True), ("b", (3.0, 3.0, 0.0), (0, 0, 0, 1), False)]
            )
        )
        pubs[2].publish(skeletons_msg(t))
        time.sleep(0.01)
    array = out.wait_for(
        lambda m: {"mvsys/labeled_markers", "mvsys/bodies", "mvsys/skeletons"} <= {x.ns for x in m.markers},
        timeout=WAIT,
    )
    elapsed = time.monotonic() - start
    layers = by_ns(array)
    labeled, unlabeled, occluded = (
        layers[f"mvsys/{k}_markers"][0] for k in ("labeled", "unlabeled", "occluded")
    )
    assert labeled.type == Marker.SPHERE_LIST and len(labeled.points) == 3
    assert len(unlabeled.points) == 2 and len(occluded.points) == 1
    colors = {(c.r, c.g, c.b) for c in (labeled.color, unlabeled.color, occluded.color)}
    assert len(colors) == 3 and occluded.color.a < 1.0
    assert labeled.header.frame_id == "world" and labeled.lifetime.nanosec == 500_000_000
    axes = {m.id: m for m in layers["mvsys/bodies"]}
    a, b = axes[1], axes[2]
    assert a.type == Marker.LINE_LIST and len(a.points) == 6
    x_tip = a.points[1]
    assert (x_tip.x, x_tip.y, x_tip.z) == pytest.approx((1.0, 0.2, 1.0), abs=1e-9)  # x axis turned to +y
    assert a.colors[0].r > 0.8 and a.colors[2].g > 0.7 and a.colors[4].b > 0.8
    assert all(abs(c.r - c.g) < 1e-6 and abs(c.g - c.b) < 1e-6 for c in b.colors)  # untracked: grey
    names = {m.id: m.text for m in layers["mvsys/body_names"]}
    assert names == {1: "a", 2: "b (not tracked)"}
    skeleton = layers["mvsys/skeletons"][0]
    assert len(skeleton.points) == 4 and len(layers["mvsys/skeleton_joints"][0].points) == 3
    last_segment = skeleton.colors[3]
    assert abs(last_segment.r - last_segment.b) < 1e-6  # untracked segment greyed
    # rate limited for display: at most 5 arrays per second whatever the input rate
    time.sleep(0.5)  # deliberately: part of the span the rate is measured over
    count = len(out.snapshot())
    assert 1 <= count <= 5 * (elapsed + 0.5) + 3
    assert proc.alive()


def test_marker_viz_discovers_announced_systems(ros, procs):
    proc = procs.start(
        TOOLS,
        "marker_viz",
        name="viz",
        namespace="/mvd",
        params={"rate": 10.0, "output_topic": "/mvd/markers"},
    )
    out = ros.subscribe("/mvd/markers", MarkerArray)
    announce = ros.publisher(SYSTEMS_TOPIC, MocapSystemInfo, SYSTEMS_QOS)
    info = MocapSystemInfo(
        system="/disc/fake",
        type="sim",
        frame_id="world",
        frame_rate=100.0,
        topics=["/disc/rigid_bodies", "/diagnostics"],
        topic_types=["mocap4r2_interfaces/msg/RigidBodies", "diagnostic_msgs/msg/DiagnosticArray"],
    )
    announce.publish(info)
    assert proc.wait_log("drawing /disc/rigid_bodies", timeout=WAIT)
    pub = ros.publisher("/disc/rigid_bodies", RigidBodies, RELIABLE)
    wait_matched(pub)

    # publish until the discovered system's bodies are drawn
    def drawn():
        pub.publish(bodies_msg(time.time(), [("wand", (0.0, 0.0, 1.0), (0, 0, 0, 1), True)]))
        return next((m for m in out.snapshot() if any(x.ns == "disc/body_names" for x in m.markers)), None)

    array = wait_for(drawn, WAIT, interval=0.5, what="a MarkerArray for the discovered system")
    assert array is not None, "no MarkerArray for the discovered system"
    assert [m.text for m in array.markers if m.ns == "disc/body_names"] == ["wand"]


# ------------------------------------------------------------------ with the simulated system
def test_tools_on_the_simulated_system(ros, procs, tmp_path):
    """sim -> robot_ground_truth -> trajectory_error (estimate = the robot_gt odometry,
    ground truth = the same body): a pure relay, so the ATE is ~0; marker_viz draws the
    discovered system."""
    scene = {
        "seed": 1,
        "rate": 100.0,
        "latency": 0.002,
        "latency_jitter": 0.0,
        "noise": 0.0,
        "occlusion": 0.0,
        "dropped_frames": 0.0,
        "unlabeled_markers": 2,
        "rigid_bodies": [
            {
                "name": "robot1",
                "id": 2,
                "trajectory": {"type": "figure_eight", "center": [0, 0, 0], "size": [2, 1], "period": 10.0},
            }
        ],
        "skeletons": [{"name": "walker", "id": 1}],
    }
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(scene))
    sim = procs.start(
        "mocap4r2_drivers",
        "simulated_system",
        name="sim",
        namespace="/s5",
        params={"scene": str(path), "autostart": True},
    )
    robot = procs.start(
        TOOLS,
        "robot_ground_truth",
        name="robot_gt",
        namespace="/s5",
        params={"rigid_bodies_topic": "/s5/rigid_bodies", "body": "robot1", "odom_topic": "/s5/odom"},
    )
    te = procs.start(
        TOOLS,
        "trajectory_error",
        name="te",
        namespace="/s5",
        params={
            "gt_topic": "/s5/rigid_bodies",
            "gt_body": "robot1",
            "est_type": "odometry",
            "est_topic": "/s5/odom",
            "max_diff": 0.001,
            "publish_rate": 5.0,
            "qos_reliable": True,
            "output_topic": "/s5/trajectory_error",
        },
    )
    viz = procs.start(
        TOOLS, "marker_viz", name="viz", namespace="/s5", params={"output_topic": "/s5/viz_markers"}
    )
    errors = ros.subscribe("/s5/trajectory_error", TrajectoryError)
    arrays = ros.subscribe("/s5/viz_markers", MarkerArray)
    result = errors.wait_for(lambda m: m.samples >= 100 and m.aligned, timeout=40)
    assert result.ate_rmse < 1e-9 and result.ate_max < 1e-9
    assert result.rpe_trans_rmse < 1e-9 and result.rpe_rot_rmse < 1e-9
    drawn = arrays.wait_for(
        lambda m: {"s5/bodies", "s5/skeletons", "s5/labeled_markers"} <= {x.ns for x in m.markers}, timeout=30
    )
    assert "robot1" in [m.text for m in drawn.markers if m.ns == "s5/body_names"]
    assert all(p.alive() for p in (sim, robot, te, viz))


# ------------------------------------------------------------------ shipped configuration
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_tools_yaml_is_valid_for_every_tool(procs):
    """config/tools.yaml: only declared parameters, every value valid, and each tool
    started with it as a real process takes it without a complaint."""
    from mocap4r2_tools import marker_viz, robot_ground_truth, trajectory_error

    config = yaml.safe_load((ROOT / "config" / "tools.yaml").read_text())
    modules = {
        "marker_viz": marker_viz,
        "robot_ground_truth": robot_ground_truth,
        "trajectory_error": trajectory_error,
    }
    assert set(config) == set(modules)
    for node, module in modules.items():
        specs = {spec.name: spec for spec in module.PARAMETERS}
        values = config[node]["ros__parameters"]
        assert set(values) <= set(specs), f"{node}: undeclared {set(values) - set(specs)}"
        for name, value in values.items():
            assert specs[name].validate(value) is None, (node, name, specs[name].validate(value))
    started = {
        node: procs.start(
            TOOLS, exe, ros=False, args=["--ros-args", "--params-file", str(ROOT / "config" / "tools.yaml")]
        )
        for node, exe in (
            ("marker_viz", "marker_viz"),
            ("robot_ground_truth", "robot_ground_truth"),
            ("trajectory_error", "trajectory_error"),
        )
    }
    assert started["robot_ground_truth"].wait_log(
        "following body 'robot1' on /sim/rigid_bodies", timeout=WAIT
    )
    assert started["trajectory_error"].wait_log(
        "estimate /robot_ground_truth/odom (odometry), align se3", timeout=WAIT
    )
    assert started["marker_viz"].wait_log("drawing /sim/rigid_bodies", timeout=WAIT)
    for node, proc in started.items():
        assert "[ERROR]" not in proc.log(), (node, proc.log())
        assert proc.alive(), node


def test_rviz_config_shows_the_markers_and_tf_in_world():
    rviz = yaml.safe_load((ROOT / "config" / "mocap4r2.rviz").read_text())
    manager = rviz["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "world"
    displays = {d["Class"]: d for d in manager["Displays"]}
    markers = displays["rviz_default_plugins/MarkerArray"]
    assert markers["Enabled"] and markers["Topic"]["Value"] == "/marker_viz/markers"
    assert displays["rviz_default_plugins/TF"]["Enabled"]
    assert displays["rviz_default_plugins/Odometry"]["Topic"]["Value"] == "/robot_ground_truth/odom"


def test_launch_file_describes_the_tools():
    pytest.importorskip(
        "launch_ros", reason="launch_ros exists only on a ROS 2 distribution, not in the wheels"
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("tools_launch", ROOT / "launch" / "tools.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    from launch_ros.actions import Node as LaunchNode

    nodes = [a for a in description.entities if isinstance(a, LaunchNode)]
    assert len(nodes) == 4  # three tools and RViz
