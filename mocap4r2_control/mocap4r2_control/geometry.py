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
        ((1, {"00": 1, "11": -1, "22": -1}), (0, {"01": 1, "10": 1}), (0, {"02": 1, "20": 1}), (0, {"21": 1, "12": -1})),
        ((0, {"01": 1, "10": 1}), (1, {"00": -1, "11": 1, "22": -1}), (0, {"12": 1, "21": 1}), (0, {"02": 1, "20": -1})),
        ((0, {"02": 1, "20": 1}), (0, {"12": 1, "21": 1}), (1, {"00": -1, "11": -1, "22": 1}), (0, {"10": 1, "01": -1})),
        ((0, {"21": 1, "12": -1}), (0, {"02": 1, "20": -1}), (0, {"10": 1, "01": -1}), (1, {"00": 1, "11": 1, "22": 1})),
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


# Motive streams Y-up by default (X right, Y up, Z toward the viewer); ROS (REP-103) is
# Z-up. Y-up to Z-up is +90 degrees about X: (x, y, z) -> (x, -z, y). Body orientations
# are conjugated by that rotation (q' = c q c^-1), not just rotated (c q): the body's own
# axes are re-expressed in the Z-up convention too, so a body created level in Motive has
# the identity orientation in ROS. A conjugation rotates only the quaternion's vector
# part, so every conversion below is one gather with signs (float32 in, float64 out).
_SWAP_YZ = [0, 2, 1]
_SWAP_YZ_Q = [0, 2, 1, 3]


def y_up_to_z_up_positions(p: np.ndarray) -> np.ndarray:
    """Positions (..., 3) from a Y-up frame to the Z-up frame."""
    return np.asarray(p)[..., _SWAP_YZ] * np.array([1.0, -1.0, 1.0])


def y_up_to_z_up_orientations(q: np.ndarray) -> np.ndarray:
    """Body orientations (..., 4) from a Y-up frame to the Z-up frame."""
    return np.asarray(q)[..., _SWAP_YZ_Q] * np.array([1.0, -1.0, 1.0, 1.0])


def z_up_to_y_up_positions(p: np.ndarray) -> np.ndarray:
    """Positions (..., 3) from the Z-up frame to a Y-up frame (the inverse)."""
    return np.asarray(p)[..., _SWAP_YZ] * np.array([1.0, 1.0, -1.0])


def z_up_to_y_up_orientations(q: np.ndarray) -> np.ndarray:
    """Body orientations (..., 4) from the Z-up frame to a Y-up frame (the inverse)."""
    return np.asarray(q)[..., _SWAP_YZ_Q] * np.array([1.0, 1.0, -1.0, 1.0])


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
