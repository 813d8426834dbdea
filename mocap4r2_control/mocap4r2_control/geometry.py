"""Vectorised quaternion and axis helpers used by adapters and the simulated scene.

Quaternions are ``x, y, z, w`` rows (geometry_msgs order). All functions accept
arrays of shape (..., 4) / (..., 3) and broadcast. Only what the drivers need on
their hot paths lives here; anything heavier uses scipy.spatial.transform.
"""

from __future__ import annotations

import numpy as np


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product a * b."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    ax, ay, az, aw = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bx, by, bz, bw = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    out[..., 0] = aw * bx + ax * bw + ay * bz - az * by
    out[..., 1] = aw * by - ax * bz + ay * bw + az * bx
    out[..., 2] = aw * bz + ax * by - ay * bx + az * bw
    out[..., 3] = aw * bw - ax * bx - ay * by - az * bz
    return out


def _cross(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    # np.cross spends most of its time in axis bookkeeping for small arrays
    out = np.empty(np.broadcast_shapes(u.shape, v.shape))
    out[..., 0] = u[..., 1] * v[..., 2] - u[..., 2] * v[..., 1]
    out[..., 1] = u[..., 2] * v[..., 0] - u[..., 0] * v[..., 2]
    out[..., 2] = u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]
    return out


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors v by unit quaternions q (v' = q v q*)."""
    q = np.asarray(q, dtype=float)
    v = np.asarray(v, dtype=float)
    u = q[..., :3]
    w = q[..., 3:4]
    t = 2.0 * _cross(u, v)
    return v + w * t + _cross(u, t)


def quat_from_yaw(yaw) -> np.ndarray:
    yaw = np.asarray(yaw, dtype=float)
    out = np.zeros(yaw.shape + (4,))
    out[..., 2] = np.sin(yaw / 2.0)
    out[..., 3] = np.cos(yaw / 2.0)
    return out


def quat_from_axis_angle(axis, angle) -> np.ndarray:
    axis = np.asarray(axis, dtype=float)
    axis = axis / np.linalg.norm(axis, axis=-1, keepdims=True)
    angle = np.asarray(angle, dtype=float)[..., None]
    return np.concatenate((axis * np.sin(angle / 2.0), np.cos(angle / 2.0)), axis=-1)


def _candidate_map() -> tuple[np.ndarray, np.ndarray]:
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


def quat_from_matrix(m: np.ndarray) -> np.ndarray:
    """Unit quaternions (x, y, z, w) of rotation matrices (..., 3, 3), vectorised.

    scipy's Rotation.from_matrix gives the same rotations but costs about 90 us for
    ten matrices (input checks), most of a frame's budget on this path; here one
    matrix product gives Shepperd's four candidates and each row keeps the
    numerically safe one (that of its largest quaternion component)."""
    m = np.asarray(m, dtype=float)
    table = m.reshape(-1, 9) @ _LINEAR + _CONSTANT
    branch = np.argmax(table[:, _DIAGONAL], axis=1)
    q = table.reshape(-1, 4, 4)[np.arange(table.shape[0]), branch]
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    return q.reshape(m.shape[:-2] + (4,))


# Up-axis conventions. ROS (REP-103) is Z-up; Motive streams Y-up by default (X right, Y up,
# Z toward the viewer), QTM may be set to any up axis. Each convention names the axis that
# points up in the system's frame; the change to Z-up is the proper rotation A taking that
# axis to +Z, written as a signed permutation: output axis i = sign_i * input axis index_i.
# Body orientations are conjugated by A (q' = a q a^-1), not just rotated: the body's own
# axes are re-expressed in the Z-up convention too, so a body created level in the vendor's
# software has the identity orientation in ROS. Conjugation by a signed permutation maps
# the quaternion's vector part v to A v and keeps w, so every change is one gather with
# signs (float32 in, float64 out) on the hot paths of the drivers.
UP_AXIS_CONVENTIONS: dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]] = {
    "+Z": ((0, 1, 2), (1, 1, 1)),
    "-Z": ((0, 1, 2), (1, -1, -1)),
    "+Y": ((0, 2, 1), (1, -1, 1)),  # (x, y, z) -> (x, -z, y): +90 degrees about X
    "-Y": ((0, 2, 1), (1, 1, -1)),
    "+X": ((1, 2, 0), (1, 1, 1)),
    "-X": ((1, 2, 0), (1, -1, -1)),
}


class AxisChange:
    """The change from a named up-axis convention to Z-up (or back, :meth:`inverse`)."""

    def __init__(self, up: str, _index=None, _sign=None):
        if up not in UP_AXIS_CONVENTIONS:
            raise ValueError(f"unknown up axis {up!r}; one of {sorted(UP_AXIS_CONVENTIONS)}")
        self.up = up
        index, sign = UP_AXIS_CONVENTIONS[up] if _index is None else (_index, _sign)
        self._index = list(index)
        self._sign = np.array(sign, dtype=float)
        self._q_index = self._index + [3]
        self._q_sign = np.append(self._sign, 1.0)
        self.identity = self._index == [0, 1, 2] and bool((self._sign == 1).all())

    def positions(self, p: np.ndarray) -> np.ndarray:
        """Positions (..., 3) in the Z-up frame (the inverse: in the vendor's frame)."""
        return np.asarray(p)[..., self._index] * self._sign

    def orientations(self, q: np.ndarray) -> np.ndarray:
        """Body orientations (..., 4), x y z w, conjugated by the change."""
        return np.asarray(q)[..., self._q_index] * self._q_sign

    def inverse(self) -> AxisChange:
        """The change back from Z-up to this convention (A transposed)."""
        index = [0, 0, 0]
        sign = [1, 1, 1]
        for i, (j, s) in enumerate(zip(self._index, self._sign)):
            index[j], sign[j] = i, int(s)
        return AxisChange(self.up, tuple(index), tuple(sign))

    def matrix(self) -> np.ndarray:
        """A as a 3 x 3 matrix (positions p' = A p)."""
        out = np.zeros((3, 3))
        out[np.arange(3), self._index] = self._sign
        return out


# A quaternion shorter than this carries no direction: it is noise or an all-zero
# placeholder (what several SDKs send for an untracked body), never a rotation.
MIN_QUATERNION_NORM = 1e-6


def usable_pose(position, orientation) -> tuple[np.ndarray, np.ndarray] | None:
    """(position, unit quaternion) of one pose, or None when it cannot be used as a
    pose: a non-finite value, or a quaternion too short to normalise."""
    position = np.asarray(position, dtype=float)
    orientation = np.asarray(orientation, dtype=float)
    norm = float(np.linalg.norm(orientation))
    if not (np.isfinite(position).all() and np.isfinite(norm) and norm > MIN_QUATERNION_NORM):
        return None
    return position, orientation / norm


def pose_is_usable(position, orientation) -> bool:
    """True when :func:`usable_pose` accepts the pose."""
    return usable_pose(position, orientation) is not None


def pose_msg_arrays(pose) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`usable_pose` of a geometry_msgs Pose (or Transform: translation/rotation)."""
    p = getattr(pose, "position", None) or pose.translation
    q = getattr(pose, "orientation", None) or pose.rotation
    return usable_pose((p.x, p.y, p.z), (q.x, q.y, q.z, q.w))
