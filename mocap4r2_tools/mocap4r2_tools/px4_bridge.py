"""Node `px4_bridge`: one mocap rigid body to a PX4 flight controller over MAVLink.

Follows the body ``body`` on a system's ``rigid_bodies`` and sends it, converted from
ROS's ENU/FLU to PX4's NED/FRD (:mod:`mocap4r2_tools.px4.frames`), as MAVLink
ODOMETRY (default: frame MAV_FRAME_LOCAL_FRD, child MAV_FRAME_BODY_FRD, pose, body
velocity from ``velocity_topic`` when given, covariances, quality), VISION_POSITION_ESTIMATE,
or ATT_POS_MOCAP (which PX4's EKF2 ignores: a warning says so).

* At most ``rate`` Hz, decided on capture stamps; ``time_usec`` is the capture stamp, and
  the bridge answers the vehicle's TIMESYNC so PX4 converts it to its own clock
  (:mod:`mocap4r2_tools.px4.timesync`); /diagnostics gives the timesync state, the
  capture-to-send delay and the EKF2_EV_DELAY that follows from both.
* While the body is not tracked nothing is sent (the topics hold a lost body's last pose;
  a flight controller must never fuse it as fresh). When tracking returns, the
  ``reset_counter`` increments; /diagnostics says how long tracking was lost.
* The link (``backend`` pymavlink or mavsdk) lives on its own thread; a vehicle that does
  not answer within ``connect_timeout`` leaves the node running and retrying, and
  /diagnostics says why.
"""

from __future__ import annotations

import sys
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy

from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.timebase import stamp_to_seconds
from mocap4r2_interfaces.msg import RigidBodies

from .px4.links import BACKENDS, MESSAGES, Connection, LinkWorker, connection_check, make_link
from .px4.stream import RateLimiter, TrackingGate, build_sample
from .px4.timesync import recommended_ev_delay_ms
from .tool_node import (
    DIAGNOSTICS_PERIOD,
    QOS_RELIABLE,
    FollowedBody,
    ToolNode,
    followed_body_parameters,
    run_tool,
)

PARAMETERS = (
    *followed_body_parameters("vehicle"),
    ParameterSpec(
        "connection",
        # PX4 SITL's onboard link binds UDP 14580 and sends to 14540: listen there and
        # answer whoever sends (udpout:127.0.0.1:14540 would send to a port nobody reads)
        "udpin:127.0.0.1:14540",
        "MAVLink URL: udpin:HOST:PORT (listen, answer the sender), udpout:HOST:PORT or serial:DEVICE[:BAUD].",
        check=connection_check,
        read_only=True,
    ),
    ParameterSpec(
        "backend",
        "pymavlink",
        "MAVLink transport: pymavlink or mavsdk (MAVSDK's Mocap plugin).",
        choices=BACKENDS,
        read_only=True,
    ),
    ParameterSpec(
        "message",
        "odometry",
        "odometry (ODOMETRY), vision_position_estimate or att_pos_mocap (ignored by EKF2).",
        choices=MESSAGES,
    ),
    ParameterSpec(
        "rate", 50.0, "Messages per second at most (EKF2 wants 30..100).", min_value=10.0, max_value=200.0
    ),
    ParameterSpec(
        "connect_timeout",
        5.0,
        "Seconds to wait for the vehicle's HEARTBEAT before retrying.",
        min_value=0.2,
        max_value=120.0,
        read_only=True,
    ),
    ParameterSpec(
        "velocity_topic",
        "",
        "nav_msgs/Odometry with the body's body-frame twist "
        "(e.g. a motion estimator's odom); empty: velocity unknown (NaN).",
        read_only=True,
    ),
    ParameterSpec(
        "velocity_max_age",
        0.1,
        "Largest stamp difference, s, between pose and velocity sample.",
        min_value=0.0,
        max_value=5.0,
    ),
    ParameterSpec(
        "position_stddev",
        0.005,
        "Position standard deviation sent as covariance, m (0: unknown).",
        min_value=0.0,
        max_value=10.0,
    ),
    ParameterSpec(
        "orientation_stddev",
        0.01,
        "Orientation standard deviation sent as covariance, rad (0: unknown).",
        min_value=0.0,
        max_value=3.2,
    ),
    ParameterSpec(
        "system_id",
        1,
        "MAVLink system id of the bridge (the vehicle's, as for a companion computer).",
        min_value=1,
        max_value=255,
        read_only=True,
    ),
    ParameterSpec(
        "component_id",
        197,
        "MAVLink component id (197: MAV_COMP_ID_VISUAL_INERTIAL_ODOMETRY).",
        min_value=1,
        max_value=255,
        read_only=True,
    ),
    ParameterSpec(
        "timeout",
        0.5,
        "Seconds without rigid_bodies after which the body counts as lost.",
        min_value=0.01,
        max_value=600.0,
    ),
    DIAGNOSTICS_PERIOD,
    QOS_RELIABLE,
)

# why the body is not streamed, as the tracking gate reports it
LOSS_REASONS = {
    FollowedBody.MISSING: "not in rigid_bodies",
    FollowedBody.NOT_TRACKED: "not tracked (tracking_valid false)",
    FollowedBody.BAD_POSE: "pose not usable (NaN or zero quaternion)",
}

# s: how long a thread waiting for the interpreter lock waits at most (see __init__)
GIL_SWITCH_INTERVAL = 0.0002

SIM_TIME_REFUSED = (
    "use_sim_time is true: refused. time_usec would be simulation time (the stamps of "
    "rigid_bodies) while the bridge answers PX4's TIMESYNC on the host's system clock, so PX4 "
    "would convert every sample by the difference of the two clocks; nothing is sent. Run "
    "px4_bridge with use_sim_time false (PX4 SITL in lockstep takes the simulation's time from "
    "its own simulator link, not from this bridge)"
)

ATT_POS_MOCAP_WARNING = (
    "message att_pos_mocap: PX4's EKF2 ignores ATT_POS_MOCAP; use odometry "
    "(or vision_position_estimate) for the vehicle to fuse the pose"
)


class Px4BridgeNode(ToolNode):
    """The node: rigid_bodies in, MAVLink external vision out."""

    def __init__(self, **kwargs):
        super().__init__("px4_bridge", PARAMETERS, **kwargs)
        cfg = self.values()
        self._apply_config()
        self._limiter = RateLimiter(cfg["rate"])
        self._gate = TrackingGate()
        self._followed = FollowedBody(self.get_logger())
        self._twist = None  # (stamp, (linear, angular), covariance) of the last velocity sample
        self._submitted = 0
        connection = Connection.parse(cfg["connection"])
        self._connection = connection
        # The link's reader thread stamps TIMESYNC requests and answers them. Woken by a
        # datagram, it may wait CPython's switch interval (5 ms by default) for the
        # interpreter lock while the executor thread holds it; PX4 takes that wait for
        # link delay in one direction only, and its offset is off by half of it.
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL))
        self._backend = cfg["backend"]
        logger = self.get_logger()
        self._worker = LinkWorker(
            lambda: make_link(
                cfg["backend"],
                connection,
                cfg["system_id"],
                cfg["component_id"],
                log=self._warn,
            ),
            cfg["connect_timeout"],
            self.message,
        )
        qos = QoSProfile(
            depth=100,
            reliability=ReliabilityPolicy.RELIABLE if cfg["qos_reliable"] else ReliabilityPolicy.BEST_EFFORT,
        )
        self.create_subscription(RigidBodies, cfg["rigid_bodies_topic"], self._on_bodies, qos)
        if cfg["velocity_topic"]:
            self.create_subscription(Odometry, cfg["velocity_topic"], self._on_velocity, qos)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(cfg["diagnostics_period"], self._publish_diagnostics)
        # the two clocks of a sample must agree: time_usec's (ROS time) and TIMESYNC's (the
        # host's system clock); with simulation time they do not
        self._refused = SIM_TIME_REFUSED if self.get_parameter("use_sim_time").value else ""
        if self._refused:
            logger.error(self._refused)
        else:
            self._worker.start()
        self.mark_ready()
        if not self.body:
            logger.error("parameter body is empty: set it to the rigid body on the vehicle")
        if self.message == "att_pos_mocap":
            logger.warning(ATT_POS_MOCAP_WARNING)
        logger.info(
            f"body {self.body!r} on {self.resolve_topic_name(cfg['rigid_bodies_topic'])} -> "
            f"{self.message} at {cfg['rate']:g} Hz to {connection} ({self._backend})"
            + (
                f", velocity from {self.resolve_topic_name(cfg['velocity_topic'])}"
                if cfg["velocity_topic"]
                else ", velocity unknown"
            )
        )

    def _warn(self, text: str) -> None:
        self.get_logger().warning(text)

    def _apply_config(self) -> None:
        cfg = self.values()
        self.body = cfg["body"]
        self.message = cfg["message"]
        self.timeout = cfg["timeout"]
        self.position_stddev = cfg["position_stddev"]
        self.orientation_stddev = cfg["orientation_stddev"]
        self.velocity_max_age = cfg["velocity_max_age"]

    def on_parameters_changed(self, names: set[str]) -> None:
        self._apply_config()
        self._limiter.set_rate(self.value("rate"))
        self._worker.message = self.message
        if "message" in names and self.message == "att_pos_mocap":
            self.get_logger().warning(ATT_POS_MOCAP_WARNING)
        if "body" in names:
            self._gate = TrackingGate()
            self._limiter.reset()
        self.get_logger().info(f"{', '.join(sorted(names))} changed")

    # ------------------------------------------------------------------ input
    def _on_velocity(self, msg: Odometry) -> None:
        t = msg.twist.twist
        self._twist = (
            stamp_to_seconds(msg.header.stamp),
            ((t.linear.x, t.linear.y, t.linear.z), (t.angular.x, t.angular.y, t.angular.z)),
            list(msg.twist.covariance),
        )

    def _on_bodies(self, msg: RigidBodies) -> None:
        if self._refused:
            return
        now = time.monotonic()
        reading = self._followed.read(msg, self.body, now)
        if reading.status == FollowedBody.STALE:
            return
        if reading.status != FollowedBody.TRACKED:
            self._gate.update(False, now, LOSS_REASONS[reading.status])
            return
        stamp = reading.stamp
        if not self._gate.update(True, now):
            return
        if not self._limiter.admit(stamp):
            return
        twist = covariance = None
        if self._twist is not None and abs(self._twist[0] - stamp) <= self.velocity_max_age:
            _, twist, covariance = self._twist
        sample = build_sample(
            stamp,
            reading.position,
            reading.quaternion,
            twist=twist,
            twist_covariance=covariance,
            position_stddev=self.position_stddev,
            orientation_stddev=self.orientation_stddev,
            reset_counter=self._gate.reset_counter,
            quality=self._gate.quality(),
        )
        self._worker.submit(sample)
        self._submitted += 1

    # ------------------------------------------------------------------ diagnostics
    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        if self._gate.state == "tracking" and now - self._followed.last_message > self.timeout:
            self._gate.silent(now, f"no rigid_bodies message for more than {self.timeout:g} s")
        worker, gate = self._worker, self._gate
        status = DiagnosticStatus()
        status.name = f"{self.get_fully_qualified_name()}: {self.body or '(no body)'}"
        status.hardware_id = str(self._connection)
        lost_for = gate.lost_for(now)
        if self._refused:
            level, text = DiagnosticStatus.ERROR, self._refused
        elif not self.body:
            level, text = DiagnosticStatus.ERROR, "parameter body is empty"
        elif worker.state != "connected":
            level, text = DiagnosticStatus.ERROR, f"vehicle not connected: {worker.reason}; retrying"
        elif gate.state == "lost":
            level = DiagnosticStatus.WARN
            text = (
                f"body {self.body!r} {gate.reason}: tracking lost for {lost_for:.1f} s, nothing sent; "
                f"reset_counter becomes {(gate.reset_counter + 1) % 256} when it is back"
            )
        elif gate.state == "waiting":
            level = DiagnosticStatus.WARN
            text = f"waiting for body {self.body!r}: {gate.reason}; nothing sent"
            if gate.reason == "not in rigid_bodies":
                text += f" (bodies: {', '.join(self._followed.known_bodies) or 'none'})"
        else:
            level, text = DiagnosticStatus.OK, f"sending {self.message} of {self.body!r} to {worker.vehicle}"
        if self.message == "att_pos_mocap" and level == DiagnosticStatus.OK:
            level, text = DiagnosticStatus.WARN, text + "; " + ATT_POS_MOCAP_WARNING
        status.level = level
        status.message = text
        values = {
            "backend": self._backend,
            "connection": str(self._connection),
            "message": self.message,
            "link": worker.state,
            "link_reason": worker.reason,
            "vehicle": worker.vehicle,
            "connect_attempts": str(worker.attempts),
            "sent": str(worker.sent),
            "dropped": str(worker.dropped),
            "tracking": gate.state,
            "tracking_lost_for": f"{lost_for:.3f}" if lost_for is not None else "",
            "last_loss_duration": (
                f"{gate.last_loss_duration:.3f}" if gate.last_loss_duration is not None else ""
            ),
            "tracking_losses": str(gate.losses),
            "reset_counter": str(gate.reset_counter),
            "quality": str(gate.quality()),
            "mocap_frame": self._followed.mocap_frame,
        }
        values.update(self._timing_values())
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [status]
        self._diag_pub.publish(array)

    def _timing_values(self) -> dict[str, str]:
        """Timesync with the vehicle, capture-to-send delay, and the EKF2_EV_DELAY they imply."""
        worker = self._worker
        out = {
            "timesync": "",
            "timesync_converged": "",
            "timesync_requests_answered": "",
            "timesync_rtt_ms": "",
            "timesync_offset_s": "",
        }
        out.update(worker.timesync())
        delays = worker.ev_delay
        p50, p99 = delays.percentile(50), delays.percentile(99)
        out["ev_delay_ms"] = (
            f"p50 {p50 * 1e3:.2f} p99 {p99 * 1e3:.2f}" if p50 is not None and p99 is not None else ""
        )
        out["ev_delay_samples"] = str(len(delays))
        rtt = float(out["timesync_rtt_ms"]) if out["timesync_rtt_ms"] else None
        recommended = recommended_ev_delay_ms(
            out["timesync_converged"] == "true", p50 * 1e3 if p50 is not None else None, rtt
        )
        out["recommended_EKF2_EV_DELAY_ms"] = f"{recommended:.1f}" if recommended is not None else ""
        return out

    def destroy_node(self):
        self._worker.stop()
        return super().destroy_node()


def main(args=None) -> int:
    """Entry point of ``px4_bridge``."""
    return run_tool(Px4BridgeNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
