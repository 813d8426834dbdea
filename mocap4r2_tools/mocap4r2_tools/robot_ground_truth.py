"""Node `robot_ground_truth`: a robot's ground-truth odometry and /tf from one rigid body.

Follows the body named ``body`` on a system's ``rigid_bodies``. The robot base is the
body frame moved by a fixed offset (``offset_xyz``, ``offset_rpy``: the base in the body
frame), and poses are expressed relative to an origin (identity until ``~/set_origin``
sets it; mocap4r2_interfaces/srv/SetOrigin, ``use_current`` makes the current base pose
the origin):

    T_root_base = T_origin^-1 * T_mocap_body * T_body_base

Publishes nav_msgs/Odometry (``root_frame`` -> ``<robot_frame>_gt``; twist in the child
frame, estimated by the velocity estimation core of ``mocap4r2_tools.motion`` with
``twist_method``: by default a finite difference over ``twist_window`` seconds) and the same transform on
/tf, stamped with the mocap stamp.

Tracking loss: nothing is published while the body is not tracked (or missing, or its
system is silent), so no stale pose ever looks fresh; after a loss the first sample
sends /tf only and odometry resumes once a twist can be estimated from fresh poses.
/diagnostics says which of these is happening.
"""

from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import TransformStamped
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy

from mocap4r2_control.geometry import Transform
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.rotation import quat_from_rpy_one, quat_normalize
from mocap4r2_control.tf_out import TransformSender
from mocap4r2_interfaces.msg import RigidBodies
from mocap4r2_interfaces.srv import SetOrigin

from .motion.estimation import METHODS, make_estimator
from .tool_node import (
    DIAGNOSTICS_PERIOD,
    QOS_RELIABLE,
    FollowedBody,
    ToolNode,
    followed_body_parameters,
    frame_parameter,
    run_tool,
    topic_parameter,
    vector_check,
)

PARAMETERS = (
    *followed_body_parameters("robot"),
    frame_parameter("root_frame", "world", "Frame of the published poses (parent of the /tf edge)."),
    frame_parameter(
        "robot_frame", "base_link", "Robot base frame; the published child frame is <robot_frame>_gt."
    ),
    ParameterSpec(
        "offset_xyz",
        [0.0, 0.0, 0.0],
        "Robot base position in the body frame, m.",
        check=vector_check("offset_xyz", 3),
    ),
    ParameterSpec(
        "offset_rpy",
        [0.0, 0.0, 0.0],
        "Robot base orientation in the body frame (roll, pitch, yaw), rad.",
        check=vector_check("offset_rpy", 3),
    ),
    ParameterSpec("publish_tf", True, "Publish root_frame -> <robot_frame>_gt on /tf."),
    topic_parameter("odom_topic", "~/odom", "nav_msgs/Odometry output topic."),
    ParameterSpec(
        "twist_method", "finite_difference", "How the twist is estimated from the poses.", choices=METHODS
    ),
    ParameterSpec(
        "twist_window",
        0.05,
        "finite_difference: seconds of poses the twist is estimated over (0: the previous pose).",
        min_value=0.0,
        max_value=5.0,
    ),
    ParameterSpec(
        "timeout",
        0.5,
        "Seconds without a tracked sample after which diagnostics report ERROR.",
        min_value=0.01,
        max_value=600.0,
    ),
    DIAGNOSTICS_PERIOD,
    QOS_RELIABLE,
)


class RobotGroundTruthNode(ToolNode):
    """Publishes one rigid body as a robot's ground truth (nav_msgs/Odometry) relative to a
    settable origin."""

    def __init__(self, **kwargs):
        super().__init__("robot_ground_truth", PARAMETERS, **kwargs)
        cfg = self.values()
        self._apply_config()
        self.origin = Transform.identity()
        self._estimator = make_estimator(self.twist_method, window_seconds=self.twist_window)
        self._current: Transform | None = None  # base pose in the mocap frame, last tracked sample
        self._state = "waiting"  # waiting | tracking | not_tracked | missing
        self._last_tracked = 0.0  # monotonic time of the last tracked sample
        self._published = 0
        self._lost_events = 0
        self._followed = FollowedBody(self.get_logger())  # the body in rigid_bodies
        qos = QoSProfile(
            depth=100,
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        self.create_subscription(RigidBodies, cfg["rigid_bodies_topic"], self._on_bodies, qos)
        self._odom_pub = self.create_publisher(Odometry, cfg["odom_topic"], 10)
        self._tf = TransformSender(self)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(cfg["diagnostics_period"], self._publish_diagnostics)
        self.create_service(SetOrigin, "~/set_origin", self._on_set_origin)
        self._started = time.monotonic()
        self.mark_ready()
        if not self.body:
            self.get_logger().error("parameter body is empty: set it to the rigid body on the robot")
        self.get_logger().info(
            f"following body {self.body!r} on {self.resolve_topic_name(cfg['rigid_bodies_topic'])}: "
            f"{self.root_frame} -> {self.child_frame} on {self.resolve_topic_name(cfg['odom_topic'])}"
            + (" and /tf" if self.publish_tf else "")
        )

    def _apply_config(self) -> None:
        cfg = self.values()
        self.body = cfg["body"]
        self.root_frame = cfg["root_frame"]
        self.child_frame = cfg["robot_frame"] + "_gt"
        self.offset = Transform(
            np.asarray(cfg["offset_xyz"], float), np.array(quat_from_rpy_one(*cfg["offset_rpy"]))
        )
        self.publish_tf = cfg["publish_tf"]
        self.twist_window = cfg["twist_window"]
        self.twist_method = cfg["twist_method"]
        self.timeout = cfg["timeout"]

    def on_parameters_changed(self, names: set[str]) -> None:
        self._apply_config()
        # a new offset or body makes the old poses incomparable
        self._estimator = make_estimator(self.twist_method, window_seconds=self.twist_window)
        if "body" in names:
            self._current = None
            self._state = "waiting"
        self.get_logger().info(f"{', '.join(sorted(names))} changed")

    # ------------------------------------------------------------------ input
    def _on_bodies(self, msg: RigidBodies) -> None:
        now = time.monotonic()
        reading = self._followed.read(msg, self.body, now)
        status = reading.status
        if status in (FollowedBody.MISSING, FollowedBody.NOT_TRACKED):
            self._lose("missing" if status == FollowedBody.MISSING else "not_tracked")
            return
        if status == FollowedBody.BAD_POSE:
            self.get_logger().warning(f"body {self.body!r}: invalid pose ignored", throttle_duration_sec=5.0)
            return
        # not TRACKED: a stamp not after the last one (logged, ignored); a TRACKED reading
        # always carries its pose
        if status != FollowedBody.TRACKED or reading.position is None or reading.quaternion is None:
            return
        stamp = reading.stamp
        base = Transform(reading.position, quat_normalize(reading.quaternion)) * self.offset
        was = self._state
        self._state = "tracking"
        self._last_tracked = now
        self._current = base
        if was != "tracking":
            self._estimator.reset()
            self.get_logger().info(f"body {self.body!r} tracked", throttle_duration_sec=1.0)
            self._publish_diagnostics()
        self._publish(msg.header.stamp, stamp, base)

    def _lose(self, state: str) -> None:
        if self._state != state:
            if self._state == "tracking":
                self._lost_events += 1
            self._state = state
            self._estimator.reset()
            reason = "not tracked (tracking_valid false)" if state == "not_tracked" else "not in rigid_bodies"
            self.get_logger().warning(
                f"body {self.body!r} {reason}: odometry and /tf stop until it is tracked",
                throttle_duration_sec=1.0,
            )
            self._publish_diagnostics()

    # ------------------------------------------------------------------ output
    def _publish(self, stamp_msg, stamp: float, base: Transform) -> None:
        """``base``: the robot base in the mocap frame; published relative to the origin."""
        pose = self.origin.inverse() * base
        quat = pose.rotation
        if self.publish_tf:
            tf = TransformStamped()
            tf.header.stamp = stamp_msg
            tf.header.frame_id = self.root_frame
            tf.child_frame_id = self.child_frame
            tf.transform.translation.x, tf.transform.translation.y, tf.transform.translation.z = (
                float(v) for v in pose.translation
            )
            (
                tf.transform.rotation.x,
                tf.transform.rotation.y,
                tf.transform.rotation.z,
                tf.transform.rotation.w,
            ) = (float(v) for v in quat)
            self._tf.send([tf])
        # from mocap-frame poses: the body-frame twist does not depend on the origin, and
        # an origin change between two samples must not look like motion
        estimate = self._estimator.update(stamp, base.translation, base.rotation)
        if estimate is None:
            return  # first fresh pose: no twist yet, and no odometry with a made-up one
        odom = Odometry()
        odom.header.stamp = stamp_msg
        odom.header.frame_id = self.root_frame
        odom.child_frame_id = self.child_frame
        pp = odom.pose.pose
        pp.position.x, pp.position.y, pp.position.z = (float(v) for v in pose.translation)
        pp.orientation.x, pp.orientation.y, pp.orientation.z, pp.orientation.w = (float(v) for v in quat)
        linear, angular = estimate.linear, estimate.angular
        odom.twist.covariance = [float(v) for v in estimate.twist_covariance.ravel()]
        odom.twist.twist.linear.x, odom.twist.twist.linear.y, odom.twist.twist.linear.z = (
            float(v) for v in linear
        )
        odom.twist.twist.angular.x, odom.twist.twist.angular.y, odom.twist.twist.angular.z = (
            float(v) for v in angular
        )
        self._odom_pub.publish(odom)
        self._published += 1

    def _state_text(self) -> str:
        if not self.body:
            return "parameter body is empty"
        since = time.monotonic() - self._last_tracked if self._last_tracked else None
        ago = f" for {since:.1f} s" if since is not None else ""
        if self._state == "waiting":
            return f"waiting for body {self.body!r} on rigid_bodies"
        if self._state == "missing":
            known = ", ".join(self._followed.known_bodies) or "none"
            return f"body {self.body!r} is not in rigid_bodies{ago} (bodies: {known}); nothing published"
        if self._state == "not_tracked":
            return f"body {self.body!r} not tracked (tracking_valid false){ago}; odometry and /tf stopped"
        return f"tracking body {self.body!r}"

    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        status = DiagnosticStatus()
        status.name = f"{self.get_fully_qualified_name()}: {self.body or '(no body)'}"
        status.hardware_id = self.body
        message = self._state_text()
        level = DiagnosticStatus.OK
        if not self.body:
            level = DiagnosticStatus.ERROR
        elif self._state == "tracking" and now - self._followed.last_message > self.timeout:
            level = DiagnosticStatus.ERROR
            message = (
                f"no rigid_bodies message for {now - self._followed.last_message:.1f} s: the mocap system "
                "is silent; nothing published"
            )
        elif self._state in ("waiting", "missing", "not_tracked"):
            silent = now - max(self._last_tracked, self._started)
            level = DiagnosticStatus.ERROR if silent > self.timeout else DiagnosticStatus.WARN
        status.level = level
        status.message = message
        values = {
            "state": self._state,
            "root_frame": self.root_frame,
            "child_frame": self.child_frame,
            "mocap_frame": self._followed.mocap_frame,
            "odometry_published": str(self._published),
            "tracking_losses": str(self._lost_events),
            "origin": " ".join(
                f"{v:.4f}" for v in np.concatenate((self.origin.translation, self.origin.rotation))
            ),
        }
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [status]
        self._diag_pub.publish(array)

    # ------------------------------------------------------------------ service
    def _on_set_origin(self, request: SetOrigin.Request, response: SetOrigin.Response) -> SetOrigin.Response:
        if request.use_current:
            if self._current is None or self._state != "tracking":
                response.success = False
                response.message = f"no current pose: {self._state_text()}"
                return response
            self.origin = self._current
            response.message = "origin set to the current robot pose"
        else:
            o = request.origin
            quat = np.array([o.orientation.x, o.orientation.y, o.orientation.z, o.orientation.w])
            position = np.array([o.position.x, o.position.y, o.position.z])
            norm = np.linalg.norm(quat)
            if not np.isfinite(position).all():
                response.success = False
                response.message = f"origin position must be finite, got {position.tolist()}"
                return response
            if not np.isfinite(norm) or abs(norm - 1.0) > 1e-3:
                response.success = False
                response.message = f"origin orientation must be a unit quaternion (norm {norm:.6g})"
                return response
            self.origin = Transform(position, np.asarray(quat, dtype=float) / norm)
            response.message = "origin set to the given pose"
        # the twist comes from mocap-frame poses: the pose history stays valid
        response.success = True
        self.get_logger().info(
            response.message + f" ({' '.join(f'{v:.4f}' for v in self.origin.translation)})"
        )
        return response


def main(args=None) -> int:
    """Entry point of the ``robot_ground_truth`` executable; returns the process exit status."""
    return run_tool(RobotGroundTruthNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
