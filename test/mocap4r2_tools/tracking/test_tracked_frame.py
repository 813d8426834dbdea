"""What the marker_tracker publishes for a frame, without ROS: the shipped swarm scene's
unlabeled cloud (config/swarm_scene.yaml, its bodies in config/swarm_bodies.yaml) tracked
and turned into frames whose bodies and labeled markers are the scene's truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mocap4r2_control.frame import UNKNOWN_ID
from mocap4r2_drivers.simulated.scene import Scene, unlabeled_cloud
from mocap4r2_tools.tracking.bodies import load_config
from mocap4r2_tools.tracking.tracked_frame import CpuWindow, SwapWatch, TrackedFrameBuilder
from mocap4r2_tools.tracking.tracker import FrameResult, Tracker

ROOT = Path(__file__).resolve().parents[3]
SCENE = ROOT / "config" / "swarm_scene.yaml"
BODIES = ROOT / "config" / "swarm_bodies.yaml"


def test_the_swarm_cloud_gives_the_scene_bodies_and_its_labels():
    scene = Scene.from_file(SCENE)
    config = load_config(BODIES)
    assert [b.name for b in config.bodies] == list(scene.asset_names().rigid_bodies)
    tracker, builder, swaps = Tracker(config), TrackedFrameBuilder(config), SwapWatch(config)
    both_valid = 0
    for k in range(360):  # 3 s at 120 Hz: every quadrotor passes a crossing
        truth = scene.frame(k)
        cloud = unlabeled_cloud(truth, scene.seed)
        points = cloud.markers.positions
        result = tracker.update(points, scene.time_of(k))
        swaps.update(result)
        frame = builder.build(k, 1000.0 + scene.time_of(k), points, result)
        frame.check()
        assert frame.frame_number == k and frame.capture_time == 1000.0 + scene.time_of(k)
        bodies = frame.bodies
        assert bodies.names == scene.asset_names().rigid_bodies
        valid = bodies.valid & truth.bodies.valid
        both_valid += int(valid.sum())
        error = np.linalg.norm(bodies.positions[valid] - truth.bodies.positions[valid], axis=1)
        assert error.max(initial=0.0) < 0.005, (k, error.max())
        assert np.isnan(bodies.positions[~bodies.valid]).all()
        # each labeled marker the tracker saw is the scene's marker of that body and index
        markers = frame.markers
        labeled = markers.ids != UNKNOWN_ID
        seen = labeled & ~markers.occluded
        truth_of = {name: i for i, name in enumerate(truth.markers.names)}
        for i in np.flatnonzero(seen):
            body, index = markers.names[i].split(":")
            j = truth_of[f"{body}:marker{index}"]
            assert np.array_equal(markers.positions[i], truth.markers.positions[j]), markers.names[i]
        # the strays are the rest of the cloud, unlabeled
        assert len(markers) - labeled.sum() == len(points) - seen.sum()
        assert set(markers.names[int(labeled.sum()) :]) <= {""}
    assert both_valid > 0.9 * 360 * 18
    assert swaps.swaps.sum() == 0


def _result(positions, valid, reacquired):
    n = len(positions)
    return FrameResult(
        positions=np.asarray(positions, float),
        orientations=np.tile([0.0, 0.0, 0.0, 1.0], (n, 1)),
        valid=np.asarray(valid),
        mean_error=np.zeros(n),
        assigned=np.full((n, 4), -1),
        strays=np.zeros(0, dtype=np.intp),
        reacquired=np.asarray(reacquired, dtype=np.intp),
    )


def test_a_body_reacquired_where_its_twin_was_is_a_suspected_swap():
    config = load_config(BODIES)
    watch = SwapWatch(config)
    n = len(config.bodies)
    start = np.zeros((n, 3))
    start[:, 0] = np.arange(n)  # cf1 at x=0, cf2 at x=1, ...
    assert watch.update(_result(start, np.ones(n, bool), [])) == 0
    moved = start.copy()
    moved[0] = [1.05, 0.0, 0.0]  # cf1 found again next to where cf2 was
    moved[1] = [1.02, 0.0, 0.0]  # cf2 found again next to its own last position
    assert watch.update(_result(moved, np.ones(n, bool), [0, 1])) == 1
    assert watch.swaps[0] == 1 and watch.swaps[1] == 0
    # the quadrotors share one layout, the two single-marker bodies another: all are twins
    assert watch.identical.all() and watch.group[0] != watch.group[-1]


def test_cpu_window_percentiles():
    window = CpuWindow(size=100)
    assert all(np.isnan(window.percentiles_ms()))
    for i in range(200):
        window.add(i * 1e-3)  # only the last 100 (0.1 .. 0.199 s) are kept
    p50, p99, worst = window.percentiles_ms()
    assert worst == 199.0 and 149.0 <= p50 <= 150.0 and 197.0 < p99 < 199.0
