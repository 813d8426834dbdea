"""`mocap4r2 doctor`: every check of a lab's setup, one table (or JSON), exit 1 on a FAIL.

    mocap4r2 doctor --system optitrack --params-file config/optitrack.yaml
    mocap4r2 doctor --json          # ROS and time checks only, machine-readable

Every system of registry.py can be checked: its parameters, then its own probe
(probes.py; the row names it), then the ROS graph with the topics it reads.

The values checked are the system's defaults overridden by the params file, as the node
would see them (a refused value is reported and the default used, as the node does).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import shutil
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mocap4r2_drivers import registry

from . import config_checks, network_checks, probes, ros_checks, server_checks, time_checks
from .report import Check, as_json, as_text, exit_code, failed

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


def probe_of(system: str) -> probes.Probe | None:
    """The doctor's probe of ``system``, as its row in registry.py names it (None: only
    its parameters can be checked)."""
    row = registry.get(system)
    if not row.probe:
        return None
    module, _, function = row.probe.partition(":")
    probe: probes.Probe = getattr(importlib.import_module(module), function)
    return probe


def network_and_server(system: str, values: dict[str, Any], timeout: float) -> list[Check]:
    """The system's own probe; first, for a system that talks to a server, the route and
    interfaces that reach it (the probe is given them)."""
    probe = probe_of(system)
    name = _server_address(values)
    if name is None:
        return probe(probes.Target(values, timeout)) if probe is not None else []
    out: list[Check] = []
    try:  # a host name (VRPN, Vicon, QTM accept them) to the address the checks compare
        server = str(socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0])
    except (OSError, IndexError) as exc:
        return [failed("server address", f"cannot resolve {name}: {exc}", "check the host name", "network")]
    interfaces = network_checks.local_interfaces()
    try:
        route = network_checks.route_to(server)
        out.append(network_checks.check_route(server, route))
    except OSError as exc:
        out.append(network_checks.check_route(server, None, exc.strerror or str(exc)))
        return out
    out.append(network_checks.check_link(next((i for i in interfaces if i.name == route.dev), None)))
    out.append(network_checks.check_subnet_interfaces(server, interfaces, route))
    out += config_checks.check_address_subnets(values, interfaces)
    if probe is not None:
        out += probe(probes.Target(values, timeout, server, interfaces, route))
    return out


def input_topics(system: str, values: dict[str, Any]) -> list[str]:
    """The ROS topics ``system`` reads (its registry row's ``input_topics`` parameter)."""
    key = registry.get(system).input_topics
    if not key:
        return []
    value = values.get(key, [])
    return [str(t) for t in ([value] if isinstance(value, str) else value) if str(t)]


def ros_and_time(wait: float, inputs: Sequence[str] = (), system: str = "") -> list[Check]:
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
        if inputs:
            key = registry.get(system).input_topics
            out += ros_checks.check_publishers(
                session.node,
                inputs,
                f"{system}'s input",
                f"start what publishes it ({config_checks.docs_page(system)}), or correct {key}",
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
    inputs: list[str] = []
    if system is not None:
        try:
            specs = config_checks.system_specs(system)
        except (ImportError, RuntimeError) as exc:  # its package is not installed, or cannot load
            specs = None
            out.append(probes.unavailable(system, exc))
        if specs is not None:
            sections: dict[str, dict[str, Any]] = {}
            if params_file is not None:
                try:
                    sections = config_checks.read_params_file(params_file)
                except ValueError as exc:
                    out.append(failed("params file", str(exc), "give a ROS 2 params file", "configuration"))
                out += config_checks.check_parameters(system, sections, specs)
            values = effective_values(specs, sections)
            out += network_and_server(system, values, timeout)
            inputs = input_topics(system, values)
    if ros:
        out += ros_and_time(wait, inputs, system or "")
    else:
        out.append(time_checks.check_host_clock(time_checks.kernel_sync(), time_checks.chrony_tracking()))
    return out


DESCRIPTION = """\
Check a lab's mocap setup end to end, each finding with the evidence seen and its fix:
the params file against the system's parameters, the network path to the server (route,
link, subnet, multicast, MTU, firewall), the server itself with the driver's own
protocol code (NatNet, QTM RT, VRPN, Vicon's port), a replay's file, the tracker's
bodies and compiled kernels, the ROS graph (domain, discovery, announced systems, QoS,
input topics) and the host clock.

PASS: checked and works. WARN: works, but fragile. FAIL: no data until fixed (exit 1).
INFO: shown, nothing to judge. SKIP: could not be checked here (it says why)."""

EXAMPLES = """\
examples:
  mocap4r2 doctor --system optitrack --params-file config/optitrack.yaml
  mocap4r2 doctor --system vrpn --params-file config/vrpn.yaml --no-ros
  mocap4r2 doctor --system replay --params-file config/replay.yaml   # the file, readable and known
  mocap4r2 doctor --system tracker --timeout 60   # first run: let numba fill its cache
  mocap4r2 doctor --json                          # ROS and time only, machine-readable"""


def colour_wanted() -> bool:
    """Colour only on a terminal, and not when NO_COLOR is set (https://no-color.org: any
    value but the empty string)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def terminal_width() -> int | None:
    """The terminal's width to wrap the table to; None for a file or a pipe (one line per
    check)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


class DoctorCommand:
    """The ``doctor`` verb."""

    help = "check the network, the mocap server, the params, ROS and time; each finding with its fix"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--params-file", type=Path, help="the system's ROS 2 params file")
        parser.description = DESCRIPTION
        parser.epilog = EXAMPLES
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.add_argument(
            "--system",
            choices=registry.names(),
            metavar="SYSTEM",
            help=f"the mocap system to check, one of: {', '.join(registry.names())}",
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
            sys.stdout.write(as_text(checks, colour=colour_wanted(), width=terminal_width()))
        return exit_code(checks)
