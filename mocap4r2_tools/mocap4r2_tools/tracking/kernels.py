"""The tracker's per-frame hot path as compiled scalar loops (numba), one body at a time.

Why compiled: at 1 kHz the tracker has 1 ms for a frame of 49 bodies. Written as numpy on
arrays of all bodies, each step took dozens of numpy calls of 1-3 us each whatever the
arithmetic (a few hundred flops per body), and a frame 1.07 ms p50 / 1.59 ms p99 on a quiet
machine here: the floor was the number of calls, not the work. The steps that cost most, as
plain loops over bodies and markers compiled by numba's ``njit``, cost one call each: the
fit from the prior (:func:`newton_fits`), the gated neighbour search of the assignment and
the refinement (:func:`gated_neighbours`, instead of a k-d tree built every frame) and the
assignment's direct pairing (:func:`pair_alone`). docs/tracking.md has the figures.

numba's cache keeps the machine code between processes (``__pycache__`` next to this
file, or numba's per-user cache directory when that is read-only; NUMBA_CACHE_DIR chooses
another; where nothing is writable, :mod:`.kernel_cache` chooses a private directory or
none): a process after the first loads it (~0.5 s here) instead of compiling it (11-16 s).
:func:`warm_up` compiles or loads every kernel with the argument types the tracker passes,
so that the marker_tracker node (before it announces itself) and the bench pay for it
before their first frame, not in it; :func:`prepare` is that, timed, with the cache's
note logged once.

The callers pass C-contiguous arrays of the types the kernels were warmed with (float64,
intp): other types or layouts would compile a second version in the middle of tracking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mocap4r2_tools.tracking.kernel_cache import CACHE, KernelCache, kernel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


@kernel
def _quat_matrix(q: FloatArray, out: FloatArray) -> None:
    """``out`` (3, 3) = the rotation of quaternion ``q`` (x, y, z, w) times |q|^2 (exactly
    the rotation for a unit q)."""
    x, y, z, w = q[0], q[1], q[2], q[3]
    out[0, 0] = w * w + x * x - y * y - z * z
    out[0, 1] = 2.0 * (x * y - w * z)
    out[0, 2] = 2.0 * (x * z + w * y)
    out[1, 0] = 2.0 * (x * y + w * z)
    out[1, 1] = w * w - x * x + y * y - z * z
    out[1, 2] = 2.0 * (y * z - w * x)
    out[2, 0] = 2.0 * (x * z - w * y)
    out[2, 1] = 2.0 * (y * z + w * x)
    out[2, 2] = w * w - x * x - y * y + z * z


@kernel
def _turn_two(
    weights: FloatArray, local: FloatArray, observed: FloatArray, prior: FloatArray, q: FloatArray
) -> None:
    """Turn the unit quaternion ``q`` (x y z w, the prior's) of a body with 2 weighted
    markers by the least rotation that lays the line of those markers where it is seen (the
    roll about the line stays the prior's), as :func:`~.kabsch.fit_batch` turns its
    matrix. The least turn of direction a onto b is (a x b, |a||b| + a . b) normalised;
    opposite directions get none."""
    first = -1
    second = -1
    for j in range(weights.shape[0]):
        if weights[j] > 0.0:
            if first < 0:
                first = j
            second = j
    seen = np.empty(3)
    line = np.empty(3)
    was = np.zeros(3)
    for i in range(3):
        seen[i] = observed[second, i] - observed[first, i]
        line[i] = local[second, i] - local[first, i]
    for i in range(3):
        for k in range(3):
            was[i] += prior[i, k] * line[k]
    turn = np.empty(4)
    turn[0] = was[1] * seen[2] - was[2] * seen[1]
    turn[1] = was[2] * seen[0] - was[0] * seen[2]
    turn[2] = was[0] * seen[1] - was[1] * seen[0]
    lengths = np.sqrt(
        (was[0] ** 2 + was[1] ** 2 + was[2] ** 2) * (seen[0] ** 2 + seen[1] ** 2 + seen[2] ** 2)
    )
    turn[3] = was[0] * seen[0] + was[1] * seen[1] + was[2] * seen[2] + lengths
    if turn[3] < 1e-12 * lengths:
        return
    size = max(np.sqrt(turn[0] ** 2 + turn[1] ** 2 + turn[2] ** 2 + turn[3] ** 2), 1e-300)
    px, py, pz, pw = turn[0] / size, turn[1] / size, turn[2] / size, turn[3] / size
    qx, qy, qz, qw = q[0], q[1], q[2], q[3]
    # the Hamilton product turn * q: (p_w q_v + q_w p_v + p_v x q_v, p_w q_w - p_v . q_v)
    q[0] = pw * qx + qw * px + py * qz - pz * qy
    q[1] = pw * qy + qw * py + pz * qx - px * qz
    q[2] = pw * qz + qw * pz + px * qy - py * qx
    q[3] = pw * qw - px * qx - py * qy - pz * qz


@kernel
def newton_fits(
    weights: FloatArray,
    local: FloatArray,
    observed: FloatArray,
    prior: FloatArray,
    prior_quat: FloatArray,
    tolerance: float,
    max_steps: int,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, BoolArray]:
    """The weighted rigid fit of each body from its prior by Newton steps on the rotation
    (the maths is :func:`~.kabsch.fit_near`'s docstring's); returns rot (B, 3, 3), trans,
    rms, count, fitted (B, L, 3), sq (B, L), quat (B, 4, x y z w, largest part positive)
    and settled: the bodies whose steps settled within ``max_steps`` to below
    ``tolerance`` with M clearly positive definite. The others with 3+ markers are not
    fitted here (the caller fits them exactly); with 2 markers the prior is turned least,
    with 0-1 it is kept."""
    n_bodies, n_slots = weights.shape
    rot = np.empty((n_bodies, 3, 3))
    trans = np.empty((n_bodies, 3))
    rms = np.empty(n_bodies)
    count = np.empty(n_bodies)
    fitted = np.empty((n_bodies, n_slots, 3))
    sq = np.empty((n_bodies, n_slots))
    quat = np.empty((n_bodies, 4))
    settled = np.zeros(n_bodies, dtype=np.bool_)
    c_local = np.empty(3)
    c_obs = np.empty(3)
    h = np.empty((3, 3))
    r = np.empty((3, 3))
    p = np.empty((3, 3))
    q = np.empty(4)
    for b in range(n_bodies):
        n = 0.0
        c_local[:] = 0.0
        c_obs[:] = 0.0
        for j in range(n_slots):
            w = weights[b, j]
            n += w
            for i in range(3):
                c_local[i] += w * local[b, j, i]
                c_obs[i] += w * observed[b, j, i]
        inv = 1.0 / max(n, 1.0)
        for i in range(3):
            c_local[i] *= inv
            c_obs[i] *= inv
        count[b] = n
        # h = sum over markers of (l - c_local) (o - c_obs)^T, weighted; 0 below 3 markers,
        # whose steps are then 0
        h[:, :] = 0.0
        if n >= 3.0:
            for j in range(n_slots):
                w = weights[b, j]
                if w == 0.0:
                    continue
                for i in range(3):
                    a = (local[b, j, i] - c_local[i]) * w
                    for k in range(3):
                        h[i, k] += a * (observed[b, j, k] - c_obs[k])
        q[:] = prior_quat[b]
        r[:, :] = prior[b]
        step_sq = 0.0
        m00 = m11 = m22 = a22 = det = 0.0
        for step in range(max_steps):
            # P = R h; turning R by a small rotation vector d changes the fit's sum of
            # b . a by d . k - d^T M d / 2: Newton's step solves M d = k
            for i in range(3):
                for k in range(3):
                    p[i, k] = r[i, 0] * h[0, k] + r[i, 1] * h[1, k] + r[i, 2] * h[2, k]
            k0 = p[1, 2] - p[2, 1]
            k1 = p[2, 0] - p[0, 2]
            k2 = p[0, 1] - p[1, 0]
            m00 = p[1, 1] + p[2, 2]
            m11 = p[0, 0] + p[2, 2]
            m22 = p[0, 0] + p[1, 1]
            m01 = -0.5 * (p[0, 1] + p[1, 0])
            m02 = -0.5 * (p[0, 2] + p[2, 0])
            m12 = -0.5 * (p[1, 2] + p[2, 1])
            # M's adjugate, its determinant, and d = adj(M) k / det(M)
            a00 = m11 * m22 - m12 * m12
            a11 = m00 * m22 - m02 * m02
            a22 = m00 * m11 - m01 * m01
            a01 = m02 * m12 - m01 * m22
            a02 = m01 * m12 - m02 * m11
            a12 = m01 * m02 - m00 * m12
            det = a00 * m00 + a01 * m01 + a02 * m02
            d0 = d1 = d2 = 0.0
            if det > 0.0:
                d0 = (a00 * k0 + a01 * k1 + a02 * k2) / det
                d1 = (a01 * k0 + a11 * k1 + a12 * k2) / det
                d2 = (a02 * k0 + a12 * k1 + a22 * k2) / det
            # q + (d, 0) q / 2: q turned by about d (exactly by 2 atan(|d| / 2), which the
            # next step corrects); q is not normalised between steps, which scales M and k
            # alike and leaves the step unchanged
            qx, qy, qz, qw = q[0], q[1], q[2], q[3]
            q[0] += 0.5 * (qw * d0 + d1 * qz - d2 * qy)
            q[1] += 0.5 * (qw * d1 + d2 * qx - d0 * qz)
            q[2] += 0.5 * (qw * d2 + d0 * qy - d1 * qx)
            q[3] -= 0.5 * (d0 * qx + d1 * qy + d2 * qz)
            step_sq = d0 * d0 + d1 * d1 + d2 * d2
            if step and step_sq < tolerance * tolerance:
                break
            _quat_matrix(q, r)
        # Sylvester's test of M, with a determinant that bounds M's least eigenvalue away
        # from 0: det > 1e-4 (tr/2)^3 gives it > 1e-4 tr/2, fit_batch's margin against
        # collinearity
        trace = m00 + m11 + m22
        settled[b] = (
            n >= 3.0
            and step_sq < tolerance * tolerance
            and m00 > 0.0
            and a22 > 0.0
            and det > 1.25e-5 * trace * trace * trace
        )
        size = np.sqrt(q[0] ** 2 + q[1] ** 2 + q[2] ** 2 + q[3] ** 2)
        for i in range(4):
            q[i] /= size
        if n == 2.0:
            _turn_two(weights[b], local[b], observed[b], prior[b], q)
        _quat_matrix(q, rot[b])
        # x y z w, the largest part positive (as fit_batch and rotation.quat_from_matrix)
        sign = -1.0 if max(q[0], q[1], q[2], q[3]) < -min(q[0], q[1], q[2], q[3]) else 1.0
        for i in range(4):
            quat[b, i] = sign * q[i]
        for i in range(3):
            trans[b, i] = c_obs[i] - (
                rot[b, i, 0] * c_local[0] + rot[b, i, 1] * c_local[1] + rot[b, i, 2] * c_local[2]
            )
        total = 0.0
        for j in range(n_slots):
            off_sq = 0.0
            for i in range(3):
                f = (
                    rot[b, i, 0] * local[b, j, 0]
                    + rot[b, i, 1] * local[b, j, 1]
                    + rot[b, i, 2] * local[b, j, 2]
                    + trans[b, i]
                )
                fitted[b, j, i] = f
                off_sq += (f - observed[b, j, i]) ** 2
            sq[b, j] = off_sq * weights[b, j]
            total += sq[b, j]
        rms[b] = np.sqrt(total * inv)
    return rot, trans, rms, count, fitted, sq, quat, settled


@kernel
def gated_neighbours(
    points: FloatArray, order: IntArray, xs: FloatArray, queries: FloatArray, bounds: FloatArray, k: int
) -> tuple[FloatArray, IntArray]:
    """The ``k`` nearest of ``points`` (N, 3) to each of ``queries`` (Q, 3) within its
    ``bounds`` (Q,), nearest first, as cKDTree.query gives them: distances (Q, k), inf
    where fewer are found, and indices (Q, k), N there. ``order`` sorts the points along x
    and ``xs`` is their x in that order (:class:`MarkerIndex`): a query scans only the
    points within its bound in x, a binary search away. The tracker's gates are a few cm
    in a volume of metres, so that is a handful of points; building and querying a k-d tree
    of 200 markers for 196 predicted ones cost ~0.12 ms a frame here, sorting and this
    ~0.03 ms."""
    n_points = len(order)
    dist = np.full((len(queries), k), np.inf)
    near = np.full((len(queries), k), n_points, dtype=np.intp)
    if k < 1:  # nothing to find (and no last column to compare with)
        return dist, near
    for r in range(len(queries)):
        qx, qy, qz = queries[r, 0], queries[r, 1], queries[r, 2]
        bound = bounds[r]
        bound_sq = bound * bound
        found = 0
        for s in range(np.searchsorted(xs, qx - bound), n_points):
            if xs[s] > qx + bound:
                break
            j = order[s]
            d_sq = (points[j, 0] - qx) ** 2 + (points[j, 1] - qy) ** 2 + (points[j, 2] - qz) ** 2
            if d_sq > bound_sq or (found == k and d_sq >= dist[r, k - 1]):
                continue
            # insert into the sorted row (squared distances until the end)
            c = found if found < k else k - 1
            while c > 0 and dist[r, c - 1] > d_sq:
                dist[r, c] = dist[r, c - 1]
                near[r, c] = near[r, c - 1]
                c -= 1
            dist[r, c] = d_sq
            near[r, c] = j
            found = min(found + 1, k)
        for c in range(found):
            dist[r, c] = np.sqrt(dist[r, c])
    return dist, near


@kernel
def pair_alone(near: IntArray, n_points: int, rows: IntArray, assigned: IntArray) -> IntArray:
    """The usual case of the tracker's assignment: a predicted marker (row r of ``near``,
    its neighbours within its gate, N for none) with exactly one marker in its gate that
    no other gate holds is paired with it, written into ``assigned`` (flat) at ``rows[r]``.
    Returns the rows with a marker in their gate not paired so (their gates overlap):
    those go through the global assignment."""
    uses = np.zeros(n_points, dtype=np.intp)
    for r in range(near.shape[0]):
        for c in range(near.shape[1]):
            if near[r, c] < n_points:
                uses[near[r, c]] += 1
    shared = np.empty(near.shape[0], dtype=np.intp)
    n_shared = 0
    if near.shape[1] == 0:  # no neighbours asked for: no marker in any gate
        return shared[:0]
    for r in range(near.shape[0]):
        first = near[r, 0]
        if first == n_points:
            continue
        if (near.shape[1] == 1 or near[r, 1] == n_points) and uses[first] == 1:
            assigned[rows[r]] = first
        else:
            shared[n_shared] = r
            n_shared += 1
    return shared[:n_shared]


@kernel
def motion(
    last_quat: FloatArray, quat: FloatArray, trans: FloatArray, pred_p: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Per body: the squared distance of the fit ``trans`` from the predicted position,
    and the angle the fit ``quat`` turned from ``last_quat`` (the cosine of half of it is
    |q_last . q|)."""
    n_bodies = len(quat)
    step_sq = np.empty(n_bodies)
    angle = np.empty(n_bodies)
    for b in range(n_bodies):
        step_sq[b] = (
            (trans[b, 0] - pred_p[b, 0]) ** 2
            + (trans[b, 1] - pred_p[b, 1]) ** 2
            + (trans[b, 2] - pred_p[b, 2]) ** 2
        )
        cos_half = abs(
            last_quat[b, 0] * quat[b, 0]
            + last_quat[b, 1] * quat[b, 1]
            + last_quat[b, 2] * quat[b, 2]
            + last_quat[b, 3] * quat[b, 3]
        )
        angle[b] = 2.0 * np.arccos(min(cos_half, 1.0))
    return step_sq, angle


@kernel
def judge(
    tracked: BoolArray,
    count: FloatArray,
    need: IntArray,
    rms: FloatArray,
    step_sq: FloatArray,
    angle: FloatArray,
    allowed: FloatArray,
    dt: FloatArray,
    single: BoolArray,
    noise_angle: FloatArray,
    max_residual: float,
    max_angular_velocity: float,
) -> tuple[BoolArray, int]:
    """The tracked fit's checks (:class:`~.tracked_fit.TrackedFit`): which bodies' fits are
    good (enough markers, RMS residual within ``max_residual``, within ``allowed`` of the
    prediction and turned at most ``max_angular_velocity * dt`` plus the noise angle, which
    a single marker is not checked for), and how many fits with enough markers were
    refused."""
    n_bodies = len(tracked)
    good = np.zeros(n_bodies, dtype=np.bool_)
    refused = 0
    for b in range(n_bodies):
        if not (tracked[b] and count[b] >= need[b]):
            continue
        spin_ok = single[b] or angle[b] <= max_angular_velocity * dt[b] + noise_angle[b]
        good[b] = rms[b] <= max_residual and step_sq[b] <= allowed[b] * allowed[b] and spin_ok
        refused += 0 if good[b] else 1
    return good, refused


@kernel
def commit(
    good: BoolArray,
    assigned: IntArray,
    claimed: BoolArray,
    trans: FloatArray,
    rot: FloatArray,
    quat: FloatArray,
    fitted: FloatArray,
    dt: FloatArray,
    stamp: float,
    position: FloatArray,
    velocity: FloatArray,
    velocity_known: BoolArray,
    rotation: FloatArray,
    last_quat: FloatArray,
    offsets: FloatArray,
    last_good: FloatArray,
) -> None:
    """Accept the ``good`` fits into the bodies' motion state (:class:`~.track_state.BodyStates`'
    arrays, written in place) and set their markers in ``claimed``; clear the others'
    rows of ``assigned``. The velocity is the step over ``dt``: a known one is smoothed
    (half the new estimate), an unknown one taken, and known from then on if ``dt`` > 0.
    A single marker's rotation stays the identity (its fit keeps the prior) and its offsets
    0 (its layout is the origin)."""
    for b in range(len(good)):
        if not good[b]:
            assigned[b, :] = -1
            continue
        for j in range(assigned.shape[1]):
            if assigned[b, j] >= 0:
                claimed[assigned[b, j]] = True
        inv_dt = 1.0 / max(dt[b], 1e-9)
        for i in range(3):
            raw_v = (trans[b, i] - position[b, i]) * inv_dt
            velocity[b, i] = 0.5 * (raw_v + velocity[b, i]) if velocity_known[b] else raw_v
            position[b, i] = trans[b, i]
        velocity_known[b] = velocity_known[b] or dt[b] > 0.0
        rotation[b] = rot[b]
        last_quat[b] = quat[b]
        for j in range(fitted.shape[1]):
            for i in range(3):
                offsets[b, j, i] = fitted[b, j, i] - trans[b, i]
        last_good[b] = stamp


class MarkerIndex:
    """A frame's markers sorted along x, for the gated neighbour queries of the tracker's
    assignment and refinement (:func:`gated_neighbours`; the same answers as a k-d tree's
    query with a distance bound, in a tenth of the time for a frame's few hundred markers).
    The scan is over the markers within a query's bound in x: at worst (every marker in one
    slab of x) all of them."""

    def __init__(self, points: FloatArray) -> None:
        self.points = np.ascontiguousarray(points, dtype=np.float64)
        self.order: IntArray = np.argsort(self.points[:, 0], kind="stable")
        self.xs: FloatArray = self.points[self.order, 0]

    def query(self, queries: FloatArray, bounds: FloatArray, k: int) -> tuple[FloatArray, IntArray]:
        """Distances and indices of the ``k`` nearest markers within ``bounds`` (one per
        query) of each query, nearest first; inf and the number of markers where none."""
        found: tuple[FloatArray, IntArray] = gated_neighbours(
            self.points,
            self.order,
            self.xs,
            np.ascontiguousarray(queries, dtype=np.float64),
            np.ascontiguousarray(bounds, dtype=np.float64),
            k,
        )
        return found


def warm_up() -> None:
    """Compile (first process) or load from the cache (later ones) every kernel, with the
    argument types the tracker passes (C-contiguous float64, intp and bool arrays, Python
    floats and ints): a tiny frame of 3 bodies, one for each marker count's branch."""
    local = np.zeros((3, 3, 3))
    local[:, :, 0] = [0.0, 0.02, 0.0]
    local[:, :, 1] = [0.0, 0.0, 0.02]
    weights = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    prior = np.tile(np.eye(3), (3, 1, 1))
    quat = np.tile([0.0, 0.0, 0.0, 1.0], (3, 1))
    rot, trans, rms, count, fitted, _, fit_quat, _ = newton_fits(
        weights, local, local.copy(), prior, quat, 1e-4, 4
    )
    index = MarkerIndex(local[0])
    _, near = index.query(local[1], np.full(3, 0.01), 2)
    assigned = np.full((3, 3), -1, dtype=np.intp)
    pair_alone(near, 3, np.arange(3), assigned.reshape(-1))
    step_sq, angle = motion(quat, fit_quat, trans, np.zeros((3, 3)))
    yes = np.ones(3, dtype=np.bool_)
    dt = np.full(3, 0.01)
    good, _ = judge(yes, count, np.full(3, 2), rms, step_sq, angle, dt, dt, ~yes, dt, 0.004, 20.0)
    commit(
        good,
        assigned,
        np.zeros(3, dtype=np.bool_),
        trans,
        rot,
        fit_quat,
        fitted,
        dt,
        0.0,
        np.zeros((3, 3)),
        np.zeros((3, 3)),
        ~yes,
        prior.copy(),
        quat.copy(),
        np.zeros((3, 3, 3)),
        np.zeros(3),
    )


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare` did: the seconds it took and the cache it used."""

    seconds: float
    cache: KernelCache


_noted = False


def prepare(note: Callable[[str], object] | None = None) -> Prepared:
    """:func:`warm_up`, timed; ``note`` (a logger's warning) is given the cache's note the
    first time in a process when numba's own cache is not writable (once: later calls, the
    node's configure among them, load nothing and say nothing)."""
    global _noted
    if CACHE.note and not _noted and note is not None:
        _noted = True
        note(CACHE.note)
    started = time.perf_counter()
    warm_up()
    return Prepared(time.perf_counter() - started, CACHE)
