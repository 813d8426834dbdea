"""Node `motion_estimator`: velocity and acceleration of tracked bodies, from their poses.

Reads one mocap system's ``rigid_bodies`` (``rigid_bodies_topic``) and, for every body
selected by ``bodies`` (empty: all), publishes

* ``~/<body>/odom`` (nav_msgs/Odometry): pose in the system's frame (``header.frame_id``),
  twist in the body frame (``child_frame_id`` is the body, as REP-105 and
  nav_msgs/Odometry specify), with the estimator's covariances;
* ``~/<body>/accel`` (geometry_msgs/AccelWithCovarianceStamped, ``frame_id`` the body):
  the world acceleration and the angular acceleration in body axes.

The math is :mod:`mocap4r2_tools.motion.estimation` (``method``: finite_difference,
savitzky_golay, kalman). Sample times are capture stamps fitted to frame numbers, so
dropped frames give the right dt; a frame where the body is not tracked is not a
measurement (a predicted estimate with a grown covariance is published); after
``timeout`` s of capture time without a tracked pose nothing is published for the body.
"""

from __future__ import annotations

import re

from geometry_msgs.msg import AccelWithCovarianceStamped
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy

from mocap4r2_control.geometry import pose_msg_arrays
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.timebase import stamp_to_seconds
from mocap4r2_interfaces.msg import RigidBodies

from .motion.estimation import METHODS, BodyTracker, Estimate, EstimatorError, FrameClock, make_estimator
from .tool_node import ToolNode, run_tool, topic_parameter

MAX_BODIES = 256


def _names_check(value: list) -> str | None:
    if not all(isinstance(v, str) and v for v in value):
        return f"bodies must be a list of non-empty names, got {value!r}"
    return None


PARAMETERS = (
    topic_parameter("rigid_bodies_topic", "rigid_bodies", "RigidBodies topic of the mocap system."),
    ParameterSpec("bodies", [], "Names of the bodies to estimate; empty: every body.", check=_names_check),
    ParameterSpec("method", "kalman", "Estimator.", choices=METHODS),
    ParameterSpec(
        "position_noise", 0.0005, "Std dev of a body position measurement, m.", min_value=1e-7, max_value=1.0
    ),
    ParameterSpec(
        "orientation_noise",
        0.005,
        "Std dev of a body orientation measurement, rad.",
        min_value=1e-7,
        max_value=1.0,
    ),
    ParameterSpec(
        "window",
        0.0,
        "finite_difference: seconds back to the older pose (0: the previous one).",
        min_value=0.0,
        max_value=5.0,
    ),
    ParameterSpec("sg_window", 15, "savitzky_golay: poses in the window.", min_value=3, max_value=512),
    ParameterSpec(
        "sg_order", 2, "savitzky_golay: polynomial order (window >= order + 2).", min_value=1, max_value=5
    ),
    ParameterSpec(
        "linear_jerk",
        10.0,
        "kalman: spectral density of the white jerk, (m/s^3)^2/Hz.",
        min_value=1e-6,
        max_value=1e9,
    ),
    ParameterSpec(
        "angular_jerk",
        10.0,
        "kalman: spectral density of the angular jerk, (rad/s^3)^2/Hz.",
        min_value=1e-6,
        max_value=1e9,
    ),
    ParameterSpec(
        "timeout",
        0.5,
        "Seconds without a tracked pose after which a body's estimate stops.",
        min_value=0.001,
        max_value=600.0,
    ),
    ParameterSpec(
        "frame_rate",
        0.0,
        "Nominal frame rate of the mocap system, Hz (dt = frame number gap / rate); "
        "0: learned from the stamps and frame numbers.",
        min_value=0.0,
        max_value=100000.0,
    ),
    ParameterSpec("publish_accel", True, "Also publish ~/<body>/accel."),
    ParameterSpec("qos_reliable", True, "Reliable subscription (false: best effort).", read_only=True),
)


def topic_token(name: str) -> str:
    """A body name as one topic name token (ROS names: letters, digits, underscores)."""
    token = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return token if token and not token[0].isdigit() else f"_{token}"


class MotionEstimatorNode(ToolNode):
    """Estimates velocity and acceleration of the configured rigid bodies from the mocap stream and publishes
    them per body."""

    def __init__(self, **kwargs):
        super().__init__("motion_estimator", PARAMETERS, **kwargs)
        cfg = self.values()
        self._bodies: dict[str, tuple[BodyTracker, object, object]] = {}
        self._ignored: set[str] = set()
        self._configure()
        qos = QoSProfile(
            depth=100,
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        self.create_subscription(RigidBodies, cfg["rigid_bodies_topic"], self._on_bodies, qos)
        self.mark_ready()
        which = ", ".join(self.selection) if self.selection else "every body"
        self.get_logger().info(
            f"estimating {which} on {self.resolve_topic_name(cfg['rigid_bodies_topic'])} with {self.method}"
        )

    def _configure(self) -> None:
        cfg = self.values()
        self.method = cfg["method"]
        self.selection = set(cfg["bodies"])
        self.timeout = cfg["timeout"]
        self.publish_accel = cfg["publish_accel"]
        self.frame_rate = cfg["frame_rate"]
        self._estimator_args = dict(
            position_noise=cfg["position_noise"],
            orientation_noise=cfg["orientation_noise"],
            window_seconds=cfg["window"],
            sg_window=cfg["sg_window"],
            sg_order=cfg["sg_order"],
            linear_jerk=cfg["linear_jerk"],
            angular_jerk=cfg["angular_jerk"],
        )
        try:
            make_estimator(self.method, **self._estimator_args)
        except EstimatorError as exc:
            # e.g. sg_window < sg_order + 2: the parameters are valid one by one, not together
            self.get_logger().error(f"{exc}; using finite_difference until the parameters are fixed")
            self.method = "finite_difference"
        # every tracker starts over with the new settings; publishers are kept
        for name, (_, odom_pub, accel_pub) in list(self._bodies.items()):
            self._bodies[name] = (self._tracker(), odom_pub, accel_pub)

    def on_parameters_changed(self, names: set[str]) -> None:
        self._configure()
        self.get_logger().info(f"{', '.join(sorted(names))} changed: method {self.method}")

    def _tracker(self) -> BodyTracker:
        period = 1.0 / self.frame_rate if self.frame_rate > 0 else None
        return BodyTracker(
            make_estimator(self.method, **self._estimator_args),
            timeout=self.timeout,
            clock=FrameClock(period=period),
        )

    def _entry(self, name: str):
        entry = self._bodies.get(name)
        if entry is None:
            if len(self._bodies) >= MAX_BODIES:
                if name not in self._ignored and len(self._ignored) < MAX_BODIES:
                    self._ignored.add(name)
                    self.get_logger().error(f"more than {MAX_BODIES} bodies: {name!r} is not estimated")
                return None
            token = topic_token(name)
            entry = (
                self._tracker(),
                self.create_publisher(Odometry, f"~/{token}/odom", 10),
                self.create_publisher(AccelWithCovarianceStamped, f"~/{token}/accel", 10),
            )
            self._bodies[name] = entry
            self.get_logger().info(f"body {name!r}: ~/{token}/odom and ~/{token}/accel")
        return entry

    def _on_bodies(self, msg: RigidBodies) -> None:
        stamp = stamp_to_seconds(msg.header.stamp)
        for body in msg.rigid_bodies:
            if self.selection and body.name not in self.selection:
                continue
            entry = self._entry(body.name)
            if entry is None:
                continue
            tracker, odom_pub, accel_pub = entry
            pose = pose_msg_arrays(body.pose) if body.tracking_valid else None
            if body.tracking_valid and pose is None:
                self.get_logger().warning(
                    f"body {body.name!r}: tracked with an unusable pose (NaN or zero "
                    "quaternion); used as an untracked frame",
                    throttle_duration_sec=5.0,
                )
            position, orientation = pose if pose is not None else (None, None)
            estimate = tracker.on_frame(msg.frame_number, stamp, pose is not None, position, orientation)
            if estimate is not None:
                self._publish(msg, body.name, estimate, odom_pub, accel_pub)

    def _publish(self, msg: RigidBodies, name: str, e: Estimate, odom_pub, accel_pub) -> None:
        odom = Odometry()
        odom.header.stamp = msg.header.stamp
        odom.header.frame_id = msg.header.frame_id
        odom.child_frame_id = name
        p = odom.pose.pose
        p.position.x, p.position.y, p.position.z = (float(v) for v in e.position)
        p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w = (float(v) for v in e.orientation)
        odom.pose.covariance = [float(v) for v in e.pose_covariance.ravel()]
        tw = odom.twist.twist
        tw.linear.x, tw.linear.y, tw.linear.z = (float(v) for v in e.linear)
        tw.angular.x, tw.angular.y, tw.angular.z = (float(v) for v in e.angular)
        odom.twist.covariance = [float(v) for v in e.twist_covariance.ravel()]
        odom_pub.publish(odom)
        if self.publish_accel:
            accel = AccelWithCovarianceStamped()
            accel.header.stamp = msg.header.stamp
            accel.header.frame_id = name
            a = accel.accel.accel
            a.linear.x, a.linear.y, a.linear.z = (float(v) for v in e.linear_acceleration)
            a.angular.x, a.angular.y, a.angular.z = (float(v) for v in e.angular_acceleration)
            accel.accel.covariance = [float(v) for v in e.accel_covariance.ravel()]
            accel_pub.publish(accel)


def main(args=None) -> int:
    """Entry point of the ``motion_estimator`` executable; returns the process exit status."""
    return run_tool(MotionEstimatorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
