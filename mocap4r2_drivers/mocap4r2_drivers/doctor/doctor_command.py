"""`mocap4r2 doctor`: every check of a lab's setup, one table (or JSON), exit 1 on a FAIL.

    mocap4r2 doctor --system optitrack --params-file config/optitrack.yaml
    mocap4r2 doctor --json          # ROS and time checks only, machine-readable

The values checked are the system's defaults overridden by the params file, as the node
would see them (a refused value is reported and the default used, as the node does).
"""

from __future__ import annotations

import argparse
import math
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from . import config_checks, network_checks, ros_checks, server_checks, time_checks
from .report import Check, as_json, as_table, exit_code, failed

# rclpy, the ROS messages and the drivers' system modules are imported inside the
# functions that use them: the `mocap4r2` command line imports this module for every verb
# it lists (`mocap4r2 systems` too), and they take about a second to load.


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse's type for --timeout and --wait)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 600 s, got {text!r}")
    return value


def effective_values(specs: dict[str, Any], sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Defaults, overridden by every section's valid values (in file order)."""
    values = {name: spec.default for name, spec in specs.items()}
    for section in sections.values():
        for key, value in section.items():
            spec = specs.get(key)
            if spec is not None and spec.validate(value) is None:
                values[key] = float(value) if isinstance(spec.default, float) else value
    return values


def _server_address(values: dict[str, Any]) -> str | None:
    """The server's host from a system's values, without a scheme or port."""
    for key in config_checks.SERVER_ADDRESS_KEYS:
        value = values.get(key)
        if isinstance(value, str) and value:
            return value.removeprefix("tcp://").split(":")[0]
    return None


def network_and_server(system: str, values: dict[str, Any], timeout: float) -> list[Check]:
    """Route, interfaces and the server's answer for a system that talks to one."""
    name = _server_address(values)
    if name is None:
        return []
    out: list[Check] = []
    try:  # a host name (VRPN, Vicon, QTM accept them) to the address the checks compare
        server = str(socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0])
    except (OSError, IndexError) as exc:
        return [failed("server address", f"cannot resolve {name}: {exc}", "check the host name", "network")]
    interfaces = network_checks.local_interfaces()
    route: network_checks.Route | None = None
    try:
        route = network_checks.route_to(server)
        out.append(network_checks.check_route(server, route))
    except OSError as exc:
        out.append(network_checks.check_route(server, None, exc.strerror or str(exc)))
        return out
    out.append(network_checks.check_link(next((i for i in interfaces if i.name == route.dev), None)))
    out.append(network_checks.check_subnet_interfaces(server, interfaces, route))
    out += config_checks.check_address_subnets(values, interfaces)
    if system == "optitrack":
        out += _optitrack(values, interfaces, route, timeout)
    elif system == "qualisys":
        out += server_checks.probe_qtm(server, int(values["port"]), str(values["protocol_version"]), timeout)
    elif system == "vrpn":
        out.append(server_checks.probe_vrpn(server, int(values["port"]), str(values["connection"]), timeout))
    elif system == "vicon":
        out.append(
            server_checks.probe_tcp(
                "Vicon DataStream server",
                server,
                int(values["port"]),
                "start Nexus/Tracker/Shogun with the DataStream server on; set host and port (801)",
                timeout,
            )
        )
    return out


def _optitrack(
    values: dict[str, Any],
    interfaces: list[network_checks.Interface],
    route: network_checks.Route,
    timeout: float,
) -> list[Check]:
    from mocap4r2_drivers.optitrack.optitrack_system import OptiTrackAdapter

    config = OptiTrackAdapter.from_parameters(values).config
    local = network_checks.check_local_address(config.local_address, config.server_address, interfaces, route)
    out = [local]
    if local.status.value == "FAIL":
        return out  # the probe would fail for the same reason
    probe = server_checks.probe_natnet(config, timeout)
    joining = probe.local_address or route.src
    joining_dev = next((i.name for i in interfaces if i.address == joining), "")
    if config.connection_type == "multicast":
        try:
            group_route: network_checks.Route | None = network_checks.route_to(config.multicast_address)
        except OSError:
            group_route = None
        out.append(
            network_checks.check_multicast(config.multicast_address, joining, joining_dev, group_route)
        )
    out += probe.checks
    if probe.frame_bytes:
        out.append(
            network_checks.check_mtu(
                probe.frame_bytes, next((i for i in interfaces if i.name == joining_dev), None)
            )
        )
    out.append(network_checks.check_udp_to_self(joining, config.data_port))
    return out


def ros_and_time(wait: float, pose_topics: Sequence[str] = ()) -> list[Check]:
    """The ROS checks through a ControlSession of its own, then the host clock."""
    from diagnostic_msgs.msg import DiagnosticArray

    from mocap4r2_control.control_plane import ControlSession

    env, rmw = ros_checks.ros_environment()
    out = ros_checks.check_environment(env, rmw)
    latest: dict[str, dict[str, str]] = {}

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            latest[status.hardware_id] = {kv.key: kv.value for kv in status.values}

    session = ControlSession(args=["mocap4r2_doctor"])
    try:
        session.node.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, 50)
        systems = session.client.wait_for_systems(count=1, timeout=wait, min_wait=wait)
        out += ros_checks.check_systems(systems)
        out += ros_checks.check_qos(session.node, ros_checks.data_topics(session.node, systems))
        out += ros_checks.check_publishers(
            session.node,
            pose_topics,
            "Gazebo poses",
            "bridge the PosePublisher's pose topic: ros_gz_bridge parameter_bridge "
            "<topic>@tf2_msgs/msg/TFMessage[gz.msgs.Pose_V (docs/gazebo.md); or correct pose_topics",
        )
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(name not in latest for name in systems):
            time.sleep(0.05)  # polling the callback's dict; bounded by --wait
        for name in systems:
            if name in latest:
                out.append(time_checks.check_clock_model(name, latest[name]))
    finally:
        session.close()
    out.append(time_checks.check_host_clock(time_checks.kernel_sync(), time_checks.chrony_tracking()))
    return out


def run_checks(
    system: str | None, params_file: Path | None, timeout: float, wait: float, ros: bool = True
) -> list[Check]:
    """Every check that applies: configuration, network and server for ``system``, ROS, time."""
    out: list[Check] = []
    pose_topics: list[str] = []
    if system is not None:
        specs = config_checks.system_specs(system)
        sections: dict[str, dict[str, Any]] = {}
        if params_file is not None:
            try:
                sections = config_checks.read_params_file(params_file)
            except ValueError as exc:
                out.append(failed("params file", str(exc), "give a ROS 2 params file", "configuration"))
            out += config_checks.check_parameters(system, sections, specs)
        values = effective_values(specs, sections)
        out += network_and_server(system, values, timeout)
        if system == "gazebo":
            pose_topics = [str(t) for t in values["pose_topics"]]
    if ros:
        out += ros_and_time(wait, pose_topics)
    else:
        out.append(time_checks.check_host_clock(time_checks.kernel_sync(), time_checks.chrony_tracking()))
    return out


class DoctorCommand:
    """The ``doctor`` verb."""

    help = "check the network, the mocap server, the params, ROS and time; each finding with its fix"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--params-file", type=Path, help="the system's ROS 2 params file")
        parser.add_argument(
            "--system", choices=sorted(config_checks.SYSTEMS), help="the mocap system to check"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        parser.add_argument(
            "--timeout", type=_seconds, default=server_checks.STEP_TIMEOUT, help="seconds per server step (2)"
        )
        parser.add_argument(
            "--wait", type=_seconds, default=2.0, help="seconds to listen for systems and diagnostics (2)"
        )
        parser.add_argument("--no-ros", action="store_true", help="skip the ROS checks")

    def main(self, args: argparse.Namespace) -> int:
        if args.params_file is not None and args.system is None:
            print("mocap4r2 doctor: --params-file needs --system", file=sys.stderr)
            return 2
        checks = run_checks(args.system, args.params_file, args.timeout, args.wait, ros=not args.no_ros)
        if args.json:
            print(as_json(checks))
        else:
            Console(width=None if sys.stdout.isatty() else 200).print(as_table(checks))
        return exit_code(checks)
