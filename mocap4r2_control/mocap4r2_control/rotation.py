"""Quaternion algebra for the whole suite: one vocabulary, two speeds.

Quaternions are ``x, y, z, w`` (geometry_msgs order), unit length unless a function says
otherwise; rotation vectors are axis * angle in radians.

* ``quat_*`` functions (and :func:`norm3`) take arrays of shape (..., 4) / (..., 3),
  broadcast, and keep the memory layout of their first array argument: a caller holding
  (4, m) component rows passes their transposed (m, 4) views and every operation runs
  along contiguous rows (for a million poses products and rotations are two to three
  times as fast as down the columns of an (m, 4) array: ``python -m bench rotation``).
* ``*_one`` functions take one quaternion or vector as a sequence of 4 or 3 numbers and
  return a tuple of Python floats. They serve per-sample online paths (running RPE,
  velocity estimators, monitors), where numpy's fixed cost per call would be most of the
  work: ``python -m bench rotation`` compares the two on single samples.

q and -q are the same rotation. :func:`quat_log`, :func:`quat_angle`,
:func:`quat_relative` and :func:`quat_slerp` take the shorter way round, so a sign flip
between two samples (which mocap systems and conversions produce freely) is no rotation.
Euler angles are here too (:func:`quat_to_rpy_one`, :func:`quat_from_rpy_one`,
:func:`quat_to_euler_zyx_one`): shipped code uses this vocabulary, not scipy's
``Rotation`` (the tests hold these functions to scipy's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
# below this rotation angle (rad) exp and log use their first-order series: sin(a)/a
# would divide rounding noise by rounding noise
_SMALL_ANGLE = 1e-12


def _out(first: FloatArray, shape: tuple[int, ...]) -> FloatArray:
    """An uninitialised result of ``shape``, in ``first``'s memory layout when it has
    that shape (a transposed (4, m) view gives a result whose components are rows)."""
    return np.empty_like(first) if first.shape == shape else np.empty(shape)


def quat_multiply(a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """Hamilton product a * b."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ax, ay, az, aw = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bx, by, bz, bw = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    out = _out(a, np.broadcast_shapes(a.shape, b.shape))
    out[..., 0] = aw * bx + ax * bw + ay * bz - az * by
    out[..., 1] = aw * by - ax * bz + ay * bw + az * bx
    out[..., 2] = aw * bz + ax * by - ay * bx + az * bw
    out[..., 3] = aw * bw - ax * bx - ay * by - az * bz
    return out


def quat_conjugate(q: npt.ArrayLike) -> FloatArray:
    """The conjugate (x, y, z negated): the inverse of a unit quaternion."""
    q = np.asarray(q, dtype=np.float64)
    out = np.array(q, dtype=np.float64)  # a copy in q's layout
    out[..., :3] *= -1.0
    return out


def quat_normalize(q: npt.ArrayLike) -> FloatArray:
    """Q scaled to unit length (a zero quaternion gives NaN: check before, see
    geometry.usable_pose)."""
    q = np.asarray(q, dtype=np.float64)
    if q.ndim == 1:  # one quaternion, per sample: a third of the cost of the general form
        one: FloatArray = q / np.linalg.norm(q)
        return one
    unit: FloatArray = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return unit


def _cross(u: FloatArray, v: FloatArray) -> FloatArray:
    # np.cross spends most of its time in axis bookkeeping for small arrays
    out = _out(v, np.broadcast_shapes(u.shape, v.shape))
    out[..., 0] = u[..., 1] * v[..., 2] - u[..., 2] * v[..., 1]
    out[..., 1] = u[..., 2] * v[..., 0] - u[..., 0] * v[..., 2]
    out[..., 2] = u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]
    return out


def quat_rotate(q: npt.ArrayLike, v: npt.ArrayLike) -> FloatArray:
    """Vectors v rotated by unit quaternions q (v' = q v q*)."""
    q = np.asarray(q, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    u = q[..., :3]
    w = q[..., 3:4]
    t = 2.0 * _cross(u, v)
    result: FloatArray = v + w * t + _cross(u, t)
    return result


def quat_rotate_inverse(q: npt.ArrayLike, v: npt.ArrayLike) -> FloatArray:
    """Vectors v expressed in the axes of the frames whose orientations are q (R(q)^T v)."""
    return quat_rotate(quat_conjugate(q), v)


def quat_from_yaw(yaw: npt.ArrayLike) -> FloatArray:
    """Rotations by ``yaw`` radians about +Z."""
    yaw = np.asarray(yaw, dtype=np.float64)
    out = np.zeros(yaw.shape + (4,))
    out[..., 2] = np.sin(yaw / 2.0)
    out[..., 3] = np.cos(yaw / 2.0)
    return out


def quat_from_axis_angle(axis: npt.ArrayLike, angle: npt.ArrayLike) -> FloatArray:
    """Rotations by ``angle`` radians about ``axis`` (any non-zero length)."""
    axis = np.asarray(axis, dtype=np.float64)
    axis = axis / np.linalg.norm(axis, axis=-1, keepdims=True)
    half = np.asarray(angle, dtype=np.float64)[..., None] / 2.0
    return np.concatenate((axis * np.sin(half), np.cos(half)), axis=-1)


def quat_exp(rotvec: npt.ArrayLike) -> FloatArray:
    """Unit quaternions of rotation vectors (axis * angle): the exponential map."""
    v = np.asarray(rotvec, dtype=np.float64)
    angle = np.sqrt(v[..., 0] * v[..., 0] + v[..., 1] * v[..., 1] + v[..., 2] * v[..., 2])
    small = angle < _SMALL_ANGLE
    safe = np.where(small, 1.0, angle)
    scale = np.where(small, 0.5, np.sin(0.5 * safe) / safe)
    out = np.empty(v.shape[:-1] + (4,))
    out[..., :3] = v * scale[..., None]
    out[..., 3] = np.where(small, 1.0, np.cos(0.5 * safe))
    return out


def quat_log(q: npt.ArrayLike) -> FloatArray:
    """Rotation vectors of unit quaternions, angle in [0, pi]: q and -q give the same."""
    q = np.asarray(q, dtype=np.float64)
    sign = np.where(q[..., 3] < 0.0, -1.0, 1.0)  # the shorter way round
    x, y, z, w = (sign * q[..., k] for k in range(4))
    n = np.sqrt(x * x + y * y + z * z)
    small = n < _SMALL_ANGLE
    safe = np.where(small, 1.0, n)
    scale = np.where(small, 2.0, 2.0 * np.arctan2(n, w) / safe)
    return np.stack((x * scale, y * scale, z * scale), axis=-1)


def quat_angle(q: npt.ArrayLike) -> FloatArray:
    """Rotation angles in [0, pi] of unit quaternions; atan2 keeps small angles exact."""
    q = np.asarray(q, dtype=np.float64)
    angle: FloatArray = 2.0 * np.arctan2(norm3(q[..., :3]), np.abs(q[..., 3]))
    return angle


def norm3(v: FloatArray) -> FloatArray:
    """Lengths of 3-vectors (..., 3), elementwise so that component rows stay rows.

    The squares are added as (x + z) + y, the order in which np.einsum sums the rows of
    an (m, 3) array, so the results equal its results to the bit in either layout."""
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    length: FloatArray = np.sqrt((x * x + z * z) + y * y)
    return length


def row_norms(v: FloatArray) -> FloatArray:
    """Lengths of the rows of an (n, k) array (positions, quaternions).

    One einsum pass: np.linalg.norm(v, axis=1) squares into an (n, k) temporary and then
    reduces along the short axis, 3-4x slower on the 100 k-row trajectories of an
    evaluation. The two can differ in the last bit (the sum order differs)."""
    lengths: FloatArray = np.sqrt(np.einsum("ij,ij->i", v, v))
    return lengths


def quat_relative(q0: npt.ArrayLike, q1: npt.ArrayLike) -> FloatArray:
    """Rotation vectors of q0^-1 q1: the rotation from q0 to q1 in q0's (body) axes."""
    return quat_log(quat_multiply(quat_conjugate(q0), q1))


def quat_slerp(q0: npt.ArrayLike, q1: npt.ArrayLike, fraction: npt.ArrayLike) -> FloatArray:
    """Spherical interpolation from q0 (fraction 0) to q1 (fraction 1) at constant
    angular rate, the shorter way round; q0 and q1 broadcast with fraction's shape."""
    step = quat_relative(q0, q1)
    fraction = np.asarray(fraction, dtype=np.float64)[..., None]
    return quat_multiply(q0, quat_exp(step * fraction))


def _candidate_map() -> tuple[FloatArray, FloatArray]:
    """The affine map from a rotation matrix (9 entries, row-major) to the 4 x 4 table
    of Shepperd's method: row b is 4 * q_b * (x, y, z, w) for b in (x, y, z, w), so its
    diagonal holds 4 * q_b ** 2 and every row is proportional to the quaternion."""
    # (constant, {matrix entry "ij": coefficient}) per row and component
    table = (
        (
            (1, {"00": 1, "11": -1, "22": -1}),
            (0, {"01": 1, "10": 1}),
            (0, {"02": 1, "20": 1}),
            (0, {"21": 1, "12": -1}),
        ),
        (
            (0, {"01": 1, "10": 1}),
            (1, {"00": -1, "11": 1, "22": -1}),
            (0, {"12": 1, "21": 1}),
            (0, {"02": 1, "20": -1}),
        ),
        (
            (0, {"02": 1, "20": 1}),
            (0, {"12": 1, "21": 1}),
            (1, {"00": -1, "11": -1, "22": 1}),
            (0, {"10": 1, "01": -1}),
        ),
        (
            (0, {"21": 1, "12": -1}),
            (0, {"02": 1, "20": -1}),
            (0, {"10": 1, "01": -1}),
            (1, {"00": 1, "11": 1, "22": 1}),
        ),
    )
    linear = np.zeros((9, 16))
    constant = np.zeros(16)
    for b, row in enumerate(table):
        for c, (const, terms) in enumerate(row):
            constant[4 * b + c] = const
            for entry, coefficient in terms.items():
                linear[3 * int(entry[0]) + int(entry[1]), 4 * b + c] = coefficient
    return linear, constant


_LINEAR, _CONSTANT = _candidate_map()
_DIAGONAL = np.array([0, 5, 10, 15])


def quat_from_matrix(m: npt.ArrayLike) -> FloatArray:
    """Unit quaternions of rotation matrices (..., 3, 3), vectorised.

    scipy's Rotation.from_matrix gives the same rotations but costs about 90 us for
    ten matrices (input checks), most of a frame's budget on the drivers' paths; here one
    matrix product gives Shepperd's four candidates and each row keeps the
    numerically safe one (that of its largest quaternion component)."""
    m = np.asarray(m, dtype=np.float64)
    table = m.reshape(-1, 9) @ _LINEAR + _CONSTANT
    branch = np.argmax(table[:, _DIAGONAL], axis=1)
    q = table.reshape(-1, 4, 4)[np.arange(table.shape[0]), branch]
    unit: FloatArray = q / np.linalg.norm(q, axis=1, keepdims=True)
    return unit.reshape(m.shape[:-2] + (4,))


def quat_to_matrix(q: npt.ArrayLike) -> FloatArray:
    """Rotation matrices (..., 3, 3) of unit quaternions (p' = R p)."""
    q = np.asarray(q, dtype=np.float64)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    out = np.empty(q.shape[:-1] + (3, 3))
    out[..., 0, 0] = 1.0 - 2.0 * (y * y + z * z)
    out[..., 0, 1] = 2.0 * (x * y - z * w)
    out[..., 0, 2] = 2.0 * (x * z + y * w)
    out[..., 1, 0] = 2.0 * (x * y + z * w)
    out[..., 1, 1] = 1.0 - 2.0 * (x * x + z * z)
    out[..., 1, 2] = 2.0 * (y * z - x * w)
    out[..., 2, 0] = 2.0 * (x * z - y * w)
    out[..., 2, 1] = 2.0 * (y * z + x * w)
    out[..., 2, 2] = 1.0 - 2.0 * (x * x + y * y)
    return out


# One quaternion or vector at a time, on Python floats (see the module docstring). They
# also take (4,) / (3,) arrays; numpy scalars then make the arithmetic slower.
Quat = tuple[float, float, float, float]
Vector = tuple[float, float, float]
Floats = Sequence[float] | FloatArray


def quat_multiply_one(a: Floats, b: Floats) -> Quat:
    """Hamilton product a * b of one pair."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def quat_conjugate_one(q: Floats) -> Quat:
    """The conjugate of one quaternion (its inverse when unit)."""
    return (-q[0], -q[1], -q[2], q[3])


def quat_rotate_one(q: Floats, v: Floats) -> Vector:
    """One vector rotated by one unit quaternion (the formula of :func:`quat_rotate`)."""
    ux, uy, uz, w = q
    vx, vy, vz = v
    tx = 2.0 * (uy * vz - uz * vy)
    ty = 2.0 * (uz * vx - ux * vz)
    tz = 2.0 * (ux * vy - uy * vx)
    return (
        vx + w * tx + (uy * tz - uz * ty),
        vy + w * ty + (uz * tx - ux * tz),
        vz + w * tz + (ux * ty - uy * tx),
    )


def quat_rotate_inverse_one(q: Floats, v: Floats) -> Vector:
    """One vector in the axes of the frame whose orientation is q (R(q)^T v)."""
    return quat_rotate_one(quat_conjugate_one(q), v)


def quat_exp_one(rotvec: Floats) -> Quat:
    """Unit quaternion of one rotation vector (axis * angle)."""
    vx, vy, vz = rotvec
    angle = math.sqrt(vx * vx + vy * vy + vz * vz)
    if angle < _SMALL_ANGLE:
        return (0.5 * vx, 0.5 * vy, 0.5 * vz, 1.0)
    s = math.sin(0.5 * angle) / angle
    return (s * vx, s * vy, s * vz, math.cos(0.5 * angle))


def quat_log_one(q: Floats) -> Vector:
    """Rotation vector of one unit quaternion, angle in [0, pi]: q and -q give the same."""
    x, y, z, w = q
    if w < 0.0:  # the shorter way round
        x, y, z, w = -x, -y, -z, -w
    n = math.sqrt(x * x + y * y + z * z)
    if n < _SMALL_ANGLE:
        return (2.0 * x, 2.0 * y, 2.0 * z)
    scale = 2.0 * math.atan2(n, w) / n
    return (x * scale, y * scale, z * scale)


def quat_angle_one(q: Floats) -> float:
    """Rotation angle in [0, pi] of one unit quaternion."""
    return 2.0 * math.atan2(math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2]), abs(q[3]))


def quat_relative_one(q0: Floats, q1: Floats) -> Vector:
    """Rotation vector of q0^-1 q1: the rotation from q0 to q1 in q0's (body) axes."""
    return quat_log_one(quat_multiply_one(quat_conjugate_one(q0), q1))


def quat_slerp_one(q0: Floats, q1: Floats, fraction: float) -> Quat:
    """Spherical interpolation from q0 to q1 at ``fraction``, the shorter way round."""
    sx, sy, sz = quat_relative_one(q0, q1)
    return quat_multiply_one(q0, quat_exp_one((sx * fraction, sy * fraction, sz * fraction)))


def quat_to_rpy_one(q: Floats) -> Vector:
    """(roll, pitch, yaw) in radians of one unit quaternion, as URDF's ``<origin rpy>``
    and tf2's getRPY read them: fixed axes X, then Y, then Z (R = Rz(yaw) Ry(pitch)
    Rx(roll)); pitch in [-pi/2, pi/2] (at +-pi/2 roll and yaw share one degree of freedom
    and roll carries it)."""
    x, y, z, w = q
    sin_pitch = max(-1.0, min(1.0, 2.0 * (w * y - z * x)))
    if abs(sin_pitch) > 1.0 - 1e-12:  # gimbal lock: yaw 0, roll takes their difference
        return (2.0 * math.atan2(x, w), math.copysign(math.pi / 2.0, sin_pitch), 0.0)
    return (
        math.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y)),
        math.asin(sin_pitch),
        math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)),
    )


def quat_to_euler_zyx_one(q: Floats) -> Vector:
    """(yaw, pitch, roll) in radians of a quaternion (normalised first), the aerospace
    Z-Y-X convention (R = Rz(yaw) Ry(pitch) Rx(roll)), as scipy's ``as_euler("ZYX")``
    gives them: the angles of :func:`quat_to_rpy_one` in the other order, except at
    gimbal lock (pitch +-pi/2), where yaw carries the shared degree of freedom and roll
    is 0."""
    x, y, z, w = q
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    sin_pitch = 2.0 * (w * y - z * x)
    if abs(sin_pitch) > 1.0 - 1e-12:
        yaw = -math.copysign(2.0, sin_pitch) * math.atan2(x, w)
        yaw = math.remainder(yaw, 2.0 * math.pi)
        return (yaw, math.copysign(math.pi / 2.0, sin_pitch), 0.0)
    roll, pitch, yaw = quat_to_rpy_one((x, y, z, w))
    return (yaw, pitch, roll)


def quat_from_rpy_one(roll: float, pitch: float, yaw: float) -> Quat:
    """The unit quaternion of fixed-axis roll about X, then pitch about Y, then yaw about
    Z (R = Rz(yaw) Ry(pitch) Rx(roll)): URDF's ``<origin rpy>``, scipy's
    ``from_euler("xyz", (roll, pitch, yaw))``."""
    cr, sr = math.cos(roll / 2.0), math.sin(roll / 2.0)
    cp, sp = math.cos(pitch / 2.0), math.sin(pitch / 2.0)
    cy, sy = math.cos(yaw / 2.0), math.sin(yaw / 2.0)
    return (
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
        cr * cp * cy + sr * sp * sy,
    )
