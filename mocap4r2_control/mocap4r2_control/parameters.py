"""ROS parameters in one vocabulary, for mocap systems and tools alike.

A :class:`ParameterSpec` says what a parameter is (default and therefore type,
description, validation). :func:`declare_parameters` declares a node's specs with one
policy: a bad value at start-up (wrong type, out of range, NaN) is logged with the
reason and replaced by the default, so a typo in a params file never kills a node;
:func:`check_parameters` refuses a bad value set at runtime with the reason, which
``ros2 param set`` prints.
"""

from __future__ import annotations

import array
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the spec itself is ROS-free, so adapters can be tested without rclpy
    from rcl_interfaces.msg import SetParametersResult
    from rclpy.node import Node
    from rclpy.parameter import Parameter


@dataclass(frozen=True)
class ParameterSpec:
    """A ROS parameter: default (its type is the parameter's type), description, and
    optional validation (choices, a range, or a function returning an error message or
    None). ``read_only`` parameters (topics, types) need a restart to change."""

    name: str
    default: Any
    description: str
    choices: Sequence[Any] | None = None
    min_value: float | None = None
    max_value: float | None = None
    check: Callable[[Any], str | None] | None = None
    read_only: bool = False

    def validate(self, value: Any) -> str | None:
        """An error message for ``value``, or None when it is acceptable."""
        expected = type(self.default)
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if expected is list:
            if not isinstance(value, (list, tuple)):
                return f"{self.name} must be a list, got {type(value).__name__}"
        elif not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            return f"{self.name} must be {expected.__name__}, got {type(value).__name__} {value!r}"
        # NaN compares false with every bound, so a range check alone lets it through
        if (
            isinstance(value, float)
            and not math.isfinite(value)
            and (self.min_value is not None or self.max_value is not None)
        ):
            return f"{self.name} must be a finite number, got {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"{self.name} must be one of {list(self.choices)}, got {value!r}"
        if self.min_value is not None and value < self.min_value:
            return f"{self.name} must be >= {self.min_value}, got {value!r}"
        if self.max_value is not None and value > self.max_value:
            return f"{self.name} must be <= {self.max_value}, got {value!r}"
        if self.check is not None:
            return self.check(value)
        return None


def plain_value(value: Any) -> Any:
    """Rclpy gives numeric arrays as array.array; the specs expect lists."""
    return list(value) if isinstance(value, array.array) else value


def declare_parameters(node: Node, specs: Sequence[ParameterSpec]) -> dict[str, ParameterSpec]:
    """Declare ``specs`` on ``node`` (descriptions included); a bad start-up value is
    logged and replaced by the default. Returns the specs by name."""
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.parameter import Parameter

    log = node.get_logger()
    declared: dict[str, ParameterSpec] = {}
    for spec in specs:
        declared[spec.name] = spec
        descriptor = ParameterDescriptor(description=spec.description, read_only=spec.read_only)
        # first declared writable: rclpy refuses to undeclare a read-only parameter, and a
        # bad value must be replaced (a read-only one is re-declared read-only below)
        writable = ParameterDescriptor(description=spec.description)
        # an empty list does not tell rclpy its element type: only string lists default to []
        default = Parameter.Type.STRING_ARRAY if spec.default == [] else spec.default
        try:
            value = plain_value(node.declare_parameter(spec.name, default, writable).value)
        except Exception as exc:  # wrong type from a params file, launch file or command line
            log.error(f"parameter {spec.name}: {exc}; using the default {spec.default!r}")
            node.declare_parameter(spec.name, default, descriptor, ignore_override=True)
            continue
        problem = spec.validate(spec.default if value is None else value)
        if problem:
            log.error(f"parameter {problem}; using the default {spec.default!r}")
        if problem or spec.read_only:
            node.undeclare_parameter(spec.name)
            keep = default if problem or value is None else value
            node.declare_parameter(spec.name, keep, descriptor, ignore_override=True)
    return declared


def warn_unknown_parameters(node: Node) -> list[str]:
    """Warn once, at start-up, about each value given to ``node`` (params file, launch
    file, ``-p``) that names no declared parameter: a misspelt key would otherwise leave
    the default in force without a word. Call after every parameter is declared.

    rclpy keeps the node's overrides in ``Node._parameter_overrides`` and offers no public
    accessor; without it nothing is reported. QoS overrides are declared later, by the
    publishers that use them, so they are not checked here."""
    overrides = getattr(node, "_parameter_overrides", None) or {}
    unknown = sorted(
        name for name in overrides if not name.startswith("qos_overrides.") and not node.has_parameter(name)
    )
    for name in unknown:
        node.get_logger().warning(
            f"unknown parameter {name!r} for node {node.get_fully_qualified_name()} "
            "is ignored (misspelt, or meant for another node?)"
        )
    return unknown


def check_parameters(
    specs: Mapping[str, ParameterSpec], params: Sequence[Parameter[Any]], log: Any
) -> SetParametersResult:
    """The answer to a runtime change: refused with the first problem, else accepted."""
    from rcl_interfaces.msg import SetParametersResult

    for param in params:
        spec = specs.get(param.name)
        if spec is None:
            continue
        problem = spec.validate(plain_value(param.value))
        if problem:
            log.warning(f"refused: {problem}")
            return SetParametersResult(successful=False, reason=problem)
    return SetParametersResult(successful=True)


def parameter_value(node: Node, spec: ParameterSpec) -> Any:
    """The current value of a declared spec (the default for an unset empty list)."""
    from rclpy.exceptions import ParameterUninitializedException

    try:
        value = plain_value(node.get_parameter(spec.name).value)
    except ParameterUninitializedException:  # declared by type only (an empty list)
        value = None
    return spec.default if value is None else value
