"""px4_bridge's rclpy-free core: the ENU/FLU -> NED/FRD conversion, the rate limiter, the
tracking-loss gate and the MAVLink URL."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mocap4r2_tools.px4.frames import enu_flu_to_ned_frd, flu_to_frd, ned_frd_to_enu_flu, quat_to_euler_frd
from mocap4r2_tools.px4.links import Connection, connection_check
from mocap4r2_tools.px4.stream import (
    RateLimiter,
    TrackingGate,
    build_sample,
    pose_covariance_urt,
    twist_covariance_frd,
)
from mocap4r2_tools.px4.timesync import TimesyncPeer


def test_position_east_north_up_becomes_north_east_down():
    p, _ = enu_flu_to_ned_frd([1.0, 2.0, 3.0], [0, 0, 0, 1])
    assert p.tolist() == [2.0, 1.0, -3.0]


@pytest.mark.parametrize("yaw_enu_deg, heading_ned_deg", [(0, 90), (90, 0), (180, -90), (-90, 180), (45, 45)])
def test_yaw_in_enu_becomes_the_compass_heading_in_ned(yaw_enu_deg, heading_ned_deg):
    q = Rotation.from_euler("z", yaw_enu_deg, degrees=True).as_quat()
    _, q_ned = enu_flu_to_ned_frd([0, 0, 0], q)
    roll, pitch, yaw = quat_to_euler_frd(q_ned)
    assert abs(roll) < 1e-12 and abs(pitch) < 1e-12
    assert math.degrees(math.remainder(yaw - math.radians(heading_ned_deg), 2 * math.pi)) == pytest.approx(
        0, abs=1e-9
    )


def test_nose_down_and_right_wing_down_keep_their_meaning():
    # FLU: a positive rotation about y (left) pitches the nose DOWN; in FRD pitch up is +y (right)
    q_nose_down = Rotation.from_euler("y", 10, degrees=True).as_quat()
    roll, pitch, _ = quat_to_euler_frd(enu_flu_to_ned_frd([0, 0, 0], q_nose_down)[1])
    assert pitch == pytest.approx(math.radians(-10)) and roll == pytest.approx(0, abs=1e-12)
    # FLU: a positive rotation about x (forward) lifts the left wing (y left turns up):
    # right wing down, which is a positive roll in FRD
    q_right_wing_down = Rotation.from_euler("x", 10, degrees=True).as_quat()
    roll, pitch, _ = quat_to_euler_frd(enu_flu_to_ned_frd([0, 0, 0], q_right_wing_down)[1])
    assert roll == pytest.approx(math.radians(10)) and pitch == pytest.approx(0, abs=1e-12)


def test_conversion_is_its_own_inverse_and_keeps_body_vectors_consistent():
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = rng.normal(size=3)
        r = Rotation.random(random_state=rng)
        p_ned, q_ned = enu_flu_to_ned_frd(p, r.as_quat())
        p_back, q_back = ned_frd_to_enu_flu(p_ned, q_ned)
        assert np.allclose(p_back, p)
        assert (Rotation.from_quat(q_back).inv() * r).magnitude() < 1e-9
        # a point ahead-left-up of the body, in both conventions, lands at the same place
        v_flu = rng.normal(size=3)
        world_enu = p + r.apply(v_flu)
        world_ned = p_ned + Rotation.from_quat(q_ned).apply(flu_to_frd(v_flu))
        assert np.allclose(world_ned, [world_enu[1], world_enu[0], -world_enu[2]])


def test_sample_velocity_covariance_and_stamp():
    s = build_sample(
        1_700_000_000.123456,
        [1, 2, 3],
        [0, 0, 0, 1],
        twist=((1.0, 0.5, 0.2), (0.1, 0.2, 0.3)),
        twist_covariance=np.diag([0.01, 0.02, 0.03, 0.04, 0.05, 0.06]).ravel(),
        position_stddev=0.01,
        orientation_stddev=0.1,
        reset_counter=257,
        quality=150,
    )
    assert s.time_usec == 1_700_000_000_123_456
    assert s.velocity == (1.0, -0.5, -0.2) and s.angular_velocity == (0.1, -0.2, -0.3)
    assert s.reset_counter == 1 and s.quality == 100
    assert s.pose_covariance[0] == pytest.approx(1e-4) and s.pose_covariance[6] == pytest.approx(1e-4)
    assert s.pose_covariance[20] == pytest.approx(1e-2) and s.pose_covariance[1] == 0
    assert s.velocity_covariance[0] == pytest.approx(0.01) and s.velocity_covariance[20] == pytest.approx(
        0.06
    )
    unknown = build_sample(1.0, [0, 0, 0], [0, 0, 0, 1])
    assert all(math.isnan(v) for v in unknown.velocity + unknown.angular_velocity)
    assert math.isnan(unknown.pose_covariance[0]) and math.isnan(unknown.velocity_covariance[0])
    assert math.isnan(pose_covariance_urt(0.0, 0.1)[0]) and math.isnan(twist_covariance_frd([0.0] * 36)[0])
    # a cross term vx-vy changes sign with y
    c = np.zeros((6, 6))
    c[0, 1] = c[1, 0] = 0.5
    assert twist_covariance_frd(c.ravel())[1] == -0.5


@pytest.mark.parametrize(
    "mocap_hz, rate, expected",
    [
        (100, 50, 50),
        (120, 50, 50),
        (240, 100, 100),
        (30, 50, 30),
        (200, 10, 10),
        (360, 200, 200),
        (60, 50, 50),
    ],
)
def test_rate_limiter_on_capture_stamps(mocap_hz, rate, expected):
    limiter = RateLimiter(rate)
    t0 = 1_700_000_000.0
    passed = sum(limiter.admit(t0 + k / mocap_hz) for k in range(mocap_hz * 10))
    assert abs(passed - expected * 10) <= 2


def test_rate_limiter_restarts_after_a_gap():
    limiter = RateLimiter(50)
    assert limiter.admit(10.0) and not limiter.admit(10.01) and limiter.admit(10.02)
    assert limiter.admit(15.0)  # after a gap, at once
    assert not limiter.admit(15.01) and limiter.admit(15.02)
    with pytest.raises(ValueError):
        RateLimiter(float("nan"))


def test_tracking_gate_counts_resets_and_loss_duration():
    gate = TrackingGate()
    assert not gate.update(False, 0.0, "not in rigid_bodies") and gate.state == "waiting"
    assert gate.update(True, 0.1) and gate.reset_counter == 0  # first tracking is no reset
    assert not gate.update(False, 1.0) and gate.state == "lost"
    assert gate.lost_for(1.5) == pytest.approx(0.5)
    assert not gate.update(False, 1.5)
    assert gate.update(True, 2.25) and gate.reset_counter == 1
    assert gate.last_loss_duration == pytest.approx(1.25) and gate.losses == 1
    gate.silent(3.0, "no rigid_bodies")
    assert gate.state == "lost" and gate.update(True, 3.5) and gate.reset_counter == 2
    gate.reset_counter = 255
    gate.update(False, 4.0)
    gate.update(True, 4.1)
    assert gate.reset_counter == 0  # uint8 wraps, as MAVLink's field does


def test_quality_is_the_tracked_share_of_the_last_second():
    gate = TrackingGate(quality_window=1.0)
    assert gate.quality() == 0
    for k in range(100):
        gate.update(k % 4 != 0, k * 0.01)
    assert gate.quality() == 75


@pytest.mark.parametrize(
    "url, kind, pym, sdk",
    [
        ("udpout:127.0.0.1:14540", "udpout", "udpout:127.0.0.1:14540", "udpout://127.0.0.1:14540"),
        ("udpin://0.0.0.0:14550", "udpin", "udpin:0.0.0.0:14550", "udpin://0.0.0.0:14550"),
        ("serial:/dev/ttyACM0:921600", "serial", "/dev/ttyACM0", "serial:///dev/ttyACM0:921600"),
        ("/dev/ttyUSB0", "serial", "/dev/ttyUSB0", "serial:///dev/ttyUSB0:57600"),
    ],
)
def test_connection_urls(url, kind, pym, sdk):
    c = Connection.parse(url)
    assert (c.kind, c.pymavlink_device(), c.mavsdk_url()) == (kind, pym, sdk)


@pytest.mark.parametrize(
    "url", ["", "tcp:1.2.3.4:5", "udpout:host", "udpout:host:99999", "serial:ttyS0", "serial:/dev/ttyS0:fast"]
)
def test_bad_connection_urls_are_refused_with_a_reason(url):
    assert connection_check(url)


def drifting_vehicle_answers(
    peer: TimesyncPeer, seconds: float, rate: float, jump_at: float | None = None
) -> tuple[int, int]:
    """Requests of the bridge answered by a vehicle whose clock runs at 0.99 of the host's
    (PX4 SITL's lockstep clock on a loaded machine: its offset drifts -10 ms/s), every
    100 ms, over links of 0.1-1.5 ms each way and one answer in ten queued 4 ms on the way
    back. ``jump_at``: the vehicle's clock jumps back 100 s then (a reboot). Returns the
    last arrival (host ns) and the true offset, vehicle minus host, then (ns)."""
    import random

    rng = random.Random(7)
    boot = 1_700_000_000 * 10**9

    def vehicle_clock(host_ns: int) -> int:
        jumped = jump_at is not None and host_ns >= boot + jump_at * 1e9
        return int((host_ns - boot) * rate) + 10**12 - (100 * 10**9 if jumped else 0)

    arrival = boot
    for k in range(int(seconds * 10)):
        sent = boot + k * 100_000_000
        up = int(rng.uniform(0.1, 1.5) * 1e6)
        down = int(rng.uniform(0.1, 1.5) * 1e6) + (4_000_000 if k % 10 == 3 else 0)
        request = peer.request(sent)
        arrival = sent + up + down
        peer.on_timesync(vehicle_clock(sent + up), request.ts1, arrival, arrival)
    return arrival, vehicle_clock(arrival) - arrival


def test_the_vehicle_offset_tracks_a_drifting_clock():
    """/diagnostics' timesync_offset_s on a vehicle clock drifting 1 % (10 ms/s): a filter
    keeping its best reading for long goes stale by the drift since then; it must follow
    the clock within a millisecond, with a round trip of up to 5.5 ms."""
    peer = TimesyncPeer()
    _, true_offset = drifting_vehicle_answers(peer, 60.0, 0.99)
    error_ms = (peer.offset_s - true_offset * 1e-9) * 1e3
    assert abs(error_ms) < 1.0, f"offset {error_ms:+.3f} ms off a clock drifting 10 ms/s"
    # a steady clock is found as well, and a clock that jumps (the vehicle rebooted) is
    # followed within seconds: the readings of the old clock are dropped
    steady = TimesyncPeer()
    _, true_offset = drifting_vehicle_answers(steady, 20.0, 1.0)
    assert abs(steady.offset_s - true_offset * 1e-9) < 0.5e-3
    assert steady.clock_jumps == 0
    rebooted = TimesyncPeer()
    _, true_offset = drifting_vehicle_answers(rebooted, 30.0, 1.0, jump_at=28.0)
    assert abs(rebooted.offset_s - true_offset * 1e-9) < 1e-3
    assert rebooted.clock_jumps == 1, "the reboot is counted once (/diagnostics timesync_clock_jumps)"
