"""Teaching a layout from clouds, alone: frames of one still cluster in any order are
matched and averaged, what is not the cluster is left out or refused, and the bodies file
gets a layout and body that load."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from scipy.spatial.transform import Rotation

from mocap4r2_tools.tracking.bodies import load_config
from mocap4r2_tools.tracking.teach import Teacher, TeachError, write_body

LAYOUT = np.array([[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]])
PLACE = np.array([0.4, -0.3, 0.05])


def _frames(count: int, rng: np.random.Generator, noise: float = 0.0002, strays: int = 0):
    rot = Rotation.from_euler("xyz", [10, -5, 60], degrees=True).as_matrix()
    world = LAYOUT @ rot.T + PLACE
    for _ in range(count):
        points = world + rng.normal(0.0, noise, world.shape)
        far = rng.uniform(1.0, 2.0, (strays, 3))
        yield rng.permutation(np.vstack([points, far])), world


def _distances(points):
    return np.linalg.norm(points[:, None] - points[None], axis=2)


def test_a_still_cluster_in_any_order_is_averaged_into_its_layout():
    rng = np.random.default_rng(1)
    teacher = Teacher(near=PLACE + [0.01, 0.0, 0.0], radius=0.1)
    frames = list(_frames(120, rng, strays=3))
    for points, _ in frames:
        assert teacher.add(points)
    world = frames[0][1]
    local, origin = teacher.layout("pca")
    assert teacher.frames == 120 and np.allclose(origin, world.mean(axis=0), atol=1e-4)
    # the same shape, whatever the order the markers came in (0.2 mm noise averaged)
    assert np.allclose(np.sort(_distances(local).ravel()), np.sort(_distances(LAYOUT).ravel()), atol=1e-4)
    assert np.allclose(local.mean(axis=0), 0.0, atol=1e-12)
    spread = local.var(axis=0)
    assert spread[0] >= spread[1] >= spread[2]  # PCA: widest first
    world_local, _ = teacher.layout("world")
    assert np.allclose(np.sort(_distances(world_local).ravel()), np.sort(_distances(local).ravel()))


def test_frames_that_are_not_the_cluster_are_skipped_and_counted():
    rng = np.random.default_rng(2)
    frames = list(_frames(10, rng))
    teacher = Teacher(radius=0.1)  # no place given: the whole frame must be one cluster
    assert teacher.add(frames[2][0][:3])  # a marker hidden in the first frame: kept for now
    assert teacher.add(frames[0][0])
    assert not teacher.add(np.vstack([frames[1][0], [[1.5, 1.5, 1.5]]]))  # a stray
    assert teacher.add(frames[3][0] + [0.02, 0.0, 0.0])  # moved
    assert not teacher.add(np.full((4, 3), np.nan))
    assert teacher.add(frames[4][0])
    local, _ = teacher.layout()
    # the most common number of markers (4) is averaged: frames 0 and 4
    assert len(local) == 4 and teacher.frames == 2
    assert teacher.skipped == {
        "markers outside the cluster (give --near)": 1,
        "no marker": 1,
        "another number of markers": 1,
        "markers moved": 1,
    }
    teacher.layout("world")
    assert sum(teacher.skipped.values()) == 4  # asking again counts nothing twice
    with pytest.raises(TeachError, match="no frame"):
        Teacher().layout()
    with pytest.raises(TeachError, match="duplicated"):  # two markers on top of each other
        twin = Teacher()
        twin.add([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0005], [0.03, 0.0, 0.0], [0.0, 0.04, 0.01]])
        twin.layout()


def test_the_taught_body_is_added_to_a_bodies_file_that_loads(tmp_path):
    rng = np.random.default_rng(3)
    teacher = Teacher(near=PLACE)
    for points, _ in _frames(20, rng):
        teacher.add(points)
    local, origin = teacher.layout()
    path = tmp_path / "bodies.yaml"
    write_body(path, "cf17", local, origin)
    write_body(path, "cf18", local, origin + [0.5, 0.0, 0.0])
    config = load_config(path)
    assert [(b.name, b.body_id, b.layout_name) for b in config.bodies] == [
        ("cf17", 1, "cf17"),
        ("cf18", 2, "cf18"),
    ]
    assert np.allclose(config.bodies[0].points, local, atol=1e-6)
    assert np.allclose(config.bodies[1].initial_position, origin + [0.5, 0.0, 0.0], atol=1e-6)
    before = path.read_text()
    with pytest.raises(TeachError, match="already"):
        write_body(path, "cf17", local, origin)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(TeachError, match="mapping"):
        write_body(bad, "x", local, origin)
    assert path.read_text() == before  # a refused write leaves the file as it was


def test_a_teaching_window_fills_by_the_frames_stamps_and_closes():
    import threading

    from mocap4r2_tools.tracking.teach import Teacher, TeachingWindow, taught_text

    cluster = np.array([[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]])
    window = TeachingWindow(Teacher(near=np.zeros(3), radius=0.1), seconds=0.5)

    def feed() -> None:
        for frame in range(100):  # 100 Hz: full at the frame 0.5 s after the first
            window.add(cluster, 10.0 + frame / 100)

    feeder = threading.Thread(target=feed)
    feeder.start()
    assert window.wait(10.0)
    feeder.join()
    assert window.frames == 51  # frames after the window filled are not taken
    layout, position = window.teacher.layout("world")
    assert np.allclose(layout + position, cluster)
    text = taught_text("cf", layout, position)
    assert yaml.safe_load(text)["bodies"] == [
        {"name": "cf", "layout": "cf", "initial_position": [round(float(v), 6) for v in position]}
    ]
    empty = TeachingWindow(Teacher(near=np.zeros(3)), seconds=0.5)
    assert not empty.wait(0.05)
    empty.add(cluster, 0.0)  # a frame arriving after the wait gave up is not taken
    assert empty.frames == 0
