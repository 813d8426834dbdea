"""A broken scene file is reported with the file and the key at fault: by the scene
loader, and by a simulated_system (a real process) whose configure fails, without
calling it a connection failure."""
from __future__ import annotations

import pytest
import yaml

from mocap4r2_drivers.simulated.scene import Scene, SceneError

SIM = ("mocap4r2_drivers", "simulated_system")

CASES = [
    ({"rate": "fast"}, "rate"),
    ({"rate": -5}, "rate"),
    ({"noise": float("nan")}, "noise"),
    ({"occlusion": 2}, "occlusion"),
    ({"rigid_bodies": [{"name": "ok"}, {"name": "x", "trajectory": {"type": "zigzag"}}]}, "rigid_bodies[1]"),
    ({"rigid_bodies": [{"name": "x", "markers": [[0, 0, 0]]}]}, "rigid_bodies[0]"),
    ({"rigid_bodies": [{"name": "x", "trajectory": {"type": "circle", "period": "soon"}}]}, "period"),
    ({"skeletons": [{"name": "w", "template": "cat"}]}, "skeletons[0]"),
]


@pytest.mark.parametrize("config,key", CASES)
def test_scene_errors_name_the_file_and_the_key(tmp_path, config, key):
    path = tmp_path / "my_scene.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SceneError) as caught:
        Scene.from_file(path)
    message = str(caught.value)
    assert str(path) in message and key in message, message


def test_a_system_reports_a_scene_error_without_calling_it_a_connection_failure(ros, procs, tmp_path):
    path = tmp_path / "lab_scene.yaml"
    path.write_text(yaml.safe_dump({"rate": 100.0, "rigid_bodies": [{"name": "x", "trajectory": {"type": "zigzag"}}]}))
    proc = procs.start(*SIM, name="sim", namespace="/scerr", params={"scene": str(path)})
    ros.wait_state("/scerr/sim", "unconfigured", timeout=30)
    assert not ros.change_state("/scerr/sim", "configure")
    assert proc.wait_log("configure failed", timeout=10), proc.log()
    line = next(l for l in proc.log().splitlines() if "configure failed" in l)
    assert str(path) in line and "rigid_bodies[0]" in line and "trajectory" in line, line
    assert "cannot connect" not in line, line
    assert ros.get_state("/scerr/sim") == "unconfigured" and proc.alive()
