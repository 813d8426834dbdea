"""px4_bridge end to end: the installed node, RigidBodies over real DDS from the test's
node, MAVLink over real UDP to a PX4 vehicle stand-in (test/fixtures/px4_vehicle.py)
that decodes every datagram with pymavlink. Both backends (pymavlink, MAVSDK's Mocap
plugin)."""

from __future__ import annotations

import math
import time

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from nav_msgs.msg import Odometry
from px4_vehicle import Px4VehicleStandIn, free_udp_port
from rclpy.qos import QoSProfile, ReliabilityPolicy
from scipy.spatial.transform import Rotation
from support import wait_subscribed

from mocap4r2_control.timebase import time_msg
from mocap4r2_interfaces.msg import RigidBodies, RigidBody

TOOLS = "mocap4r2_tools"
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
# frames are stamped on a 10 ms grid from T0, host time of about when the tests run (the
# MAVSDK backend converts stamps to the vehicle's clock, on which a stamp from before the
# vehicle booted means nothing)
T0 = float(int(time.time()) - 100)
BACKENDS = ["pymavlink", "mavsdk"]


def bodies_msg(t: float, p, q, valid: bool = True, name: str = "drone") -> RigidBodies:
    msg = RigidBodies()
    msg.header.stamp = time_msg(t)
    msg.header.frame_id = "world"
    other = RigidBody(id=1, name="other", tracking_valid=True)
    other.pose.orientation.w = 1.0
    body = RigidBody(id=2, name=name, tracking_valid=valid)
    body.pose.position.x, body.pose.position.y, body.pose.position.z = (float(v) for v in p)
    o = body.pose.orientation
    o.x, o.y, o.z, o.w = (float(v) for v in q)
    msg.rigid_bodies = [other, body]
    return msg


def start_bridge(procs, ns: str, port: int, backend: str, **extra):
    params = {
        "rigid_bodies_topic": f"{ns}/rigid_bodies",
        "body": "drone",
        "connection": f"udpout:127.0.0.1:{port}",
        "backend": backend,
        "rate": 50.0,
        "connect_timeout": 2.0,
        "diagnostics_period": 0.2,
        **extra,
    }
    return procs.start(TOOLS, "px4_bridge", name="px4_bridge", namespace=ns, params=params)


def diagnostics_of(ros, ns: str):
    """A collector of the bridge's own /diagnostics statuses."""
    collector = ros.subscribe("/diagnostics", DiagnosticArray)
    name = f"{ns}/px4_bridge"

    def matching(predicate):
        def check(array):
            return any(s.name.startswith(name) and predicate(s) for s in array.status)

        return check

    def status(predicate, timeout=30.0):
        array = collector.wait_for(matching(predicate), timeout)
        return next(s for s in array.status if s.name.startswith(name) and predicate(s))

    return status


def values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def capture_stamp(vehicle, m, period: float = 0.01, start: float = T0) -> float:
    """The capture stamp (host time, s) of the frame a sample carries.

    The pymavlink backend sends it as time_usec. The MAVSDK backend sends it converted to
    MAVSDK's "autopilot time", which is the vehicle's clock once MAVSDK's timesync has
    an answer (a boot clock: far below 1e15 µs) and accurate to about a millisecond; it
    is mapped back through the vehicle's clock and snapped to the grid of published
    frames (start + k * period)."""
    usec = m.usec if m.get_type() == "VISION_POSITION_ESTIMATE" else m.time_usec
    host = usec * 1e-6 if usec > 10**15 else vehicle.to_host_seconds(usec)
    return start + round((host - start) / period) * period


@pytest.fixture
def vehicle():
    v = Px4VehicleStandIn(free_udp_port())
    yield v
    v.close()


def publish_until_connected(pub, vehicle, start: float, timeout: float = 40.0) -> float:
    """Feed a static tracked pose until ODOMETRY arrives (link up, DDS matched); returns
    the next free stamp."""
    deadline = time.monotonic() + timeout
    t = start
    while time.monotonic() < deadline:
        pub.publish(bodies_msg(t, (0, 0, 1), (0, 0, 0, 1)))
        t += 0.01
        if vehicle.messages("ODOMETRY"):
            return t
        time.sleep(0.01)
    raise AssertionError(
        f"no ODOMETRY within {timeout} s; vehicle saw {[m.get_type() for m in vehicle.messages()][-10:]}"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_enu_motion_and_yaw_arrive_as_ned_odometry(ros, procs, vehicle, backend):
    ns = f"/px4_ned_{backend}"
    bridge = start_bridge(procs, ns, vehicle.port, backend)
    pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    wait_subscribed(pub)
    t = publish_until_connected(pub, vehicle, T0)
    heartbeat_from_bridge = vehicle.wait_for("HEARTBEAT")
    assert heartbeat_from_bridge.autopilot == 8  # MAV_AUTOPILOT_INVALID: a companion, not an autopilot

    # north-east-up in ENU: +y (north), +x (east), +z (up); yaw 90 deg in ENU (facing north)
    yaw90 = Rotation.from_euler("z", 90, degrees=True).as_quat()
    start = t
    for k in range(150):
        s = 0.01 * k
        pub.publish(bodies_msg(start + s, (1.0 + 0.5 * s, 2.0 + 1.0 * s, 0.5 + 0.2 * s), yaw90))
        time.sleep(0.01)
    moving = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(moving) < 70:
        moving = [m for m in vehicle.messages("ODOMETRY") if capture_stamp(vehicle, m) >= start - 1e-6]
        time.sleep(0.05)
    # 1.5 s of capture time at 50 Hz: 75 samples, a few lost at most on a loaded machine
    assert len(moving) >= 50, f"{len(moving)} moving samples; bridge log:\n{bridge.log()[-2000:]}"
    # PX4 hands EKF2 only ODOMETRY of a vision-like estimator_type (vehicle_visual_odometry);
    # MOCAP-typed ODOMETRY goes to vehicle_mocap_odometry, which EKF2 never reads
    fused, unfused = vehicle.vision(), vehicle.mocap_odometry()
    assert len(fused) >= len(moving) and not unfused, (
        f"{len(unfused)} ODOMETRY published as vehicle_mocap_odometry (not fused by EKF2), {len(fused)} as "
        f"vehicle_visual_odometry; estimator_type {moving[0].estimator_type}"
    )
    for m in moving:
        s = capture_stamp(vehicle, m) - start
        assert m.frame_id == 20 and m.child_frame_id == 12  # MAV_FRAME_LOCAL_FRD, MAV_FRAME_BODY_FRD
        assert m.x == pytest.approx(2.0 + 1.0 * s, abs=1e-5)  # north = ENU y
        assert m.y == pytest.approx(1.0 + 0.5 * s, abs=1e-5)  # east = ENU x
        assert m.z == pytest.approx(-(0.5 + 0.2 * s), abs=1e-5)  # down = -up
        w, x, y, z = m.q
        yaw = Rotation.from_quat([x, y, z, w]).as_euler("ZYX")[0]
        assert abs(yaw) < 1e-6  # facing north: heading 0 in NED
        assert all(math.isnan(v) for v in (m.vx, m.vy, m.vz))  # no velocity source: unknown
        assert m.pose_covariance[0] == pytest.approx(0.005**2, rel=1e-5)
        assert m.estimator_type == 2 and 1 <= m.quality <= 100  # MAV_ESTIMATOR_TYPE_VISION
    assert all(m.get_msgbuf()[0] == 0xFD for m in moving)  # MAVLink 2 frames
    # further north and east, and higher (more negative down), as time goes on
    assert moving[-1].x > moving[0].x and moving[-1].y > moving[0].y and moving[-1].z < moving[0].z


@pytest.mark.parametrize("backend", BACKENDS)
def test_nothing_sent_during_tracking_loss_and_reset_counter_after(ros, procs, vehicle, backend):
    ns = f"/px4_loss_{backend}"
    start_bridge(procs, ns, vehicle.port, backend)
    status = diagnostics_of(ros, ns)
    pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    wait_subscribed(pub)
    t = publish_until_connected(pub, vehicle, T0)
    before = vehicle.messages("ODOMETRY")[-1].reset_counter

    lost_from = t
    for _ in range(80):  # 0.8 s of capture time not tracked; the pose held, as the topics do
        pub.publish(bodies_msg(t, (0, 0, 1), (0, 0, 0, 1), valid=False))
        t += 0.01
        time.sleep(0.01)
    lost_to = t
    # the status the bridge publishes the moment it sees the loss says 0.000 s (a test-load
    # run took that one); a later one counts the time the loss has lasted
    lost = status(
        lambda s: (
            s.level == DiagnosticStatus.WARN
            and "tracking lost for" in s.message
            and float(values(s)["tracking_lost_for"]) > 0
        )
    )
    assert float(values(lost)["tracking_lost_for"]) < 30
    for _ in range(50):
        pub.publish(bodies_msg(t, (0.1, 0, 1), (0, 0, 0, 1)))
        t += 0.01
        time.sleep(0.01)
    after = vehicle.wait_for("ODOMETRY", lambda m: capture_stamp(vehicle, m) >= lost_to - 1e-6)
    sent_during = [
        m
        for m in vehicle.messages("ODOMETRY")
        if lost_from - 1e-6 <= capture_stamp(vehicle, m) < lost_to - 1e-6
    ]
    assert sent_during == []
    assert after.reset_counter == (before + 1) % 256
    back = status(lambda s: s.level == DiagnosticStatus.OK and values(s)["last_loss_duration"] != "")
    assert 0.3 < float(values(back)["last_loss_duration"]) < 30
    assert values(back)["reset_counter"] == str(after.reset_counter)


def test_rate_holds_below_the_mocap_rate(ros, procs, vehicle):
    ns = "/px4_rate"
    start_bridge(procs, ns, vehicle.port, "pymavlink", rate=40.0)
    pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    wait_subscribed(pub)
    t = publish_until_connected(pub, vehicle, T0)
    start = t + 1.0
    t = start
    frames = 400  # 2 s of a 200 Hz mocap stream
    for _ in range(frames):
        pub.publish(bodies_msg(t, (0, 0, 1), (0, 0, 0, 1)))
        t += 0.005
        time.sleep(0.005)
    end = t

    def window():
        return [m for m in vehicle.messages("ODOMETRY") if start * 1e6 - 1 <= m.time_usec < end * 1e6 - 1]

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(window()) < 76:
        time.sleep(0.05)
    got = window()
    # 2 s of capture time at 40 Hz: 80, give or take a few superseded on a loaded machine
    assert 72 <= len(got) <= 81, len(got)
    stamps = [m.time_usec for m in got]
    assert stamps == sorted(stamps)
    gaps = [(b - a) * 1e-6 for a, b in zip(stamps, stamps[1:])]
    assert min(gaps) >= 0.75 / 40  # never faster than the rate allows


def test_no_vehicle_keeps_the_node_retrying_and_connects_later(ros, procs):
    port = free_udp_port()
    ns = "/px4_novehicle"
    bridge = start_bridge(procs, ns, port, "pymavlink", connect_timeout=0.5)
    status = diagnostics_of(ros, ns)
    pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    down = status(
        lambda s: (
            s.level == DiagnosticStatus.ERROR
            and "no HEARTBEAT" in s.message
            and int(values(s)["connect_attempts"]) >= 2
        )
    )
    assert values(down)["link"] in ("retrying", "connecting")
    assert bridge.alive()
    vehicle = Px4VehicleStandIn(port)
    try:
        wait_subscribed(pub)
        publish_until_connected(pub, vehicle, T0)
        status(lambda s: values(s)["link"] == "connected")
    finally:
        vehicle.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_default_connection_reaches_px4_sitl(ros, procs, backend):
    """PX4 SITL's onboard MAVLink instance (started by its rcS as ``mavlink start -u 14580
    ... -o 14540``) binds UDP 14580 and sends to 127.0.0.1:14540, as the stand-in in
    ``mode="udpout"`` does. So the shipped default must listen on 14540 and answer the
    sender: here the default's scheme and host, on a port of the test's own (14540 may be
    taken on the machine running the tests). The vehicle sends first; the bridge answers
    whoever it heard."""
    from mocap4r2_tools import px4_bridge
    from mocap4r2_tools.px4.links import Connection

    default = Connection.parse(next(s.default for s in px4_bridge.PARAMETERS if s.name == "connection"))
    assert (default.host, default.port) == ("127.0.0.1", 14540)
    port = free_udp_port()
    ns = f"/px4_default_{backend}"
    start_bridge(procs, ns, port, backend, connection=f"{default.kind}:{default.host}:{port}")
    vehicle = Px4VehicleStandIn(port, mode="udpout")
    try:
        pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
        wait_subscribed(pub)
        publish_until_connected(pub, vehicle, T0, timeout=20.0)
        m = vehicle.wait_for("ODOMETRY")
        assert (m.x, m.y, m.z) == pytest.approx((0.0, 0.0, -1.0), abs=1e-6)
        assert vehicle.vision(), "ODOMETRY arrived but not as vehicle_visual_odometry"
    finally:
        vehicle.close()


def test_velocity_from_an_odometry_topic_goes_out_in_frd(ros, procs, vehicle):
    ns = "/px4_velocity"
    start_bridge(procs, ns, vehicle.port, "pymavlink", velocity_topic=f"{ns}/odom")
    pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    odom_pub = ros.publisher(f"{ns}/odom", Odometry, RELIABLE)
    wait_subscribed(pub)
    wait_subscribed(odom_pub)
    t = publish_until_connected(pub, vehicle, T0)
    first = t
    for _ in range(60):
        odom = Odometry()
        odom.header.stamp = time_msg(t)
        odom.twist.twist.linear.x, odom.twist.twist.linear.y, odom.twist.twist.linear.z = 1.0, 0.5, 0.25
        odom.twist.twist.angular.z = 0.3
        odom_pub.publish(odom)
        pub.publish(bodies_msg(t, (0, 0, 1), (0, 0, 0, 1)))
        t += 0.01
        time.sleep(0.01)
    m = vehicle.wait_for("ODOMETRY", lambda m: m.time_usec > first * 1e6 and not math.isnan(m.vx))
    assert (m.vx, m.vy, m.vz) == pytest.approx((1.0, -0.5, -0.25))  # FLU -> FRD: y and z flip
    assert (m.rollspeed, m.pitchspeed, m.yawspeed) == pytest.approx((0.0, 0.0, -0.3))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("message", ["vision_position_estimate", "att_pos_mocap"])
def test_the_other_messages_carry_the_same_ned_pose(ros, procs, vehicle, backend, message):
    ns = f"/px4_{message[:3]}_{backend}"
    bridge = start_bridge(procs, ns, vehicle.port, backend, message=message)
    pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    wait_subscribed(pub)
    kind = message.upper()
    yaw0 = Rotation.from_euler("z", 0, degrees=True).as_quat()  # facing the mocap's +x: "east"
    deadline = time.monotonic() + 40
    t = T0
    while time.monotonic() < deadline and not vehicle.messages(kind):
        pub.publish(bodies_msg(t, (1.0, 2.0, 3.0), yaw0))
        t += 0.01
        time.sleep(0.01)
    m = vehicle.wait_for(kind, timeout=5)
    assert (m.x, m.y, m.z) == pytest.approx((2.0, 1.0, -3.0), abs=1e-6)
    if message == "vision_position_estimate":
        assert m.yaw == pytest.approx(math.pi / 2, abs=1e-6) and abs(m.roll) < 1e-6 and abs(m.pitch) < 1e-6
        assert capture_stamp(vehicle, m) >= T0 - 1e-6
    else:
        w, x, y, z = m.q
        assert Rotation.from_quat([x, y, z, w]).as_euler("ZYX")[0] == pytest.approx(math.pi / 2, abs=1e-6)
        assert capture_stamp(vehicle, m) >= T0 - 1e-6
        assert bridge.wait_log("EKF2 ignores ATT_POS_MOCAP", 10)


def test_shipped_config_is_valid(procs):
    """config/px4_bridge.yaml: only declared parameters, every value valid; the node
    started with it takes it without an error (and, with no vehicle, keeps running)."""
    import yaml
    from support import ROOT

    from mocap4r2_tools import px4_bridge

    values = yaml.safe_load((ROOT / "config" / "px4_bridge.yaml").read_text())["px4_bridge"][
        "ros__parameters"
    ]
    specs = {spec.name: spec for spec in px4_bridge.PARAMETERS}
    assert set(values) <= set(specs), set(values) - set(specs)
    for name, value in values.items():
        assert specs[name].validate(value) is None, (name, specs[name].validate(value))
    # the shipped file connects as the node's default does (to PX4 SITL; see the test above)
    assert values["connection"] == specs["connection"].default
    proc = procs.start(
        TOOLS,
        "px4_bridge",
        ros=False,
        args=[
            "--ros-args",
            "--params-file",
            str(ROOT / "config" / "px4_bridge.yaml"),
            "-p",
            f"connection:=udpout:127.0.0.1:{free_udp_port()}",
        ],
    )
    assert proc.wait_log("body 'robot1' on /sim/rigid_bodies -> odometry at 50 Hz", timeout=20), proc.log()
    assert "[ERROR]" not in proc.log() and proc.alive()


def test_bad_parameters_are_refused_and_the_node_keeps_running(ros, procs):
    from rcl_interfaces.msg import Parameter as ParameterMsg
    from rcl_interfaces.msg import ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    port = free_udp_port()
    proc = procs.start(
        TOOLS,
        "px4_bridge",
        name="px4_bridge",
        namespace="/px4_bad",
        params={
            "body": "drone",
            "rate": 500.0,
            "connection": f"udpout:127.0.0.1:{port}",
            "backend": "carrier_pigeon",
        },
    )
    assert proc.wait_log("rate must be <= 200", 20), proc.log()
    assert proc.wait_log("backend must be one of", 20)
    assert proc.wait_log("odometry at 50 Hz", 20)  # the defaults used instead

    def set_parameter(name, value):
        request = SetParameters.Request()
        kind = ParameterType.PARAMETER_DOUBLE if isinstance(value, float) else ParameterType.PARAMETER_STRING
        request.parameters = [
            ParameterMsg(
                name=name,
                value=ParameterValue(
                    type=kind,
                    double_value=value if isinstance(value, float) else 0.0,
                    string_value=value if isinstance(value, str) else "",
                ),
            )
        ]
        return ros.call(SetParameters, "/px4_bad/px4_bridge/set_parameters", request, timeout=20).results[0]

    refused = set_parameter("rate", 5.0)
    assert not refused.successful and "rate must be >= 10" in refused.reason
    assert not set_parameter("message", "carrier_pigeon").successful
    assert not set_parameter("connection", "udpout:127.0.0.1:1").successful  # read-only: needs a restart
    assert set_parameter("rate", 20.0).successful
    assert proc.alive()


# A mocap system stamps a frame with its capture time, some milliseconds before the frame
# reaches the bridge; a vehicle stamping samples on arrival is off by at least this much.
CAPTURE_LATENCY = 0.02


def stream_indexed_frames(pub, vehicle, captures: dict[int, float], until, timeout: float = 40.0) -> None:
    """Publish frames stamped CAPTURE_LATENCY before now, each with its index k in the
    position (ENU x = k / 100, so NED y), at about 100 Hz, until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    k = len(captures)
    while time.monotonic() < deadline and not until():
        capture = time.time() - CAPTURE_LATENCY
        captures[k] = capture
        pub.publish(bodies_msg(capture, (k / 100.0, 0.0, 1.0), (0, 0, 0, 1)))
        k += 1
        time.sleep(0.01)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_vehicle_converts_time_usec_to_the_capture_time(ros, procs, backend):
    """PX4 converts a sample's time_usec through its TIMESYNC filter (sync_stamp): once
    the filter has converged on the bridge's answers, the stamp EKF2 uses must be the
    frame's capture time on the vehicle's clock (within 1 ms on loopback). Before that,
    and forever for a bridge that does not answer, it is the arrival time: 20 ms off."""
    vehicle = Px4VehicleStandIn(free_udp_port(), timesync_rate=100.0, boot_age=321.0)
    try:
        ns = f"/px4_timesync_{backend}"
        bridge = start_bridge(procs, ns, vehicle.port, backend)
        status = diagnostics_of(ros, ns)
        pub = ros.publisher(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
        wait_subscribed(pub)
        captures: dict[int, float] = {}

        def converged_samples():
            return [a for a in vehicle.vision() if a.converged]

        stream_indexed_frames(pub, vehicle, captures, lambda: len(converged_samples()) >= 100)
        arrivals = vehicle.vision()
        assert arrivals, (
            f"no ODOMETRY reached EKF2 ({len(vehicle.mocap_odometry())} went to vehicle_mocap_odometry); "
            f"bridge log:\n{bridge.log()[-2000:]}"
        )
        ts = vehicle.timesync
        converged = converged_samples()
        assert converged, (
            f"the vehicle's timesync never converged ({ts.sequence} answers used, {ts.high_rtt} too slow, "
            f"{vehicle.timesync_requests_sent} requests sent): every sample stamped on arrival"
        )
        errors_ms = []
        for a in converged:
            k = round(a.message.y * 100.0)  # NED y = ENU x = k / 100
            expected_us = (captures[k] * 1e9 - vehicle._boot_ns) / 1000
            errors_ms.append((a.timestamp_sample_us - expected_us) / 1000)
        worst = max(errors_ms, key=abs)
        rtt_ms = sum(ts.used_rtt_us) / len(ts.used_rtt_us) / 1000
        print(
            f"{backend}: {len(errors_ms)} samples after convergence, error median "
            f"{sorted(errors_ms)[len(errors_ms) // 2]:.3f} ms, worst {worst:.3f} ms; timesync round trip "
            f"mean {rtt_ms:.3f} ms"
        )
        # The bridge stamps its answer mid-way through the time it held the request, so only
        # a difference between the two directions of the link is left: within 1 ms. MAVSDK
        # stamps its answer when it sends it, after its own threads have handed the request
        # over (PX4 takes that for link delay), and moves its clock every 5 s by one sample
        # that PX4's slower filter follows late: 0.25-0.45 ms on a quiet machine, 1-2 ms seen
        # on a busy one, which the bridge cannot change through MAVSDK. Its bound is half
        # PX4's 10 ms round-trip gate: still far from arrival stamps (20 ms and more late)
        # and from a wrong clock (seconds to years).
        median = sorted(errors_ms)[len(errors_ms) // 2]
        assert abs(median) < 1.0, f"timestamp_sample off the capture time by {median:.3f} ms (median)"
        bound = 1.0 if backend == "pymavlink" else 5.0
        assert abs(worst) < bound, (
            f"timestamp_sample off the capture time by up to {worst:.3f} ms "
            f"(median {sorted(errors_ms)[len(errors_ms) // 2]:.3f} ms over {len(errors_ms)} samples)"
        )
        # the check can tell: samples taken before convergence were stamped on arrival
        early = [a for a in arrivals if not a.converged]
        for a in early[:20]:
            k = round(a.message.y * 100.0)
            assert a.timestamp_sample_us - (captures[k] * 1e9 - vehicle._boot_ns) / 1000 > 15_000

        # /diagnostics: capture -> send is at least the mocap's latency (how much more
        # depends on the load of the machine: 1-3 ms when quiet, 100 ms seen when busy),
        # in milliseconds
        delays = values(status(lambda s: values(s)["ev_delay_ms"] != ""))
        _, p50, _, p99 = delays["ev_delay_ms"].split()
        assert CAPTURE_LATENCY * 1e3 <= float(p50) <= float(p99) < 2000, delays["ev_delay_ms"]
        if backend == "pymavlink":
            # the bridge's own view of the vehicle's clock and of PX4's convergence
            synced = values(status(lambda s: values(s)["timesync_converged"] == "true"))
            assert int(synced["timesync_requests_answered"]) >= 500
            assert 0 < float(synced["timesync_rtt_ms"]) < 10
            vehicle_minus_host = -vehicle._boot_ns * 1e-9
            assert float(synced["timesync_offset_s"]) == pytest.approx(vehicle_minus_host, abs=0.005)
            assert synced["timesync_clock_jumps"] == "0"  # one boot, one clock
            assert synced["recommended_EKF2_EV_DELAY_ms"] == "0.0"
        else:
            assert delays["timesync"].startswith("MAVSDK") and delays["timesync_converged"] == ""
    finally:
        vehicle.close()
