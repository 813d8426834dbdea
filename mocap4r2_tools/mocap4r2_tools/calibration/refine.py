"""Nonlinear refinement on SE(3) over all pairs, with the time offset estimated jointly.

Unknowns, in local coordinates about the closed-form start (so the covariance is in
them too): for X (and Y in ``A X = Y B``) a rotation vector in the transform's own axes
(rad) and a translation in its parent frame (m); and the time offset (s) added to B's
stamps, with A re-interpolated at the moved stamps on every evaluation.

Hand-eye is refined as ``A X = Y B`` too, with Y (B's fixed frame in A's: the calibration
target, the camera's map, the mocap frame) as a nuisance: on the absolute poses each
pair's noise enters one residual, where the relative motions of ``A X = X B`` combine the
noise of two poses in each and correlate neighbouring ones; B's frame must then stay
fixed during the recording, as it does for a target or a mocap frame.

Residual of a pair: the difference (:func:`.tangent.difference`) between the two sides of
the problem's equation, ``A X`` and ``Y B`` say, its rotation part divided by the robust
rotation scale and its translation part by the translation scale (both from the median
absolute residual, re-estimated once after a first solve). scipy's ``least_squares``
minimises them under a robust loss (Cauchy by default: an outlier's weight falls with
the square of its size, so 5 % gross outliers move the answer by a small fraction of the
noise instead of dragging it as plain least squares does).

Uncertainty: the covariance of the M-estimate, s^2 (J^T W J)^-1 with the loss's weights W
at the solution; checked by a bootstrap over the pairs (resampled with replacement, one
weighted Gauss-Newton step from the solution each, which is what a re-solve from there
gives to first order), and reported as the larger of the two per parameter, so a model
that does not fit the noise as assumed (correlated residuals, a few unflagged outliers)
widens the interval instead of giving false confidence. ``coverage`` is the share of
bootstrap estimates inside the covariance's 95 % interval about the full-data estimate
(the bootstrap world's truth): about 0.95 when the covariance is right.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from mocap4r2_control.geometry import Transform
from mocap4r2_control.rotation import FloatArray, quat_exp, quat_multiply, quat_relative

from ..trajectory.poses import Trajectory
from .streams import PairSet, a_at, median_step
from .tangent import difference, perturbed

IndexArray = npt.NDArray[np.intp]
LOSSES = ("cauchy", "soft_l1", "huber", "linear")
F_SCALE = 3.0  # residuals (in robust standard deviations) beyond which the loss gives way
OUTLIER_SIGMAS = 6.0  # a pair with a residual component beyond this is counted an outlier
Z95 = 1.959964
_FLOOR_ROT = 1e-7  # rad: scales never below (exact synthetic data)
_FLOOR_TRANS = 1e-7  # m
ROUNDS = 3  # solves with the offset: each re-linearises A at the offset the last reached


@dataclass(frozen=True, eq=False)
class Problem:
    """What is refined: the kind, the pairs, and A's stream (re-interpolated when the
    offset is estimated)."""

    kind: str
    pairs: PairSet
    a_stream: Trajectory
    estimate_offset: bool
    offset_bound: float  # s the offset may move from the start either way

    def parameter_names(self) -> list[str]:
        names = [f"X.{n}" for n in _LOCAL]
        if self.kind != "frame_to_frame":
            names += [f"Y.{n}" for n in _LOCAL]
        if self.estimate_offset:
            names.append("offset")
        return names


_LOCAL = ("rx", "ry", "rz", "tx", "ty", "tz")


@dataclass(frozen=True, eq=False)
class Refined:
    """The refined transforms and offset, with their uncertainty and the residuals."""

    x: Transform
    y: Transform | None
    offset: float
    names: list[str]
    params: FloatArray  # local coordinates of the solution about the start (offset: absolute s)
    covariance: FloatArray  # (p, p) from the refinement
    sigma_cov: FloatArray  # (p,) its square roots
    sigma_boot: FloatArray  # (p,) bootstrap standard deviations
    sigma: FloatArray  # (p,) reported: the larger of the two
    coverage: float  # share of bootstrap estimates inside the covariance's 95 % interval
    residuals: FloatArray  # (blocks, 6) rad and m at the solution
    outliers: npt.NDArray[np.bool_]  # (blocks,) counted as outliers
    scale_rot: float  # rad, robust residual scale
    scale_trans: float  # m
    evaluations: int

    @property
    def covariance_reported(self) -> FloatArray:
        """The covariance scaled so its diagonal is ``sigma`` (the larger of the two)."""
        scale = self.sigma / np.where(self.sigma_cov > 0, self.sigma_cov, 1.0)
        out: FloatArray = self.covariance * np.outer(scale, scale)
        return out


@dataclass(frozen=True, eq=False)
class _LinearisedA:
    """A's poses at B's stamps moved by ``offset``, and A's velocity there: the poses at
    another offset d are these moved by (d - offset) times the velocity. A's own samples
    carry noise, so the slope between two neighbouring samples (what a piecewise-linear
    interpolation's derivative is) is mostly noise at a few hundred Hz; the velocity is
    taken across :data:`VELOCITY_SPAN` instead, and the refinement re-linearises at each
    new offset (a few rounds), so the offset converges like the transforms do."""

    offset: float
    poses: Transform
    linear: FloatArray  # (n, 3) m/s in A's parent frame
    angular: FloatArray  # (n, 3) rad/s in A's own axes

    def at(self, offsets: FloatArray) -> Transform:
        """A at each of ``offsets`` (k,): poses of shape (k, n, ...)."""
        dt = (np.asarray(offsets, dtype=np.float64) - self.offset)[:, None, None]
        return Transform(
            self.poses.translation + dt * self.linear,
            quat_multiply(self.poses.rotation, quat_exp(dt * self.angular)),
        )


VELOCITY_SPAN = 0.04  # s between the two poses A's velocity is taken from, at least


def linearise(a_stream: Trajectory, stamps: FloatArray, offset: float) -> _LinearisedA:
    """A about ``offset`` (see _LinearisedA)."""
    span = max(VELOCITY_SPAN, 8.0 * median_step(a_stream.stamps))
    half = 0.5 * span
    here = a_at(a_stream, stamps, offset)
    before = a_at(a_stream, stamps, offset - half)
    after = a_at(a_stream, stamps, offset + half)
    linear = (after.translation - before.translation) / span
    angular = quat_relative(before.rotation, after.rotation) / span
    return _LinearisedA(offset, here, linear, angular)


def _side_functions(
    problem: Problem, x0: Transform, y0: Transform | None, a_lin: _LinearisedA | None
) -> Callable[[FloatArray], FloatArray]:
    """The raw residuals (n, 6) at one parameter vector (p,), or (k, n, 6) at k of them
    (k, p) at once: every rotation function broadcasts over the leading axis, so the k + 1
    evaluations of a finite-difference Jacobian cost about as many numpy calls as one
    (on 200 pairs the calls' fixed cost is most of an evaluation)."""
    pairs = problem.pairs
    kind = problem.kind
    b = pairs.b

    def local(start: Transform, deltas: FloatArray) -> Transform:
        moved = perturbed(start, deltas)  # (k, ...): one per parameter vector
        return Transform(moved.translation[:, None, :], moved.rotation[:, None, :])

    def raw(v: FloatArray) -> FloatArray:
        batch = np.atleast_2d(v)
        x = local(x0, batch[:, 0:6])
        a = a_lin.at(batch[:, -1]) if a_lin is not None else pairs.a
        if kind == "frame_to_frame":
            out = difference(a, x * b)
        else:
            assert y0 is not None  # hand-eye and robot-world: A X = Y B
            out = difference(a * x, local(y0, batch[:, 6:12]) * b)
        return out[0] if np.ndim(v) == 1 else out

    return raw


def robust_scales(raw: FloatArray) -> tuple[float, float]:
    """(rotation, translation) scales: 1.4826 x the median absolute residual component."""
    rot = 1.4826 * float(np.median(np.abs(raw[:, 0:3])))
    trans = 1.4826 * float(np.median(np.abs(raw[:, 3:6])))
    return max(rot, _FLOOR_ROT), max(trans, _FLOOR_TRANS)


def _weights(f: FloatArray, loss: str) -> FloatArray:
    """The loss's IRLS weights rho'(z), z = (f / F_SCALE)^2."""
    z = (f / F_SCALE) ** 2
    if loss == "cauchy":
        return 1.0 / (1.0 + z)
    if loss == "soft_l1":
        return 1.0 / np.sqrt(1.0 + z)
    if loss == "huber":
        return np.where(z <= 1.0, 1.0, 1.0 / np.sqrt(np.maximum(z, 1.0)))
    return np.ones_like(f)


def refine(
    problem: Problem,
    x0: Transform,
    y0: Transform | None,
    *,
    loss: str = "cauchy",
    bootstrap: int = 200,
    seed: int = 0,
) -> Refined:
    """Refine X (and Y) and the offset from the start; see the module doc."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r} (one of {', '.join(LOSSES)})")
    p = len(problem.parameter_names())
    v = np.zeros(p)
    lower = np.full(p, -np.inf)
    upper = np.full(p, np.inf)
    offset0 = problem.pairs.offset
    if problem.estimate_offset:
        v[-1] = offset0
        lower[-1], upper[-1] = offset0 - problem.offset_bound, offset0 + problem.offset_bound

    def sides(v: FloatArray) -> Callable[[FloatArray], FloatArray]:
        a_lin = (
            linearise(problem.a_stream, problem.pairs.stamps, float(v[-1]))
            if problem.estimate_offset
            else None
        )
        return _side_functions(problem, x0, y0, a_lin)

    evaluations = 0
    raw = sides(v)
    scale_rot, scale_trans = robust_scales(raw(v))
    # each round weighs the residuals by the scales the one before found and (with the
    # offset) re-linearises A at the offset it reached
    for _ in range(ROUNDS if problem.estimate_offset else 2):
        divisor = np.array([scale_rot] * 3 + [scale_trans] * 3)

        def whitened(
            values: FloatArray, sides: Callable[[FloatArray], FloatArray] = raw, divisor: FloatArray = divisor
        ) -> FloatArray:
            out: FloatArray = (sides(values) / divisor).ravel()
            return out

        def jacobian(
            values: FloatArray, sides: Callable[[FloatArray], FloatArray] = raw, divisor: FloatArray = divisor
        ) -> FloatArray:
            return _jacobian(sides, divisor, values)

        # scipy-stubs 1.15.3.0 re-exports the module of that name, not the function
        found = least_squares(  # type: ignore[operator]
            whitened,
            v,
            jac=jacobian,
            loss=loss,
            f_scale=F_SCALE,
            bounds=(lower, upper),
            x_scale="jac",
            method="trf",
            max_nfev=200,
        )
        evaluations += int(found.nfev)
        v = found.x
        raw = sides(v)
        scale_rot, scale_trans = robust_scales(raw(v))
    divisor = np.array([scale_rot] * 3 + [scale_trans] * 3)
    f = (raw(v) / divisor).ravel()
    jac = _jacobian(raw, divisor, v)
    evaluations += 2 * p + 1
    w = _weights(f, loss)
    jw = jac * np.sqrt(w)[:, None]
    rw = f * np.sqrt(w)
    info = jw.T @ jw
    dof = max(float(w.sum()) - p, 1.0)
    s2 = float(np.sum(w * f * f)) / dof
    covariance = s2 * np.linalg.pinv(info)
    sigma_cov = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    sigma_boot, coverage = _bootstrap(jw, rw, sigma_cov, bootstrap, seed)
    blocks = f.reshape(-1, 6)
    x = perturbed(x0, v[0:6])
    y = perturbed(y0, v[6:12]) if y0 is not None and problem.kind != "frame_to_frame" else None
    return Refined(
        x=x,
        y=y,
        offset=float(v[-1]) if problem.estimate_offset else offset0,
        names=problem.parameter_names(),
        params=v,
        covariance=covariance,
        sigma_cov=sigma_cov,
        sigma_boot=sigma_boot,
        sigma=np.maximum(sigma_cov, sigma_boot),
        coverage=coverage,
        residuals=blocks * divisor,
        outliers=np.abs(blocks).max(axis=1) > OUTLIER_SIGMAS,
        scale_rot=scale_rot,
        scale_trans=scale_trans,
        evaluations=evaluations,
    )


def _jacobian(raw: Callable[[FloatArray], FloatArray], divisor: FloatArray, v: FloatArray) -> FloatArray:
    """Central differences of the whitened residuals, steps of 1e-6 (rad, m, s), all 2p
    evaluations in one batched call."""
    p = v.shape[0]
    h = 1e-6
    steps = np.concatenate((v + h * np.eye(p), v - h * np.eye(p)))
    values = (raw(steps) / divisor).reshape(2 * p, -1)
    out: FloatArray = ((values[:p] - values[p:]) / (2.0 * h)).T
    return out


def _bootstrap(
    jw: FloatArray, rw: FloatArray, sigma_cov: FloatArray, count: int, seed: int
) -> tuple[FloatArray, float]:
    """Bootstrap standard deviations and the coverage of the covariance's 95 % interval
    (see the module doc); residual blocks of 6 rows (one pair) are resampled together."""
    p = jw.shape[1]
    if count <= 1:
        return np.zeros(p), float("nan")
    blocks = jw.shape[0] // 6
    jb = jw.reshape(blocks, 6, p)
    rb = rw.reshape(blocks, 6)
    info_k = np.einsum("kip,kiq->kpq", jb, jb).reshape(blocks, p * p)
    grad_k = np.einsum("kip,ki->kp", jb, rb)
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, blocks, blocks), minlength=blocks) for _ in range(count)])
    info = (counts @ info_k).reshape(count, p, p)
    grad = counts @ grad_k
    try:
        steps = -np.linalg.solve(info, grad[..., None])[..., 0]
    except np.linalg.LinAlgError:
        steps = -np.stack([np.linalg.lstsq(h, g, rcond=None)[0] for h, g in zip(info, grad)])
    sigma_boot = steps.std(axis=0, ddof=1)
    inside = np.abs(steps) <= Z95 * np.maximum(sigma_cov, 1e-300)
    return sigma_boot, float(inside.mean())
