"""What the tool nodes share: declared, described and validated parameters, and main().

Parameters are :class:`~mocap4r2_control.parameters.ParameterSpec`, declared with the
same policy as a mocap system's (:mod:`mocap4r2_control.parameters`).
Parameters marked ``read_only`` (topics, types) need a restart; the others are applied
at once through :meth:`ToolNode.on_parameters_changed`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from rclpy.node import Node
from rclpy.parameter import Parameter

from mocap4r2_control.parameters import (ParameterSpec, check_parameters, declare_parameters, parameter_value,
                                         warn_unknown_parameters)
from mocap4r2_control.spin import run_node


class ToolNode(Node):
    def __init__(self, node_name: str, specs: Sequence[ParameterSpec], **kwargs: Any):
        super().__init__(node_name, **kwargs)
        self._specs = declare_parameters(self, specs)
        warn_unknown_parameters(self)
        self.add_on_set_parameters_callback(
            lambda params: check_parameters(self._specs, params, self.get_logger()))
        self.add_post_set_parameters_callback(self._after_change)

    def _after_change(self, params: list[Parameter]) -> None:
        names = {p.name for p in params if p.name in self._specs}
        if names and getattr(self, "_ready", False):
            self.on_parameters_changed(names)

    def value(self, name: str) -> Any:
        return parameter_value(self, self._specs[name])

    def values(self) -> dict[str, Any]:
        return {name: self.value(name) for name in self._specs}

    def mark_ready(self) -> None:
        """From now on parameter changes reach on_parameters_changed."""
        self._ready = True

    def on_parameters_changed(self, names: set[str]) -> None:
        """Apply changed (validated, not read-only) parameters."""


def run_tool(make_node: Callable[[], Node], args: list[str] | None = None) -> int:
    """main() of a tool: spin until Ctrl-C/SIGTERM, leave cleanly."""
    # one thread: the tools keep state across callbacks and need no locks, and a
    # single-threaded executor sleeps while nothing arrives (see mocap4r2_control.spin)
    return run_node(make_node, None, args, threads=1)


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
