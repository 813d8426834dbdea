"""Parameters as users give them, on real nodes (a system and a tool): NaN on the command
line, in a params file and at runtime, and keys no parameter has (a typo)."""

from __future__ import annotations

import math

from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from support import executable

SIM = ("mocap4r2_drivers", "simulated_system")
GT = ("mocap4r2_tools", "robot_ground_truth")


def set_parameter(ros, node, name, value: float):
    pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
    request = SetParameters.Request(parameters=[ParameterMsg(name=name, value=pv)])
    return ros.call(SetParameters, f"{node}/set_parameters", request, timeout=30).results[0]


def get_parameter(ros, node, name) -> float:
    response = ros.call(
        GetParameters, f"{node}/get_parameters", GetParameters.Request(names=[name]), timeout=30
    )
    return response.values[0].double_value


def test_nan_on_the_command_line_and_in_a_params_file_is_logged_and_the_default_used(ros, procs, tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("/pin/sim:\n  ros__parameters:\n    no_frame_error: .nan\n    raed_timeout: 0.2\n")
    proc = procs.start_command(
        [
            str(executable(*SIM)),
            "--ros-args",
            "-r",
            "__node:=sim",
            "-r",
            "__ns:=/pin",
            "-p",
            "read_timeout:=.nan",
            "--params-file",
            str(params),
        ],
        label="sim",
    )
    ros.wait_state("/pin/sim", "unconfigured", timeout=30)
    assert get_parameter(ros, "/pin/sim", "read_timeout") == 0.1
    assert get_parameter(ros, "/pin/sim", "no_frame_error") == 1.0
    assert proc.wait_log("read_timeout must be a finite number", timeout=10), proc.log()
    assert proc.wait_log("no_frame_error must be a finite number", timeout=10), proc.log()
    # the unknown key is named, with the node, once
    assert proc.wait_log("raed_timeout", timeout=10), proc.log()
    line = [text for text in proc.log().splitlines() if "raed_timeout" in text]
    assert len(line) == 1 and "unknown parameter" in line[0] and "/pin/sim" in line[0], line
    # at runtime NaN is refused with the reason, and the value stays
    result = set_parameter(ros, "/pin/sim", "diagnostics_period", math.nan)
    assert not result.successful and "finite" in result.reason
    assert get_parameter(ros, "/pin/sim", "diagnostics_period") == 1.0
    assert proc.alive()


def test_a_tool_refuses_nan_the_same_way_and_names_unknown_keys(ros, procs, tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("/pin/gt:\n  ros__parameters:\n    timeout: .nan\n    bdy: robot\n")
    proc = procs.start_command(
        [
            str(executable(*GT)),
            "--ros-args",
            "-r",
            "__node:=gt",
            "-r",
            "__ns:=/pin",
            "-p",
            "twist_window:=.nan",
            "--params-file",
            str(params),
        ],
        label="gt",
    )
    assert proc.wait_log("twist_window must be a finite number", timeout=30), proc.log()
    assert proc.wait_log("timeout must be a finite number", timeout=10), proc.log()
    assert get_parameter(ros, "/pin/gt", "twist_window") == 0.05
    assert get_parameter(ros, "/pin/gt", "timeout") == 0.5
    assert proc.wait_log("bdy", timeout=10), proc.log()
    line = [text for text in proc.log().splitlines() if "bdy" in text]
    assert len(line) == 1 and "unknown parameter" in line[0] and "/pin/gt" in line[0], line
    result = set_parameter(ros, "/pin/gt", "twist_window", math.nan)
    assert not result.successful and "finite" in result.reason
    assert proc.alive()
