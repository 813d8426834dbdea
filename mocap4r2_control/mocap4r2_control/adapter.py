"""What a vendor adapter is: connect, read asset names, read frames, disconnect.

An adapter knows its mocap system and nothing of ROS. The
:class:`~mocap4r2_control.system_node.MocapSystemNode` owns one adapter, calls
``connect`` on configure, ``read_frame`` in its reader thread while active, and
``disconnect`` on cleanup and shutdown.

Adapters declare their own parameters as :class:`ParameterSpec`; the node declares
them (with descriptions), validates every value, and passes the current values to
``from_parameters`` when it configures.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

from .frame import AssetNames, MocapFrame


class AdapterError(RuntimeError):
    """A failure the node reports as such (cannot connect, server gone, ...)."""


@dataclass(frozen=True)
class ParameterSpec:
    """A ROS parameter of a system: default (its type is the parameter's type),
    description, and optional validation (choices, a range, or a function returning an
    error message or None)."""

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
        if self.choices is not None and value not in self.choices:
            return f"{self.name} must be one of {list(self.choices)}, got {value!r}"
        if self.min_value is not None and value < self.min_value:
            return f"{self.name} must be >= {self.min_value}, got {value!r}"
        if self.max_value is not None and value > self.max_value:
            return f"{self.name} must be <= {self.max_value}, got {value!r}"
        if self.check is not None:
            return self.check(value)
        return None


class MocapAdapter(abc.ABC):
    """One mocap system behind the neutral frame type.

    Subclasses set ``system_type`` (MocapSystemInfo.type: "optitrack", "sim", ...) and
    ``parameters``, and implement the four methods. ``read_frame`` is called from the
    node's reader thread only; ``connect``/``disconnect`` from the executor, never
    concurrently with ``read_frame``.
    """

    system_type: ClassVar[str] = "unknown"
    parameters: ClassVar[Sequence[ParameterSpec]] = ()

    @classmethod
    @abc.abstractmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> "MocapAdapter":
        """Build an adapter from the current values of ``parameters``."""

    @abc.abstractmethod
    def connect(self) -> AssetNames:
        """Connect to the system and return the names of its assets.

        Raise AdapterError (or any exception) with a reason a user can act on."""

    @abc.abstractmethod
    def read_frame(self, timeout: float) -> MocapFrame | None:
        """The next frame, blocking at most ``timeout`` seconds; None when none came.

        Raise AdapterError when the connection is lost for good; a frame that cannot be
        decoded is dropped by the adapter (it counts and logs it) rather than raised."""

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Release sockets, SDK handles and threads. Must be safe to call twice."""

    @property
    def nominal_rate(self) -> float:
        """Nominal frame rate in Hz, 0 when unknown."""
        return 0.0

    def start_streaming(self) -> None:
        """Called on activate before the reader thread starts (optional)."""

    def stop_streaming(self) -> None:
        """Called on deactivate after the reader thread stopped (optional)."""

    def status(self) -> dict[str, str]:
        """Extra key/values for /diagnostics (e.g. decode errors, server version)."""
        return {}
