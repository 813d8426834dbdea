"""The rclpy half of the web panel: one node spun in one thread (announcements, acks,
/diagnostics, each system's frames, lifecycle services), and a bounded pool of worker
threads for the calls that wait for answers (START/STOP acks, lifecycle transitions,
exports), so neither the executor nor the server's event loop ever blocks on them."""

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
from rclpy.qos import qos_profile_sensor_data
from rclpy.serialization import deserialize_message

from mocap4r2_control.control_plane import ControlClient, ControlResult
from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

from ..recording.export import ExportError, export
from ..recording.session_id import session_dir
from ..recording.sessions import list_sessions
from .core import (
    MAX_CLIENT_RATE,
    ControlRequest,
    LatestFrames,
    LiveFrame,
    RequestError,
    body_row,
    marker_rows,
)

FRAME_TYPES = {
    "mocap4r2_interfaces/msg/Markers": ("markers", Markers),
    "mocap4r2_interfaces/msg/RigidBodies": ("rigid_bodies", RigidBodies),
    "mocap4r2_interfaces/msg/Skeletons": ("skeletons", Skeletons),
}
FRAME_CLASSES = dict(FRAME_TYPES.values())
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
        self.frames = LatestFrames()
        self._decoded_cache: dict[tuple[str, str], tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._diagnostics: dict[str, Diagnostic] = {}
        self._frame_subs: dict[str, tuple[str, str, Any, Any]] = {}
        self._frames_node = rclpy.create_node(
            f"{node.get_name()}_frames", namespace=node.get_namespace(), context=node.context
        )
        self._lifecycle: dict[str, Any] = {}
        self.log: list[dict[str, Any]] = []
        self._pending = threading.BoundedSemaphore(MAX_PENDING_CALLS)
        self._pool = ThreadPoolExecutor(MAX_PENDING_CALLS, thread_name_prefix="web-panel-call")
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 50)
        # new systems' frame topics are subscribed from the executor thread (a timer); the
        # worker pool only publishes requests and calls services (rclpy allows both from
        # any thread)
        node.create_timer(0.5, self._subscribe_frames)
        node.create_timer(1.0 / MAX_CLIENT_RATE, self._poll_frames)
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
            while len(self._diagnostics) > 512:
                self._diagnostics.pop(next(iter(self._diagnostics)))

    def _subscribe_frames(self) -> None:
        for name, info in self.control.systems().items():
            for topic, type_name in zip(info.topics, info.topic_types):
                kind = FRAME_TYPES.get(type_name)
                if kind is None or topic in self._frame_subs or len(self._frame_subs) >= 192:
                    continue
                label, cls = kind
                # on the node no executor waits on: polled by _poll_frames
                sub = self._frames_node.create_subscription(
                    cls, topic, lambda _: None, qos_profile_sensor_data, raw=True
                )
                self._frame_subs[topic] = (name, label, cls, sub)

    def _poll_frames(self) -> None:
        """Decimation at the source: a browser never needs more than MAX_CLIENT_RATE
        frames a second, and an executor callback per message costs far more than the
        panel's own work (1 kHz x 3 topics would be most of a core). So the frame
        subscriptions sit on a node no executor waits on, and this timer takes what each
        holds (its queue is the sensor-data depth, so what is older is dropped by DDS),
        keeping the newest serialized message; deserialization happens only when a
        client asks for it."""
        for name, label, cls, sub in self._frame_subs.values():
            newest = None
            for _ in range(64):
                with sub.handle:
                    taken = sub.handle.take_message(cls, True)
                if taken is None:
                    break
                newest = taken[0]
            if newest is not None:
                self.frames.put(name, label, newest)

    # ---------------------------------------------------------------- reads (any thread)
    def systems(self) -> list[dict[str, Any]]:
        rows = []
        with self._lock:
            diagnostics = dict(self._diagnostics)
        for name, info in self.control.systems(include_finalized=True).items():
            diag = diagnostics.get(name)
            values = diag.values if diag else {}
            ratios = {k.split("/", 1)[1]: v for k, v in values.items() if k.startswith("tracking_ratio/")}
            rows.append(
                {
                    "system": name,
                    "type": info.type,
                    "state": info.state.label,
                    "rate": info.frame_rate,
                    "session": info.session_id,
                    "level": diag.level if diag else -1,
                    "message": diag.message if diag else "",
                    "measured_rate": values.get("rate_hz", ""),
                    "latency_ms": values.get("latency_mean_ms", ""),
                    "dropped": values.get("dropped_frames_total", ""),
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
        """When the newest message of ``system`` arrived (None: nothing yet)."""
        return self.frames.newest(system)

    def live_frame(self, system: str) -> LiveFrame | None:
        """The latest frame of ``system`` in the page's form (built here, on demand, at
        the clients' rate; never per message)."""
        raw = self.frames.get(system)
        if not raw:
            return None
        slot = {kind: (self._decoded(system, kind, data, at), at) for kind, (data, at) in raw.items()}
        newest = max(slot.values(), key=lambda item: item[1])
        msg = newest[0]
        frame = LiveFrame(
            system=system,
            frame_number=int(msg.frame_number),
            stamp=msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9,
            received=newest[1],
        )
        if "markers" in slot:
            points = [
                (m.position.x, m.position.y, m.position.z, m.occluded) for m in slot["markers"][0].markers
            ]
            frame.markers, frame.occluded = marker_rows(points)
        if "rigid_bodies" in slot:
            for body in slot["rigid_bodies"][0].rigid_bodies[:200]:
                p, q = body.pose.position, body.pose.orientation
                frame.bodies.append(
                    body_row(body.name, body.id, (p.x, p.y, p.z), (q.x, q.y, q.z, q.w), body.tracking_valid)
                )
        if "skeletons" in slot:
            for skeleton in slot["skeletons"][0].skeletons[:20]:
                for seg in skeleton.segments[:100]:
                    p = seg.pose.position
                    row = body_row(
                        seg.name, seg.id, (p.x, p.y, p.z), (0.0, 0.0, 0.0, 1.0), seg.tracking_valid
                    )
                    row["parent"] = int(seg.parent_id)
                    row["skeleton"] = skeleton.name[:64]
                    frame.segments.append(row)
        return frame

    def _decoded(self, system: str, kind: str, data: bytes, received: float) -> Any:
        """The message of ``data``, deserialized once however many clients ask."""
        key = (system, kind)
        cached = self._decoded_cache.get(key)
        if cached is not None and cached[0] == received:
            return cached[1]
        message = deserialize_message(data, FRAME_CLASSES[kind])
        if len(self._decoded_cache) < 3 * 64:
            self._decoded_cache[key] = (received, message)
        else:
            self._decoded_cache.pop(key, None)
        return message

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
            self._frames_node.destroy_node()
            self.node.destroy_node()
            if self.context.ok():
                rclpy.shutdown(context=self.context)
            self._thread.join(timeout=2.0)
