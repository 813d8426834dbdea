"""MocapSystemNode lifecycle through the standard services (what `ros2 lifecycle set`
calls), with the simulated system as a real process."""

from __future__ import annotations

import time

import yaml
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_interfaces.msg import RigidBodies

SIM = ("mocap4r2_drivers", "simulated_system")


def write_scene(tmp_path, **overrides):
    scene = {
        "seed": 3,
        "rate": 100.0,
        "latency": 0.002,
        "latency_jitter": 0.0,
        "noise": 0.0,
        "unlabeled_markers": 2,
        "rigid_bodies": [
            {"name": "alpha", "id": 11, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0}},
            {"name": "beta", "id": 12, "trajectory": {"type": "static", "position": [1, 2, 3]}},
        ],
        "skeletons": [{"name": "walker", "id": 1}],
    }
    scene.update(overrides)
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(scene))
    return str(path)


def reader_threads(proc) -> int:
    return sum(1 for name in proc.threads() if name == "mocap4r2-reader")


def test_full_lifecycle_through_standard_services(ros, procs, tmp_path):
    node = "/lc/sim"
    proc = procs.start(*SIM, name="sim", namespace="/lc", params={"scene": write_scene(tmp_path)})
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    bodies = ros.subscribe("/lc/rigid_bodies", RigidBodies)

    assert ros.change_state(node, "configure")
    assert ros.get_state(node) == "inactive"
    time.sleep(0.3)  # deliberately lets time pass: nothing may arrive while inactive
    assert not bodies.snapshot(), "an inactive system must not stream"
    assert reader_threads(proc) == 0

    assert ros.change_state(node, "activate")
    assert ros.get_state(node) == "active"
    first = bodies.wait_for(timeout=WAIT)
    assert [b.name for b in first.rigid_bodies] == ["alpha", "beta"]
    assert reader_threads(proc) == 1

    assert ros.change_state(node, "deactivate")
    assert ros.get_state(node) == "inactive"
    assert reader_threads(proc) == 0
    # frames published before deactivate may still be in flight on a loaded machine:
    # wait until nothing has arrived for 0.5 s, then watch a further 0.5 s
    wait_for(
        lambda: bodies.quiet(0.5),
        WAIT,
        lambda: f"{len(bodies.times)} frames, still arriving",
        what="the stream to go quiet",
    )
    bodies.clear()
    time.sleep(0.5)  # deliberately lets time pass: no frame may arrive after deactivate
    assert not bodies.snapshot(), "frames after deactivate"

    # activate again: frame numbers continue, the reader is back
    assert ros.change_state(node, "activate")
    again = bodies.wait_for(timeout=WAIT)
    assert again.frame_number > first.frame_number
    assert reader_threads(proc) == 1

    # shutdown straight from active releases everything
    assert ros.change_state(node, "shutdown")
    assert ros.get_state(node) == "finalized"
    assert reader_threads(proc) == 0
    assert proc.alive()


def test_cleanup_disconnects_and_reconfigure_works(ros, procs, tmp_path):
    node = "/lc2/sim"
    proc = procs.start(*SIM, name="sim", namespace="/lc2", params={"scene": write_scene(tmp_path)})
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert ros.change_state(node, "configure")
    assert ros.change_state(node, "activate")
    assert ros.change_state(node, "deactivate")
    assert ros.change_state(node, "cleanup")
    assert ros.get_state(node) == "unconfigured"
    assert reader_threads(proc) == 0
    assert ros.change_state(node, "configure")
    assert ros.change_state(node, "activate")
    assert reader_threads(proc) == 1
    assert proc.stop() == 0, proc.log()


def test_wrong_state_transitions_are_refused_without_harm(ros, procs, tmp_path):
    node = "/lc3/sim"
    proc = procs.start(*SIM, name="sim", namespace="/lc3", params={"scene": write_scene(tmp_path)})
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert not ros.change_state(node, "activate")
    assert not ros.change_state(node, "deactivate")
    assert not ros.change_state(node, "cleanup")
    assert ros.get_state(node) == "unconfigured"
    assert ros.change_state(node, "configure")
    assert not ros.change_state(node, "configure")
    assert ros.get_state(node) == "inactive"
    assert proc.alive()
    assert ros.change_state(node, "activate")
    assert ros.get_state(node) == "active"


def test_configure_failure_is_logged_and_leaves_node_unconfigured(ros, procs, tmp_path):
    node = "/lc4/sim"
    missing = str(tmp_path / "no_such_scene.yaml")
    proc = procs.start(*SIM, name="sim", namespace="/lc4", params={"scene": missing})
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert not ros.change_state(node, "configure")
    assert ros.get_state(node) == "unconfigured"
    assert proc.wait_log("configure failed", timeout=WAIT), proc.log()
    assert "no_such_scene.yaml" in proc.log()
    # a broken scene file is refused the same way
    (tmp_path / "broken.yaml").write_text("rigid_bodies: [{name: x, trajectory: {type: zigzag}}]\n")
    set_parameter(ros, node, "scene", str(tmp_path / "broken.yaml"))
    assert not ros.change_state(node, "configure")
    assert proc.wait_log("trajectory: unknown type 'zigzag'", timeout=WAIT), proc.log()
    # with a valid scene again, configure succeeds in the same process
    set_parameter(ros, node, "scene", write_scene(tmp_path))
    assert ros.change_state(node, "configure")
    assert proc.alive()


def set_parameter(ros, node, name, value):
    if isinstance(value, bool):
        pv = ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value)
    elif isinstance(value, float):
        pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
    elif isinstance(value, int):
        pv = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=value)
    else:
        pv = ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
    request = SetParameters.Request(parameters=[ParameterMsg(name=name, value=pv)])
    return ros.call(SetParameters, f"{node}/set_parameters", request).results[0]


def get_parameter(ros, node, name):
    response = ros.call(GetParameters, f"{node}/get_parameters", GetParameters.Request(names=[name]))
    value = response.values[0]
    return {
        ParameterType.PARAMETER_BOOL: value.bool_value,
        ParameterType.PARAMETER_DOUBLE: value.double_value,
        ParameterType.PARAMETER_INTEGER: value.integer_value,
        ParameterType.PARAMETER_STRING: value.string_value,
    }.get(value.type)


def test_bad_parameters_are_refused_with_a_reason(ros, procs, tmp_path):
    node = "/lc5/sim"
    # bad values on the command line: logged, defaults used, node alive
    proc = procs.start(
        *SIM,
        name="sim",
        namespace="/lc5",
        params={
            "scene": write_scene(tmp_path),
            "rate": -5.0,
            "frame_id": "/bad frame",
            "publish_tf": "yes please",
        },
    )
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    log = proc.log()
    assert "rate must be >= 0.0" in log
    assert "frame_id must be a non-empty tf frame name" in log
    assert "publish_tf" in log
    assert get_parameter(ros, node, "rate") == 0.0
    assert get_parameter(ros, node, "frame_id") == "world"
    assert get_parameter(ros, node, "publish_tf") is False

    # bad values at run time: refused with the reason, old value kept
    result = set_parameter(ros, node, "read_timeout", 50.0)
    assert not result.successful
    assert "read_timeout must be <= 5.0" in result.reason
    result = set_parameter(ros, node, "tf_prefix", "/abs")
    assert not result.successful and "tf_prefix" in result.reason
    assert set_parameter(ros, node, "frame_id", "mocap").successful
    assert ros.change_state(node, "configure")
    assert ros.change_state(node, "activate")
    bodies = ros.subscribe("/lc5/rigid_bodies", RigidBodies)
    assert bodies.wait_for(timeout=WAIT).header.frame_id == "mocap"
    assert proc.alive()


def test_sigint_releases_and_announces_finalized(ros, procs, tmp_path):
    from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS
    from mocap4r2_interfaces.msg import MocapSystemInfo

    node = "/lc6/sim"
    proc = procs.start(
        *SIM, name="sim", namespace="/lc6", params={"scene": write_scene(tmp_path), "autostart": True}
    )
    infos = ros.subscribe("/mocap4r2/systems", MocapSystemInfo, SYSTEMS_LISTENER_QOS)
    infos.wait_for(lambda i: i.system == node and i.state.label == "active", timeout=WAIT)
    assert proc.stop() == 0
    infos.wait_for(lambda i: i.system == node and i.state.label == "finalized", timeout=WAIT)
