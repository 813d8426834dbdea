"""marker_tracker: rigid bodies from any system's unlabeled markers, as a system of its own.

It is a :class:`~mocap4r2_control.system_node.MocapSystemNode` (type ``tracker``) whose
adapter is fed by a subscription: the markers of another system (``markers_topic``) are
taken as raw CDR bytes and read with numpy (tracking/markers_cdr.py), tracked by the core
(tracking/tracker.py), and published as that system's frame would be: ``rigid_bodies``,
``markers`` labeled ``<body>:<index>`` (strays unlabeled), optional /tf, /diagnostics, with
the source frame's frame_number and stamp. So it announces itself on /mocap4r2/systems,
answers START/STOP, and marker_viz, robot_ground_truth, px4_bridge and the recorder read it
like any system.

The service ``~/teach`` (std_srvs/Trigger) teaches a body from the frames the tracker reads,
as `mocap4r2 teach` does from a topic (tracking/teach.py): the still cluster within
``teach_radius`` of ``teach_near`` over ``teach_seconds`` of source time, named
``teach_name``; it answers the layout and body as bodies-file YAML and adds them to
``teach_file`` when set.

Frames wait in a queue of ``queue_frames`` between the subscription and the node's reader
thread: when tracking takes longer than frames come, the oldest frames waiting are dropped
and counted (``frames_dropped_cpu`` in /diagnostics), never queued without bound.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mocap4r2_control.adapter import AdapterError, ConfigurationError, MocapAdapter
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.system_node import run_system
from mocap4r2_tools.tracking.bodies import ConfigError, TrackerConfig, load_config
from mocap4r2_tools.tracking.markers_cdr import MarkersDecodeError, decode_markers
from mocap4r2_tools.tracking.teach import Teacher, TeachError, TeachingWindow, taught_text, write_body
from mocap4r2_tools.tracking.tracked_frame import CpuWindow, SwapWatch, TrackedFrameBuilder
from mocap4r2_tools.tracking.tracker import Tracker

_LOG = logging.getLogger("mocap4r2.marker_tracker")
MAX_LOGGED_REASONS = 20  # distinct decode errors logged; later ones are only counted
# the subscription's DDS history: deep enough that a message waits there while the executor
# is held up (loaded machine), so frames are dropped by FrameQueue, where they are counted
INPUT_DEPTH = 100


TEACH_MARGIN_S = 5.0  # how long a teach request waits for frames beyond teach_seconds


def _place(value: list[float]) -> str | None:
    ok = len(value) == 3 and all(math.isfinite(float(v)) for v in value)
    return None if ok else "must be 3 finite numbers [x, y, z] (m)"


def _limit(value: float) -> str | None:
    return (
        None if value == 0.0 or 1e-5 <= value <= 10.0 else "must be 0 (the bodies file's) or in [1e-5, 10] m"
    )


def _warm_up(config: TrackerConfig) -> None:
    """Track one made-up frame (every body at its initial position) on a throwaway tracker:
    the first frame pays for loading and first calls (0.1-0.25 s for 18 bodies here), and
    while the first real frame waits that long the queue would drop the frames in which
    identical bodies are still near their initial positions, where they are told apart."""
    points = [
        body.points + (body.initial_position if body.initial_position is not None else 2.0 * i)
        for i, body in enumerate(config.bodies)
    ]
    with contextlib.suppress(Exception):  # only a warm-up: the real frames report their own errors
        Tracker(config).update(np.concatenate(points), 0.0)


class FrameQueue:
    """Raw messages between the subscription and the reader thread, at most ``size``: a
    full queue drops its oldest message and counts it."""

    def __init__(self, size: int) -> None:
        self._items: deque[bytes] = deque()
        self._size = size
        self._ready = threading.Condition()
        self.dropped = 0
        self.open = False

    def put(self, data: bytes) -> None:
        with self._ready:
            if not self.open:
                return
            if len(self._items) >= self._size:
                self._items.popleft()
                self.dropped += 1
            self._items.append(data)
            self._ready.notify()

    def get(self, timeout: float) -> bytes | None:
        with self._ready:
            if not self._items:
                self._ready.wait(max(timeout, 0.0))
            return self._items.popleft() if self._items else None

    def set_open(self, is_open: bool) -> None:
        with self._ready:
            self.open = is_open
            self._items.clear()
            self._ready.notify_all()


class MarkerTrackerAdapter(MocapAdapter):
    """The tracker as a mocap system: its frames come from another system's markers."""

    system_type = "tracker"
    parameters = (
        ParameterSpec(
            "markers_topic", "/sim/markers", "Markers topic of the system to track.", read_only=True
        ),
        ParameterSpec(
            "bodies", "", "Bodies file (YAML: layouts, bodies, dynamics, limits; docs/tracking.md)."
        ),
        ParameterSpec(
            "marker_gate",
            0.0,
            "Gate around a predicted marker (m) before the dynamics widen it; 0: the bodies "
            "file's limits.marker_gate, else 0.01 (millimetre systems).",
            check=_limit,
        ),
        ParameterSpec(
            "max_residual",
            0.0,
            "RMS residual (m) above which a fit is refused; 0: the bodies file's "
            "limits.max_residual, else 0.004.",
            check=_limit,
        ),
        ParameterSpec(
            "queue_frames",
            8,
            "Source frames waiting for the tracker at most; older ones are dropped and counted.",
            min_value=1,
            max_value=1000,
        ),
        ParameterSpec("teach_name", "", "~/teach: name of the layout and body taught (no ':')."),
        ParameterSpec(
            "teach_near", [0.0, 0.0, 0.0], "~/teach: where the body to teach is held still (m).", check=_place
        ),
        ParameterSpec(
            "teach_radius",
            0.15,
            "~/teach: markers within this of teach_near (m).",
            min_value=1e-3,
            max_value=10.0,
        ),
        ParameterSpec(
            "teach_seconds", 1.0, "~/teach: source time averaged (s).", min_value=0.01, max_value=60.0
        ),
        ParameterSpec(
            "teach_axes", "pca", "~/teach: body axes, principal or the world's.", choices=("pca", "world")
        ),
        ParameterSpec(
            "teach_file", "", "~/teach: bodies file the layout and body are added to (empty: only returned)."
        ),
    )

    def __init__(
        self, markers_topic: str, bodies: str, marker_gate: float, max_residual: float, queue_frames: int
    ) -> None:
        self.markers_topic = markers_topic
        self.bodies_path = bodies
        self.marker_gate = marker_gate
        self.max_residual = max_residual
        self.queue = FrameQueue(queue_frames)
        self._node: Any = None
        self._subscription: Any = None
        self.tracker: Tracker | None = None
        self.builder: TrackedFrameBuilder | None = None
        self.swaps: SwapWatch | None = None
        self.cpu = CpuWindow()
        self.decode_errors = 0
        self.stray_markers = 0
        self._reasons_logged: set[str] = set()
        self._last_source: tuple[int, float] | None = None
        self._periods: deque[float] = deque(maxlen=256)
        self._teach_service: Any = None
        self._teaching: TeachingWindow | None = None

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> MarkerTrackerAdapter:
        return cls(
            values["markers_topic"],
            values["bodies"],
            values["marker_gate"],
            values["max_residual"],
            values["queue_frames"],
        )

    def attach(self, node: Any) -> None:
        self._node = node

    def load(self) -> TrackerConfig:
        """The bodies file with the parameters' limits applied; ConfigurationError with the reason."""
        if not self.bodies_path:
            raise ConfigurationError("no bodies file: set the 'bodies' parameter to a YAML path")
        try:
            config = load_config(self.bodies_path)
        except ConfigError as exc:
            raise ConfigurationError(str(exc)) from None
        limits = config.limits
        if self.marker_gate > 0.0:
            limits = replace(limits, marker_gate=self.marker_gate)
        if self.max_residual > 0.0:
            limits = replace(limits, max_residual=self.max_residual)
        return replace(config, limits=limits)

    def connect(self) -> AssetNames:
        config = self.load()
        if self._node is None:
            raise AdapterError(
                "marker_tracker reads a ROS topic: the system node must attach() the adapter first"
            )
        _warm_up(config)
        self.tracker = Tracker(config)
        self.builder = TrackedFrameBuilder(config)
        self.swaps = SwapWatch(config)
        self.cpu = CpuWindow()
        self._subscribe()
        self._offer_teaching()
        return AssetNames(rigid_bodies=self.builder.body_names, markers=self.builder.marker_names)

    def _subscribe(self) -> None:
        from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from mocap4r2_interfaces.msg import Markers

        self._unsubscribe()
        qos = QoSProfile(depth=INPUT_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
        self._subscription = self._node.create_subscription(
            Markers,
            self.markers_topic,
            self.queue.put,
            qos,
            callback_group=MutuallyExclusiveCallbackGroup(),
            raw=True,
        )

    def _offer_teaching(self) -> None:
        from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
        from std_srvs.srv import Trigger

        if self._teach_service is None:
            # a group of its own: the request waits for frames while the subscription
            # (its own group, the executor's other thread) keeps taking them in
            self._teach_service = self._node.create_service(
                Trigger, "~/teach", self._on_teach, callback_group=MutuallyExclusiveCallbackGroup()
            )

    def _on_teach(self, request: Any, response: Any) -> Any:
        try:
            response.message = self.teach()
            response.success = True
        except (TeachError, AdapterError) as exc:
            response.success, response.message = False, str(exc)
        except Exception as exc:  # noqa: BLE001 - a request must never take the node down
            _LOG.error("teach failed: %r", exc)
            response.success, response.message = False, f"internal error: {exc!r}"
        return response

    def teach(self) -> str:
        """Teach the still cluster at ``teach_near`` from the next ``teach_seconds`` of the
        frames this tracker reads (tracking/teach.py: the same averaging as `mocap4r2
        teach`); the layout and body as bodies-file YAML, also added to ``teach_file``
        when one is set. TeachError says why nothing was taught."""
        node = self._node
        if node is None:
            raise AdapterError("not attached to a node")
        name = str(node.value("teach_name"))
        if not name or ":" in name:
            raise TeachError("set the parameter teach_name to a name without ':' first")
        seconds = float(node.value("teach_seconds"))
        near = np.asarray(node.value("teach_near"), dtype=np.float64)
        window = TeachingWindow(Teacher(near=near, radius=float(node.value("teach_radius"))), seconds)
        self._teaching = window
        try:
            full = window.wait(seconds + TEACH_MARGIN_S)
        finally:
            self._teaching = None
        if not full:
            raise TeachError(
                f"{window.frames} frames from {self.markers_topic} in {seconds + TEACH_MARGIN_S:g} s, "
                f"not {seconds:g} s of them: is the tracker active and its source streaming?"
            )
        layout, position = window.teacher.layout(str(node.value("teach_axes")))
        text = taught_text(name, layout, position)
        target = str(node.value("teach_file"))
        if target:
            write_body(Path(target), name, layout, position)
        skipped = ", ".join(f"{n} {r}" for r, n in window.teacher.skipped.items())
        _LOG.info(
            "taught %r: %d markers from %d frames%s%s",
            name,
            len(layout),
            window.teacher.frames,
            f" (skipped: {skipped})" if skipped else "",
            f", added to {target}" if target else "",
        )
        return text

    def _unsubscribe(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None and self._node is not None:
            with contextlib.suppress(Exception):  # the node is being destroyed already
                self._node.destroy_subscription(subscription)

    def start_streaming(self) -> None:
        if self.tracker is None:
            raise AdapterError("not connected")
        self.queue.set_open(True)

    def stop_streaming(self) -> None:
        self.queue.set_open(False)

    def read_frame(self, timeout: float) -> MocapFrame | None:
        deadline = time.monotonic() + timeout
        while True:
            data = self.queue.get(deadline - time.monotonic())
            if data is None:
                return None
            frame = self.track(data)
            if frame is not None:
                return frame
            if time.monotonic() >= deadline:
                return None

    def track(self, data: bytes) -> MocapFrame | None:
        """One source message tracked: the frame to publish, or None (counted) when the
        bytes cannot be read."""
        tracker, builder, swaps = self.tracker, self.builder, self.swaps
        if tracker is None or builder is None or swaps is None:
            raise AdapterError("not connected")
        started = time.thread_time()
        try:
            source = decode_markers(data, max_markers=tracker.config.limits.max_markers)
        except MarkersDecodeError as exc:
            self.decode_errors += 1
            reason = str(exc)
            if reason not in self._reasons_logged and len(self._reasons_logged) < MAX_LOGGED_REASONS:
                self._reasons_logged.add(reason)
                _LOG.warning("a markers message was not read (logged once per reason, counted): %s", reason)
            return None
        points = source.positions[~source.occluded]  # a labeled system's occluded markers hold old positions
        teaching = self._teaching
        if teaching is not None:
            teaching.add(points, source.stamp)
        result = tracker.update(points, source.stamp)
        swaps.update(result)
        self.stray_markers += len(result.strays)
        self._note_period(source.frame_number, source.stamp)
        frame = builder.build(source.frame_number, source.stamp, points, result)
        self.cpu.add(time.thread_time() - started)
        return frame

    def _note_period(self, frame_number: int, stamp: float) -> None:
        # the source's frame period from its own numbers and stamps: frames the tracker
        # dropped do not change it, so a rate below it in /diagnostics says it falls behind
        last = self._last_source
        self._last_source = (frame_number, stamp)
        if last is not None and frame_number > last[0] and stamp > last[1]:
            self._periods.append((stamp - last[1]) / (frame_number - last[0]))

    @property
    def nominal_rate(self) -> float:
        """The source's frame rate, from the frames tracked so far; 0 before two."""
        if not self._periods:
            return 0.0
        return float(1.0 / np.median(np.asarray(self._periods)))

    def disconnect(self) -> None:
        self.queue.set_open(False)
        self._unsubscribe()
        service, self._teach_service = self._teach_service, None
        if service is not None and self._node is not None:
            with contextlib.suppress(Exception):  # the node is being destroyed already
                self._node.destroy_service(service)
        self.tracker = None

    def status(self) -> dict[str, str]:
        p50, p99, worst = self.cpu.percentiles_ms()
        out = {
            "markers_topic": self.markers_topic,
            "bodies_file": self.bodies_path,
            "cpu_ms_p50": f"{p50:.3f}",
            "cpu_ms_p99": f"{p99:.3f}",
            "cpu_ms_max": f"{worst:.3f}",
            "frames_dropped_cpu": str(self.queue.dropped),
            "decode_errors": str(self.decode_errors),
            "stray_markers": str(self.stray_markers),
        }
        tracker, swaps, builder = self.tracker, self.swaps, self.builder
        if tracker is not None and swaps is not None and builder is not None:
            counters = tracker.counters
            out.update(
                nan_markers=str(counters.nan_markers),
                refused_frames=str(counters.refused_frames),
                bad_stamps=str(counters.bad_stamps),
                rejected_fits=str(counters.rejected_fits),
                reacquisitions=str(sum(counters.reacquisitions)),
                suspected_swaps=str(int(swaps.swaps.sum())),
            )
            # per body only where something happened: a swarm's diagnostics stay short
            for i, name in enumerate(builder.body_names):
                if counters.reacquisitions[i] or swaps.swaps[i]:
                    out[f"{name}.reacquisitions"] = str(counters.reacquisitions[i])
                    out[f"{name}.suspected_swaps"] = str(int(swaps.swaps[i]))
        return out


def main(args: list[str] | None = None) -> int:
    """The marker_tracker executable: the adapter under MocapSystemNode until shutdown."""
    # two executor threads: a teach request waits for frames that the subscription takes in
    return run_system(MarkerTrackerAdapter, "marker_tracker", args, threads=2)


if __name__ == "__main__":
    raise SystemExit(main())
