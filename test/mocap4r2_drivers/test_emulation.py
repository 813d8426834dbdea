"""The marker emulation shared by the simulated scene and the Gazebo emulator."""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_control.rotation import quat_rotate
from mocap4r2_drivers.emulation import observe_markers

LAYOUT = np.array([[0.1, 0, 0], [-0.08, 0.06, 0], [-0.05, -0.09, 0.01], [0, 0.02, 0.07]] * 2)
BODY = np.repeat([0, 1], 4)
POSITIONS = np.array([[1.0, 2.0, 0.5], [-1.0, 0.0, 1.5]])
ORIENTATIONS = np.array([[0, 0, 0.6, 0.8], [0, 0, 0, 1.0]])


def observe(seed, noise=0.001, occlusion=0.0, hidden=(False, False)):
    return observe_markers(
        np.random.default_rng([seed, 7]),
        LAYOUT,
        marker_body=BODY,
        positions=POSITIONS,
        orientations=ORIENTATIONS,
        noise=noise,
        occlusion=occlusion,
        hidden=np.asarray(hidden),
    )


def test_markers_are_the_layout_in_the_world_plus_the_reported_noise():
    seen = observe(1)
    truth = quat_rotate(ORIENTATIONS[BODY], LAYOUT) + POSITIONS[BODY]
    np.testing.assert_allclose(seen.positions - truth, seen.noise, atol=1e-12)
    np.testing.assert_allclose(seen.residuals, np.linalg.norm(seen.noise, axis=1), rtol=1e-6)
    np.testing.assert_allclose(
        seen.mean_errors, [seen.residuals[:4].mean(), seen.residuals[4:].mean()], rtol=1e-6
    )
    assert seen.valid.tolist() == [True, True] and seen.visible.tolist() == [4, 4]


def test_the_same_generator_gives_the_same_observation():
    a, b, c = observe(3, occlusion=0.4), observe(3, occlusion=0.4), observe(4, occlusion=0.4)
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.occluded, b.occluded)
    assert not np.array_equal(a.noise, c.noise)


def test_three_seen_markers_make_a_tracked_body():
    counts = {}
    for seed in range(400):
        seen = observe(seed, occlusion=0.3)
        assert np.isnan(seen.positions[seen.occluded]).all() and (seen.residuals[seen.occluded] == -1).all()
        np.testing.assert_array_equal(seen.valid, seen.visible >= 3)
        np.testing.assert_array_equal(seen.visible, [np.sum(~seen.occluded[:4]), np.sum(~seen.occluded[4:])])
        for body in range(2):
            if seen.visible[body] == 0:
                assert seen.mean_errors[body] == -1.0
        counts[tuple(seen.valid)] = counts.get(tuple(seen.valid), 0) + 1
    assert counts.get((False, False), 0) > 0 and counts[(True, True)] > 100
    occluded = np.mean([observe(s, occlusion=0.3).occluded.mean() for s in range(400)])
    assert occluded == pytest.approx(0.3, abs=0.03)


def test_a_hidden_body_is_not_seen_and_not_tracked():
    seen = observe(5, hidden=(True, False))
    assert seen.occluded[:4].all() and not seen.occluded[4:].any()
    assert seen.valid.tolist() == [False, True] and seen.mean_errors[0] == -1.0


def test_no_noise_draws_no_noise():
    seen = observe(6, noise=0.0)
    assert not seen.noise.any() and not seen.residuals.any()


def test_a_batch_observes_as_each_frame_alone():
    from mocap4r2_drivers.emulation import draw_marker_randomness, observe_markers_batch

    rngs = [np.random.default_rng([s, 7]) for s in range(5)]
    draws = [draw_marker_randomness(r, len(LAYOUT), 0.001) for r in rngs]
    hidden = np.array([[False, False], [True, False], [False, True], [False, False], [True, True]])
    batch = observe_markers_batch(
        LAYOUT,
        BODY,
        positions=np.stack([POSITIONS] * 5),
        orientations=np.stack([ORIENTATIONS] * 5),
        offsets=np.stack([d[0] for d in draws]),
        draws=np.stack([d[1] for d in draws]),
        occlusion=0.3,
        hidden=hidden,
    )
    for i in range(5):
        one = observe_markers(
            np.random.default_rng([i, 7]),
            LAYOUT,
            marker_body=BODY,
            positions=POSITIONS,
            orientations=ORIENTATIONS,
            noise=0.001,
            occlusion=0.3,
            hidden=hidden[i],
        )
        for field in ("positions", "noise", "occluded", "residuals", "visible", "valid", "mean_errors"):
            np.testing.assert_array_equal(getattr(batch, field)[i], getattr(one, field), err_msg=field)


def test_fit_pose_recovers_the_body_frame_not_the_centroid():
    from mocap4r2_drivers.emulation import fit_pose

    layout = LAYOUT[:4]
    world = quat_rotate(ORIENTATIONS[0], layout) + POSITIONS[0]
    pos, quat = fit_pose(layout, world)
    np.testing.assert_allclose(pos, POSITIONS[0], atol=1e-12)
    assert abs(np.dot(quat, ORIENTATIONS[0])) == pytest.approx(1.0, abs=1e-12)
    world[1] = np.nan  # three markers still fix the pose
    pos, _ = fit_pose(layout, world)
    np.testing.assert_allclose(pos, POSITIONS[0], atol=1e-12)
    world[2] = np.nan
    assert fit_pose(layout, world) is None
