"""The calibration core against known truth: the closed forms on exact pairs, the full
solve (noise, outliers, a time offset) within tolerance of the truth, its uncertainty
holding the truth, and bad input refused with what is missing."""

from __future__ import annotations

import numpy as np
import pytest
from calibration_cases import errors, exact_pairs

from mocap4r2_control.geometry import Transform
from mocap4r2_control.rotation import quat_exp, quat_multiply
from mocap4r2_tools.calibration import (
    CalibrationError,
    CalibrationOptions,
    calibrate,
    clean_stream,
    closed_form,
)
from mocap4r2_tools.calibration.synthetic import (
    Corruption,
    arm_scene,
    drone_body,
    drone_scene,
    frame_to_frame_scene,
)
from mocap4r2_tools.calibration.tangent import difference, perturbed

EXACT = Corruption(noise_m=0.0, noise_deg=0.0, outlier_share=0.0, delay=0.0)


def test_tangent_difference_undoes_perturbed_and_is_zero_on_equal_transforms():
    rng = np.random.default_rng(1)
    p = Transform(rng.normal(size=(5, 3)), quat_exp(rng.normal(size=(5, 3))))
    delta = rng.normal(scale=0.1, size=(5, 6))
    assert np.allclose(difference(p, perturbed(p, delta)), delta, atol=1e-12)
    assert np.allclose(difference(p, p), 0.0, atol=1e-15)
    # a batch of steps about one transform gives one transform per step
    one = p.take(0)
    moved = perturbed(one, delta)
    assert moved.translation.shape == (5, 3) and moved.rotation.shape == (5, 4)
    assert np.allclose(difference(one, moved), delta, atol=1e-12)


def test_closed_forms_are_exact_on_exact_pairs():
    a, b, x, y = exact_pairs("hand_eye")
    i, j = closed_form.motion_pairs(len(a.translation))
    hand_eye = closed_form.hand_eye(
        closed_form.relative_motions(a, i, j), closed_form.relative_motions(b, i, j)
    )
    assert max(errors(hand_eye, x)) < 1e-6
    a, b, x, y = exact_pairs("robot_world")
    found_x, found_y = closed_form.robot_world(a, b)
    assert max(errors(found_x, x)) < 1e-6 and max(errors(found_y, y)) < 1e-6
    a, b, x, _ = exact_pairs("frame_to_frame")
    assert max(errors(closed_form.frame_to_frame(a, b), x)) < 1e-6


@pytest.mark.parametrize(
    ("kind", "scene_fn", "mm", "deg"),
    [
        ("hand_eye", drone_scene, 1.2, 0.06),
        ("robot_world", arm_scene, 1.2, 0.08),
        ("frame_to_frame", frame_to_frame_scene, 0.6, 0.03),
    ],
)
def test_noisy_pairs_with_outliers_and_a_time_offset_give_the_truth(kind, scene_fn, mm, deg):
    """1 mm / 0.2 deg noise, 5 % outliers, B 40 ms late, 200 pairs: the transform within
    the tolerance, the offset within 2 ms, and the truth within 4 reported sigmas."""
    scene = scene_fn(seconds=20.0, rate_a=100.0, rate_b=100.0, corruption=Corruption(seed=3))
    found = calibrate(scene.a, scene.b, CalibrationOptions(kind=kind, max_pairs=200))
    t_err, r_err = errors(found.x, scene.x)
    assert t_err < mm and r_err < deg, (t_err, r_err)
    assert abs(found.offset - scene.offset) < 0.002, found.offset
    if kind == "robot_world":
        assert found.y is not None and max(errors(found.y, scene.y)) < 3.0
    # the start is worse or no better than the refinement against the truth
    start_t, _ = errors(found.start_x, scene.x)
    assert t_err < start_t + 0.2
    d = difference(found.x, scene.x)  # rotation vector in X's axes (small), translation
    sigma = found.refined.sigma[:6]
    assert np.all(np.abs(d) < 4.0 * sigma + 1e-9), (d, sigma)
    assert 0.8 <= found.refined.coverage <= 1.0
    assert found.outliers >= 3  # the outliers among the 200 pairs were seen


def test_nan_and_untracked_poses_are_left_out_and_counted():
    scene = frame_to_frame_scene(
        seconds=10.0, rate_a=50.0, rate_b=50.0, corruption=Corruption(nan_rows=7, seed=5)
    )
    assert scene.b.dropped == 7 and scene.b.total == 500
    tracked = np.ones(len(scene.a.trajectory), dtype=bool)
    tracked[10:19] = False
    ta = scene.a.trajectory
    a = clean_stream(ta.stamps, ta.positions, ta.orientations, "system1", tracked=tracked)
    q = ta.orientations.copy()
    q[30] = 0.0  # a zero quaternion is no rotation
    a2 = clean_stream(ta.stamps, ta.positions, q, "system1")
    assert (a.dropped, a2.dropped) == (9, 1)
    found = calibrate(a, scene.b, CalibrationOptions(kind="frame_to_frame", max_pairs=200))
    assert (found.dropped_a, found.dropped_b) == (9, 7)
    assert any("9 of 500 poses of A, 7 of 500 of B" in note for note in found.notes), found.notes
    assert max(errors(found.x, scene.x)) < 1.0


def _stream(poses: Transform, times, name):
    return clean_stream(times, poses.translation, poses.rotation, name)


def test_pure_translation_is_refused_with_the_motion_to_add():
    times = np.arange(0.0, 20.0, 0.01, dtype=np.float64)
    body = drone_body(times)
    still = Transform(body.translation, np.tile([0.0, 0.0, 0.0, 1.0], (len(times), 1)))
    cam = still * Transform(np.array([0.1, 0.0, 0.0]), np.array([0.0, 0.0, 0.0, 1.0]))
    with pytest.raises(CalibrationError) as info:
        calibrate(
            _stream(still, times, "body"), _stream(cam, times, "camera"), CalibrationOptions(offset=0.0)
        )
    message = str(info.value)
    assert "too little rotation in body" in message and "moves" in message
    assert "about two perpendicular axes" in message


def test_rotation_about_one_axis_is_refused_naming_the_axis():
    times = np.arange(0.0, 20.0, 0.01, dtype=np.float64)
    body = drone_body(times)
    yaw_only = Transform(body.translation, quat_exp(np.outer(np.sin(times), [0.0, 0.0, 1.0])))
    cam = yaw_only * Transform(np.array([0.1, 0.0, 0.05]), quat_exp(np.array([0.3, 0.0, 0.0])))
    with pytest.raises(CalibrationError) as info:
        calibrate(
            _stream(yaw_only, times, "body"),
            _stream(cam, times, "camera"),
            CalibrationOptions(kind="robot_world", offset=0.0),
        )
    message = str(info.value)
    assert "rotation about one axis only in body" in message
    assert "about its z axis" in message and "perpendicular to z" in message


def test_too_few_pairs_and_streams_apart_in_time_are_refused():
    scene = drone_scene(seconds=20.0, rate_a=100.0, rate_b=100.0, corruption=EXACT)
    few = scene.b.trajectory
    b = clean_stream(few.stamps[:6], few.positions[:6], few.orientations[:6], "camera")
    with pytest.raises(CalibrationError, match="6 pose pairs: hand_eye needs at least 10"):
        calibrate(scene.a, b, CalibrationOptions(offset=0.0))
    late = clean_stream(few.stamps + 100.0, few.positions, few.orientations, "camera")
    with pytest.raises(CalibrationError, match="do not overlap in time") as info:
        calibrate(scene.a, late)
    assert "camera [100.005, 119.995] s" in str(info.value)
    with pytest.raises(CalibrationError, match="do not overlap in time"):
        calibrate(scene.a, late, CalibrationOptions(offset=0.0))


def test_unusable_stream_and_bad_options_are_refused():
    nan = np.full((4, 3), np.nan)
    with pytest.raises(CalibrationError, match="none of its 4 poses is usable"):
        clean_stream(np.arange(4.0), nan, np.tile([0, 0, 0, 1.0], (4, 1)), "camera")
    scene = frame_to_frame_scene(seconds=5.0, rate_a=20.0, rate_b=20.0, corruption=EXACT)
    for options, match in (
        (CalibrationOptions(kind="eye_in_hand"), "unknown problem"),
        (CalibrationOptions(offset=float("nan")), "finite"),
        (CalibrationOptions(offset_window=0.0), "positive"),
        (CalibrationOptions(loss="l3"), "unknown loss"),
    ):
        with pytest.raises(CalibrationError, match=match):
            calibrate(scene.a, scene.b, options)


def test_a_fixed_offset_is_kept_when_not_estimated():
    scene = frame_to_frame_scene(seconds=10.0, rate_a=100.0, rate_b=100.0, corruption=Corruption(seed=8))
    found = calibrate(
        scene.a, scene.b, CalibrationOptions(kind="frame_to_frame", offset=0.04, estimate_offset=False)
    )
    assert found.offset == 0.04 and found.offset_found_by == "given"
    assert "offset" not in found.refined.names
    q = quat_multiply(found.x.rotation, [0, 0, 0, 1.0])
    assert np.isclose(np.linalg.norm(q), 1.0)
