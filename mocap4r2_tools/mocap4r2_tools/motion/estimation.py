"""Velocity and acceleration of a tracked body from its mocap poses (no rclpy).

Three estimators share one interface (:class:`Estimator`):

* :class:`FiniteDifference`: the reference. Backward difference of the last two poses;
  its estimate belongs to the middle of the last interval, half a frame late.
* :class:`SavitzkyGolay`: least-squares polynomial (``order``) over the last ``window``
  poses, differentiated at the newest pose. Causal; for motion that the polynomial
  represents exactly the delay is zero, and the price is noise (an end-point derivative
  amplifies noise more than a centred one). Stated delay: 0 frames.
* :class:`Kalman`: constant-acceleration model driven by white jerk. Position, velocity
  and acceleration in the world frame; orientation as an error state on SO(3): the
  nominal orientation is a quaternion, the filter estimates a rotation-vector error
  (body axes), the body angular velocity and angular acceleration, and the error is
  folded back into the quaternion after every update. The measurement residual is the
  rotation vector of q_pred^-1 q_meas, so quaternion sign flips cost nothing.
  Stated delay: 0 frames (a filtered estimate at the newest pose).

Conventions (REP-103/105, nav_msgs/Odometry): the pose is in the mocap system's frame,
the twist is in the body frame: ``linear`` is the world velocity expressed in body axes,
``angular`` the body angular velocity. ``linear_acceleration`` is the world acceleration
expressed in body axes. Covariances are 6x6, rows x y z (linear) then x y z (angular).

:class:`BodyTracker` puts a :class:`FrameClock` in front of an estimator: sample times
come from capture stamps and frame numbers (a gap of dropped frames gives the right dt,
stamp jitter is averaged out), a frame where the body is not tracked is not a
measurement (the estimate is predicted and its covariance grows), and after ``timeout``
seconds of capture time without a tracked pose there is no estimate at all.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import (
    FloatArray,
    quat_conjugate_one,
    quat_exp_one,
    quat_log_one,
    quat_multiply_one,
    quat_normalize,
    quat_relative_one,
    quat_rotate_inverse_one,
    quat_rotate_one,
)

METHODS = ("finite_difference", "savitzky_golay", "kalman")


@dataclass
class Estimate:
    """State of one body at time ``t`` (seconds, the capture timebase)."""

    t: float
    position: FloatArray  # world, m
    orientation: FloatArray  # world, x y z w
    linear: FloatArray  # body axes, m/s
    angular: FloatArray  # body axes, rad/s
    linear_acceleration: FloatArray  # body axes, m/s^2
    angular_acceleration: FloatArray  # body axes, rad/s^2
    pose_covariance: FloatArray = field(default_factory=lambda: np.zeros((6, 6)))
    twist_covariance: FloatArray = field(default_factory=lambda: np.zeros((6, 6)))
    accel_covariance: FloatArray = field(default_factory=lambda: np.zeros((6, 6)))
    measured: bool = True  # False: predicted over an untracked frame


def _block_cov(var_linear: float, var_angular: float) -> FloatArray:
    return np.diag([var_linear] * 3 + [var_angular] * 3)


class EstimatorError(ValueError):
    """A setting an estimator cannot work with, with the reason."""


class Estimator:
    """Feed tracked poses with :meth:`update`, untracked frames with :meth:`predict`."""

    name = ""
    delay_frames = 0.0  # stated delay of the estimate behind its stamp, in frames

    def __init__(self, position_noise: float = 0.0005, orientation_noise: float = 0.005):
        if not (position_noise > 0 and orientation_noise > 0):
            raise EstimatorError("position_noise and orientation_noise must be > 0")
        self.position_noise = float(position_noise)
        self.orientation_noise = float(orientation_noise)
        self._last: Estimate | None = None

    def reset(self) -> None:
        self._last = None

    def update(self, t: float, position: npt.ArrayLike, orientation: npt.ArrayLike) -> Estimate | None:
        raise NotImplementedError

    def predict(self, t: float) -> Estimate | None:
        """The estimate at t without a measurement: the last one held, with its
        uncertainty grown as by an unknown acceleration."""
        last = self._last
        if last is None or t <= last.t:
            return None
        gap = t - last.t
        a = float(np.linalg.norm(last.linear_acceleration)) + 1.0
        out = Estimate(
            t=t,
            position=last.position + np.array(quat_rotate_one(last.orientation, last.linear)) * gap,
            orientation=np.array(quat_multiply_one(last.orientation, quat_exp_one(last.angular * gap))),
            linear=last.linear,
            angular=last.angular,
            linear_acceleration=last.linear_acceleration,
            angular_acceleration=last.angular_acceleration,
            pose_covariance=last.pose_covariance + _block_cov((a * gap * gap) ** 2, (a * gap * gap) ** 2),
            twist_covariance=last.twist_covariance + _block_cov((a * gap) ** 2, (a * gap) ** 2),
            accel_covariance=last.accel_covariance + _block_cov(a * a, a * a),
            measured=False,
        )
        return out


def _append_sample(
    history: deque[tuple[float, FloatArray, FloatArray]],
    t: float,
    position: npt.ArrayLike,
    orientation: npt.ArrayLike,
) -> bool:
    """Append a sample to a window estimator's history; False (nothing kept) when ``t``
    does not advance: a repeated or reordered frame would divide by a zero or negative step."""
    if history and t <= history[-1][0]:
        return False
    history.append((t, np.asarray(position, float), quat_normalize(orientation)))
    return True


class FiniteDifference(Estimator):
    """Backward differences of the last poses: velocity from two, acceleration from three."""

    name = "finite_difference"
    delay_frames = 0.5

    def __init__(self, window: float = 0.0, **kw: float):
        super().__init__(**kw)
        if not window >= 0:
            raise EstimatorError("window must be >= 0 s")
        self.window = float(window)  # seconds back to the older pose (0: the previous one)
        self._history: deque[tuple[float, FloatArray, FloatArray]] = deque(maxlen=4096)
        self._previous_velocity: tuple[float, FloatArray, FloatArray] | None = None

    def reset(self) -> None:
        super().reset()
        self._history.clear()
        self._previous_velocity = None

    def update(self, t: float, position: npt.ArrayLike, orientation: npt.ArrayLike) -> Estimate | None:
        history = self._history
        if not _append_sample(history, t, position, orientation):
            return None
        _, position, orientation = history[-1]  # as kept: an array, the quaternion normalised
        while len(history) > 2 and t - history[1][0] >= self.window:
            history.popleft()
        if len(history) < 2:
            return None
        t0, p0, q0 = history[0]
        dt = t - t0
        world_velocity = (position - p0) / dt
        linear = np.array(quat_rotate_inverse_one(orientation, world_velocity))
        angular = np.array(quat_relative_one(q0, orientation)) / dt
        var_v = 2 * self.position_noise**2 / dt**2
        var_w = 2 * self.orientation_noise**2 / dt**2
        accel: FloatArray = np.zeros(3)
        alpha: FloatArray = np.zeros(3)
        var_a = var_alpha = 1e6  # unknown until a second velocity exists
        previous = self._previous_velocity
        if previous is not None:
            tv, wv, ang = previous
            dtv = (t - 0.5 * dt) - tv
            if dtv > 0:
                accel = np.array(quat_rotate_inverse_one(orientation, (world_velocity - wv) / dtv))
                alpha = (angular - ang) / dtv
                var_a = 2 * var_v / dtv**2
                var_alpha = 2 * var_w / dtv**2
        self._previous_velocity = (t - 0.5 * dt, world_velocity, angular)
        self._last = Estimate(
            t=t,
            position=position,
            orientation=orientation,
            linear=linear,
            angular=angular,
            linear_acceleration=accel,
            angular_acceleration=alpha,
            pose_covariance=_block_cov(self.position_noise**2, self.orientation_noise**2),
            twist_covariance=_block_cov(var_v, var_w),
            accel_covariance=_block_cov(var_a, var_alpha),
        )
        return self._last


def savitzky_golay_weights(times: FloatArray, order: int, at: float) -> FloatArray:
    """Rows d = 0, 1, 2: weights w_d such that w_d . y is the d-th derivative at ``at`` of
    the least-squares polynomial of ``order`` through (times, y). Works for uneven
    spacing (dropped frames), which the classic fixed-coefficient table does not."""
    x = np.asarray(times, float) - at
    vander = np.vander(x, order + 1, increasing=True)  # columns 1, x, x^2, ...
    pinv = np.linalg.pinv(vander)  # (order+1, n): coefficients
    rows = [
        pinv[0],
        pinv[1] if order >= 1 else np.zeros(len(x)),
        2 * pinv[2] if order >= 2 else np.zeros(len(x)),
    ]
    return np.stack(rows)


class SavitzkyGolay(Estimator):
    """Polynomial least squares over the last ``window`` poses, evaluated at the newest.

    Orientations enter as rotation vectors relative to the newest orientation (body
    axes), i.e. the fit happens in the tangent space of SO(3) at the newest pose, where
    a constant body angular velocity is a straight line.
    """

    name = "savitzky_golay"
    delay_frames = 0.0

    def __init__(self, window: int = 15, order: int = 2, **kw: float):
        super().__init__(**kw)
        if not (isinstance(window, int) and isinstance(order, int)) or order < 1 or window < order + 2:
            raise EstimatorError(
                f"savitzky_golay needs an integer order >= 1 and window >= order + 2, "
                f"got window {window!r}, order {order!r}"
            )
        if window > 512:
            raise EstimatorError(f"savitzky_golay window must be <= 512, got {window}")
        self.window = window
        self.order = order
        self._history: deque[tuple[float, FloatArray, FloatArray]] = deque(maxlen=window)

    def reset(self) -> None:
        super().reset()
        self._history.clear()

    def update(self, t: float, position: npt.ArrayLike, orientation: npt.ArrayLike) -> Estimate | None:
        history = self._history
        if not _append_sample(history, t, position, orientation):
            return None
        _, position, orientation = history[-1]  # as kept: an array, the quaternion normalised
        if len(history) < self.order + 2:
            return None
        times = np.fromiter((h[0] for h in history), float, len(history))
        positions = np.stack([h[1] for h in history])
        q_inv = quat_conjugate_one(orientation)
        rotvecs = np.array([quat_log_one(quat_multiply_one(q_inv, h[2])) for h in history])
        weights = savitzky_golay_weights(times, self.order, t)
        world_velocity = weights[1] @ positions
        world_accel = weights[2] @ positions
        # d/dt of log(q_t^-1 q(s)) at s = t is the body angular velocity (first order)
        angular = weights[1] @ rotvecs
        alpha = weights[2] @ rotvecs
        gains = (weights**2).sum(axis=1)
        p2, r2 = self.position_noise**2, self.orientation_noise**2
        self._last = Estimate(
            t=t,
            position=position + 0.0,
            orientation=orientation,
            linear=np.array(quat_rotate_inverse_one(orientation, world_velocity)),
            angular=angular,
            linear_acceleration=np.array(quat_rotate_inverse_one(orientation, world_accel)),
            angular_acceleration=alpha,
            pose_covariance=_block_cov(p2 * gains[0], r2 * gains[0]),
            twist_covariance=_block_cov(p2 * gains[1], r2 * gains[1]),
            accel_covariance=_block_cov(
                p2 * gains[2] if self.order >= 2 else 1e6, r2 * gains[2] if self.order >= 2 else 1e6
            ),
        )
        return self._last


def _transition(dt: float) -> FloatArray:
    return np.array([[1.0, dt, 0.5 * dt * dt], [0.0, 1.0, dt], [0.0, 0.0, 1.0]])


def _jerk_noise(dt: float, q: float) -> FloatArray:
    """Discrete process noise of a constant-acceleration model driven by white jerk
    of spectral density q."""
    d2, d3 = dt * dt, dt * dt * dt
    return q * np.array(
        [[d3 * d2 / 20, d2 * d2 / 8, d3 / 6], [d2 * d2 / 8, d3 / 3, d2 / 2], [d3 / 6, d2 / 2, dt]]
    )


class Kalman(Estimator):
    """Constant acceleration, linear part in world axes, rotation as an SO(3) error state.

    Both parts are three identical, independent per-axis filters (state value, rate,
    rate of rate) driven by white jerk: with isotropic measurement noise their
    covariances are the same 3x3 matrix, so one is kept for the linear part and one for
    the angular part. The angular filter neglects the cross-axis coupling of the exact
    error-state Jacobian (-[w]x dt), which at mocap rates is below the measurement noise.
    """

    name = "kalman"
    delay_frames = 0.0

    def __init__(self, linear_jerk: float = 10.0, angular_jerk: float = 10.0, **kw: float):
        super().__init__(**kw)
        if not (linear_jerk > 0 and angular_jerk > 0):
            raise EstimatorError("linear_jerk and angular_jerk must be > 0")
        self.q_linear = float(linear_jerk)
        self.q_angular = float(angular_jerk)
        self.reset()

    def reset(self) -> None:
        super().reset()
        self._t: float | None = None
        self._x: FloatArray = np.zeros((3, 3))  # rows p, v, a; columns x, y, z (world)
        self._P: FloatArray = np.eye(3)
        self._q: FloatArray = np.array((0.0, 0.0, 0.0, 1.0))
        self._w: FloatArray = np.zeros((2, 3))  # rows body angular velocity, acceleration
        self._Pr: FloatArray = np.eye(3)  # covariance of (rotation error, w, alpha) per axis
        self.updates = 0

    def _propagate(self, t: float) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
        if self._t is None:
            raise RuntimeError("Kalman: nothing to propagate before the first update")
        dt = t - self._t
        F = _transition(dt)
        x = F @ self._x
        P = F @ self._P @ F.T + _jerk_noise(dt, self.q_linear)
        w, alpha = self._w
        q = np.array(quat_multiply_one(self._q, quat_exp_one(w * dt + 0.5 * alpha * dt * dt)))
        wa = np.stack((w + alpha * dt, alpha))
        Pr = F @ self._Pr @ F.T + _jerk_noise(dt, self.q_angular)
        return x, P, q, wa, Pr

    def update(self, t: float, position: npt.ArrayLike, orientation: npt.ArrayLike) -> Estimate | None:
        position = np.asarray(position, float)
        orientation = quat_normalize(orientation)
        if self._t is None:
            self._t = t
            self._x[:] = 0.0
            self._x[0] = position
            big_v, big_a = 4.0, 100.0  # (m/s)^2, (m/s^2)^2: nothing known yet
            self._P = np.diag([self.position_noise**2, big_v, big_a])
            self._q = orientation
            self._w[:] = 0.0
            self._Pr = np.diag([self.orientation_noise**2, 4 * big_v, 4 * big_a])
            self.updates = 1
            return None
        if t <= self._t:
            return None
        x, P, q, wa, Pr = self._propagate(t)
        # linear: z = p, H = [1 0 0]
        r = self.position_noise**2
        s = P[0, 0] + r
        k = P[:, 0] / s
        x = x + np.outer(k, position - x[0])
        P = P - np.outer(k, P[0])
        # angular: residual on the manifold, in body axes
        rr = self.orientation_noise**2
        residual = np.array(quat_relative_one(q, orientation))
        sr = Pr[0, 0] + rr
        kr = Pr[:, 0] / sr
        q = quat_normalize(quat_multiply_one(q, quat_exp_one(kr[0] * residual)))
        wa = wa + np.outer(kr[1:], residual)
        Pr = Pr - np.outer(kr, Pr[0])
        self._t, self._x, self._P, self._q, self._w, self._Pr = t, x, P, q, wa, Pr
        self.updates += 1
        if self.updates < 3:  # velocity and acceleration need three poses to mean anything
            return None
        self._last = self._estimate(t, x=x, P=P, q=q, wa=wa, Pr=Pr, measured=True)
        return self._last

    def predict(self, t: float) -> Estimate | None:
        if self._t is None or self.updates < 3 or t <= self._t:
            return None
        x, P, q, wa, Pr = self._propagate(t)
        # the prediction is published but not kept: the next measurement propagates
        # from the last update over the whole gap, which is the same thing
        return self._estimate(t, x=x, P=P, q=q, wa=wa, Pr=Pr, measured=False)

    def _estimate(
        self,
        t: float,
        *,
        x: FloatArray,
        P: FloatArray,
        q: FloatArray,
        wa: FloatArray,
        Pr: FloatArray,
        measured: bool,
    ) -> Estimate:
        return Estimate(
            t=t,
            position=x[0].copy(),
            orientation=q,
            linear=np.array(quat_rotate_inverse_one(q, x[1])),
            angular=wa[0].copy(),
            linear_acceleration=np.array(quat_rotate_inverse_one(q, x[2])),
            angular_acceleration=wa[1].copy(),
            pose_covariance=_block_cov(P[0, 0], Pr[0, 0]),
            twist_covariance=_block_cov(P[1, 1], Pr[1, 1]),
            accel_covariance=_block_cov(P[2, 2], Pr[2, 2]),
            measured=measured,
        )


def make_estimator(
    method: str,
    *,
    position_noise: float = 0.0005,
    orientation_noise: float = 0.005,
    window_seconds: float = 0.0,
    sg_window: int = 15,
    sg_order: int = 2,
    linear_jerk: float = 10.0,
    angular_jerk: float = 10.0,
) -> Estimator:
    """The estimator ``method`` (one of METHODS) with the settings it uses."""
    noise = {"position_noise": position_noise, "orientation_noise": orientation_noise}
    if method == "finite_difference":
        return FiniteDifference(window=window_seconds, **noise)
    if method == "savitzky_golay":
        return SavitzkyGolay(window=sg_window, order=sg_order, **noise)
    if method == "kalman":
        return Kalman(linear_jerk=linear_jerk, angular_jerk=angular_jerk, **noise)
    raise EstimatorError(f"unknown method {method!r} (one of {', '.join(METHODS)})")


class FrameClock:
    """Sample times from (frame number, capture stamp) pairs.

    A mocap system's frames are equally spaced in frame number; their stamps carry
    jitter (arrival time minus a reported latency; tens of milliseconds on a loaded
    machine). What an estimator needs is the right dt, so times advance by frame-number
    gap x period (a gap of dropped frames is exactly that many periods), and follow the
    stamps only slowly (``gain`` of each residual), which keeps them on the stamps'
    timebase without passing their jitter on. The period is the system's nominal one
    (``period``) or a least-squares slope of stamp over frame number (last ``window``
    frames). A frame number that goes back, or ``outliers_before_restart`` stamps in a
    row more than ``tolerance`` s off (a restarted system, a paused stream), restart the
    clock; fewer stamps that far off (frames that waited in a stalled reader and came in
    a burst) get their place on the line.
    """

    outliers_before_restart = 50

    def __init__(
        self, period: float | None = None, window: int = 1000, tolerance: float = 0.1, gain: float = 0.002
    ):
        self.nominal_period = period if period and period > 0 else None
        self.window = window
        self.tolerance = tolerance
        self.gain = gain
        self.restarts = 0
        self._pairs: deque[tuple[float, float]] = deque()
        self.reset()

    def reset(self) -> None:
        self._pairs.clear()
        self._outliers = 0
        self._anchor: tuple[int, float] | None = None  # frame number and stamp the sums are relative to
        self._sums = [0.0, 0.0, 0.0, 0.0]  # sum k, sum t, sum k^2, sum k t
        self._last: tuple[int, float] | None = None  # frame number and time of the last frame

    @property
    def period(self) -> float | None:
        if self.nominal_period is not None:
            return self.nominal_period
        n = len(self._pairs)
        if n < 2:
            return None
        sums = self._sums
        km, tm = sums[0] / n, sums[1] / n
        var = sums[2] / n - km * km
        slope = (sums[3] / n - km * tm) / var if var > 0 else 0.0
        return slope if slope > 0 else None

    def time(self, frame_number: int, stamp: float) -> float:
        if self._last is not None and frame_number <= self._last[0]:
            self.restarts += 1
            self.reset()
        if self._last is None:
            self._add(frame_number, stamp)
            self._last = (frame_number, stamp)
            return stamp
        last_k, last_t = self._last
        period = self.period
        if period is None:  # the second frame of a clock without a nominal rate
            t = stamp
        else:
            predicted = last_t + (frame_number - last_k) * period
            residual = stamp - predicted
            # while the slope is still uncertain every stamp counts
            if abs(residual) > self.tolerance and (self.nominal_period or len(self._pairs) >= 100):
                self._outliers += 1
                if self._outliers >= self.outliers_before_restart:
                    self.restarts += 1
                    self.reset()
                    return self.time(frame_number, stamp)
                self._last = (frame_number, predicted)
                return predicted
            self._outliers = 0
            t = predicted + self.gain * residual
        self._add(frame_number, stamp)
        self._last = (frame_number, t)
        return t

    def _add(self, frame_number: int, stamp: float) -> None:
        if self._anchor is None:
            self._anchor = (frame_number, stamp)
        k0, t0 = self._anchor
        k, t = float(frame_number - k0), stamp - t0
        sums = self._sums
        self._pairs.append((k, t))
        sums[0] += k
        sums[1] += t
        sums[2] += k * k
        sums[3] += k * t
        if len(self._pairs) > self.window:
            ok, ot = self._pairs.popleft()
            sums[0] -= ok
            sums[1] -= ot
            sums[2] -= ok * ok
            sums[3] -= ok * ot
        if k > 8 * self.window:
            self._reanchor()

    def _reanchor(self) -> None:
        """Sums relative to the oldest kept frame, recomputed exactly: running sums of
        ever larger frame numbers would lose precision over hours of streaming."""
        if self._anchor is None:
            return
        k0, t0 = self._anchor
        dk, dt = self._pairs[0]
        self._anchor = (k0 + int(dk), t0 + dt)
        shifted = deque((k - dk, t - dt) for k, t in self._pairs)
        self._pairs = shifted
        self._sums = [
            sum(k for k, _ in shifted),
            sum(t for _, t in shifted),
            sum(k * k for k, _ in shifted),
            sum(k * t for k, t in shifted),
        ]


class BodyTracker:
    """One body: frame clock, estimator, tracking-loss and timeout rules."""

    def __init__(self, estimator: Estimator, timeout: float = 0.5, clock: FrameClock | None = None):
        self.estimator = estimator
        self.timeout = float(timeout)
        self.clock = clock or FrameClock()
        self.last_tracked: float | None = None
        self.last_time: float | None = None

    def on_frame(
        self,
        frame_number: int,
        stamp: float,
        tracked: bool,
        position: npt.ArrayLike | None = None,
        orientation: npt.ArrayLike | None = None,
    ) -> Estimate | None:
        """The estimate for this frame, or None (nothing to publish)."""
        t = self.clock.time(frame_number, stamp)
        if self.last_time is not None and t <= self.last_time:
            return None
        self.last_time = t
        if tracked:
            if position is None or orientation is None:
                raise ValueError("a tracked frame needs its position and orientation")
            if self.last_tracked is not None and t - self.last_tracked > self.timeout:
                self.estimator.reset()  # too long without a pose: start over, no stale rates
            self.last_tracked = t
            return self.estimator.update(t, position, orientation)
        if self.last_tracked is None or t - self.last_tracked > self.timeout:
            return None
        return self.estimator.predict(t)


__all__ = [
    "METHODS",
    "BodyTracker",
    "Estimate",
    "Estimator",
    "EstimatorError",
    "FiniteDifference",
    "FrameClock",
    "Kalman",
    "SavitzkyGolay",
    "make_estimator",
    "savitzky_golay_weights",
]
