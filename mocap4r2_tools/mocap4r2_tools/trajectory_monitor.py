"""Node `trajectory_monitor`: monitors of executing trajectories, with mocap snapshots.

Reads ``TrajectoryFeedbackStamped`` (``feedback_topic``) of a trajectory being
executed and evaluates the monitors of ``monitors_file`` (YAML, see
docs/motion_tools.md) and, with ``goals_topic`` set, the monitors each QueueTrajectory
goal carries (``motion_control_interfaces/action/QueueTrajectory_Goal`` as the executor
publishes the goals it accepted, e.g. simulated_arm's ``~/accepted_goals``) with
:mod:`mocap4r2_tools.motion.monitors`: RATIO, TIME and JOINT_STATE trigger conditions
of motion_control_interfaces. For every feedback it
publishes ``MonitorResultsStamped`` on ``~/monitor_results`` (stamped with the feedback's
stamp): each monitor of the trajectory, ``is_triggered`` false until it triggers and true
from then on.

Mocap snapshot: when a monitor triggers, the poses of ``snapshot_bodies`` (from
``rigid_bodies_topic``) at the feedback stamp, interpolated between the frames around
it, go out as ``geometry_msgs/PoseStamped`` on ``~/<monitor_id>/<body>``: where the robot
really was when, say, half of the trajectory was done. A stamp newer than the last frame
waits (at most ``snapshot_wait`` s) for the frame after it.

A goal's monitors apply to its trajectory_id only, besides the file's. A goal that
arrives after feedback of its trajectory adds its monitors from the next feedback on (a
RATIO or TIME monitor whose point has passed then triggers at once, at that feedback).

Bad input never stops the node: a refused monitor is logged with its reason (at start-up
for the file, on arrival for a goal; the goal's other monitors are kept),
feedback whose stamp goes backwards is ignored with a warning, a NaN joint position
does not trigger anything and is logged.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from pathlib import Path

import yaml
from geometry_msgs.msg import PoseStamped
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from mocap4r2_control.geometry import pose_msg_arrays
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.timebase import stamp_to_seconds
from mocap4r2_interfaces.msg import RigidBodies
from motion_control_interfaces.action import QueueTrajectory
from motion_control_interfaces.msg import MonitorResult, MonitorResultsStamped, TrajectoryFeedbackStamped

from .motion.monitors import (
    MAX_MONITORS,
    Feedback,
    Monitor,
    MonitorError,
    MonitorSet,
    PoseHistory,
    monitor_from_msg,
    monitors_from_config,
)
from .motion_estimator import topic_token
from .tool_node import ToolNode, run_tool, topic_check

MAX_TRAJECTORIES = 100
MAX_PENDING = 100
# goals bring monitor ids from the network: the snapshot topics (one per monitor id and
# body) are capped, and ids beyond the cap get no snapshot (logged)
MAX_SNAPSHOT_TOPICS = 1000
SNAPSHOT_QOS = QoSProfile(
    depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
# matches the executor's accepted-goals publisher (reliable, transient local): goals
# queued before this node started still arrive; depth bounds what is held
GOALS_QOS = QoSProfile(
    depth=MAX_TRAJECTORIES + 1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

PARAMETERS = (
    ParameterSpec(
        "feedback_topic",
        "trajectory_feedback",
        "TrajectoryFeedbackStamped of the executing trajectory.",
        check=topic_check("feedback_topic"),
        read_only=True,
    ),
    ParameterSpec("monitors_file", "", "YAML file with the monitors ({monitors: [...]}).", read_only=True),
    ParameterSpec(
        "goals_topic",
        "",
        "QueueTrajectory goals accepted by the executor (e.g. "
        "/simulated_arm/accepted_goals), whose monitors are evaluated too; empty: off.",
        read_only=True,
    ),
    ParameterSpec(
        "rigid_bodies_topic", "", "RigidBodies topic for the snapshots; empty: no snapshots.", read_only=True
    ),
    ParameterSpec("snapshot_bodies", [], "Bodies whose poses are published when a monitor triggers."),
    ParameterSpec(
        "snapshot_wait",
        1.0,
        "Longest wait for the mocap frame after a trigger stamp, s.",
        min_value=0.0,
        max_value=60.0,
    ),
    ParameterSpec("qos_reliable", True, "Reliable subscriptions (false: best effort).", read_only=True),
)


def feedback_of(msg: TrajectoryFeedbackStamped) -> Feedback:
    """The monitors' view of a TrajectoryFeedbackStamped message."""
    d = msg.data
    return Feedback(
        trajectory_id=d.trajectory_id,
        stamp=stamp_to_seconds(msg.header.stamp),
        ratio_of_trajectory=d.ratio_of_trajectory,
        time_from_start=d.time_from_start.sec + d.time_from_start.nanosec * 1e-9,
        joint_names=list(d.current_joint_state.name),
        positions=list(d.current_joint_state.position),
    )


class TrajectoryMonitorNode(ToolNode):
    """Runs the configured monitors over the trajectories being executed and the mocap stream, and publishes
    their results."""

    def __init__(self, **kwargs):
        super().__init__("trajectory_monitor", PARAMETERS, **kwargs)
        cfg = self.values()
        self._monitors: list[tuple[str, Monitor]] = []
        self._load(cfg["monitors_file"])
        self._sets: OrderedDict[str, MonitorSet] = OrderedDict()
        self._goal_monitors: OrderedDict[str, list[Monitor]] = OrderedDict()
        self._histories: dict[str, PoseHistory] = {}
        self._pending: list[
            tuple[float, float, str, str, object]
        ] = []  # (stamp, deadline, monitor, body, header)
        self._snapshot_pubs: dict[tuple[str, str], object] = {}
        self._mocap_frame = "world"
        qos = QoSProfile(
            depth=100,
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        self.create_subscription(TrajectoryFeedbackStamped, cfg["feedback_topic"], self._on_feedback, qos)
        if cfg["goals_topic"]:
            self.create_subscription(QueueTrajectory.Goal, cfg["goals_topic"], self._on_goal, GOALS_QOS)
        if cfg["rigid_bodies_topic"]:
            # a deep queue: the snapshots need every frame around a trigger, even when
            # this node falls behind a 360 Hz system for a moment
            frames_qos = QoSProfile(depth=1000, reliability=qos.reliability)
            self.create_subscription(RigidBodies, cfg["rigid_bodies_topic"], self._on_bodies, frames_qos)
        self._results_pub = self.create_publisher(MonitorResultsStamped, "~/monitor_results", 10)
        # snapshot topics exist from the start, so subscribers are matched before a trigger
        for _, monitor in self._monitors:
            for body in cfg["snapshot_bodies"]:
                self._snapshot_publisher(monitor.monitor_id, body)
        self.mark_ready()
        self.get_logger().info(
            f"{len(self._monitors)} monitors on {self.resolve_topic_name(cfg['feedback_topic'])}"
            + (
                f", and the monitors of the goals on {self.resolve_topic_name(cfg['goals_topic'])}"
                if cfg["goals_topic"]
                else ""
            )
            + (f", snapshots of {', '.join(cfg['snapshot_bodies'])}" if cfg["snapshot_bodies"] else "")
        )

    def _load(self, path: str) -> None:
        if not path:
            self.get_logger().warning("parameter monitors_file is empty: no monitors to evaluate")
            return
        try:
            text = Path(path).read_text()
            if len(text) > 10_000_000:
                raise ValueError("larger than 10 MB")
            config = yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            self.get_logger().error(f"monitors_file {path}: {exc}; no monitors")
            return
        self._monitors, refused = monitors_from_config(config)
        for reason in refused:
            self.get_logger().error(f"monitors_file {path}: refused: {reason}")

    def _on_goal(self, goal: QueueTrajectory.Goal) -> None:
        tid = goal.trajectory_id
        if not tid:
            self.get_logger().error(
                "goal without trajectory_id ignored: its monitors cannot be matched to feedback"
            )
            return
        if tid in self._goal_monitors:
            self.get_logger().warning(f"goal {tid!r} seen before: the monitors of the first one are kept")
            return
        taken = {m.monitor_id for t, m in self._monitors if t in ("", tid)}
        accepted: list[Monitor] = []
        for i, msg in enumerate(goal.monitors):
            if i >= MAX_MONITORS:
                self.get_logger().error(f"goal {tid!r}: only the first {MAX_MONITORS} monitors are used")
                break
            try:
                monitor = monitor_from_msg(msg)
                monitor.check()
            except (MonitorError, TypeError, ValueError) as exc:
                self.get_logger().error(f"goal {tid!r}: monitor refused: {exc}")
                continue
            if monitor.monitor_id in taken:
                self.get_logger().error(
                    f"goal {tid!r}: monitor refused: monitor_id {monitor.monitor_id!r} is "
                    "already used for this trajectory"
                )
                continue
            taken.add(monitor.monitor_id)
            accepted.append(monitor)
        self._goal_monitors[tid] = accepted
        while len(self._goal_monitors) > MAX_TRAJECTORIES:
            self._goal_monitors.popitem(last=False)
        for monitor in accepted:
            for body in self.value("snapshot_bodies"):
                self._snapshot_publisher(monitor.monitor_id, body)
        mset = self._sets.get(tid)
        if mset is not None:
            # feedback came first: the goal's monitors join from the next feedback on
            for monitor in accepted:
                mset.monitors.append(monitor)
                mset.triggered[monitor.monitor_id] = False
        self.get_logger().info(f"goal {tid!r}: {len(accepted)} of {len(goal.monitors)} monitors accepted")

    def _set_for(self, trajectory_id: str) -> MonitorSet:
        mset = self._sets.get(trajectory_id)
        if mset is None:
            mset = MonitorSet(
                trajectory_id,
                [m for tid, m in self._monitors if tid in ("", trajectory_id)]
                + self._goal_monitors.get(trajectory_id, []),
            )
            self._sets[trajectory_id] = mset
            while len(self._sets) > MAX_TRAJECTORIES:
                self._sets.popitem(last=False)
            self.get_logger().info(f"trajectory {trajectory_id!r}: {len(mset.monitors)} monitors")
        return mset

    def _on_feedback(self, msg: TrajectoryFeedbackStamped) -> None:
        fb = feedback_of(msg)
        if not fb.trajectory_id:
            self.get_logger().warning("feedback without trajectory_id ignored", throttle_duration_sec=5.0)
            return
        if not all(math.isfinite(v) for v in fb.positions):
            self.get_logger().warning(
                f"trajectory {fb.trajectory_id!r}: NaN in the joint state at "
                f"{fb.stamp:.6f}: no JOINT_STATE monitor can trigger on it",
                throttle_duration_sec=2.0,
            )
        mset = self._set_for(fb.trajectory_id)
        try:
            fired = mset.evaluate(fb)
        except MonitorError as exc:
            self.get_logger().warning(f"trajectory {fb.trajectory_id!r}: {exc}", throttle_duration_sec=2.0)
            return
        out = MonitorResultsStamped()
        out.header = msg.header
        out.monitor_results = [MonitorResult(monitor_id=mid, is_triggered=hit) for mid, hit in mset.results()]
        self._results_pub.publish(out)
        for monitor_id in fired:
            self.get_logger().info(
                f"trajectory {fb.trajectory_id!r}: monitor {monitor_id!r} triggered at "
                f"{fb.stamp:.6f} (ratio {fb.ratio_of_trajectory:.3f})"
            )
            for body in self.value("snapshot_bodies"):
                self._snapshot(fb.stamp, monitor_id, body, msg.header)

    # ------------------------------------------------------------------ snapshots
    def _on_bodies(self, msg: RigidBodies) -> None:
        wanted = set(self.value("snapshot_bodies"))
        if not wanted:
            return
        self._mocap_frame = msg.header.frame_id or self._mocap_frame
        t = stamp_to_seconds(msg.header.stamp)
        for body in msg.rigid_bodies:
            if body.name in wanted and body.tracking_valid:
                pose = pose_msg_arrays(body.pose)
                if pose is not None:
                    self._histories.setdefault(body.name, PoseHistory()).add(t, *pose)
        if self._pending:
            pending, self._pending = self._pending, []
            for stamp, deadline, monitor_id, body, header in pending:
                self._snapshot(stamp, monitor_id, body, header, deadline)

    def _snapshot(
        self, stamp: float, monitor_id: str, body: str, header, deadline: float | None = None
    ) -> None:
        history = self._histories.get(body)
        pose = history.at(stamp) if history is not None else None
        if pose is None:
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.value("snapshot_wait")
            newer = history is None or history.newest is None or stamp > history.newest
            if newer and now < deadline and len(self._pending) < MAX_PENDING:
                self._pending.append((stamp, deadline, monitor_id, body, header))
            else:
                self.get_logger().warning(
                    f"monitor {monitor_id!r}: no tracked pose of {body!r} around {stamp:.6f}; no snapshot"
                )
            return
        pub = self._snapshot_publisher(monitor_id, body)
        if pub is None:
            return
        out = PoseStamped()
        out.header.stamp = header.stamp
        out.header.frame_id = self._mocap_frame
        (out.pose.position.x, out.pose.position.y, out.pose.position.z) = (float(v) for v in pose[0])
        (out.pose.orientation.x, out.pose.orientation.y, out.pose.orientation.z, out.pose.orientation.w) = (
            float(v) for v in pose[1]
        )
        pub.publish(out)

    def _snapshot_publisher(self, monitor_id: str, body: str):
        key = (monitor_id, body)
        pub = self._snapshot_pubs.get(key)
        if pub is None:
            if len(self._snapshot_pubs) >= MAX_SNAPSHOT_TOPICS:
                self.get_logger().error(
                    f"monitor {monitor_id!r}: already {MAX_SNAPSHOT_TOPICS} snapshot topics; "
                    f"no snapshot of {body!r}",
                    throttle_duration_sec=5.0,
                )
                return None
            # transient local: a snapshot is a one-off event a late subscriber still wants
            pub = self.create_publisher(
                PoseStamped, f"~/{topic_token(monitor_id)}/{topic_token(body)}", SNAPSHOT_QOS
            )
            self._snapshot_pubs[key] = pub
        return pub


def main(args=None) -> int:
    """Entry point of the ``trajectory_monitor`` executable; returns the process exit status."""
    return run_tool(TrajectoryMonitorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
