"""How a system node stamps frames (``time_source``) and what /diagnostics says about it,
with the simulated system as a real process."""

from __future__ import annotations

import numpy as np
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


def test_simulated_system_stamps_from_its_clock_through_an_impaired_stream(ros, procs, tmp_path):
    """The simulated system hands its own clock (drifting +100 ppm, 3 s off) through a
    bursty, jittery delivery; the node's stamps follow the truth log, not the arrivals."""
    from rclpy.qos import QoSProfile
    from support import wait_for

    from mocap4r2_drivers.impairment import read_truth_log

    truth_path = tmp_path / "truth.csv"
    scene = write_scene(
        tmp_path,
        jitter_ms=2.0,
        burst=4,
        clock_drift_ppm=100.0,
        clock_offset_s=3.0,
        truth_log=str(truth_path),
    )
    node = "/ts2/sim"
    bodies = ros.subscribe("/ts2/rigid_bodies", RigidBodies, QoSProfile(depth=3000))
    procs.start(
        *SIM, name="sim", namespace="/ts2", params={"scene": scene, "autostart": True, "qos_depth": 3000}
    )
    bodies.wait_for(timeout=WAIT)
    wanted = 200 * 7  # 7 s of stream: the drift is fitted on 4 s of points
    wait_for(
        lambda: len(bodies.snapshot()) >= wanted, 60, lambda: len(bodies.snapshot()), what=f"{wanted} frames"
    )
    values = diagnostics_of(ros, node, lambda v: v.get("clock_drift_ppm") not in (None, "0.00", "unknown"))
    assert values["time_source_in_use"] == "system clock model"
    assert values["clock_converged"] == "True"
    assert abs(float(values["clock_drift_ppm"]) - 100.0) < 30.0, values["clock_drift_ppm"]
    assert abs(float(values["clock_offset_s"])) > 1e9  # host (Unix) minus a clock that began at 3 s
    assert float(values["transport_delay_p99_ms"]) > 1.0  # the bursts' holding, kept out of the stamps
    received = bodies.snapshot()
    truth = dict(read_truth_log(truth_path))
    stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in received])
    captured = np.array([truth.get(m.frame_number, np.nan) for m in received])
    assert np.all(np.diff(stamps) > 0)
    error = np.abs(stamps - captured)[1000:]  # after 5 s
    error = error[np.isfinite(error)]
    assert error.size > 200
    # arrival - latency would be off by the holding (up to 15 ms) plus 2 ms of jitter
    assert np.median(error) < 1e-3, np.median(error)
    assert np.percentile(error, 95) < 3e-3, np.percentile(error, 95)
