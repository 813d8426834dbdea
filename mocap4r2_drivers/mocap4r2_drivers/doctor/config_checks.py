"""A params file against the system's ParameterSpecs: every key known, every value
accepted by the spec's own validation (the one the node applies at start-up), and the
addresses on the subnet of a local interface."""

from __future__ import annotations

import difflib
import importlib
import ipaddress
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_drivers import registry

from .network_checks import Interface
from .report import Check, failed, passed, warned

AREA = "configuration"

# parameters that hold an address of a remote server (checked against local subnets)
SERVER_ADDRESS_KEYS = ("server_address", "host")
# parameters rclpy itself accepts for every node
ROS_KEYS = frozenset({"use_sim_time", "start_type_description_service"})


def system_specs(system: str) -> dict[str, ParameterSpec]:
    """Every parameter a system's node declares: the common ones and its adapter's (the
    adapter named by the system's row in registry.py; ImportError where its package is
    not installed)."""
    # imported here, as the system's adapter: each pulls in rclpy and its driver, and the
    # `mocap4r2` command line loads this module for every verb it lists
    from mocap4r2_control.system_node import BASE_PARAMETERS

    row = registry.get(system)
    adapter = getattr(importlib.import_module(row.module), row.adapter_class)
    return {spec.name: spec for spec in (*BASE_PARAMETERS, *adapter.parameters)}


def docs_page(system: str) -> str:
    """Where a user reads about ``system``'s parameters."""
    page = registry.get(system).docs
    return f"docs/{page}" if page else "README.md"


def read_params_file(path: Path) -> dict[str, dict[str, Any]]:
    """``node name -> ros__parameters`` of a ROS 2 params file (nested namespaces
    flattened to their node name); ValueError saying what is wrong with the file."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    found: dict[str, dict[str, Any]] = {}

    def walk(node: Any, name: str) -> None:
        if not isinstance(node, Mapping):
            return
        for key, value in node.items():
            if key == "ros__parameters" and isinstance(value, Mapping):
                found[name or "/**"] = _flatten(value)
            else:
                walk(value, f"{name}/{key}" if name else str(key))

    walk(document, "")
    if not found:
        raise ValueError(f"{path} has no 'ros__parameters' section")
    return found


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings are dotted parameter names, as ROS reads them."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def check_parameters(
    system: str, sections: Mapping[str, Mapping[str, Any]], specs: Mapping[str, ParameterSpec]
) -> list[Check]:
    """One FAIL per unknown key (with the closest known name) and per refused value."""
    out: list[Check] = []
    for node, values in sections.items():
        for key, value in values.items():
            if key in ROS_KEYS or key.startswith("qos_overrides."):
                continue
            spec = specs.get(key)
            if spec is None:
                close = difflib.get_close_matches(key, list(specs), n=1)
                fix = f"did you mean {close[0]}? " if close else ""
                out.append(
                    failed(
                        f"parameter {key} ({node})",
                        f"{system} has no parameter {key!r}: the node ignores it and keeps its default",
                        fix + f"remove it or use one of {system}'s parameters ({docs_page(system)})",
                        AREA,
                    )
                )
                continue
            problem = spec.validate(value)
            if problem:
                out.append(
                    failed(
                        f"parameter {key} ({node})",
                        f"{problem}: the node logs it and uses the default {spec.default!r}",
                        f"{spec.description} Give a valid value.",
                        AREA,
                    )
                )
    if not out:
        count = sum(len(v) for v in sections.values())
        out.append(passed("params file keys and values", f"{count} parameters, all known and valid", AREA))
    return out


def check_address_subnets(
    values: Mapping[str, Any], interfaces: Sequence[Interface], keys: Sequence[str] = SERVER_ADDRESS_KEYS
) -> list[Check]:
    """A server address off every local subnet goes through a router (WARN); a
    local_address that is no address of this machine cannot be bound (FAIL)."""
    out: list[Check] = []
    for key in keys:
        value = values.get(key)
        if not isinstance(value, str):
            continue
        try:
            address = ipaddress.IPv4Address(value)
        except ValueError:
            continue  # a host name, or a bad value reported by check_parameters
        subnet = next((i for i in interfaces if address in i.network), None)
        if subnet is None:
            mine = ", ".join(f"{i.name} {i.network}" for i in interfaces)
            out.append(
                warned(
                    f"{key} on a local subnet",
                    f"{value} is on none of this machine's subnets ({mine})",
                    "give this machine an address on the server's subnet (mocap belongs on one "
                    "switch; multicast does not cross routers), or correct the address",
                    AREA,
                )
            )
        else:
            out.append(
                passed(f"{key} on a local subnet", f"{value} is on {subnet.name}'s {subnet.network}", AREA)
            )
    return out
