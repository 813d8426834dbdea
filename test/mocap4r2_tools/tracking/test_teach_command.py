"""`mocap4r2 teach` as a real process against a simulated system that sends only its cloud:
the still body's layout is taught into a bodies file the tracker loads; a topic without
frames is an error saying so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import yaml

from mocap4r2_tools.tracking.bodies import load_config

ROOT = Path(__file__).resolve().parents[3]
LAYOUT = [[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]]
PLACE = [0.5, 0.5, 0.3]


def _verb() -> str:
    return shutil.which("mocap4r2") or str(ROOT / "install" / "mocap4r2_tools" / "bin" / "mocap4r2")


def _distances(points) -> np.ndarray:
    points = np.asarray(points)
    return np.sort(np.linalg.norm(points[:, None] - points[None], axis=2).ravel())


def test_teach_a_still_body_from_the_cloud(ros, procs, tmp_path):
    scene = {
        "seed": 3,
        "rate": 100.0,
        "noise": 0.0002,
        "occlusion": 0.02,
        "unlabeled_markers": 2,
        "volume": [[-3.0, -3.0, 1.0], [-1.0, -1.0, 2.0]],  # the strays, away from the body
        "rigid_bodies": [
            {"name": "cf", "id": 1, "markers": LAYOUT, "trajectory": {"type": "static", "position": PLACE}}
        ],
    }
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(scene))
    procs.start(
        "mocap4r2_drivers",
        "simulated_system",
        name="sim",
        namespace="/teach",
        params={"scene": str(path), "publish_labels": False, "autostart": True},
    )
    out = tmp_path / "bodies.yaml"
    done = subprocess.run(
        [_verb(), "teach", "--markers-topic", "/teach/markers", "--name", "cf9", "--out", str(out)]
        + ["--near", *map(str, PLACE), "--seconds", "0.5", "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert "taught 'cf9': 4 markers" in done.stdout, done.stdout
    config = load_config(out)
    (body,) = config.bodies
    assert body.name == "cf9" and body.layout_name == "cf9"
    assert np.allclose(_distances(body.points), _distances(LAYOUT), atol=3e-4)
    centroid = np.asarray(PLACE) + np.mean(LAYOUT, axis=0)  # static, yaw 0
    assert np.linalg.norm(body.initial_position - centroid) < 1e-3


def test_teach_without_frames_says_so(ros, tmp_path):
    done = subprocess.run(
        [
            _verb(),
            "teach",
            "--markers-topic",
            "/nobody/markers",
            "--name",
            "x",
            "--out",
            str(tmp_path / "b.yaml"),
        ]
        + ["--timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "no frame on /nobody/markers" in done.stderr, done.stderr
    assert not (tmp_path / "b.yaml").exists()
