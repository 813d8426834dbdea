"""mocap4r2_control.rotation against scipy's rotations: products, rotations, matrices both
ways, exp/log and slerp; the single-sample functions against the vectorised ones; and
the memory layout the trajectory metrics rely on."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation, Slerp

from mocap4r2_control.rotation import (
    norm3,
    quat_angle,
    quat_angle_one,
    quat_conjugate,
    quat_conjugate_one,
    quat_exp,
    quat_exp_one,
    quat_from_axis_angle,
    quat_from_matrix,
    quat_from_rpy_one,
    quat_from_yaw,
    quat_log,
    quat_log_one,
    quat_multiply,
    quat_multiply_one,
    quat_normalize,
    quat_relative,
    quat_relative_one,
    quat_rotate,
    quat_rotate_inverse,
    quat_rotate_inverse_one,
    quat_rotate_one,
    quat_slerp,
    quat_slerp_one,
    quat_to_euler_zyx_one,
    quat_to_matrix,
    quat_to_rpy_one,
)

RNG = np.random.default_rng(7)
Q = Rotation.random(64, random_state=3)
V = RNG.normal(size=(64, 3))

# a rotation vector with angle below pi (log returns angles in [0, pi])
rotvecs = st.tuples(
    st.floats(-1.0, 1.0), st.floats(-1.0, 1.0), st.floats(-1.0, 1.0), st.floats(0.0, math.pi - 1e-6)
).filter(lambda v: math.hypot(v[0], v[1], v[2]) > 1e-3)


def as_rotvec(v: tuple[float, float, float, float]) -> np.ndarray:
    axis = np.array(v[:3])
    return axis / np.linalg.norm(axis) * v[3]


def same_rotation(a: np.ndarray, b: np.ndarray) -> float:
    """Largest component difference of two quaternion arrays, up to the sign of each."""
    return float(np.minimum(np.abs(a - b).max(axis=-1), np.abs(a + b).max(axis=-1)).max())


def test_products_and_rotations_equal_scipys():
    a, b = Q.as_quat(), Q[::-1].as_quat()
    product = quat_multiply(a, b)
    assert np.allclose(Rotation.from_quat(product).as_matrix(), (Q * Q[::-1]).as_matrix(), atol=1e-12)
    assert np.allclose(quat_rotate(a, V), Q.apply(V), atol=1e-12)
    assert np.allclose(quat_rotate_inverse(a, V), Q.inv().apply(V), atol=1e-12)
    assert np.array_equal(quat_conjugate(a), a * [-1.0, -1.0, -1.0, 1.0])
    assert same_rotation(quat_conjugate(a), Q.inv().as_quat()) < 1e-15


def test_matrix_to_quaternion_equals_scipy_up_to_sign_for_every_branch():
    # rotations near 180 degrees about each axis exercise every branch of Shepperd's method
    extra = Rotation.from_rotvec(np.diag([np.pi - 1e-9] * 3))
    rotations = Rotation.concatenate([Q, extra, Rotation.identity()])
    ours = quat_from_matrix(rotations.as_matrix())
    ref = rotations.as_quat()
    same = np.minimum(np.abs(ours - ref).max(axis=1), np.abs(ours + ref).max(axis=1))
    assert same.max() < 1e-9


def test_quaternion_to_matrix_equals_scipy_and_round_trips():
    assert np.allclose(quat_to_matrix(Q.as_quat()), Q.as_matrix(), atol=1e-14)
    assert quat_to_matrix(Q.as_quat()[:8].reshape(2, 4, 4)).shape == (2, 4, 3, 3)
    assert same_rotation(quat_from_matrix(quat_to_matrix(Q.as_quat())), Q.as_quat()) < 1e-12


def test_yaw_and_axis_angle_constructors():
    assert np.allclose(quat_from_yaw(np.pi / 2), Rotation.from_euler("z", 90, degrees=True).as_quat())
    assert np.allclose(quat_from_axis_angle([0, 2.0, 0], 0.3), Rotation.from_rotvec([0, 0.3, 0]).as_quat())


def test_normalize_gives_unit_rows():
    q = Q.as_quat() * RNG.uniform(0.1, 10.0, (64, 1))
    assert np.allclose(np.linalg.norm(quat_normalize(q), axis=1), 1.0, atol=1e-15)
    assert np.allclose(quat_normalize(q), Q.as_quat(), atol=1e-15)


def test_exp_and_log_equal_scipys_rotation_vectors():
    rotvec = Q.as_rotvec()
    assert same_rotation(quat_exp(rotvec), Q.as_quat()) < 1e-14
    assert np.allclose(quat_log(Q.as_quat()), rotvec, atol=1e-12)
    # the sign of a quaternion changes nothing: q and -q are one rotation
    assert np.allclose(quat_log(-Q.as_quat()), rotvec, atol=1e-12)
    assert np.allclose(quat_angle(-Q.as_quat()), Q.magnitude(), atol=1e-12)


def test_exp_and_log_near_zero_use_the_series_and_stay_finite():
    tiny = np.array([[0.0, 0.0, 0.0], [1e-14, -2e-14, 0.0], [1e-7, 0.0, 0.0]])
    q = quat_exp(tiny)
    assert np.isfinite(q).all()
    assert np.array_equal(q[0], [0.0, 0.0, 0.0, 1.0])
    assert np.allclose(quat_log(q), tiny, atol=1e-20, rtol=1e-12)
    assert quat_angle(q)[0] == 0.0


@settings(max_examples=200, deadline=None)
@given(rotvecs)
# found by hypothesis in a CI run: numpy's arctan2 and the C library's atan2 (math.atan2)
# gave results one ulp apart (0.10234139476844605 / ...606), so quat_log and quat_log_one did
@example((0.0, 0.0, 1.0, 0.20468278953689212))
def test_exp_log_round_trip(v):
    rotvec = as_rotvec(v)
    assert np.allclose(quat_log(quat_exp(rotvec)), rotvec, atol=1e-12)
    assert quat_angle(quat_exp(rotvec)) == pytest.approx(v[3], abs=1e-12)
    # the single-sample functions compute the same numbers, to a few ulp: they call the C
    # library's sin, cos and atan2 (math), the vectorised ones numpy's, which may differ in
    # the last bit (the log of an exp carries both differences)
    np.testing.assert_array_max_ulp(quat_exp(rotvec), np.array(quat_exp_one(rotvec)), maxulp=2)
    np.testing.assert_array_max_ulp(
        quat_log(quat_exp(rotvec)), np.array(quat_log_one(quat_exp_one(rotvec))), maxulp=4
    )


@settings(max_examples=100, deadline=None)
@given(rotvecs, rotvecs, st.floats(0.0, 1.0))
def test_slerp_equals_scipys_and_its_single_form(a, b, fraction):
    q0, q1 = Rotation.from_rotvec(as_rotvec(a)), Rotation.from_rotvec(as_rotvec(b))
    ours = quat_slerp(q0.as_quat(), q1.as_quat(), fraction)
    ref = Slerp([0.0, 1.0], Rotation.concatenate([q0, q1]))([fraction]).as_quat()[0]
    assert same_rotation(ours, ref) < 1e-9
    assert np.allclose(quat_slerp_one(q0.as_quat(), q1.as_quat(), fraction), ours, atol=1e-15)


def test_slerp_takes_the_shorter_way_and_broadcasts_fractions():
    q0 = Rotation.from_euler("z", 10, degrees=True).as_quat()
    q1 = -Rotation.from_euler("z", 30, degrees=True).as_quat()  # the same rotation, other sign
    half = quat_slerp(q0, q1, np.array([0.0, 0.5, 1.0]))
    assert half.shape == (3, 4)
    assert np.allclose(np.degrees(quat_log(half)[:, 2]), [10.0, 20.0, 30.0])
    assert same_rotation(half[2], q1) < 1e-15


def test_single_sample_functions_equal_the_vectorised_ones():
    a, b = Q.as_quat(), Q[::-1].as_quat()
    for k in range(a.shape[0]):
        qa, qb, v = a[k].tolist(), b[k].tolist(), V[k].tolist()
        assert quat_multiply_one(qa, qb) == tuple(quat_multiply(a[k], b[k]))
        assert quat_conjugate_one(qa) == tuple(quat_conjugate(a[k]))
        assert quat_rotate_one(qa, v) == tuple(quat_rotate(a[k], V[k]))
        assert quat_rotate_inverse_one(qa, v) == tuple(quat_rotate_inverse(a[k], V[k]))
        assert quat_relative_one(qa, qb) == pytest.approx(tuple(quat_relative(a[k], b[k])), abs=1e-15)
        assert quat_angle_one(qa) == pytest.approx(float(quat_angle(a[k])), abs=1e-15)


def test_transposed_component_rows_give_the_same_bits_in_their_own_layout():
    # the trajectory metrics pass (m, 4) views of (4, m) arrays: the results must be
    # the same numbers, laid out as component rows
    a = np.ascontiguousarray(Q.as_quat().T)
    b = np.ascontiguousarray(Q[::-1].as_quat().T)
    v = np.ascontiguousarray(V.T)
    product = quat_multiply(a.T, b.T)
    assert product.T.flags.c_contiguous
    assert np.array_equal(product, quat_multiply(Q.as_quat(), Q[::-1].as_quat()))
    rotated = quat_rotate(a.T, v.T)
    assert rotated.T.flags.c_contiguous
    assert np.array_equal(rotated, quat_rotate(Q.as_quat(), V))
    assert np.array_equal(quat_angle(a.T), quat_angle(Q.as_quat()))


def test_broadcasting_one_quaternion_against_many():
    q = Q.as_quat()[0]
    assert np.allclose(quat_rotate(q, V), Q[0].apply(V), atol=1e-12)
    assert same_rotation(quat_multiply(q, Q.as_quat()), (Q[0] * Q).as_quat()) < 1e-12


def test_norm3_equals_einsum_to_the_bit_in_both_layouts():
    v = RNG.normal(size=(1001, 3)) * 1e3
    reference = np.sqrt(np.einsum("ij,ij->i", v, v))
    assert np.array_equal(norm3(v), reference)
    assert np.array_equal(norm3(np.ascontiguousarray(v.T).T), reference)
    assert np.allclose(norm3(v), np.linalg.norm(v, axis=1), rtol=1e-15)


def test_rpy_equals_scipys_fixed_axis_xyz_euler_angles():
    """URDF's rpy (fixed X, Y, Z) is scipy's extrinsic "xyz"; away from pitch +-90 deg
    the angles agree, and the angles rebuild the rotation everywhere."""
    for q in Q.as_quat():
        rpy = np.array(quat_to_rpy_one(q))
        rebuilt = Rotation.from_euler("xyz", rpy).as_quat()
        assert same_rotation(rebuilt[None], q[None]) < 1e-12
        assert np.allclose(rpy, Rotation.from_quat(q).as_euler("xyz"), atol=1e-9)
    gimbal = Rotation.from_euler("xyz", [0.3, math.pi / 2, -0.2]).as_quat()
    rpy = quat_to_rpy_one(gimbal)
    assert abs(rpy[1] - math.pi / 2) < 1e-6
    assert same_rotation(Rotation.from_euler("xyz", rpy).as_quat()[None], gimbal[None]) < 1e-7


def test_zyx_euler_angles_are_scipys_also_at_gimbal_lock():
    """The aerospace Z-Y-X angles (MAVLink's) equal scipy's as_euler("ZYX") to float
    rounding, for quaternions of any length, and at pitch +-90 deg scipy's split too
    (roll 0, yaw carries the shared freedom)."""
    rng = np.random.default_rng(11)
    import warnings

    quats = rng.normal(size=(2000, 4)) * rng.uniform(0.5, 2.0, (2000, 1))
    for q in quats:
        got = np.array(quat_to_euler_zyx_one(q))
        assert np.abs(got - Rotation.from_quat(q).as_euler("ZYX")).max() < 1e-13
    for pitch in (math.pi / 2, -math.pi / 2):
        for yaw, roll in ((0.3, 0.0), (2.5, -1.0), (-3.0, 0.4)):
            q = Rotation.from_euler("ZYX", [yaw, pitch, roll]).as_quat()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # scipy warns of the gimbal lock
                expected = Rotation.from_quat(q).as_euler("ZYX")
            assert np.abs(np.array(quat_to_euler_zyx_one(q)) - expected).max() < 1e-12


def test_rpy_to_quaternion_is_scipys_fixed_axis_xyz():
    rng = np.random.default_rng(12)
    for rpy in rng.uniform(-4.0, 4.0, (500, 3)):
        q = np.array(quat_from_rpy_one(*rpy))
        assert same_rotation(q[None], Rotation.from_euler("xyz", rpy).as_quat()[None]) < 1e-15
        assert np.allclose(quat_to_rpy_one(q), Rotation.from_quat(q).as_euler("xyz"), atol=1e-9)
