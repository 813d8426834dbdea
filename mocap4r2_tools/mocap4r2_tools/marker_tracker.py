"""marker_tracker: rigid bodies from any system's unlabeled markers, as a system of its own.

It is a :class:`~mocap4r2_control.system_node.MocapSystemNode` (type ``tracker``) whose
adapter is fed by a topic input the node subscribes: the markers of another system
(``markers_topic``) are taken as raw CDR bytes (``TopicInput(raw=True)``) and read with
numpy (tracking/markers_cdr.py), tracked by the core (tracking/tracker.py), and published
as that system's frame would be: ``rigid_bodies``,
``markers`` labeled ``<body>:<index>`` (strays unlabeled), optional /tf, /diagnostics, with
the source frame's frame_number and stamp. So it announces itself on /mocap4r2/systems,
answers START/STOP, and marker_viz, robot_ground_truth, px4_bridge and the recorder read it
like any system.

The service ``~/teach`` (std_srvs/Trigger) teaches a body from the frames the tracker reads,
as `mocap4r2 teach` does from a topic (tracking/teach.py): the still cluster within
``teach_radius`` of ``teach_near`` over ``teach_seconds`` of source time, named
``teach_name``; it answers the layout and body as bodies-file YAML and adds them to
``teach_file`` when set (marker_tracker_teach.py). The node creates it from the adapter's
``ServiceOffer`` once connected, and the teach parameters reach the adapter as they are
set (``parameters_changed``), so a body is taught without reconfiguring.

Frames wait in a queue of ``queue_frames`` between the subscription and the node's reader
thread: when tracking takes longer than frames come, the oldest frames waiting are dropped
and counted (``frames_dropped_cpu`` in /diagnostics), never queued without bound. The queue
and the source's measured rate are marker_tracker_source.py's; this module wires them, the
tracking core and the teach service into one adapter.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import rclpy.logging

from mocap4r2_control.adapter import (
    AdapterError,
    ConfigurationError,
    MocapAdapter,
    ServiceOffer,
    TopicInput,
)
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.spin import run_node
from mocap4r2_control.system_node import MocapSystemNode
from mocap4r2_tools.marker_tracker_source import FrameQueue, SourceRate
from mocap4r2_tools.marker_tracker_teach import TEACH_MARGIN_S, TeachService
from mocap4r2_tools.tracking import kernels
from mocap4r2_tools.tracking.bodies import ConfigError, TrackerConfig, load_config
from mocap4r2_tools.tracking.markers_cdr import MarkersDecodeError, decode_markers
from mocap4r2_tools.tracking.tracked_frame import CpuWindow, SwapWatch, TrackedFrameBuilder
from mocap4r2_tools.tracking.tracker import Tracker

_LOG = logging.getLogger("mocap4r2.marker_tracker")
MAX_LOGGED_REASONS = 20  # distinct decode errors logged; later ones are only counted
# the subscription's DDS history: deep enough that a message waits there while the executor
# is held up (loaded machine), so frames are dropped by FrameQueue, where they are counted
INPUT_DEPTH = 100
SLOW_PREPARE_S = 2.0  # kernels ready slower than this were compiled: said at info level
# how the kernels were made ready before the node (kernel_cache, kernels_ready_s), for /diagnostics
_KERNELS_READY: dict[str, str] = {}

# FrameQueue and TEACH_MARGIN_S live with their concerns (marker_tracker_source.py,
# marker_tracker_teach.py) and stay importable from here, where callers found them
__all__ = [
    "INPUT_DEPTH",
    "MAX_LOGGED_REASONS",
    "TEACH_MARGIN_S",
    "FrameQueue",
    "MarkerTrackerAdapter",
    "main",
]


def _place(value: list[float]) -> str | None:
    ok = len(value) == 3 and all(math.isfinite(float(v)) for v in value)
    return None if ok else "must be 3 finite numbers [x, y, z] (m)"


def _limit(value: float) -> str | None:
    return (
        None if value == 0.0 or 1e-5 <= value <= 10.0 else "must be 0 (the bodies file's) or in [1e-5, 10] m"
    )


def _warm_up(config: TrackerConfig) -> None:
    """Track two made-up frames (every body at its initial position) on a throwaway
    tracker, after loading the compiled kernels: the first frames pay for loading and first
    calls (0.1-0.25 s for 18 bodies here; the kernels ~0.5 s from numba's cache, seconds to
    compile when there is none), and while the first real frame waits that long the queue
    would drop the frames in which identical bodies are still near their initial
    positions, where they are told apart. The first frame acquires, the second tracks."""
    kernels.warm_up()  # the made-up frames need not reach every kernel
    points = np.concatenate(
        [
            body.points + (body.initial_position if body.initial_position is not None else 2.0 * i)
            for i, body in enumerate(config.bodies)
        ]
    )
    with contextlib.suppress(Exception):  # only a warm-up: the real frames report their own errors
        tracker = Tracker(config)
        tracker.update(points, 0.0)
        tracker.update(points, 0.01)


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
        self, *, markers_topic: str, bodies: str, marker_gate: float, max_residual: float, queue_frames: int
    ) -> None:
        self.markers_topic = markers_topic
        self.bodies_path = bodies
        self.marker_gate = marker_gate
        self.max_residual = max_residual
        self.queue = FrameQueue(queue_frames)
        self.tracker: Tracker | None = None
        self.builder: TrackedFrameBuilder | None = None
        self.swaps: SwapWatch | None = None
        self.cpu = CpuWindow()
        self.decode_errors = 0
        self.stray_markers = 0
        self._reasons_logged: set[str] = set()
        self.source_rate = SourceRate()
        self.teaching = TeachService(markers_topic)

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> MarkerTrackerAdapter:
        # the teach_* parameters are the teach service's, handed to it apart
        names = ("markers_topic", "bodies", "marker_gate", "max_residual", "queue_frames")
        adapter = cls(**{name: values[name] for name in names})
        adapter.teaching.settings_changed(values)
        return adapter

    def parameters_changed(self, values: Mapping[str, Any]) -> Collection[str]:
        """The teach parameters apply at the next request (a body is taught after
        ``ros2 param set ... teach_name``, without reconfiguring); the others at the
        next configure."""
        return self.teaching.settings_changed(values)

    def topic_inputs(self) -> Sequence[TopicInput]:
        """The source's Markers, as their CDR bytes (markers_cdr reads them faster than
        rclpy deserializes them), into the queue the reader thread tracks from."""
        return (
            TopicInput(
                self.markers_topic,
                "mocap4r2_interfaces/msg/Markers",
                INPUT_DEPTH,
                False,
                self._take,
                raw=True,
            ),
        )

    def _take(self, topic: str, data: object) -> None:
        assert isinstance(data, bytes), "a raw input hands over bytes"
        self.queue.put(data)

    def service_offers(self) -> Sequence[ServiceOffer]:
        """``~/teach`` (std_srvs/Trigger), once connected."""
        if self.tracker is None:
            return ()
        return (ServiceOffer("~/teach", "std_srvs/srv/Trigger", self.teaching.answer),)

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
        _warm_up(config)
        self.tracker = Tracker(config)
        self.builder = TrackedFrameBuilder(config)
        self.swaps = SwapWatch(config)
        self.cpu = CpuWindow()
        return AssetNames(rigid_bodies=self.builder.body_names, markers=self.builder.marker_names)

    def teach(self) -> str:
        """Teach a body from the next frames this tracker reads (marker_tracker_teach.py);
        the answer of ``~/teach``."""
        return self.teaching.teach()

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
        self.teaching.add(points, source.stamp)
        result = tracker.update(points, source.stamp)
        swaps.update(result)
        self.stray_markers += len(result.strays)
        self.source_rate.note(source.frame_number, source.stamp)
        frame = builder.build(source.frame_number, source.stamp, points, result)
        self.cpu.add(time.thread_time() - started)
        return frame

    @property
    def nominal_rate(self) -> float:
        """The source's frame rate, from the frames tracked so far; 0 before two. A rate
        published below it on /diagnostics says the tracker falls behind its source."""
        return self.source_rate.hz

    def disconnect(self) -> None:
        self.queue.set_open(False)  # the node unsubscribes the input and withdraws ~/teach
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
            **_KERNELS_READY,
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


def _prepared_node() -> MocapSystemNode:
    """The node, made once the kernels are compiled (or loaded from the cache).

    A system is announced when its node is made, and the control plane waits 10 s for
    a START's answer: compiling at configure (11-16 s after an install, or in every start
    where no cache is writable) made the first START time out. Compiled first, the node
    is announced 11-16 s later, and a START then configures in about a second."""
    logger = rclpy.logging.get_logger("marker_tracker")
    prepared = kernels.prepare(note=logger.warning)
    kind = prepared.cache.kind
    where = {"numba": "numba's cache", "private": "a private cache", "none": "no cache"}[kind]
    line = f"tracker kernels ready in {prepared.seconds:.1f} s ({where})"
    # seconds mean they were compiled: the first start after an install, or no cache
    (logger.info if prepared.seconds > SLOW_PREPARE_S else logger.debug)(line)
    _KERNELS_READY.update(kernel_cache=kind, kernels_ready_s=f"{prepared.seconds:.2f}")
    return MocapSystemNode(MarkerTrackerAdapter, "marker_tracker")


def main(args: list[str] | None = None) -> int:
    """The marker_tracker executable: the adapter under MocapSystemNode until shutdown,
    the kernels compiled before the node is announced (:func:`_prepared_node`)."""
    # two executor threads: a teach request waits for frames that the subscription takes in
    return run_node(_prepared_node, MocapSystemNode.finish, args, threads=2)


if __name__ == "__main__":
    raise SystemExit(main())
