"""Scene frames computed in batches: a frame does not depend on the batch it was computed
in (its random draws have their own seeded generator), so streaming in batches gives the
frames one-at-a-time computation gives, and any frame can still be asked for in any order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mocap4r2_control.frame import UNKNOWN_ID
from mocap4r2_drivers.simulated.scene import BATCH_SIZE, Scene, batch_size_for, unlabeled_cloud

# every feature of a scene: noise, occlusion, jitter, strays, tilt, tracking loss, a skeleton
SCENE = {
    "seed": 5,
    "rate": 2000.0,
    "latency": 0.004,
    "latency_jitter": 0.001,
    "noise": 0.0005,
    "occlusion": 0.2,
    "dropped_frames": 0.01,
    "unlabeled_markers": 3,
    "rigid_bodies": [
        {
            "name": "flyer",
            "id": 1,
            "trajectory": {"type": "circle", "radius": 1.0, "period": 0.5, "tilt": 0.1},
            "tracking_loss": {"every": 0.05, "duration": 0.01},
        },
        {"name": "wander", "id": 2, "trajectory": {"type": "random_walk", "period": 1.0}, "occlusion": 0.5},
        {"name": "eight", "id": 3, "trajectory": {"type": "figure_eight", "period": 2.0}, "occlusion": 0.0},
    ],
    "skeletons": [
        {
            "name": "walker",
            "id": 4,
            "trajectory": {"type": "circle", "period": 3.0},
            "tracking_loss": {"every": 0.04, "duration": 0.01},
        }
    ],
}


def same(a, b, path="frame"):
    """Every field of two frames (nested dataclasses with numpy arrays) equal, NaN == NaN."""
    for name in a.__slots__:
        x, y = getattr(a, name), getattr(b, name)
        where = f"{path}.{name}"
        if hasattr(x, "__slots__"):
            same(x, y, where)
        elif isinstance(x, np.ndarray):
            assert x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), where
        else:
            assert x == y, where


@pytest.mark.parametrize("first,count", [(0, 64), (37, 100), (1000, 1), (5, 7)])
def test_a_batch_holds_the_frames_computed_one_at_a_time(first, count):
    scene = Scene(dict(SCENE))
    batch = scene.frames(first, count)
    assert [f.frame_number for f in batch] == list(range(first, first + count))
    for frame in batch:
        same(frame, Scene(dict(SCENE)).frames(frame.frame_number, 1)[0], f"frame {frame.frame_number}")


def test_frames_in_any_order_and_the_cache_keeps_one_batch():
    scene = Scene(dict(SCENE))
    reference = Scene(dict(SCENE))
    for k in [500, 3, 501, 2, 10_000, 499, 563, 564]:
        same(scene.frame(k), reference.frames(k, 1)[0], f"frame {k}")
        assert len(scene._cache[1]) == BATCH_SIZE and scene._cache[0] <= k < scene._cache[0] + BATCH_SIZE


@pytest.mark.parametrize("config", ["SCENE", "SINGLES", "no occlusion"])
def test_body_poses_are_the_frames_bodies_without_their_markers(config):
    """A stand-in streaming poses only (VRPN) reads them without the markers' work: the
    same positions, orientations and validity as the whole frame, NaN where it has NaN,
    in any order and across batches (occlusion, tracking loss, a single-marker body)."""
    scenes = {"SCENE": SCENE, "SINGLES": SINGLES, "no occlusion": {**SCENE, "occlusion": 0.0}}
    description = dict(scenes[config])
    if config == "no occlusion":
        description["rigid_bodies"] = [{**b, "occlusion": 0.0} for b in SCENE["rigid_bodies"]]
    scene, reference = Scene(dict(description)), Scene(dict(description))
    valid_seen = set()
    for k in [*range(0, 300), 1000, 7, 5000, 4999]:
        positions, orientations, valid = scene.body_poses(k)
        bodies = reference.frames(k, 1)[0].bodies
        assert np.array_equal(valid, bodies.valid), f"frame {k}"
        assert np.array_equal(positions, bodies.positions, equal_nan=True), f"frame {k}"
        assert np.array_equal(orientations, bodies.orientations, equal_nan=True), f"frame {k}"
        valid_seen.update(valid.tolist())
    assert valid_seen == {True, False}  # tracked and untracked bodies both compared


def test_the_batch_spans_a_short_stretch_of_the_stream():
    """Computing a batch stalls a real-time reader: at low rates batches are a few frames."""
    assert [batch_size_for(r) for r in (1, 100, 120, 500, 2000, 10000)] == [1, 3, 4, 16, 64, 64]
    assert Scene(dict(SCENE)).batch_size == 64 and Scene({"rate": 100}).batch_size == 3


def test_batched_frames_vary_and_keep_the_rules():
    """Not a constant: noise, occlusion, tracking loss and jitter all show within a few
    batches, and an untracked row carries NaN (the node holds its last good value)."""
    scene = Scene(dict(SCENE))
    frames = [scene.frame(k) for k in range(400)]
    valid = np.array([f.bodies.valid for f in frames])
    assert valid.all(axis=0).tolist() == [False, False, True] and valid.any(axis=0).all()
    for f in frames:
        bad = ~f.bodies.valid
        assert np.isnan(f.bodies.positions[bad]).all() and np.isfinite(f.bodies.positions[~bad]).all()
        assert np.isnan(f.markers.positions[f.markers.occluded]).all()
        seg_bad = ~f.skeletons.segments.valid
        assert np.isnan(f.skeletons.segments.positions[seg_bad]).all()
        assert np.isfinite(f.skeletons.segments.positions[~seg_bad]).all()
    skel = np.array([f.skeletons.valid[0] for f in frames])
    assert skel.any() and not skel.all()
    latencies = {f.latency for f in frames}
    assert len(latencies) > 300 and all(0.003 <= v <= 0.005 for v in latencies)
    # a tracked body is the trajectory: the circle of radius 1 about (0, 0, 1)
    for f in frames:
        if f.bodies.valid[0]:
            x, y, z = f.bodies.positions[0]
            assert math.isclose(math.hypot(x, y), 1.0, abs_tol=1e-9) and z == pytest.approx(1.0)
    strays = np.array([f.markers.positions[-3:] for f in frames])
    assert np.unique(strays[:, 0, 0]).size == len(frames)


SINGLES = {
    "seed": 9,
    "rate": 200.0,
    "noise": 0.0002,
    "occlusion": 0.3,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        {
            "name": "dot",
            "id": 1,
            "markers": [[0.0, 0.0, 0.0]],
            "trajectory": {"type": "circle", "period": 2.0},
        },
        {"name": "quad", "id": 2, "trajectory": {"type": "circle", "radius": 0.5, "period": 3.0}},
    ],
}


def test_a_single_marker_body_is_tracked_whenever_its_marker_is_seen():
    """One marker gives a position-only body: tracked when that marker is seen (a body of
    more markers needs 3), its orientation the trajectory's (not observable from one point)."""
    scene = Scene(dict(SINGLES))
    assert scene.asset_names().markers[0] == "dot:marker1" and len(scene.asset_names().markers) == 5
    frames = scene.frames(0, 200)
    dot_seen = np.array([not f.markers.occluded[0] for f in frames])
    quad_seen = np.array([(~f.markers.occluded[1:5]).sum() for f in frames])
    valid = np.array([f.bodies.valid for f in frames])
    assert valid[:, 0].tolist() == dot_seen.tolist() and 0 < dot_seen.sum() < 200
    assert valid[:, 1].tolist() == (quad_seen >= 3).tolist()
    for k, f in enumerate(frames):
        pos, quat = scene.poses(scene.time_of(k))
        if f.bodies.valid[0]:
            assert np.array_equal(f.bodies.positions[0], pos[0])
            assert np.array_equal(f.bodies.orientations[0], quat[0])
            assert np.linalg.norm(f.markers.positions[0] - pos[0]) < 0.003  # noise only


def test_the_unlabeled_cloud_holds_the_seen_markers_shuffled_and_nothing_else():
    scene = Scene(dict(SINGLES))
    orders = set()
    for frame in scene.frames(0, 50):
        cloud = unlabeled_cloud(frame, scene.seed)
        assert cloud.frame_number == frame.frame_number and cloud.latency == frame.latency
        seen = ~frame.markers.occluded
        assert len(cloud.markers) == seen.sum() and (cloud.markers.ids == UNKNOWN_ID).all()
        assert set(cloud.markers.names) <= {""} and not cloud.markers.occluded.any()
        assert len(cloud.bodies) == 0 and len(cloud.skeletons.ids) == 0
        # the same points, in another order, the same order for the same seed and frame
        truth = frame.markers.positions[seen]
        assert np.array_equal(np.sort(cloud.markers.positions, axis=0), np.sort(truth, axis=0))
        again = unlabeled_cloud(frame, scene.seed)
        assert np.array_equal(again.markers.positions, cloud.markers.positions)
        orders.add(tuple(np.argsort(cloud.markers.positions[:, 0])))
    assert len(orders) > 10
