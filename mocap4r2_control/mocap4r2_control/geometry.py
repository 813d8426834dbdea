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


def quat_from_matrix(m: np.ndarray) -> np.ndarray:
    """Unit quaternions (x, y, z, w) from rotation matrices (..., 3, 3), numerically safe
    for every rotation (Shepperd's method, branch chosen per matrix)."""
    m = np.asarray(m, dtype=float)
    shape = m.shape[:-2]
    m = m.reshape(-1, 3, 3)
    tr = np.trace(m, axis1=1, axis2=2)
    diag = np.diagonal(m, axis1=1, axis2=2)
    choice = np.argmax(np.concatenate((diag, tr[:, None]), axis=1), axis=1)
    q = np.empty((m.shape[0], 4))
    for i in range(m.shape[0]):
        r = m[i]
        c = choice[i]
        if c == 3:
            s = 2.0 * np.sqrt(max(1.0 + tr[i], 1e-300))
            q[i] = ((r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, 0.25 * s)
        else:
            j, k = (c + 1) % 3, (c + 2) % 3
            s = 2.0 * np.sqrt(max(1.0 + r[c, c] - r[j, j] - r[k, k], 1e-300))
            v = np.empty(4)
            v[c] = 0.25 * s
            v[j] = (r[j, c] + r[c, j]) / s
            v[k] = (r[k, c] + r[c, k]) / s
            v[3] = (r[k, j] - r[j, k]) / s
            q[i] = v
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q.reshape(shape + (4,))


# Motive streams Y-up by default (X right, Y up, Z toward the viewer); ROS (REP-103) is
# Z-up. The rotation that takes Y-up coordinates to Z-up is +90 degrees about X:
# (x, y, z)_yup -> (x, -z, y)_zup.
_Y_UP_TO_Z_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
_Q_Y_UP_TO_Z_UP = np.array([np.sin(np.pi / 4), 0.0, 0.0, np.cos(np.pi / 4)])


def y_up_to_z_up_positions(p: np.ndarray) -> np.ndarray:
    """Positions (..., 3) from a Y-up frame to the Z-up frame."""
    p = np.asarray(p, dtype=float)
    out = np.empty_like(p)
    out[..., 0] = p[..., 0]
    out[..., 1] = -p[..., 2]
    out[..., 2] = p[..., 1]
    return out


def y_up_to_z_up_orientations(q: np.ndarray) -> np.ndarray:
    """Body orientations (..., 4) from a Y-up frame to the Z-up frame.

    Conjugation (q' = c q c^-1), not just c q: the body's own axes are re-expressed in
    the Z-up convention too, so a body created level in Motive has the identity
    orientation in ROS, and body-frame marker offsets convert with the same c."""
    q = np.asarray(q, dtype=float)
    r = np.broadcast_to(_Q_Y_UP_TO_Z_UP, q.shape)
    r_inv = r * np.array([-1.0, -1.0, -1.0, 1.0])
    return quat_multiply(quat_multiply(r, q), r_inv)


def z_up_to_y_up_positions(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    out = np.empty_like(p)
    out[..., 0] = p[..., 0]
    out[..., 1] = p[..., 2]
    out[..., 2] = -p[..., 1]
    return out


def z_up_to_y_up_orientations(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=float)
    r = np.broadcast_to(_Q_Y_UP_TO_Z_UP, q.shape)
    r_inv = r * np.array([-1.0, -1.0, -1.0, 1.0])
    return quat_multiply(quat_multiply(r_inv, q), r)
