"""Arms in a simulated scene (no ROS: link poses handed in as arrays): the arm's end
effector seen through 4 markers with the scene's noise and fitted as a rigid body, a
skeleton of its links, untracked before link poses arrive and when they are stale,
and bad link poses refused with the reason (bad ``arms:`` entries: test_scene_errors.py)."""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_control.rotation import quat_from_axis_angle, quat_rotate
from mocap4r2_drivers.common import stable_id
from mocap4r2_drivers.simulated.arms import MAX_LINKS, LinkPosesRefused, SceneArms
from mocap4r2_drivers.simulated.scene import ARM_MARKER_LAYOUT, Scene

ARM = {"name": "arm", "link_poses_topic": "/simulated_arm/link_poses", "timeout": 0.5}
SCENE = {
    "seed": 3,
    "rate": 120.0,
    "noise": 0.0005,
    "occlusion": 0.0,
    "unlabeled_markers": 2,
    "rigid_bodies": [{"name": "box", "id": 1, "trajectory": {"type": "static", "position": [1, 0, 0]}}],
    "arms": [ARM],
}


def links(angle: float) -> tuple[np.ndarray, np.ndarray]:
    """Three link tips, the last one turned by ``angle`` about z and y."""
    q = quat_from_axis_angle([0.3, 0.5, 0.8], angle)
    p = np.array([[0.0, 0.0, 0.3], [0.25, 0.0, 0.3], [0.25 + 0.2 * np.cos(angle), 0.2 * np.sin(angle), 0.3]])
    return p, np.stack([[0, 0, 0, 1.0], [0, 0, 0, 1.0], q])


def test_asset_names_and_stable_ids_are_declared_from_the_yaml():
    scene = Scene(dict(SCENE))
    names = scene.asset_names()
    assert names.rigid_bodies == ("box", "arm_ee") and names.skeletons == ("arm",)
    assert names.markers[-4:] == tuple(f"arm_ee:marker{i}" for i in range(1, 5))
    spec = scene.description.arms[0]
    assert spec.body_id == stable_id("arm_ee") and spec.skeleton_id == stable_id("arm")


def test_untracked_before_link_poses_then_fitted_to_the_tip_then_stale():
    scene = Scene(dict(SCENE))
    arms = SceneArms(scene)
    frame = arms.compose(scene.frame(0), now=100.0)
    frame.check()
    assert frame.bodies.names == ("box", "arm_ee") and frame.bodies.valid.tolist() == [True, False]
    assert np.isnan(frame.bodies.positions[1]).all()
    assert (
        frame.skeletons.names == ("arm",)
        and not frame.skeletons.valid[0]
        and len(frame.skeletons.segments) == 0
    )
    assert len(frame.markers) == 4 + 4 + 2 and frame.markers.names[4:8] == scene.asset_names().markers[4:]

    errors, centroid_offsets = [], []
    for k in range(1, 200):
        p, q = links(0.01 * k)
        arms.receive(0, p, q, now=100.0 + k / 120)
        frame = arms.compose(scene.frame(k), now=100.0 + k / 120 + 0.01)
        frame.check()
        assert frame.bodies.valid[1] and frame.skeletons.valid[0]
        errors.append(np.linalg.norm(frame.bodies.positions[1] - p[-1]))
        markers = frame.bodies.markers.positions[4:8]
        centroid_offsets.append(np.linalg.norm(markers.mean(axis=0) - p[-1]))
        # the orientation is the end effector's within the noise's effect on the fit
        assert abs(np.dot(frame.bodies.orientations[1], q[-1])) > np.cos(0.05 / 2)
        # the scene's own body is untouched by the arm
        np.testing.assert_array_equal(frame.bodies.positions[0], scene.frame(k).bodies.positions[0])
        seg = frame.skeletons.segments
        assert seg.names == ("arm_link1", "arm_link2", "arm_link3")
        assert seg.ids.tolist() == [stable_id(f"arm_link{i}") for i in (1, 2, 3)]
        assert seg.parent_ids.tolist() == [-1, stable_id("arm_link1"), stable_id("arm_link2")]
        np.testing.assert_allclose(seg.positions, p)
    # the pose is the tip plus the fit's error: small but not zero, and not the centroid
    assert 0 < np.median(errors) < 0.001 and max(errors) < 0.003
    assert min(centroid_offsets) > 0.01
    # markers: the layout on the end effector plus the residuals reported
    layout_world = quat_rotate(q[-1], ARM_MARKER_LAYOUT) + p[-1]
    np.testing.assert_allclose(
        np.linalg.norm(markers - layout_world, axis=1), frame.bodies.markers.residuals[4:8], rtol=1e-5
    )

    stale = arms.compose(scene.frame(300), now=100.0 + 199 / 120 + 0.6)
    assert not stale.bodies.valid[1] and not stale.skeletons.valid[0]
    assert np.isnan(stale.bodies.positions[1]).all() and np.isnan(stale.skeletons.segments.positions).all()


def test_bad_link_poses_are_refused_and_the_previous_kept():
    scene = Scene(dict(SCENE))
    arms = SceneArms(scene)
    p, q = links(0.2)
    arms.receive(0, p, q, now=1.0)
    bad = {
        "no link poses": (np.zeros((0, 3)), np.zeros((0, 4))),
        f"at most {MAX_LINKS}": (np.zeros((MAX_LINKS + 1, 3)), np.tile([0, 0, 0, 1.0], (MAX_LINKS + 1, 1))),
        "the first message had 3": (p[:2], q[:2]),
        "not finite": (np.where(np.eye(3, dtype=bool), np.nan, p), q),
        "too short": (p, np.zeros((3, 4))),
    }
    for reason, (bp, bq) in bad.items():
        with pytest.raises(LinkPosesRefused, match=reason) as caught:
            arms.receive(0, bp, bq, now=1.1)
        assert "/simulated_arm/link_poses" in str(caught.value)
    frame = arms.compose(scene.frame(1), now=1.2)
    assert frame.bodies.valid[1] and np.linalg.norm(frame.bodies.positions[1] - p[-1]) < 0.003
    assert "5 refused" in arms.counters()["arm arm"]
