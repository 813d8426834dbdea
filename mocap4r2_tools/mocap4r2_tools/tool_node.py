"""What the tool nodes share: declared, described and validated parameters, and main().

Parameters are :class:`~mocap4r2_control.adapter.ParameterSpec` (as a driver's are).
A bad value at start-up is logged with the reason and replaced by the default, so a
typo never kills the node; a bad value set at runtime is refused with the reason.
Parameters marked ``read_only`` (topics, types) need a restart; the others are applied
at once through :meth:`ToolNode.on_parameters_changed`.
"""
from __future__ import annotations

import array
import warnings
from typing import Any, Callable, Sequence

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter

from mocap4r2_control.adapter import ParameterSpec
from mocap4r2_control.spin import run_node


class ToolNode(Node):
    def __init__(self, node_name: str, specs: Sequence[ParameterSpec], **kwargs: Any):
        super().__init__(node_name, **kwargs)
        self._specs = {spec.name: spec for spec in specs}
        for spec in specs:
            self._declare(spec)
        self.add_on_set_parameters_callback(self._check_change)
        self.add_post_set_parameters_callback(self._after_change)

    def _declare(self, spec: ParameterSpec) -> None:
        log = self.get_logger()
        descriptor = ParameterDescriptor(description=spec.description, read_only=spec.read_only)
        # an empty list does not tell rclpy its element type: only string lists default to []
        default = Parameter.Type.STRING_ARRAY if spec.default == [] else spec.default
        try:
            value = _plain(self.declare_parameter(spec.name, default, descriptor).value)
        except Exception as exc:  # wrong type from a params file or the command line
            log.error(f"parameter {spec.name}: {exc}; using the default {spec.default!r}")
            self.declare_parameter(spec.name, default, descriptor, ignore_override=True)
            return
        problem = spec.validate(spec.default if value is None else value)
        if problem:
            log.error(f"parameter {problem}; using the default {spec.default!r}")
            # read-only parameters cannot be set again: redeclare with the default
            self.undeclare_parameter(spec.name)
            self.declare_parameter(spec.name, default, descriptor, ignore_override=True)

    def _check_change(self, params: list[Parameter]) -> SetParametersResult:
        for param in params:
            spec = self._specs.get(param.name)
            if spec is None:
                continue
            problem = spec.validate(_plain(param.value))
            if problem:
                self.get_logger().warning(f"refused: {problem}")
                return SetParametersResult(successful=False, reason=problem)
        return SetParametersResult(successful=True)

    def _after_change(self, params: list[Parameter]) -> None:
        names = {p.name for p in params if p.name in self._specs}
        if names and getattr(self, "_ready", False):
            self.on_parameters_changed(names)

    def value(self, name: str) -> Any:
        try:
            value = _plain(self.get_parameter(name).value)
        except ParameterUninitializedException:  # declared by type only (an empty list)
            value = None
        return self._specs[name].default if value is None else value

    def values(self) -> dict[str, Any]:
        return {name: self.value(name) for name in self._specs}

    def mark_ready(self) -> None:
        """From now on parameter changes reach on_parameters_changed."""
        self._ready = True

    def on_parameters_changed(self, names: set[str]) -> None:
        """Apply changed (validated, not read-only) parameters."""


def run_tool(make_node: Callable[[], Node], args: list[str] | None = None) -> int:
    """main() of a tool: spin until Ctrl-C/SIGTERM, leave cleanly."""
    # one thread: the tools keep state across callbacks and need no locks; run_node's
    # executor warns about a single thread, which is the point here
    warnings.filterwarnings("ignore", message="MultiThreadedExecutor is used with a single thread")
    return run_node(make_node, None, args, threads=1)


def _plain(value: Any) -> Any:
    """rclpy gives numeric arrays as array.array; the specs expect lists."""
    return list(value) if isinstance(value, array.array) else value


def frame_check(name: str, allow_empty: bool = False) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if (not value and not allow_empty) or value.startswith("/") or " " in value:
            return f"{name} must be a tf frame name without a leading '/' or spaces, got {value!r}"
        return None
    return check


def topic_check(name: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not value or " " in value or value.endswith("/"):
            return f"{name} must be a topic name, got {value!r}"
        return None
    return check


def vector_check(name: str, length: int) -> Callable[[list], str | None]:
    def check(value: list) -> str | None:
        if len(value) != length or not all(isinstance(v, (int, float)) for v in value):
            return f"{name} must be a list of {length} numbers, got {value!r}"
        return None
    return check
