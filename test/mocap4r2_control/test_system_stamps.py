"""How a system node stamps frames (``time_source``) and what /diagnostics says about it,
with the simulated system as a real process."""

from __future__ import annotations

import yaml
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from support import CROSS_PROCESS_TIMEOUT as WAIT

from mocap4r2_interfaces.msg import RigidBodies

SIM = ("mocap4r2_drivers", "simulated_system")


def write_scene(tmp_path, **overrides):
    scene = {
        "seed": 3,
        "rate": 200.0,
        "latency": 0.002,
        "latency_jitter": 0.0,
        "noise": 0.0,
        "rigid_bodies": [
            {"name": "alpha", "id": 11, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0}},
        ],
    }
    scene.update(overrides)
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(scene))
    return str(path)


def string_parameter(ros, node, name, value=None):
    if value is not None:
        pv = ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value)
        request = SetParameters.Request(parameters=[ParameterMsg(name=name, value=pv)])
        return ros.call(SetParameters, f"{node}/set_parameters", request).results[0]
    response = ros.call(GetParameters, f"{node}/get_parameters", GetParameters.Request(names=[name]))
    return response.values[0].string_value


def diagnostics_of(ros, node, predicate, timeout=WAIT):
    collector = ros.subscribe("/diagnostics", DiagnosticArray)
    msg = collector.wait_for(
        lambda m: any(
            s.hardware_id == node and predicate({kv.key: kv.value for kv in s.values}) for s in m.status
        ),
        timeout=timeout,
    )
    status = next(s for s in msg.status if s.hardware_id == node)
    return {kv.key: kv.value for kv in status.values}


def test_time_source_is_validated_and_reported(ros, procs, tmp_path):
    node = "/ts1/sim"
    proc = procs.start(
        *SIM, name="sim", namespace="/ts1", params={"scene": write_scene(tmp_path), "time_source": "gps"}
    )
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert "time_source must be one of ['auto', 'system', 'arrival'], got 'gps'" in proc.log()
    assert string_parameter(ros, node, "time_source") == "auto"
    result = string_parameter(ros, node, "time_source", "sometimes")
    assert not result.successful
    assert "time_source must be one of" in result.reason
    assert string_parameter(ros, node, "time_source", "arrival").successful
    assert ros.change_state(node, "configure")
    assert ros.change_state(node, "activate")
    ros.subscribe("/ts1/rigid_bodies", RigidBodies).wait_for(timeout=WAIT)
    values = diagnostics_of(ros, node, lambda v: v.get("time_source") == "arrival")
    assert values["time_source_in_use"] == "arrival"
    assert values["clock_resets"] == "0"
    assert proc.alive()
