"""OpenCV's hand-eye and robot-world solvers on our pose pairs: the reference the
calibration is checked against (tests here, ``python -m bench calibration``).

OpenCV's conventions (calib3d docs, calibrateHandEye / calibrateRobotWorldHandEye):

* calibrateHandEye(R_gripper2base, t_gripper2base, R_target2cam, t_target2cam) returns
  cam2gripper. With our A_i = the body (gripper) in its fixed frame (base) and B_i = the
  camera in the target's frame, gripper2base = A_i, target2cam = B_i^-1, and cam2gripper
  is our X.
* calibrateRobotWorldHandEye(R_world2cam, t_world2cam, R_base2gripper, t_base2gripper)
  solves cTw wTb = cTg gTb and returns (base2world, gripper2cam). Our A_i X = Y B_i
  inverted is B_i^-1 Y^-1 = X^-1 A_i^-1, so world2cam = B_i^-1, base2gripper = A_i^-1, and
  it returns Y^-1 and X^-1. For frame to frame (A_i = X B_i: X = I there, Y = our X) the
  same call gives our X as its Y.
"""

from __future__ import annotations

import cv2
import numpy as np

from mocap4r2_control.geometry import Transform

HAND_EYE_METHODS = {
    "tsai": cv2.CALIB_HAND_EYE_TSAI,
    "park": cv2.CALIB_HAND_EYE_PARK,
    "horaud": cv2.CALIB_HAND_EYE_HORAUD,
    "andreff": cv2.CALIB_HAND_EYE_ANDREFF,
    "daniilidis": cv2.CALIB_HAND_EYE_DANIILIDIS,
}
ROBOT_WORLD_METHODS = {"shah": cv2.CALIB_ROBOT_WORLD_HAND_EYE_SHAH, "li": cv2.CALIB_ROBOT_WORLD_HAND_EYE_LI}


def _split(p: Transform) -> tuple[list[np.ndarray], list[np.ndarray]]:
    m = p.matrix()
    return [r for r in m[:, :3, :3]], [t.reshape(3, 1) for t in m[:, :3, 3]]


def _pose(r: np.ndarray, t: np.ndarray) -> Transform:
    m = np.eye(4)
    m[:3, :3] = r
    m[:3, 3] = np.asarray(t).reshape(3)
    return Transform.from_matrix(m)


def hand_eye(a: Transform, b: Transform, method: str) -> Transform:
    """X of A X = X B by OpenCV's ``method`` (absolute poses A_i, B_i)."""
    r_g, t_g = _split(a)
    r_t, t_t = _split(b.inverse())
    r, t = cv2.calibrateHandEye(r_g, t_g, r_t, t_t, method=HAND_EYE_METHODS[method])
    return _pose(r, t)


def robot_world(a: Transform, b: Transform, method: str) -> tuple[Transform, Transform]:
    """(X, Y) of A X = Y B by OpenCV's ``method``."""
    r_w, t_w = _split(b.inverse())
    r_b, t_b = _split(a.inverse())
    r_bw, t_bw, r_gc, t_gc = cv2.calibrateRobotWorldHandEye(
        r_w, t_w, r_b, t_b, method=ROBOT_WORLD_METHODS[method]
    )
    return _pose(r_gc, t_gc).inverse(), _pose(r_bw, t_bw).inverse()


def all_methods(kind: str, a: Transform, b: Transform) -> dict[str, Transform]:
    """Every OpenCV method's X of ``kind`` (for frame_to_frame: robot-world's Y)."""
    if kind == "hand_eye":
        return {name: hand_eye(a, b, name) for name in HAND_EYE_METHODS}
    if kind == "robot_world":
        return {name: robot_world(a, b, name)[0] for name in ROBOT_WORLD_METHODS}
    return {name: robot_world(a, b, name)[1] for name in ROBOT_WORLD_METHODS}
