"""Proof against code we did not write: OpenCV's calibrateHandEye (all five methods) and
calibrateRobotWorldHandEye (both methods) agree with our closed-form start on the same
pairs, and with noise and outliers our refinement is closer to the truth than the best
of them."""

from __future__ import annotations

import numpy as np
import opencv_reference as cvref
import pytest
from calibration_cases import errors, exact_pairs

from mocap4r2_tools.calibration import CalibrationOptions, calibrate
from mocap4r2_tools.calibration.solve import closed_form_start
from mocap4r2_tools.calibration.streams import PairSet, make_pairs
from mocap4r2_tools.calibration.synthetic import Corruption, arm_scene, drone_scene, frame_to_frame_scene

# OpenCV's hand-eye methods use the motions between every two poses (n^2 / 2): 200 poses
# take ~10 s per method on a loaded machine, 60 about 1 s (the bench runs 200)
PAIRS = 60
SCENES = {"hand_eye": drone_scene, "robot_world": arm_scene, "frame_to_frame": frame_to_frame_scene}


@pytest.mark.parametrize("kind", list(SCENES))
def test_every_opencv_method_agrees_with_the_closed_form_on_exact_pairs(kind):
    a, b, x, _ = exact_pairs(kind)
    ours, _ = closed_form_start(kind, PairSet(np.zeros(len(a.translation)), a, b, 0.0))
    assert max(errors(ours, x)) < 1e-6
    for method, theirs in cvref.all_methods(kind, a, b).items():
        t_err, r_err = errors(theirs, ours)
        assert t_err < 1e-3 and r_err < 1e-4, (method, t_err, r_err)


@pytest.mark.parametrize("kind", list(SCENES))
def test_opencv_and_the_closed_form_agree_on_slightly_noisy_pairs(kind):
    """0.2 mm and 0.02 deg of noise, no outliers: all within 1 mm and 0.05 deg of each other
    (robot-world solvers also fit the X that frame to frame knows is the identity)."""
    scene = SCENES[kind](
        seconds=20.0,
        rate_a=50.0,
        rate_b=50.0,
        corruption=Corruption(noise_m=0.0002, noise_deg=0.02, outlier_share=0.0, delay=0.0, seed=2),
    )
    pairs = make_pairs(scene.a.trajectory, scene.b.trajectory, 0.0, 0.05, PAIRS)
    ours, _ = closed_form_start(kind, pairs)
    for method, theirs in cvref.all_methods(kind, pairs.a, pairs.b).items():
        t_err, r_err = errors(theirs, ours)
        assert t_err < 1.0 and r_err < 0.05, (method, t_err, r_err)


@pytest.mark.parametrize("kind", list(SCENES))
def test_with_noise_and_outliers_the_refinement_beats_every_opencv_method(kind):
    """1 mm / 0.2 deg noise and 5 % outliers (clocks in step, so OpenCV, which has no time
    offset, is given the same pairs as our start)."""
    scene = SCENES[kind](
        seconds=20.0, rate_a=100.0, rate_b=100.0, corruption=Corruption(delay=0.0, outlier_share=0.1, seed=6)
    )
    found = calibrate(
        scene.a, scene.b, CalibrationOptions(kind=kind, offset=0.0, max_pairs=PAIRS, bootstrap=50)
    )
    ours_t, ours_r = errors(found.x, scene.x)
    theirs = {m: errors(x, scene.x) for m, x in cvref.all_methods(kind, found.pairs.a, found.pairs.b).items()}
    best_t = min(t for t, _ in theirs.values())
    best_r = min(r for _, r in theirs.values())
    assert ours_t < best_t and ours_r < best_r, (ours_t, ours_r, theirs)
