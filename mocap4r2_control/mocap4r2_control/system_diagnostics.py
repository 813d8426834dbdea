"""A mocap system's /diagnostics: one DiagnosticStatus per period, from the frame
statistics, the adapter's status, the pass-through's, the stamper's, the topic inputs',
the service offers' and the control plane's counters."""

from __future__ import annotations

import time
from typing import Protocol

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State
from rclpy.node import Node

from .adapter import MocapAdapter
from .control_plane import STATE_LABELS, ControlPlaneMember
from .diagnostic_cdr import StatusFields, encode_diagnostic_array
from .diagnostics import FrameStatistics
from .frame_output import FrameOutput
from .frame_reader import FrameReader
from .ros_logging import NodeLogRoute
from .service_offers import ServiceOffers
from .timebase import split_seconds
from .topic_inputs import TopicSubscriptions

#: how long a report waits for the reader's next hand-over (FrameReader.wait_for_gap), s:
#: a frame period at 50 Hz and above; at lower rates a report seldom meets a frame anyway
GAP_WAIT_S = 0.02


class DiagnosedSystem(Protocol):
    """What the report reads of a system (MocapSystemNode is one). Declared here, so that
    this module does not import the node that owns it."""

    adapter: MocapAdapter | None
    adapter_class: type[MocapAdapter]
    log_route: NodeLogRoute
    control: ControlPlaneMember
    output: FrameOutput
    reader: FrameReader
    stats: FrameStatistics
    inputs: TopicSubscriptions
    offers: ServiceOffers

    @property
    def state_id(self) -> int: ...


class SystemDiagnostics:
    """Publishes a system node's report on /diagnostics every ``period`` seconds."""

    def __init__(self, node: Node, system: DiagnosedSystem, period: float):
        """``node`` publishes (ROS), ``system`` is reported on (MocapSystemNode passes
        itself for both)."""
        self.ros = node
        self.node = system
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._timer = node.create_timer(period, self.publish)

    def publish(self) -> None:
        # in two parts, each begun right after one of the reader's hand-overs (at 50 bodies
        # the figures take about 0.4 ms, the bytes and the publish about 0.2 ms): the whole
        # report, 0.6-0.9 ms, did not fit between two frames at 1 kHz, and the frame it
        # overran waited for the interpreter
        reader = self.node.reader
        try:
            reader.wait_for_gap(GAP_WAIT_S)
            with self.node.log_route.active():
                status = self._status()
            reader.wait_for_gap(GAP_WAIT_S)
            # serialized here, not as message objects (diagnostic_cdr.py says why)
            sec, nanosec = split_seconds(time.time())
            self._pub.publish(encode_diagnostic_array(sec, nanosec, "", [status]))
        except Exception as exc:  # noqa: BLE001 - a report must never take the node down
            self.ros.get_logger().error(f"diagnostics report failed: {exc!r}", throttle_duration_sec=10.0)

    def _status(self) -> StatusFields:
        node = self.node
        adapter = node.adapter
        try:
            extra = adapter.status() if adapter is not None else {}
        except Exception as exc:  # noqa: BLE001
            extra = {"adapter_status_error": str(exc)}
        counters = {k: str(v) for k, v in node.control.counters().items()}
        extra = {
            **extra,
            **node.output.pass_through.status(),
            **node.output.stamper.status(),
            **node.inputs.status(),
            **node.offers.status(),
            **counters,
        }
        return node.stats.report(
            name=f"{self.ros.get_fully_qualified_name()}: {node.adapter_class.system_type} mocap system",
            hardware_id=self.ros.get_fully_qualified_name(),
            active=node.state_id == State.PRIMARY_STATE_ACTIVE,
            state_label=STATE_LABELS.get(node.state_id, "unknown"),
            nominal_rate=float(adapter.nominal_rate) if adapter is not None else 0.0,
            extra={k: str(v) for k, v in extra.items()},
        )
