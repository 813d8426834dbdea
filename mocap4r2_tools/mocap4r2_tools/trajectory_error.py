"""Node `trajectory_error`: the error of a pose estimate against mocap ground truth, live.

Ground truth: one rigid body of any system's ``rigid_bodies`` (only tracked samples), or
a PoseStamped / Odometry topic. Estimate: PoseStamped, PoseWithCovarianceStamped,
Odometry, or a TF frame pair (the chain parent -> ... -> child, sampled whenever the
edge into the child frame is published, with that edge's stamp).

Pairs are associated online (nearest or interpolated ground truth within ``max_diff``),
then fed to running sums: the aligned ATE rmse and the RPE are exact and cost O(1) per
pair in bounded memory (see trajectory/running.py); ATE mean and max are exact up to
``history_size`` pairs, then computed on an evenly thinned subset. Publishes
mocap4r2_interfaces/TrajectoryError at ``publish_rate``; ``~/reset`` (std_srvs/Trigger)
starts over.

With ``time_offset_auto`` the estimate's time offset is found from the data
(trajectory/time_offset.py) on the last ``AUTO_SECONDS`` s of both streams, every
:data:`AUTO_PERIOD` s, and each value found is published on ``~/time_offset``
(std_msgs/Float64, s added to the estimate stamps, latched). Once
``AUTO_STABLE`` values in a row agree within ``AUTO_AGREE`` s (trajectory/offset_search.py),
their median is held: the evaluation restarts with it, replaying the buffered samples, and the search
stops until ``~/reset`` or a parameter change. Until then ``time_offset`` is used.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped, TransformStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage

from mocap4r2_control.geometry import pose_msg_arrays
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.rotation import quat_multiply, quat_rotate
from mocap4r2_control.tf_out import TF_QOS, TF_STATIC_QOS
from mocap4r2_control.timebase import stamp_to_seconds
from mocap4r2_interfaces.msg import RigidBodies, TrajectoryError

from .tool_node import ToolNode, body_row, frame_parameter, run_tool, topic_parameter
from .trajectory import alignment as alignment_methods
from .trajectory import association as association_methods
from .trajectory.association import PosePair, StreamAssociator
from .trajectory.metrics import RPE_UNITS
from .trajectory.offset_search import AUTO_AGREE, AUTO_STABLE, OffsetSearch, replay_order
from .trajectory.poses import TrajectoryInputError
from .trajectory.running import RunningATE, RunningRPE
from .trajectory.time_offset import DEFAULT_WINDOW

GT_TYPES = ("rigid_bodies", "pose", "odometry")
EST_TYPES = ("pose", "pose_cov", "odometry", "tf", "rigid_bodies")
# /tf samples kept for this node while it is busy (tf2's listeners keep 100)
TF_ESTIMATE_DEPTH = 2000
#: where a pose stream goes: sink(header, geometry_msgs/Pose)
PoseSink = Callable[[Any, Any], None]
# time_offset_auto: how often (s) the offset is searched (the rest: trajectory/offset_search.py)
AUTO_PERIOD = 2.0

PARAMETERS = (
    topic_parameter("gt_topic", "rigid_bodies", "Ground truth topic."),
    ParameterSpec(
        "gt_type",
        "rigid_bodies",
        "Ground truth message: rigid_bodies (mocap4r2_interfaces/RigidBodies), "
        "pose (PoseStamped) or odometry.",
        choices=GT_TYPES,
        read_only=True,
    ),
    ParameterSpec("gt_body", "", "Rigid body name, when gt_type is rigid_bodies.", read_only=True),
    topic_parameter("est_topic", "odom", "Estimate topic (ignored for tf)."),
    ParameterSpec(
        "est_type",
        "odometry",
        "Estimate message: pose (PoseStamped), pose_cov "
        "(PoseWithCovarianceStamped), odometry, tf, or rigid_bodies (e.g. a second mocap system).",
        choices=EST_TYPES,
        read_only=True,
    ),
    ParameterSpec("est_body", "", "Rigid body name, when est_type is rigid_bodies.", read_only=True),
    frame_parameter(
        "est_parent_frame", "odom", "TF parent frame of the estimate (est_type tf).", read_only=True
    ),
    frame_parameter(
        "est_child_frame", "base_link", "TF child frame of the estimate (est_type tf).", read_only=True
    ),
    ParameterSpec(
        "association",
        "nearest",
        "nearest ground truth pose, or ground truth interpolated (slerp) at the estimate stamps.",
        choices=association_methods.METHODS,
    ),
    ParameterSpec(
        "max_diff", 0.01, "Largest stamp difference of a pose pair, s.", min_value=0.0, max_value=10.0
    ),
    ParameterSpec("time_offset", 0.0, "Seconds added to the estimate stamps.", min_value=-1e6, max_value=1e6),
    ParameterSpec(
        "time_offset_auto",
        False,
        "Find the time offset from the data (speed, angular rate, then ATE), publish it on "
        "~/time_offset and hold it once stable; time_offset is used until then.",
    ),
    ParameterSpec(
        "time_offset_window",
        DEFAULT_WINDOW,
        "With time_offset_auto: the offset is searched within +- this many seconds.",
        min_value=0.01,
        max_value=60.0,
    ),
    ParameterSpec(
        "align",
        "se3",
        "Alignment of the estimate: none, se3, sim3, posyaw (translation + yaw) or origin (first pose).",
        choices=alignment_methods.METHODS,
    ),
    ParameterSpec("align_first_n", 0, "Align on the first N pose pairs only; 0: on all.", min_value=0),
    ParameterSpec("rpe_delta", 1.0, "RPE step (consecutive pairs).", min_value=1e-9),
    ParameterSpec(
        "rpe_unit", "frames", "RPE step unit: frames, m (ground truth path) or s.", choices=RPE_UNITS
    ),
    ParameterSpec(
        "publish_rate", 2.0, "TrajectoryError messages per second.", min_value=0.01, max_value=1000.0
    ),
    topic_parameter("output_topic", "trajectory_error", "Output topic."),
    ParameterSpec(
        "history_size",
        10000,
        "Pose pairs kept for the ATE mean and max (memory bound).",
        min_value=2,
        max_value=10_000_000,
    ),
    ParameterSpec(
        "gt_buffer", 5.0, "Seconds of ground truth kept for late estimates.", min_value=0.01, max_value=600.0
    ),
    ParameterSpec(
        "qos_reliable",
        False,
        "Reliable subscriptions (false: best effort, which also matches best-effort publishers).",
        read_only=True,
    ),
)

_EVALUATION = {
    "association",
    "max_diff",
    "time_offset",
    "time_offset_auto",
    "time_offset_window",
    "align",
    "align_first_n",
    "rpe_delta",
    "rpe_unit",
    "history_size",
    "gt_buffer",
}


class TrajectoryErrorNode(ToolNode):
    """The node: ground truth and estimate in, TrajectoryError out."""

    def __init__(self, **kwargs):
        super().__init__("trajectory_error", PARAMETERS, **kwargs)
        cfg = self.values()
        log = self.get_logger()
        if cfg["gt_type"] == "rigid_bodies" and not cfg["gt_body"]:
            log.error("parameter gt_body is empty: set it to the rigid body to use as ground truth")
        if cfg["est_type"] == "rigid_bodies" and not cfg["est_body"]:
            log.error("parameter est_body is empty: set it to the rigid body to evaluate")
        self._build_evaluation()
        # a deep queue: 1 kHz ground truth must survive a pause of the executor
        qos = QoSProfile(
            depth=1000,
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        self._subscribe_gt(cfg, qos)
        self._subscribe_est(cfg, qos)
        self._pub = self.create_publisher(TrajectoryError, cfg["output_topic"], 10)
        self._timer = self.create_timer(1.0 / cfg["publish_rate"], self._publish)
        self.create_service(Trigger, "~/reset", self._on_reset)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._offset_pub = self.create_publisher(Float64, "~/time_offset", latched)
        self.create_timer(AUTO_PERIOD, self._search_offset)
        self._gt_count = 0
        self._est_count = 0
        self._started = time.monotonic()
        self._last_reason = ""
        self._frame_id = ""
        self.mark_ready()
        est = (
            f"tf {cfg['est_parent_frame']} -> {cfg['est_child_frame']}"
            if cfg["est_type"] == "tf"
            else f"{self.resolve_topic_name(cfg['est_topic'])} ({cfg['est_type']})"
        )
        gt_body = f" body {cfg['gt_body']!r}" if cfg["gt_type"] == "rigid_bodies" else ""
        log.info(
            f"ground truth {self.resolve_topic_name(cfg['gt_topic'])}{gt_body}, estimate {est}, "
            f"align {cfg['align']}, publishing {self.resolve_topic_name(cfg['output_topic'])}"
        )

    # ------------------------------------------------------------------ setup
    def _build_evaluation(self) -> None:
        cfg = self.values()
        self.associator = StreamAssociator(
            max_diff=cfg["max_diff"],
            offset=cfg["time_offset"],
            method=cfg["association"],
            horizon=cfg["gt_buffer"],
        )
        self.ate = RunningATE(cfg["align"], cfg["align_first_n"], cfg["history_size"])
        unit = cfg["rpe_unit"]
        delta = cfg["rpe_delta"]
        if unit == "frames" and delta != int(delta):
            self.get_logger().error(
                f"rpe_delta {delta} is not a whole number of frames; using {max(1, round(delta))}"
            )
            delta = max(1, round(delta))
        self.rpe = RunningRPE(delta, unit)
        self._last_stamp: float | None = None
        # time_offset_auto: raw samples (stamp, position, orientation) kept for the search
        self.offset_search = cfg["time_offset_auto"]
        self.offset_held: float | None = None
        self._offset = OffsetSearch()

    def on_parameters_changed(self, names: set[str]) -> None:
        if names & _EVALUATION:
            self._build_evaluation()
            self.get_logger().info(f"{', '.join(sorted(names))} changed: evaluation restarted")
        if "publish_rate" in names:
            self._timer.cancel()
            self.destroy_timer(self._timer)
            self._timer = self.create_timer(1.0 / self.value("publish_rate"), self._publish)

    def _subscribe_gt(self, cfg: dict, qos: QoSProfile) -> None:
        subscribe_poses(
            self, cfg["gt_type"], topic=cfg["gt_topic"], body=cfg["gt_body"], sink=self._gt, qos=qos
        )

    def _subscribe_est(self, cfg: dict, qos: QoSProfile) -> None:
        if cfg["est_type"] != "tf":
            subscribe_poses(
                self, cfg["est_type"], topic=cfg["est_topic"], body=cfg["est_body"], sink=self._est, qos=qos
            )
            return
        self._tf_chain = TfChain(cfg["est_parent_frame"], cfg["est_child_frame"], TF_ESTIMATE_DEPTH)
        # tf2's QoS with a deeper history: every estimate is a pose pair, and a
        # 100-deep queue lost most of a 600-pose burst when this process was slowed
        self.create_subscription(
            TFMessage,
            "/tf",
            self._on_tf,
            QoSProfile(depth=TF_ESTIMATE_DEPTH, reliability=TF_QOS.reliability, durability=TF_QOS.durability),
        )
        self.create_subscription(TFMessage, "/tf_static", self._on_tf_static, TF_STATIC_QOS)

    # ------------------------------------------------------------------ input
    def _gt(self, header, pose) -> None:
        sample = pose_msg_arrays(pose)
        if sample is None:
            self.get_logger().warning(
                "ground truth pose with a zero or non-finite value ignored", throttle_duration_sec=5.0
            )
            return
        self._gt_count += 1
        self._frame_id = header.frame_id
        stamp = stamp_to_seconds(header.stamp)
        if self.offset_search:
            self._offset.keep_gt(stamp, sample)
        self._feed(self.associator.add_gt(stamp, *sample))

    def _est(self, header, pose) -> None:
        sample = pose_msg_arrays(pose)
        if sample is None:
            self.get_logger().warning(
                "estimate pose with a zero or non-finite value ignored", throttle_duration_sec=5.0
            )
            return
        self._est_count += 1
        stamp = stamp_to_seconds(header.stamp)
        if self.offset_search:
            self._offset.keep_est(stamp, sample)
        self._feed(self.associator.add_est(stamp, *sample))

    def _on_tf(self, msg: TFMessage) -> None:
        self._on_edges(msg, static=False)

    def _on_tf_static(self, msg: TFMessage) -> None:
        self._on_edges(msg, static=True)

    def _on_edges(self, msg: TFMessage, static: bool) -> None:
        chain = self._tf_chain
        dropped = chain.dropped
        for tf in msg.transforms:
            for stamp, position, orientation in chain.update(tf, static):
                self._est_count += 1
                if self.offset_search:
                    self._offset.keep_est(stamp, (position, orientation))
                self._feed(self.associator.add_est(stamp, position, orientation))
        if chain.held:
            self.get_logger().info(
                f"tf {chain.parent} -> {chain.child} is not complete yet: {chain.held} "
                "estimates held until it is",
                throttle_duration_sec=5.0,
            )
        if chain.dropped > dropped:
            self.get_logger().warning(
                f"tf {chain.parent} -> {chain.child} still not complete: {chain.dropped} "
                f"estimates lost (at most {chain.max_held} are held)",
                throttle_duration_sec=5.0,
            )

    def _feed(self, pairs: list[PosePair]) -> None:
        for pair in pairs:
            self.ate.add(pair.gt_position, pair.gt_orientation, pair.est_position, pair.est_orientation)
            self.rpe.add(
                pair.stamp, pair.gt_position, pair.gt_orientation, pair.est_position, pair.est_orientation
            )
            self._last_stamp = pair.stamp

    # ------------------------------------------------------------------ output
    def _publish(self) -> None:
        snap = self.ate.snapshot()
        self._pub.publish(error_message(snap, self.rpe, self._frame_id, self._last_stamp))
        self._report(snap)

    def _report(self, snap) -> None:
        log = self.get_logger()
        if snap.samples and snap.reason != self._last_reason and self.value("align") != "none":
            if snap.reason:
                log.warning(f"not aligned: {snap.reason}")
            elif self._last_reason:
                log.info(f"aligned ({self.value('align')})")
            self._last_reason = snap.reason
        if snap.aligned and snap.alignment.method == "sim3":
            # TrajectoryError.alignment is a Pose: the scale has no field there
            log.info(f"sim3 scale {snap.alignment.scale:.6f}", throttle_duration_sec=30.0)
        if snap.samples == 0 and time.monotonic() - self._started > 5.0:
            a = self.associator
            log.warning(
                f"no pose pairs yet: {self._gt_count} ground truth and {self._est_count} estimate samples "
                f"received, {a.est_unmatched} estimates without ground truth within "
                f"max_diff={a.max_diff} s",
                throttle_duration_sec=10.0,
            )

    # ------------------------------------------------------------------ time offset
    def _search_offset(self) -> None:
        """One search for the time offset on the samples kept; held once stable."""
        if not self.offset_search:
            return
        log = self.get_logger()
        try:
            found = self._offset.search(self.value("time_offset_window"), self.value("align"))
        except TrajectoryInputError as error:
            log.warning(f"time offset not found: {error}", throttle_duration_sec=10.0)
            return
        if found is None:
            return  # too little yet to see anything by
        self._offset_pub.publish(Float64(data=found.offset))
        log.info(
            f"time offset {found.offset * 1e3:+.3f} ms (correlation {found.correlation:.2f}, "
            f"{len(self._offset.found)} of {AUTO_STABLE} to agree)"
        )
        agreed = self._offset.agreed()
        if agreed is not None:
            self._hold_offset(agreed)

    def _hold_offset(self, offset: float) -> None:
        """Restart the evaluation with ``offset`` and replay the samples kept into it."""
        gt, est = self._offset.take()
        cfg = self.values()
        self.associator = StreamAssociator(
            max_diff=cfg["max_diff"], offset=offset, method=cfg["association"], horizon=cfg["gt_buffer"]
        )
        self.ate = RunningATE(cfg["align"], cfg["align_first_n"], cfg["history_size"])
        self.rpe = RunningRPE(self.rpe.delta, self.rpe.unit)
        self._last_stamp = None
        for t, kind, p, q in replay_order(gt, est, offset):
            if kind == 0:
                self._feed(self.associator.add_gt(t, p, q))
            else:
                self._feed(self.associator.add_est(t - offset, p, q))
        self.offset_search = False
        self.offset_held = offset
        self._offset_pub.publish(Float64(data=offset))
        self.get_logger().info(
            f"time offset {offset * 1e3:+.3f} ms held ({AUTO_STABLE} values within {AUTO_AGREE * 1e3:g} ms); "
            f"evaluation restarted with it ({len(est)} estimates replayed)"
        )

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        samples = self.ate.moments.count
        self._build_evaluation()
        response.success = True
        response.message = f"cleared {samples} pose pairs"
        self.get_logger().info(response.message)
        return response


def subscribe_poses(node: Node, kind: str, *, topic: str, body: str, sink: PoseSink, qos: QoSProfile) -> None:
    """Feed ``sink(header, pose)`` from ``topic``: PoseStamped (``pose``),
    PoseWithCovarianceStamped (``pose_cov``), Odometry (``odometry``), or the tracked
    pose of the rigid body ``body`` (``rigid_bodies``)."""
    if kind == "rigid_bodies":
        picker = BodyPicker(body)
        node.create_subscription(RigidBodies, topic, lambda m: picker.feed(m, sink), qos)
    elif kind == "pose":
        node.create_subscription(PoseStamped, topic, lambda m: sink(m.header, m.pose), qos)
    elif kind == "pose_cov":
        node.create_subscription(PoseWithCovarianceStamped, topic, lambda m: sink(m.header, m.pose.pose), qos)
    else:
        node.create_subscription(Odometry, topic, lambda m: sink(m.header, m.pose.pose), qos)


def error_message(snap: Any, rpe: RunningRPE, frame_id: str, last_stamp: float | None) -> TrajectoryError:
    """The TrajectoryError of an ATE snapshot and the RPE so far."""
    msg = TrajectoryError()
    msg.header.frame_id = frame_id
    if last_stamp is not None:
        sec = int(np.floor(last_stamp))
        msg.header.stamp.sec = sec
        msg.header.stamp.nanosec = min(int(round((last_stamp - sec) * 1e9)), 999_999_999)
    msg.samples = snap.samples
    msg.ate_rmse = snap.rmse
    msg.ate_mean = snap.mean
    msg.ate_max = snap.max
    scale = snap.alignment.scale if snap.aligned else 1.0
    msg.rpe_trans_rmse = rpe.trans_rmse(scale)
    msg.rpe_rot_rmse = rpe.rot_rmse()
    msg.aligned = snap.aligned
    t = snap.alignment.translation
    q = snap.alignment.quaternion()
    msg.alignment.position.x, msg.alignment.position.y, msg.alignment.position.z = (float(v) for v in t)
    (
        msg.alignment.orientation.x,
        msg.alignment.orientation.y,
        msg.alignment.orientation.z,
        msg.alignment.orientation.w,
    ) = (float(v) for v in q)
    return msg


class BodyPicker:
    """Passes the tracked pose of one named body of each RigidBodies message on."""

    def __init__(self, name: str):
        self.name = name
        self._index = 0

    def feed(self, msg: RigidBodies, sink: PoseSink) -> None:
        bodies = msg.rigid_bodies
        # a body's index is stable in practice: its last row is tried first
        i = self._index = body_row(bodies, self.name, self._index)
        if i >= 0 and bodies[i].tracking_valid:
            sink(msg.header, bodies[i].pose)


class TfChain:
    """The pose of ``child`` in ``parent`` from the latest transforms of each edge.

    An estimate edge (into ``child``) that arrives while the chain to ``parent`` is not
    complete yet is held, up to ``max_held``, and given back once another edge completes
    it: at start-up the latched /tf_static edges (map -> odom) often arrive after the
    first /tf estimates, and tf2 would still resolve those at their stamps.
    """

    def __init__(self, parent: str, child: str, max_held: int = 1000):
        self.parent = parent
        self.child = child
        self.max_held = max_held
        self._edges: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}  # child -> (parent, t, q)
        self._held: deque[tuple[float, str, np.ndarray, np.ndarray]] = deque(maxlen=max_held)
        self.dropped = 0  # held estimates pushed out by newer ones before the chain completed

    @property
    def held(self) -> int:
        return len(self._held)

    def update(self, tf: TransformStamped, static: bool) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Store an edge; return the estimates (stamp, position, orientation) it makes
        known: this one when it is an estimate edge, and any held before."""
        child = tf.child_frame_id.lstrip("/")
        pose = pose_msg_arrays(tf.transform)
        if pose is None:
            return []
        parent = tf.header.frame_id.lstrip("/")
        self._edges[child] = (parent, *pose)
        estimate = child == self.child and not static
        if estimate:
            if len(self._held) == self.max_held:
                self.dropped += 1
            self._held.append((stamp_to_seconds(tf.header.stamp), parent, *pose))
        if not self._held:
            return []
        above = self._chain_above(self._held[-1][1])
        if above is None:
            return []
        # the held edges share the chain above them when they share their parent (the
        # usual case: one odometry frame); one with another parent waits for its own
        ready: list[tuple[float, np.ndarray, np.ndarray]] = []
        waiting: deque[tuple[float, str, np.ndarray, np.ndarray]] = deque(maxlen=self.max_held)
        for stamp, edge_parent, t, q in self._held:
            chain = above if edge_parent == self._held[-1][1] else self._chain_above(edge_parent)
            if chain is None:
                waiting.append((stamp, edge_parent, t, q))
                continue
            ct, cq = chain
            ready.append((stamp, quat_rotate(cq, t) + ct, quat_multiply(cq, q)))
        self._held = waiting
        return ready

    def _chain_above(self, frame: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The pose of ``frame`` in ``parent`` (None while an edge is missing)."""
        position = np.zeros(3)
        orientation = np.array([0.0, 0.0, 0.0, 1.0])
        for _ in range(64):  # a tf tree is shallow; this bounds a cycle in bad data
            if frame == self.parent:
                return position, orientation
            edge = self._edges.get(frame)
            if edge is None:
                return None
            parent, t, q = edge
            position = quat_rotate(q, position) + t
            orientation = quat_multiply(q, orientation)
            frame = parent
        return None


def main(args=None) -> int:
    """Entry point of ``trajectory_error``."""
    return run_tool(TrajectoryErrorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
