"""Node `simulated_arm`: a serial arm that executes QueueTrajectory goals, without hardware.

* action ``~/queue_trajectory`` (motion_control_interfaces/action/QueueTrajectory): a goal
  is validated (at least 3 points, each with positions, velocities and time; a non-empty
  trajectory_id not used before; its monitors valid) and refused with the reason in the
  log otherwise; accepted goals are queued and executed in order, by cubic interpolation
  of the points at ``rate`` Hz; the result comes when the trajectory is finished;
* service ``~/get_trajectory_status``: EXECUTING, FINISHED, IN_QUEUE or UNKNOWN;
* topics ``~/trajectory_feedback`` (TrajectoryFeedbackStamped), ``~/monitor_results``
  (MonitorResultsStamped, the goal's monitors evaluated with mocap4r2_tools.motion.monitors),
  ``~/joint_states`` (sensor_msgs/JointState), ``~/link_poses`` (geometry_msgs/PoseArray,
  forward kinematics: the tip of every link, the end effector last, in ``frame_id``) and
  ``~/ee_pose`` (geometry_msgs/PoseStamped: the commanded end-effector pose, the same
  pose and stamp as the last entry of ``~/link_poses``, for trajectory_error);
* topic ``~/tool_pose`` (geometry_msgs/PoseStamped): a tool mounted on the end effector
  (the flange) at ``tool_offset``, the pose a mocap system tracking the tool reports (the
  known answer of `mocap4r2 calibrate hand_eye/robot_world` against ``~/ee_pose``);
* topic ``~/accepted_goals`` (motion_control_interfaces/action/QueueTrajectory_Goal,
  reliable, transient local, the last ``ACCEPTED_GOALS_DEPTH``): every goal accepted, so
  a trajectory_monitor elsewhere evaluates the same monitors the goal carries.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque

import numpy as np
from geometry_msgs.msg import Pose, PoseArray, PoseStamped
from rclpy.action import ActionServer, GoalResponse
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from sensor_msgs.msg import JointState

from mocap4r2_control.geometry import Transform
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.rotation import quat_normalize
from mocap4r2_control.timebase import time_msg
from motion_control_interfaces.action import QueueTrajectory
from motion_control_interfaces.msg import MonitorResult, MonitorResultsStamped, TrajectoryFeedbackStamped
from motion_control_interfaces.srv import GetTrajectoryStatus

from .motion.arm import Point, forward_kinematics, sample, validate
from .motion.monitors import Feedback, MonitorError, MonitorSet, monitor_from_msg
from .tool_node import ToolNode, frame_check, run_tool, vector_check

MAX_QUEUE = 100
MAX_FINISHED = 1000
# A late trajectory_monitor still gets the goals queued before it started (transient
# local), as many as can be queued plus the one executing; the depth bounds the memory.
ACCEPTED_GOALS_DEPTH = MAX_QUEUE + 1
ACCEPTED_GOALS_QOS = QoSProfile(
    depth=ACCEPTED_GOALS_DEPTH,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)


def _tool_check(value: list) -> str | None:
    if len(value) != 7 or not all(isinstance(v, float) and math.isfinite(v) for v in value):
        return f"tool_offset must be 7 finite numbers x y z qx qy qz qw, got {value!r}"
    if math.hypot(*value[3:]) < 1e-6:
        return f"tool_offset's quaternion {value[3:]!r} is not a rotation"
    return None


def _links_check(value: list) -> str | None:
    if not 3 <= len(value) <= 6 or not all(isinstance(v, float) and 0 < v < 10 for v in value):
        return f"link_lengths must be 3 to 6 lengths in (0, 10) m, got {value!r}"
    return None


PARAMETERS = (
    ParameterSpec(
        "link_lengths",
        [0.3, 0.25, 0.2],
        "Link lengths, m (3 to 6 links: one joint per link).",
        check=_links_check,
        read_only=True,
    ),
    ParameterSpec(
        "base_xyz",
        [0.0, 0.0, 0.0],
        "Arm base position in frame_id, m.",
        check=vector_check("base_xyz", 3),
        read_only=True,
    ),
    ParameterSpec("frame_id", "world", "Frame of the link poses.", check=frame_check("frame_id")),
    ParameterSpec(
        "rate", 50.0, "Execution and publishing rate, Hz.", min_value=1.0, max_value=1000.0, read_only=True
    ),
    ParameterSpec(
        "tool_offset",
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        "Pose of the tool of ~/tool_pose in the end-effector (flange) frame: x y z (m) qx qy qz qw.",
        check=_tool_check,
        read_only=True,
    ),
)


class _Job:
    def __init__(self, handle, points, monitors):
        self.handle = handle
        self.goal = handle.request
        self.points = points
        self.monitors = monitors
        self.done: Future[bool] = Future()
        self.start: float | None = None


class SimulatedArmNode(ToolNode):
    """A serial arm without hardware that executes queued trajectories and publishes its link
    poses, standing in for a real robot in the motion-tool demos and tests."""

    def __init__(self, **kwargs):
        super().__init__("simulated_arm", PARAMETERS, **kwargs)
        cfg = self.values()
        self.links = [float(v) for v in cfg["link_lengths"]]
        self.base = cfg["base_xyz"]
        self.joint_names = [f"joint{i + 1}" for i in range(len(self.links))]
        self.positions = [0.0] * len(self.links)
        self.velocities = [0.0] * len(self.links)
        self._queue: deque[_Job] = deque()
        self._current: _Job | None = None
        self._finished: OrderedDict[str, bool] = OrderedDict()
        self._pending_ids: set[str] = set()
        self._fb_pub = self.create_publisher(TrajectoryFeedbackStamped, "~/trajectory_feedback", 10)
        self._mon_pub = self.create_publisher(MonitorResultsStamped, "~/monitor_results", 10)
        self._js_pub = self.create_publisher(JointState, "~/joint_states", 10)
        self._links_pub = self.create_publisher(PoseArray, "~/link_poses", 10)
        self._ee_pub = self.create_publisher(PoseStamped, "~/ee_pose", 10)
        self._tool_pub = self.create_publisher(PoseStamped, "~/tool_pose", 10)
        offset = [float(v) for v in cfg["tool_offset"]]
        self._tool = Transform(np.array(offset[:3]), quat_normalize(np.array(offset[3:])))
        self._goals_pub = self.create_publisher(QueueTrajectory.Goal, "~/accepted_goals", ACCEPTED_GOALS_QOS)
        self._server = ActionServer(
            self,
            QueueTrajectory,
            "~/queue_trajectory",
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            handle_accepted_callback=self._on_accepted,
        )
        self.create_service(GetTrajectoryStatus, "~/get_trajectory_status", self._on_status)
        self.create_timer(1.0 / cfg["rate"], self._tick)
        self.mark_ready()
        self.get_logger().info(f"arm with {len(self.links)} joints ready: ~/queue_trajectory")

    # ------------------------------------------------------------------ goals
    def _known_ids(self) -> set[str]:
        return set(self._finished) | self._pending_ids

    def _on_goal(self, goal: QueueTrajectory.Goal) -> GoalResponse:
        try:
            points = [
                Point(
                    tuple(p.positions),
                    tuple(p.velocities),
                    p.time_from_start.sec + p.time_from_start.nanosec * 1e-9,
                )
                for p in goal.trajectory.points
            ]
            reason = validate(
                goal.trajectory_id,
                list(goal.trajectory.joint_names),
                points,
                len(self.links),
                self._known_ids(),
            )
            if reason is None and len(self._queue) >= MAX_QUEUE:
                reason = f"the queue is full ({MAX_QUEUE} trajectories)"
            if reason is None:
                for monitor in goal.monitors:
                    monitor_from_msg(monitor).check()
        except MonitorError as exc:
            reason = str(exc)
        if reason is not None:
            self.get_logger().error(f"goal {goal.trajectory_id!r} rejected: {reason}")
            return GoalResponse.REJECT
        self._pending_ids.add(goal.trajectory_id)
        self.get_logger().info(
            f"goal {goal.trajectory_id!r} accepted: {len(points)} points, {len(goal.monitors)} monitors"
        )
        return GoalResponse.ACCEPT

    def _on_accepted(self, handle) -> None:
        goal = handle.request
        points = [
            Point(
                tuple(p.positions),
                tuple(p.velocities),
                p.time_from_start.sec + p.time_from_start.nanosec * 1e-9,
            )
            for p in goal.trajectory.points
        ]
        monitors = MonitorSet(goal.trajectory_id, [monitor_from_msg(m) for m in goal.monitors])
        self._queue.append(_Job(handle, points, monitors))
        # published before the job can start (the next tick at the earliest), so a
        # monitor node usually has the monitors before the first feedback
        self._goals_pub.publish(goal)

    async def _execute(self, handle):
        job = next((j for j in [self._current] if j is not None and j.handle is handle), None)
        if job is not None:
            await job.done
        handle.succeed()
        result = QueueTrajectory.Result()
        result.header.stamp = time_msg()
        result.is_finished = True
        return result

    # ------------------------------------------------------------------ execution
    def _tick(self) -> None:
        now = time.time()
        if self._current is None and self._queue:
            queued = self._queue.popleft()
            queued.start = now
            self._current = queued
            self.get_logger().info(f"executing {queued.goal.trajectory_id!r}")
            queued.handle.execute()
        job = self._current
        stamp = time_msg(now)
        if job is not None:
            assert job.start is not None  # set when the job became the current one
            elapsed = now - job.start - job.points[0].time
            t = job.points[0].time + elapsed
            pos, vel, index = sample(job.points, t)
            self.positions, self.velocities = [float(v) for v in pos], [float(v) for v in vel]
            fb = TrajectoryFeedbackStamped()
            fb.header.stamp = stamp
            fb.header.frame_id = self.value("frame_id")
            d = fb.data
            d.trajectory_id = job.goal.trajectory_id
            d.executing_trajectory_size = len(job.points)
            d.executing_point_index = index
            d.start_execution_time = time_msg(job.start)
            d.ratio_of_trajectory = (index + 1) / len(job.points)
            since = max(0.0, now - job.start)
            d.time_from_start.sec, d.time_from_start.nanosec = int(since), int((since % 1) * 1e9)
            d.current_joint_state = self._joint_state(stamp)
            self._fb_pub.publish(fb)
            try:
                job.monitors.evaluate(
                    Feedback(
                        d.trajectory_id, now, d.ratio_of_trajectory, since, self.joint_names, self.positions
                    )
                )
            except MonitorError as exc:
                self.get_logger().warning(str(exc), throttle_duration_sec=2.0)
            if job.monitors.monitors:
                out = MonitorResultsStamped()
                out.header = fb.header
                out.monitor_results = [
                    MonitorResult(monitor_id=m, is_triggered=h) for m, h in job.monitors.results()
                ]
                self._mon_pub.publish(out)
            if t >= job.points[-1].time:
                self._finish(job)
        self._js_pub.publish(self._joint_state(stamp))
        links = PoseArray()
        links.header.stamp = stamp
        links.header.frame_id = self.value("frame_id")
        for p, q in forward_kinematics(self.positions, self.links, self.base):
            pose = Pose()
            pose.position.x, pose.position.y, pose.position.z = (float(v) for v in p)
            pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = (
                float(v) for v in q
            )
            links.poses.append(pose)
        self._links_pub.publish(links)
        ee = PoseStamped()
        ee.header = links.header
        ee.pose = links.poses[-1]
        self._ee_pub.publish(ee)
        self._tool_pub.publish(self._tool_pose(ee))

    def _tool_pose(self, ee: PoseStamped) -> PoseStamped:
        p, q = ee.pose.position, ee.pose.orientation
        tool = Transform(np.array([p.x, p.y, p.z]), np.array([q.x, q.y, q.z, q.w])) * self._tool
        out = PoseStamped()
        out.header = ee.header
        out.pose.position.x, out.pose.position.y, out.pose.position.z = (float(v) for v in tool.translation)
        o = out.pose.orientation
        o.x, o.y, o.z, o.w = (float(v) for v in tool.rotation)
        return out

    def _finish(self, job: _Job) -> None:
        tid = job.goal.trajectory_id
        self._pending_ids.discard(tid)
        self._finished[tid] = True
        while len(self._finished) > MAX_FINISHED:
            self._finished.popitem(last=False)
        self._current = None
        self.velocities = [0.0] * len(self.links)
        self.get_logger().info(f"finished {tid!r}")
        job.done.set_result(True)

    def _joint_state(self, stamp) -> JointState:
        js = JointState()
        js.header.stamp = stamp
        js.name = list(self.joint_names)
        js.position = list(self.positions)
        js.velocity = list(self.velocities)
        return js

    def _on_status(self, request, response):
        tid = request.trajectory_id
        R = GetTrajectoryStatus.Response
        if self._current is not None and self._current.goal.trajectory_id == tid:
            response.status = R.EXECUTING
        elif any(j.goal.trajectory_id == tid for j in self._queue):
            response.status = R.IN_QUEUE
        elif tid in self._finished:
            response.status = R.FINISHED
        else:
            response.status = R.UNKNOWN
        return response


def main(args=None) -> int:
    """Entry point of the ``simulated_arm`` executable; returns the process exit status."""
    return run_tool(SimulatedArmNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
