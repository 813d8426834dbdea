"""mocap4r2_control.geometry against scipy's rotations: the named up-axis changes and
which poses are usable (the quaternion algebra: test_rotation.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from mocap4r2_control.geometry import (
    UP_AXIS_CONVENTIONS,
    AxisChange,
    Transform,
    pose_is_usable,
    pose_msg_arrays,
    usable_pose,
)

RNG = np.random.default_rng(7)
Q = Rotation.random(64, random_state=3)
V = RNG.normal(size=(64, 3))


@pytest.mark.parametrize("up", sorted(UP_AXIS_CONVENTIONS))
def test_axis_change_is_a_proper_rotation_taking_the_up_axis_to_z(up):
    change = AxisChange(up)
    a = change.matrix()
    assert np.allclose(a @ a.T, np.eye(3)) and np.isclose(np.linalg.det(a), 1.0)
    axis = {"X": 0, "Y": 1, "Z": 2}[up[1]]
    up_vector = np.eye(3)[axis] * (1.0 if up[0] == "+" else -1.0)
    assert np.allclose(change.positions(up_vector), [0, 0, 1])
    assert np.allclose(change.positions(V), V @ a.T)
    # orientations are conjugated: the body's own axes are re-expressed too
    conjugated = Rotation.from_matrix(a) * Q * Rotation.from_matrix(a).inv()
    assert np.allclose(
        Rotation.from_quat(change.orientations(Q.as_quat())).as_matrix(), conjugated.as_matrix()
    )
    back = change.inverse()
    assert np.allclose(back.positions(change.positions(V)), V)
    assert np.allclose(back.orientations(change.orientations(Q.as_quat())), Q.as_quat())


def test_motive_y_up_is_plus_90_degrees_about_x():
    change = AxisChange("+Y")
    assert np.allclose(change.positions([1.0, 2.0, 3.0]), [1.0, -3.0, 2.0])
    # a body created level in Motive has the identity orientation in ROS
    assert np.allclose(change.orientations([0, 0, 0, 1.0]), [0, 0, 0, 1])
    assert change.positions(np.ones((2, 3), dtype=np.float32)).dtype == np.float64
    with pytest.raises(ValueError, match="unknown up axis"):
        AxisChange("up")


def test_usable_pose_refuses_non_finite_values_and_degenerate_quaternions():
    position, orientation = usable_pose([1, 2, 3], [0, 0, 0, 2.0])
    assert np.allclose(orientation, [0, 0, 0, 1]) and np.allclose(position, [1, 2, 3])
    assert usable_pose([np.nan, 0, 0], [0, 0, 0, 1]) is None
    assert usable_pose([0, 0, 0], [0, 0, np.inf, 1]) is None
    assert usable_pose([0, 0, 0], [0, 0, 0, 0]) is None  # what SDKs send for an untracked body
    assert pose_is_usable([0, 0, 0], [0, 0, 0, 1]) and not pose_is_usable([0, 0, 0], [0, 0, 0, 1e-9])


def test_pose_msg_arrays_reads_poses_and_transforms():
    from geometry_msgs.msg import Pose, Transform

    pose = Pose()
    pose.position.x, pose.orientation.w = 1.5, 1.0
    transform = Transform()
    transform.translation.y, transform.rotation.z, transform.rotation.w = 2.0, 1.0, 1.0
    assert np.allclose(pose_msg_arrays(pose)[0], [1.5, 0, 0])
    position, orientation = pose_msg_arrays(transform)
    assert np.allclose(position, [0, 2, 0]) and np.isclose(np.linalg.norm(orientation), 1.0)
    pose.orientation.w = 0.0
    assert pose_msg_arrays(pose) is None


def test_a_batch_of_transforms_composes_inverts_and_converts_row_by_row_like_matrices():
    """Transform on (n, 3)/(n, 4) arrays: each row does what its 4 x 4 matrix does, held
    to numpy's matrix products and inverse and to scipy's matrices."""
    a = Transform(V[:8], Q[:8].as_quat())
    b = Transform(V[8:16], Q[8:16].as_quat())
    ma, mb = a.matrix(), b.matrix()
    assert ma.shape == (8, 4, 4) and np.allclose(ma[:, 3], [0, 0, 0, 1])
    assert np.allclose(ma[:, :3, :3], Q[:8].as_matrix(), atol=1e-12)
    assert np.allclose((a * b).matrix(), ma @ mb, atol=1e-12)
    assert np.allclose(a.inverse().matrix(), np.linalg.inv(ma), atol=1e-12)
    assert np.allclose((a * a.inverse()).translation, 0.0, atol=1e-12)
    back = Transform.from_matrix(ma)
    assert np.allclose(back.matrix(), ma, atol=1e-12)
    # one transform against a batch broadcasts, as a matrix times a stack of matrices
    assert np.allclose((a.take(0) * b).matrix(), ma[0] @ mb, atol=1e-12)
    assert a.take(0).matrix().shape == (4, 4)
    rows = a.take([2, 5])
    assert np.array_equal(rows.translation, V[[2, 5]]) and np.array_equal(rows.rotation, Q[[2, 5]].as_quat())
    mask = np.zeros(8, dtype=bool)
    mask[3] = True
    assert np.array_equal(a.take(mask).translation, V[[3]])
