"""The rclpy half of the web panel: one node spun in one thread (announcements, acks,
/diagnostics, each system's frames in :mod:`.frame_feed`, lifecycle services), and a
bounded pool of worker threads for the calls that wait for answers (START/STOP acks,
lifecycle transitions, exports), so neither the executor nor the server's event loop
ever blocks on them."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from mocap4r2_control.control_plane import ControlClient, ControlResult

from ..recording.export import ExportError, export
from ..recording.session_id import session_dir
from ..recording.sessions import list_sessions
from .core import (
    VALID_TRANSITIONS,
    ControlRequest,
    History,
    LiveFrame,
    RequestError,
    shown_number,
    system_status,
)
from .frame_feed import FRAME_TYPES, FrameFeed

TRANSITION_IDS = {
    "configure": Transition.TRANSITION_CONFIGURE,
    "activate": Transition.TRANSITION_ACTIVATE,
    "deactivate": Transition.TRANSITION_DEACTIVATE,
}
#: calls waiting for answers at once (START/STOP, transitions, exports); more are refused
MAX_PENDING_CALLS = 8
#: acks and recorder answers kept for the page
MAX_LOG = 50


@dataclass
class Diagnostic:
    """A system's last /diagnostics status."""

    level: int
    message: str
    values: dict[str, str] = field(default_factory=dict)


class PanelRos:
    """The node, its executor thread and the worker pool. Everything the server reads
    from here is a copy taken under a lock."""

    def __init__(self, sessions_dir: Path, args: list[str] | None = None, node: Node | None = None):
        self.sessions_dir = sessions_dir
        self._own_context = node is None
        if node is None:
            self.context = rclpy.Context()
            rclpy.init(args=args, context=self.context)
            node = rclpy.create_node("web_panel", context=self.context)
        self.node = node
        self.control = ControlClient(node)
        self.feed = FrameFeed(node, self.control)
        self.frames = self.feed.frames
        self._lock = threading.Lock()
        self._diagnostics: dict[str, Diagnostic] = {}
        self._lifecycle: dict[str, Any] = {}
        self.log: list[dict[str, Any]] = []
        #: rate, latency and tracking of each system over the last minute (the page's plots)
        self.history = History()
        self._pending = threading.BoundedSemaphore(MAX_PENDING_CALLS)
        self._pool = ThreadPoolExecutor(MAX_PENDING_CALLS, thread_name_prefix="web-panel-call")
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        # new systems' frame topics are subscribed from the executor thread (a timer); the
        # worker pool only publishes requests and calls services (rclpy allows both from
        # any thread)
        self.feed.start(node)
        self._executor: SingleThreadedExecutor | None = None
        self._thread: threading.Thread | None = None
        if self._own_context:
            self._executor = SingleThreadedExecutor(context=self.context)
            self._executor.add_node(node)
            self._thread = threading.Thread(target=self._spin, name="web-panel-ros", daemon=True)
            self._thread.start()

    def _spin(self) -> None:
        assert self._executor is not None
        with contextlib.suppress(Exception):  # the context shut down while spinning
            self._executor.spin()

    # ---------------------------------------------------------------- ROS callbacks
    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        with self._lock:
            for status in msg.status[:256]:
                level = status.level[0] if isinstance(status.level, bytes) else int(status.level)
                values = {kv.key: kv.value for kv in status.values[:256]}
                self._diagnostics[status.hardware_id[:256]] = Diagnostic(level, status.message[:500], values)
                self.history.add(status.hardware_id[:256], time.monotonic(), values)
            while len(self._diagnostics) > 512:
                self._diagnostics.pop(next(iter(self._diagnostics)))

    # ---------------------------------------------------------------- reads (any thread)
    def systems(self) -> list[dict[str, Any]]:
        rows = []
        now = time.monotonic()
        with self._lock:
            diagnostics = dict(self._diagnostics)
        for name, info in self.control.systems(include_finalized=True).items():
            diag = diagnostics.get(name)
            values = diag.values if diag else {}
            ratios = {
                k.split("/", 1)[1]: v
                for k, v in values.items()
                if k.startswith("tracking_ratio/") and shown_number(v)
            }
            level = diag.level if diag else -1
            tone, status_text = system_status(
                info.state.label, level, diag.message if diag else "", info.type
            )
            rows.append(
                {
                    "system": name,
                    "type": info.type,
                    "state": info.state.label,
                    "rate": info.frame_rate,
                    "session": info.session_id,
                    "level": level,
                    "message": diag.message if diag else "",
                    "status": {"tone": tone, "text": status_text},
                    "transitions": list(VALID_TRANSITIONS.get(info.state.label, ())),
                    "history": self.history.series(name, now),
                    "measured_rate": shown_number(values.get("rate_hz", "")),
                    "latency_ms": shown_number(values.get("latency_mean_ms", "")),
                    "dropped": shown_number(values.get("dropped_frames_total", "")),
                    "tracking": ratios,
                    "recording": values.get("path", "") if info.type == "recorder" else "",
                    "live": any(t in FRAME_TYPES for t in info.topic_types),
                }
            )
        return rows

    def known_systems(self) -> list[str]:
        return list(self.control.systems(include_finalized=True))

    def sessions(self) -> list[dict[str, Any]]:
        if not self.sessions_dir.is_dir():
            return []
        return [s.as_dict() for s in list_sessions(self.sessions_dir)[-200:]]

    def frame_key(self, system: str) -> float | None:
        """When the newest message of ``system`` was taken (None: nothing yet), after
        taking what its subscriptions hold: a client asks when it is due a frame."""
        self.feed.take(system)
        return self.frames.newest(system)

    def live_frame(self, system: str) -> LiveFrame | None:
        """The latest frame of ``system`` in the page's form (see FrameFeed.live_frame)."""
        return self.feed.live_frame(system)

    # ---------------------------------------------------------------- calls (worker pool)
    def submit(self, function: Any, *args: Any) -> Future:
        """Run a waiting call on the pool; refused (RequestError) when MAX_PENDING_CALLS
        are already waiting, so a page clicking fast cannot pile up threads."""
        if not self._pending.acquire(blocking=False):
            raise RequestError(f"{MAX_PENDING_CALLS} requests are already waiting for answers; try again")
        future = self._pool.submit(function, *args)
        future.add_done_callback(lambda _: self._pending.release())
        return future

    def control_call(self, request: ControlRequest, start: bool, timeout: float = 10.0) -> dict[str, Any]:
        call = self.control.start if start else self.control.stop
        result: ControlResult = call(systems=request.systems, session_id=request.session_id, timeout=timeout)
        answer = {
            "command": "START" if start else "STOP",
            "request_id": result.request_id,
            "session_id": request.session_id,
            "ok": result.ok,
            "acks": [
                {
                    "system": a.system,
                    "success": bool(a.success),
                    "message": a.message,
                    "stamp": a.stamp.sec + a.stamp.nanosec * 1e-9,
                    "recorder": self._is_recorder(a.system),
                }
                for a in sorted(result.acks, key=lambda a: a.system)
            ],
            "missing": result.missing,
            "time": time.time(),
        }
        with self._lock:
            self.log.append(answer)
            del self.log[:-MAX_LOG]
        return answer

    def _is_recorder(self, system: str) -> bool:
        info = self.control.systems(include_finalized=True).get(system)
        return info is not None and info.type == "recorder"

    def transition(self, system: str, transition: str, timeout: float = 10.0) -> dict[str, Any]:
        with self._lock:
            client = self._lifecycle.get(system)
            if client is None:
                client = self._lifecycle[system] = self.node.create_client(
                    ChangeState, f"{system}/change_state"
                )
        if not client.wait_for_service(timeout_sec=min(timeout, 3.0)):
            return {"system": system, "transition": transition, "success": False, "message": "no service"}
        request = ChangeState.Request()
        request.transition.id = TRANSITION_IDS[transition]
        future = client.call_async(request)
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        if not done.wait(timeout):
            return {"system": system, "transition": transition, "success": False, "message": "no answer"}
        response = future.result()
        success = bool(response is not None and response.success)
        return {
            "system": system,
            "transition": transition,
            "success": success,
            "message": "" if success else "refused in this state",
        }

    def export_session(self, session: str, fmt: str, system: str | None, out_dir: Path) -> list[Path]:
        bag = session_dir(self.sessions_dir, session)
        if not bag.is_dir():
            raise RequestError(f"no session {session!r} in {self.sessions_dir}")
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            return export(bag, fmt, system, out_dir)
        except ExportError as exc:
            raise RequestError(str(exc)) from exc

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_context:
            assert self._executor is not None and self._thread is not None
            self._executor.shutdown(timeout_sec=1.0)
            self.feed.node.destroy_node()
            self.node.destroy_node()
            if self.context.ok():
                rclpy.shutdown(context=self.context)
            self._thread.join(timeout=2.0)
