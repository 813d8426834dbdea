"""A mocap system's /diagnostics: one DiagnosticStatus per period, from the frame
statistics, the adapter's status, the pass-through's, the stamper's and the control
plane's counters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State

from .control_plane import STATE_LABELS
from .timebase import time_msg

if TYPE_CHECKING:
    from .system_node import MocapSystemNode


class SystemDiagnostics:
    """Publishes a system node's report on /diagnostics every ``period`` seconds."""

    def __init__(self, node: MocapSystemNode, period: float):
        self.node = node
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._timer = node.create_timer(period, self.publish)

    def publish(self) -> None:
        try:
            with self.node.log_route.active():
                self._report()
        except Exception as exc:  # noqa: BLE001 - a report must never take the node down
            self.node.get_logger().error(f"diagnostics report failed: {exc!r}", throttle_duration_sec=10.0)

    def _report(self) -> None:
        node = self.node
        adapter = node.adapter
        try:
            extra = adapter.status() if adapter is not None else {}
        except Exception as exc:  # noqa: BLE001
            extra = {"adapter_status_error": str(exc)}
        counters = {k: str(v) for k, v in node.control.counters().items()}
        extra = {**extra, **node.output.pass_through.status(), **node.output.stamper.status(), **counters}
        status = node.stats.report(
            name=f"{node.get_fully_qualified_name()}: {node.adapter_class.system_type} mocap system",
            hardware_id=node.get_fully_qualified_name(),
            active=node.state_id == State.PRIMARY_STATE_ACTIVE,
            state_label=STATE_LABELS.get(node.state_id, "unknown"),
            nominal_rate=float(adapter.nominal_rate) if adapter is not None else 0.0,
            extra={k: str(v) for k, v in extra.items()},
        )
        array = DiagnosticArray()
        array.header.stamp = time_msg()
        array.status = [status]
        self._pub.publish(array)
