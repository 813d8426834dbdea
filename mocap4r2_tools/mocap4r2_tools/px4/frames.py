"""ROS (ENU world, FLU body) to PX4 (NED world, FRD body): the one conversion.

ROS (REP 103) gives a pose of the body frame FLU (x forward, y left, z up) in a world
frame ENU (x east, y north, z up). PX4 and MAVLink want the body frame FRD (x forward,
y right, z down) in a local frame NED (x north, y east, z down). With

    A = R_ned_enu = [[0, 1, 0], [1, 0, 0], [0, 0, -1]]   (swap x/y, flip z)
    B = R_flu_frd = diag(1, -1, -1)                      (flip y and z)

a position maps as p_ned = A p_enu and an orientation as

    R_ned_frd = A R_enu_flu B.

Both A and B are their own inverses, so the same formula maps back. The mocap world's
"east" is whatever its x axis is: PX4 only needs a right-handed, Z-down local frame
(MAV_FRAME_LOCAL_FRD), so a mocap x axis not pointing east is fine; heading then is
relative to the mocap x axis rotated to "north" (the mocap y axis).

Quaternions here are x, y, z, w (ROS/scipy order); MAVLink wants w, x, y, z, which
:func:`wxyz` gives.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mocap4r2_control.rotation import (
    FloatArray,
    quat_from_matrix,
    quat_normalize,
    quat_to_euler_zyx_one,
    quat_to_matrix,
)

A_NED_ENU = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
B_FLU_FRD = np.diag([1.0, -1.0, -1.0])


def enu_flu_to_ned_frd(position: npt.ArrayLike, quat_xyzw: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """(position NED, quaternion x, y, z, w of FRD in NED) of a FLU pose in ENU."""
    p: FloatArray = A_NED_ENU @ np.asarray(position, dtype=np.float64)
    r = quat_to_matrix(quat_normalize(quat_xyzw))
    q = quat_from_matrix(A_NED_ENU @ r @ B_FLU_FRD)
    return p, _canonical(q)


def ned_frd_to_enu_flu(position: npt.ArrayLike, quat_xyzw: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The inverse conversion (the same formula: A and B are involutions)."""
    return enu_flu_to_ned_frd(position, quat_xyzw)


def flu_to_frd(vector: npt.ArrayLike) -> FloatArray:
    """A body-frame vector (linear or angular velocity) from FLU to FRD axes."""
    frd: FloatArray = B_FLU_FRD @ np.asarray(vector, dtype=np.float64)
    return frd


def quat_to_euler_frd(quat_xyzw: npt.ArrayLike) -> tuple[float, float, float]:
    """(roll, pitch, yaw) in rad of an FRD-in-NED quaternion, the aerospace Z-Y-X
    convention MAVLink's VISION_POSITION_ESTIMATE uses (yaw 0 = north, +pi/2 = east)."""
    # scipy's as_euler("ZYX") convention, gimbal lock included (yaw carries it)
    yaw, pitch, roll = quat_to_euler_zyx_one([float(v) for v in np.asarray(quat_xyzw, dtype=np.float64)])
    return roll, pitch, yaw


def wxyz(quat_xyzw: npt.ArrayLike) -> list[float]:
    """The quaternion in MAVLink's order w, x, y, z."""
    x, y, z, w = (float(v) for v in np.asarray(quat_xyzw, dtype=np.float64))
    return [w, x, y, z]


def _canonical(q: FloatArray) -> FloatArray:
    """W >= 0: one of the two equal quaternions, so outputs compare exactly."""
    return -q if q[3] < 0 else q
