"""A broken scene file is reported with the file and the key at fault: by the scene
loader, and by a simulated_system (a real process) whose configure fails, without
calling it a connection failure."""

from __future__ import annotations

import pytest
import yaml

from mocap4r2_drivers.simulated.scene import Scene, SceneError

SIM = ("mocap4r2_drivers", "simulated_system")
ARM = {"name": "arm", "link_poses_topic": "/simulated_arm/link_poses", "timeout": 0.5}

CASES = [
    ({"rate": "fast"}, "rate"),
    ({"rate": -5}, "rate"),
    ({"noise": float("nan")}, "noise"),
    ({"occlusion": 2}, "occlusion"),
    ({"rigid_bodies": [{"name": "ok"}, {"name": "x", "trajectory": {"type": "zigzag"}}]}, "rigid_bodies[1]"),
    # 1 marker is a position-only body; 2 leave the rotation about their line unobservable
    ({"rigid_bodies": [{"name": "x", "markers": [[0, 0, 0], [0.1, 0, 0]]}]}, "rigid_bodies[0]"),
    ({"rigid_bodies": [{"name": "x", "markers": []}]}, "rigid_bodies[0]"),
    ({"rigid_bodies": [{"name": "x", "trajectory": {"type": "circle", "period": "soon"}}]}, "period"),
    ({"skeletons": [{"name": "w", "template": "cat"}]}, "skeletons[0]"),
    # arms (link poses from a topic, see simulated/arms.py): what a bad entry is told
    ({"arms": {"name": "arm"}}, "arms must be a list"),
    ({"arms": [{"link_poses_topic": "/a"}]}, "arms[0] needs a non-empty name"),
    ({"arms": [{"name": "arm", "link_poses_topic": "relative/topic"}]}, "link_poses_topic"),
    ({"arms": [{"name": "arm"}]}, "link_poses_topic"),
    ({"arms": [{"name": "arm", "link_poses_topic": "/a", "timeout": -1}]}, "timeout"),
    ({"arms": [{"name": "arm", "link_poses_topic": "/a", "timeout": "soon"}]}, "timeout"),
    ({"arms": [{"name": "arm", "link_poses_topic": "/a", "rate": 5}]}, "unknown key 'rate'"),
    ({"arms": [{"name": "a b", "link_poses_topic": "/a"}]}, "name must be"),
    ({"arms": [dict(ARM), dict(ARM)]}, "arms[1] (arm)"),
    ({"rigid_bodies": [{"name": "arm_ee"}], "arms": [dict(ARM)]}, "already a body"),
]


@pytest.mark.parametrize("config,key", CASES)
def test_scene_errors_name_the_file_and_the_key(tmp_path, config, key):
    """``key`` is the key at fault, or the words of the reason."""
    path = tmp_path / "my_scene.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SceneError) as caught:
        Scene.from_file(path)
    message = str(caught.value)
    assert str(path) in message and key in message, message


SYSTEM_CASES = [
    (
        {"rate": 100.0, "rigid_bodies": [{"name": "x", "trajectory": {"type": "zigzag"}}]},
        ("rigid_bodies[0]", "trajectory"),
    ),
    (
        {"rate": 100.0, "arms": [{"name": "arm", "link_poses_topic": "no/slash"}]},
        ("arms[0]", "link_poses_topic"),
    ),
]


@pytest.mark.parametrize("config,words", SYSTEM_CASES)
def test_a_system_reports_a_scene_error_without_calling_it_a_connection_failure(
    ros, procs, tmp_path, config, words
):
    path = tmp_path / "lab_scene.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = procs.start(*SIM, name="sim", namespace="/scerr", params={"scene": str(path)})
    ros.wait_state("/scerr/sim", "unconfigured", timeout=30)
    assert not ros.change_state("/scerr/sim", "configure")
    assert proc.wait_log("configure failed", timeout=20), proc.log()
    line = next(text for text in proc.log().splitlines() if "configure failed" in text)
    assert str(path) in line and all(w in line for w in words), line
    assert "cannot connect" not in line, line
    assert ros.get_state("/scerr/sim") == "unconfigured" and proc.alive()
