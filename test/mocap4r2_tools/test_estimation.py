"""The velocity estimation core against analytic trajectories whose rates are known.

The body follows p(t) = c + (r cos wt, r sin wt, h sin(0.5 t)) and turns at a constant
body angular velocity W (q(t) = q0 exp(W t)), so the true body-frame twist at any t is
R(t)^T p'(t) and W.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mocap4r2_control.rotation import quat_exp, quat_multiply, quat_normalize, quat_rotate_inverse
from mocap4r2_tools.motion.estimation import (
    BodyTracker,
    EstimatorError,
    FiniteDifference,
    FrameClock,
    Kalman,
    SavitzkyGolay,
    make_estimator,
)

W = np.array([0.3, -0.2, 1.0])
Q0 = quat_normalize(np.array([0.1, 0.2, 0.3, 0.9]))
RADIUS, OMEGA, HEIGHT = 1.2, 2 * math.pi / 8.0, 0.2


def true_pose(t: float) -> tuple[np.ndarray, np.ndarray]:
    p = np.array(
        [RADIUS * math.cos(OMEGA * t), RADIUS * math.sin(OMEGA * t), 1.0 + HEIGHT * math.sin(0.5 * t)]
    )
    return p, quat_multiply(Q0, quat_exp(W * t))


def true_twist(t: float) -> tuple[np.ndarray, np.ndarray]:
    v = np.array(
        [
            -RADIUS * OMEGA * math.sin(OMEGA * t),
            RADIUS * OMEGA * math.cos(OMEGA * t),
            0.5 * HEIGHT * math.cos(0.5 * t),
        ]
    )
    return quat_rotate_inverse(true_pose(t)[1], v), W


def run(estimator, rate=120.0, seconds=6.0, noise=(0.0, 0.0), flip=False, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(int(seconds * rate)):
        t = k / rate
        p, q = true_pose(t)
        p = p + rng.normal(0, noise[0], 3) if noise[0] else p
        q = quat_multiply(q, quat_exp(rng.normal(0, noise[1], 3))) if noise[1] else q
        if flip and k % 2:
            q = -q
        est = estimator.update(t, p, q)
        if est is not None:
            out.append(est)
    return out


def errors(estimates, skip=60):
    lin, ang = [], []
    for e in estimates[skip:]:
        v, w = true_twist(e.t)
        lin.append(np.linalg.norm(e.linear - v))
        ang.append(np.linalg.norm(e.angular - w))
    return math.sqrt(np.mean(np.square(lin))), math.sqrt(np.mean(np.square(ang)))


def test_finite_difference_gives_the_angular_velocity_divided_by_dt():
    est = run(FiniteDifference())
    # a constant body angular velocity: the backward difference is exact
    assert max(np.abs(e.angular - W).max() for e in est) < 1e-9
    # the linear velocity of the chord: exact at the middle of the interval, half a frame late
    rms_lin, _ = errors(est)
    assert 0 < rms_lin < 0.02


@pytest.mark.parametrize("method", ["finite_difference", "savitzky_golay", "kalman"])
def test_quaternion_sign_flips_create_no_spikes(method):
    plain = run(make_estimator(method), noise=(0.0003, 0.003))
    flipped = run(make_estimator(method), noise=(0.0003, 0.003), flip=True)
    assert len(plain) == len(flipped) > 600
    worst = max(
        np.abs(a.angular - b.angular).max() + np.abs(a.linear - b.linear).max()
        for a, b in zip(plain, flipped)
    )
    assert worst < 1e-9, f"a sign flip changed the estimate by {worst}"


def test_savitzky_golay_is_exact_for_a_polynomial_and_uneven_spacing():
    sg = SavitzkyGolay(window=9, order=2)
    # quadratic position, constant angular acceleration about z, uneven times (drops)
    times = [0.0, 0.01, 0.02, 0.05, 0.06, 0.07, 0.1, 0.11, 0.12, 0.13, 0.16]
    acc = np.array([0.5, -1.0, 2.0])
    est = None
    for t in times:
        p = np.array([1.0, 2.0, 3.0]) + np.array([0.2, 0.1, -0.3]) * t + 0.5 * acc * t * t
        q = quat_exp(np.array([0.0, 0.0, 0.4 * t + 0.5 * 3.0 * t * t]))
        est = sg.update(t, p, q)
    t = times[-1]
    world_v = np.array([0.2, 0.1, -0.3]) + acc * t
    q = quat_exp(np.array([0.0, 0.0, 0.4 * t + 1.5 * t * t]))
    assert np.allclose(est.linear, quat_rotate_inverse(q, world_v), atol=1e-9)
    assert np.allclose(est.linear_acceleration, quat_rotate_inverse(q, acc), atol=1e-7)
    assert np.allclose(est.angular, [0, 0, 0.4 + 3.0 * t], atol=1e-9)
    assert SavitzkyGolay.delay_frames == 0.0


def test_kalman_beats_finite_difference_by_three_on_noisy_poses():
    noise = (0.0005, 0.005)
    fd_lin, fd_ang = errors(
        run(FiniteDifference(position_noise=noise[0], orientation_noise=noise[1]), noise=noise, seconds=8)
    )
    kf_lin, kf_ang = errors(
        run(Kalman(position_noise=noise[0], orientation_noise=noise[1]), noise=noise, seconds=8)
    )
    assert kf_lin < fd_lin / 3, (kf_lin, fd_lin)
    assert kf_ang < fd_ang / 3, (kf_ang, fd_ang)


def test_kalman_tracks_without_noise():
    lin, ang = errors(run(Kalman(), seconds=6), skip=240)
    assert lin < 0.01 and ang < 0.01, (lin, ang)


@pytest.mark.parametrize("method", ["finite_difference", "kalman"])
def test_reported_twist_covariance_matches_the_real_error(method):
    noise = (0.001, 0.01)
    est = run(
        make_estimator(method, position_noise=noise[0], orientation_noise=noise[1]),
        noise=noise,
        seconds=20,
        seed=11,
    )[240:]
    # normalised estimation error squared per axis: ~1 for an honest covariance
    nees_lin = np.mean(
        [np.mean((e.linear - true_twist(e.t)[0]) ** 2) / e.twist_covariance[0, 0] for e in est]
    )
    nees_ang = np.mean([np.mean((e.angular - W) ** 2) / e.twist_covariance[3, 3] for e in est])
    assert 0.3 < nees_lin < 3.0, nees_lin
    assert 0.3 < nees_ang < 3.0, nees_ang


def test_frame_numbers_give_dt_across_dropped_frames_and_stamp_jitter():
    rng = np.random.default_rng(5)
    rate = 120.0
    clock = FrameClock()
    tracker = BodyTracker(FiniteDifference(), timeout=0.5, clock=clock)
    errs = []
    for k in range(600):
        if k % 7 == 3:  # dropped: the frame number is skipped
            continue
        t = k / rate
        stamp = 1000.0 + t + rng.uniform(-0.002, 0.002)  # arrival-time jitter
        p, q = true_pose(t)
        est = tracker.on_frame(k, stamp, True, p, q)
        if est is not None and k > 240:
            errs.append(np.abs(est.angular - W).max())
    assert clock.period == pytest.approx(1 / rate, rel=1e-3)
    # with raw stamps a 2 ms jitter over an 8.3 ms interval would be a ~40 % error
    assert max(errs) < 0.01 * np.linalg.norm(W), max(errs)


def test_untracked_frames_grow_the_covariance_and_timeout_stops_the_estimate():
    rate = 100.0
    tracker = BodyTracker(Kalman(), timeout=0.1)
    last = None
    for k in range(200):
        p, q = true_pose(k / rate)
        last = tracker.on_frame(k, k / rate, True, p, q)
    assert last is not None and last.measured
    variances = []
    for k in range(200, 220):
        est = tracker.on_frame(k, k / rate, False)
        if est is None:
            break
        assert not est.measured
        variances.append(est.twist_covariance[0, 0])
    # predicted over the gap with growing uncertainty, then nothing after 0.1 s
    assert len(variances) == 10
    assert all(b > a for a, b in zip(variances, variances[1:]))
    assert variances[0] > last.twist_covariance[0, 0]
    assert tracker.on_frame(225, 2.25, False) is None
    # tracked again after the timeout: a fresh start, no rate from the stale pose
    p, q = true_pose(2.3)
    assert tracker.on_frame(230, 2.30, True, p, q) is None


def test_frame_clock_restarts_when_the_system_restarts():
    clock = FrameClock()
    for k in range(100):
        assert clock.time(k, 50.0 + k * 0.01) == pytest.approx(50.0 + k * 0.01, abs=1e-9)
    assert clock.time(3, 90.0) == 90.0  # frame numbers began again
    assert clock.restarts == 1
    # frames that waited 0.7 s in a stalled reader keep their place on the line
    # (once the clock has 100 frames: before, every stamp counts for the slope)
    for k in range(4, 200):
        clock.time(k, 90.0 + (k - 3) * 0.01)
    assert clock.time(200, 91.97 + 0.7) == pytest.approx(91.97, abs=1e-6)
    assert clock.restarts == 1
    # a new timebase for good: several frames in a row far off
    for k in range(201, 261):
        t = clock.time(k, 300.0 + k * 0.01)
    assert clock.restarts == 2 and t == pytest.approx(300.0 + 260 * 0.01, abs=1e-3)


def test_frame_clock_with_the_nominal_rate_gives_exact_dt_under_heavy_jitter():
    rng = np.random.default_rng(1)
    clock = FrameClock(period=0.01)
    times = [clock.time(k, 7.0 + k * 0.01 + rng.uniform(0, 0.04)) for k in range(0, 2000, 2)]
    dt = np.diff(times)
    assert np.abs(dt - 0.02).max() < 0.02 * 0.01  # within 1 % of the true dt, against 200 % jitter
    assert abs(times[-1] - (7.0 + 1998 * 0.01 + 0.02)) < 0.01  # on the stamps' timebase


def test_bad_settings_are_refused_with_the_reason():
    with pytest.raises(EstimatorError, match="unknown method 'magic'"):
        make_estimator("magic")
    with pytest.raises(EstimatorError, match="window >= order \\+ 2"):
        SavitzkyGolay(window=3, order=2)
    with pytest.raises(EstimatorError):
        Kalman(linear_jerk=float("nan"))


def test_a_tracked_frame_without_a_pose_is_refused_and_changes_nothing():
    tracker = BodyTracker(FiniteDifference(), timeout=0.5)
    tracker.on_frame(0, 0.0, True, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="needs its position and orientation"):
        tracker.on_frame(1, 0.01, True, None, (0.0, 0.0, 0.0, 1.0))
    est = tracker.on_frame(2, 0.02, True, (0.02, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    assert est is not None and np.allclose(est.linear, [1.0, 0.0, 0.0])
