"""vicon_system: Vicon (Nexus, Tracker, Shogun) through the DataStream SDK's Python API.

Written against Vicon's official binding, ``vicon_dssdk.ViconDataStream`` (``Client``,
``Client.StreamMode``, ``Client.AxisMapping``, ``DataStreamException`` carrying a
``Result`` code). The SDK is not on PyPI: it is imported only when the system is
configured, and a missing SDK makes configure fail with the way to install it.

* ServerPush by default (the server sends every frame as soon as it is ready), or
  ClientPull / ClientPullPreFetch;
* each segment is a rigid body, named ``subject`` when the subject has a single segment
  and ``subject/segment`` otherwise; multi-segment subjects are also skeletons;
* labeled markers ``subject:marker`` with their occlusion flags, unlabeled markers;
* an occluded segment is tracking_valid false (the node holds its last pose), never
  the zeros the SDK returns for it;
* frame_number is Vicon's frame number: a frame already seen (ClientPull can return
  the same frame again) is not published twice; the stamp is arrival minus
  ``GetLatencyTotal()``; millimetres become metres; the axis mapping is a parameter
  (Vicon's default, forward/left/up, is ROS's Z-up).

The DataStream has no ids: ids are the CRC-32 of the names, so a body keeps its id
across frames, reconnections and restarts.

GetFrame blocks until the server has a frame and has no timeout, so one SDK thread
calls the SDK and hands finished frames to ``read_frame`` through a bounded queue.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from mocap4r2_control.adapter import AdapterError, MocapAdapter
from mocap4r2_control.parameters import ParameterSpec
from mocap4r2_control.frame import (
    NO_PARENT,
    UNKNOWN_ID,
    AssetNames,
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)
from mocap4r2_control.system_node import run_system

from ..common import stable_id

LOG = logging.getLogger("mocap4r2.vicon")

SDK_MISSING = (
    "the Vicon DataStream SDK Python API (module vicon_dssdk) is not installed in this Python "
    "environment. It ships with the Vicon DataStream SDK (free download from vicon.com, "
    "'DataStream SDK'): install it with `python -m pip install <SDK folder>/Linux64/Python` "
    "(Win64/Python on Windows; the folder holding vicon_dssdk and its setup.py), make sure "
    "the SDK's shared libraries are found (LD_LIBRARY_PATH on Linux), then configure again")

STREAM_MODES = {"server_push": "EServerPush", "client_pull": "EClientPull",
                "client_pull_prefetch": "EClientPullPreFetch"}
DIRECTIONS = {"forward": (1, 0, 0), "backward": (-1, 0, 0), "left": (0, 1, 0), "right": (0, -1, 0),
              "up": (0, 0, 1), "down": (0, 0, -1)}
_LOST_CONNECTION = {"NotConnected", "ClientConnectionFailed", "InvalidOperation"}


def _check_axes(value: list) -> str | None:
    if len(value) != 3 or any(v not in DIRECTIONS for v in value):
        return f"axis_mapping needs three of {sorted(DIRECTIONS)} for x, y, z, got {value}"
    x, y, z = (np.array(DIRECTIONS[v]) for v in value)
    if abs(np.dot(x, y)) or abs(np.dot(x, z)) or abs(np.dot(y, z)):
        return f"axis_mapping {value}: the axes must be at right angles (the SDK's CoLinearAxes)"
    if not np.array_equal(np.cross(x, y), z):
        return f"axis_mapping {value}: the axes must be right handed (the SDK's LeftHandedAxes)"
    return None


def load_sdk():
    """The ViconDataStream module of the SDK, or AdapterError saying how to install it."""
    try:
        from vicon_dssdk import ViconDataStream
    except ImportError as exc:
        raise AdapterError(f"{SDK_MISSING} ({exc})") from exc
    return ViconDataStream


class SdkErrors:
    """Names of the Result codes carried by the SDK's DataStreamException."""

    def __init__(self, sdk):
        self.exception = sdk.DataStreamException
        result = getattr(sdk, "Result", None)
        self._names = {}
        if result is not None:
            self._names = {value: name for name, value in vars(result).items()
                           if not name.startswith("_") and isinstance(value, int)}

    def name(self, exc: BaseException) -> str:
        for attr in ("result", "Result", "code"):
            value = getattr(exc, attr, None)
            if value is not None:
                if isinstance(getattr(value, "name", None), str):   # an enum member
                    return value.name
                return self._names.get(value, str(value))
        if exc.args and isinstance(exc.args[0], int):
            return self._names.get(exc.args[0], str(exc.args[0]))
        text = str(exc)
        return next((n for n in self._names.values() if n in text), "Unknown")


@dataclass
class SubjectLayout:
    """What the stream says about one subject, cached while its names do not change."""

    name: str
    segments: tuple[str, ...]
    parents: tuple[int, ...]         # parent segment index per segment, -1 for the root
    markers: tuple[str, ...]
    marker_segments: tuple[int, ...]


class ViconAdapter(MocapAdapter):
    system_type = "vicon"
    parameters = (
        ParameterSpec("host", "127.0.0.1", "Address of the computer running Nexus, Tracker or Shogun."),
        ParameterSpec("port", 801, "DataStream server port (801 by default).", min_value=1, max_value=65535),
        ParameterSpec("stream_mode", "server_push", "server_push (lowest latency, every frame), client_pull "
                      "or client_pull_prefetch.", choices=tuple(STREAM_MODES)),
        ParameterSpec("axis_mapping", ["forward", "left", "up"], "Directions of the x, y, z axes (SetAxisMapping); "
                      "forward/left/up is Vicon's default and ROS's Z-up.", check=_check_axes),
        ParameterSpec("labeled_markers", True, "Stream the subjects' labeled markers (EnableMarkerData)."),
        ParameterSpec("unlabeled_markers", True, "Stream unlabeled markers (EnableUnlabeledMarkerData)."),
        ParameterSpec("segments_as_skeletons", True, "Also publish multi-segment subjects as skeletons."),
        ParameterSpec("buffer_size", 1, "Frames the SDK buffers (SetBufferSize).", min_value=1, max_value=1000),
        ParameterSpec("connect_timeout", 5.0, "Seconds to wait for the server and its first frame.",
                      min_value=0.1, max_value=120.0),
        ParameterSpec("reconnect_period", 1.0, "Seconds between reconnection attempts when the server goes "
                      "away; 0: do not reconnect (reading then fails).", min_value=0.0, max_value=60.0),
    )

    def __init__(self, values: Mapping[str, Any]):
        self.host = values["host"]
        self.port = int(values["port"])
        self.stream_mode = values["stream_mode"]
        self.axis_mapping = list(values["axis_mapping"])
        self.labeled = bool(values["labeled_markers"])
        self.unlabeled = bool(values["unlabeled_markers"])
        self.skeletons = bool(values["segments_as_skeletons"])
        self.buffer_size = int(values["buffer_size"])
        self.timeout = float(values["connect_timeout"])
        self.reconnect_period = float(values["reconnect_period"])
        self.sdk = None
        self.errors: SdkErrors | None = None
        self.client = None
        self.frame_rate = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=64)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._connected = False
        self._layouts: dict[str, SubjectLayout] = {}
        self._names_cache: dict[tuple, tuple] = {}
        self._last_frame_number: int | None = None
        self.counts = {"frames": 0, "duplicates": 0, "sdk_errors": 0, "bad_frames": 0, "reconnects": 0,
                       "dropped_slow_reader": 0}
        self._failed: AdapterError | None = None
        self.last_error = ""

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any]) -> "ViconAdapter":
        problem = _check_axes(list(values["axis_mapping"]))
        if problem:
            raise AdapterError(problem)
        return cls(values)

    # ------------------------------------------------------------------ connection
    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> AssetNames:
        self.sdk = load_sdk()
        self.errors = SdkErrors(self.sdk)
        self.client = self.sdk.Client()
        try:
            self._open(self.client)
            self._first_frame(self.client)
        except self.errors.exception as exc:
            raise AdapterError(f"DataStream server at {self.address}: {self.errors.name(exc)} ({exc})") from exc
        try:
            self.frame_rate = float(self.client.GetFrameRate())
        except self.errors.exception:
            self.frame_rate = 0.0
        frame = self._read(self.client)
        return AssetNames(rigid_bodies=frame.bodies.names, markers=tuple(n for n in frame.markers.names if n),
                          skeletons=frame.skeletons.names)

    def _open(self, client) -> None:
        """Connect and set the client up (raises the SDK's exception)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                client.Connect(self.address)
                break
            except self.errors.exception:
                if time.monotonic() > deadline or self._stop.is_set():
                    raise
                time.sleep(0.2)
        client.EnableSegmentData()
        if self.labeled:
            client.EnableMarkerData()
        if self.unlabeled:
            client.EnableUnlabeledMarkerData()
        client.SetBufferSize(self.buffer_size)
        client.SetStreamMode(getattr(self.sdk.Client.StreamMode, STREAM_MODES[self.stream_mode]))
        directions = self.sdk.Client.AxisMapping
        client.SetAxisMapping(*(getattr(directions, "E" + d.capitalize()) for d in self.axis_mapping))
        self._connected = True

    def _first_frame(self, client) -> None:
        # subject names exist only once a frame has arrived
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if client.GetFrame():
                    return
            except self.errors.exception as exc:
                if self.errors.name(exc) != "NoFrame" or time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise AdapterError(f"no frame from the DataStream server at {self.address} within {self.timeout} s")
            time.sleep(0.01)

    @property
    def nominal_rate(self) -> float:
        return self.frame_rate

    def start_streaming(self) -> None:
        if self.client is None:
            raise AdapterError("not connected")
        while not self._queue.empty():      # frames of an earlier activation are old news
            self._queue.get_nowait()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vicon-sdk", daemon=True)
        self._thread.start()

    def stop_streaming(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=max(2.0, 3.0 / max(self.frame_rate, 1.0)))
            if thread.is_alive():
                # GetFrame is blocked (the server sends nothing): disconnecting releases it
                LOG.warning("the SDK thread is blocked in GetFrame; disconnecting to release it")
                self._disconnect_client()
                thread.join(timeout=2.0)

    def disconnect(self) -> None:
        self.stop_streaming()
        self._disconnect_client()
        self.client = None

    def _disconnect_client(self) -> None:
        client = self.client
        if client is not None and self._connected:
            self._connected = False
            try:
                client.Disconnect()
            except Exception as exc:  # noqa: BLE001 - the server may be gone already
                LOG.debug("Disconnect: %s", exc)

    # ------------------------------------------------------------------ reading
    def read_frame(self, timeout: float) -> MocapFrame | None:
        if self._failed is not None:
            raise self._failed
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, AdapterError):
            self._failed = item      # lost for good: every later read says so too
            raise item
        return item

    def _put(self, item) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            try:
                self._queue.get_nowait()   # the oldest frame goes: the stream is real time
            except queue.Empty:
                pass
            self.counts["dropped_slow_reader"] += 1
            self._queue.put_nowait(item)

    def _run(self) -> None:
        """The SDK thread: get frames, convert them, reconnect when the server goes away."""
        client = self.client
        while not self._stop.is_set():
            if not self._connected:
                if not self._reconnect(client):
                    return
                continue
            try:
                if not client.GetFrame():
                    self._stop.wait(0.001)
                    continue
                frame = self._read(client)
            except self.errors.exception as exc:
                name = self.errors.name(exc)
                if name == "NoFrame":
                    self._stop.wait(0.001)
                    continue
                self.counts["sdk_errors"] += 1
                self.last_error = f"{name}: {exc}"
                if name in _LOST_CONNECTION or not self._is_connected(client):
                    self._lost(client)
                continue
            except Exception as exc:  # noqa: BLE001 - a frame that cannot be converted is dropped
                self.counts["bad_frames"] += 1
                self.last_error = f"bad frame: {exc!r}"
                if self.counts["bad_frames"] in (1, 10, 100) or self.counts["bad_frames"] % 1000 == 0:
                    LOG.error("dropped a frame that could not be converted (%d so far): %r",
                              self.counts["bad_frames"], exc)
                continue
            if frame is None:
                continue
            self.counts["frames"] += 1
            self._put(frame)

    def _is_connected(self, client) -> bool:
        try:
            return bool(client.IsConnected())
        except Exception:  # noqa: BLE001 - a dead client
            return False

    def _lost(self, client) -> None:
        self._connected = False
        LOG.warning("DataStream server at %s went away (%s)", self.address, self.last_error)
        if self.reconnect_period <= 0:
            self._put(AdapterError(f"DataStream server at {self.address} went away ({self.last_error})"))
        try:
            client.Disconnect()
        except Exception:  # noqa: BLE001
            pass

    def _reconnect(self, client) -> bool:
        if self.reconnect_period <= 0:
            self._stop.wait(0.1)
            return not self._stop.is_set()
        if self._stop.wait(self.reconnect_period):
            return False
        try:
            self._open(client)
        except self.errors.exception as exc:
            self._connected = False
            self.last_error = f"reconnect: {self.errors.name(exc)}"
            return True
        self.counts["reconnects"] += 1
        self._last_frame_number = None
        LOG.info("reconnected to the DataStream server at %s", self.address)
        return True

    # ------------------------------------------------------------------ conversion
    def _layout(self, client, subject: str) -> SubjectLayout:
        segments = tuple(client.GetSegmentNames(subject))
        markers = tuple(client.GetMarkerNames(subject)) if self.labeled else ()
        cached = self._layouts.get(subject)
        marker_names = tuple(m[0] for m in markers)
        if cached is not None and cached.segments == segments and cached.markers == marker_names:
            return cached
        index = {s: i for i, s in enumerate(segments)}
        parents = []
        for segment in segments:
            try:
                parent = client.GetSegmentParentName(subject, segment)
            except self.errors.exception:
                parent = ""   # the root has no parent
            parents.append(index.get(parent, -1))
        layout = SubjectLayout(subject, segments, tuple(parents), marker_names,
                               tuple(index.get(m[1], 0) for m in markers))
        self._layouts[subject] = layout
        return layout

    def _names(self, key: tuple, build) -> tuple:
        """A names tuple reused while the asset set does not change (the node skips
        refreshing name strings when it gets the same tuple object)."""
        names = self._names_cache.get(key)
        if names is None:
            if len(self._names_cache) > 64:
                self._names_cache.clear()
            names = self._names_cache[key] = tuple(build())
        return names

    def _read(self, client) -> MocapFrame | None:
        """The SDK's current frame as a MocapFrame, None for a frame already seen."""
        number = int(client.GetFrameNumber())
        if number == self._last_frame_number:
            self.counts["duplicates"] += 1
            return None
        self._last_frame_number = number
        layouts = [self._layout(client, s) for s in client.GetSubjectNames()]

        body_names, body_pos, body_quat, body_valid, body_markers = [], [], [], [], []
        marker_names, marker_pos, marker_occ = [], [], []
        skeleton_rows = []
        for layout in layouts:
            single = len(layout.segments) == 1
            first_marker = len(marker_names)
            for name in layout.markers:
                (x, y, z), occluded = client.GetMarkerGlobalTranslation(layout.name, name)
                marker_names.append(f"{layout.name}:{name}")
                marker_pos.append((x, y, z))
                marker_occ.append(bool(occluded))
            first_body = len(body_names)
            for i, segment in enumerate(layout.segments):
                t, t_occluded = client.GetSegmentGlobalTranslation(layout.name, segment)
                q, q_occluded = client.GetSegmentGlobalRotationQuaternion(layout.name, segment)
                body_names.append(layout.name if single else f"{layout.name}/{segment}")
                body_pos.append(t)
                body_quat.append(q)
                body_valid.append(not (t_occluded or q_occluded))
                body_markers.append([first_marker + j for j, s in enumerate(layout.marker_segments) if s == i])
            if self.skeletons and not single:
                skeleton_rows.append((layout, first_body))

        body_names_t = self._names(("bodies", *body_names), lambda: body_names)
        valid = np.asarray(body_valid, dtype=bool)
        positions = np.asarray(body_pos, dtype=float).reshape(-1, 3) * 1e-3
        orientations = np.asarray(body_quat, dtype=float).reshape(-1, 4)
        positions[~valid] = np.nan       # the SDK reports zeros for an occluded segment
        orientations[~valid] = np.nan

        labeled_pos = np.asarray(marker_pos, dtype=float).reshape(-1, 3) * 1e-3
        labeled_occ = np.asarray(marker_occ, dtype=bool)
        labeled_pos[labeled_occ] = np.nan
        labeled_names = self._names(("markers", *marker_names), lambda: marker_names)
        labeled_ids = np.asarray([stable_id(n) for n in labeled_names], dtype=np.int32)

        rows = [r for rows_ in body_markers for r in rows_]
        counts = [len(r) for r in body_markers]
        body_marker_arrays = MarkerArrays(
            ids=labeled_ids[rows] if rows else np.zeros(0, np.int32),
            names=self._names(("body_markers", *rows, *labeled_names), lambda: (labeled_names[r] for r in rows)),
            positions=labeled_pos[rows] if rows else np.zeros((0, 3)),
            occluded=labeled_occ[rows] if rows else np.zeros(0, bool),
            residuals=np.full(len(rows), -1.0, np.float32))
        bodies = BodyArrays.build(
            ids=[stable_id(n) for n in body_names_t], names=body_names_t, positions=positions,
            orientations=orientations, valid=valid, markers=body_marker_arrays, marker_counts=counts)
        bodies.names = body_names_t

        unlabeled_pos = np.zeros((0, 3))
        if self.unlabeled:
            strays = client.GetUnlabeledMarkers()
            unlabeled_pos = np.asarray([p for p, _ in strays], dtype=float).reshape(-1, 3) * 1e-3
        n_un = unlabeled_pos.shape[0]
        markers = MarkerArrays(
            ids=np.concatenate((labeled_ids, np.full(n_un, UNKNOWN_ID, np.int32))),
            names=self._names(("all_markers", n_un, *labeled_names), lambda: labeled_names + ("",) * n_un),
            positions=np.concatenate((labeled_pos, unlabeled_pos)),
            occluded=np.concatenate((labeled_occ, np.zeros(n_un, bool))),
            residuals=np.full(len(labeled_names) + n_un, -1.0, np.float32))

        skeletons = self._skeleton_arrays(skeleton_rows, positions, orientations, valid)
        try:
            latency = max(float(client.GetLatencyTotal()), 0.0)
        except self.errors.exception:
            latency = 0.0
        return MocapFrame(frame_number=number, markers=markers, bodies=bodies, skeletons=skeletons, latency=latency)

    def _skeleton_arrays(self, rows, positions, orientations, valid) -> SkeletonArrays:
        if not rows:
            return SkeletonArrays()
        take, ids, parents, seg_names, counts = [], [], [], [], []
        for layout, first in rows:
            n = len(layout.segments)
            take += range(first, first + n)
            ids += range(1, n + 1)
            parents += [p + 1 if p >= 0 else NO_PARENT for p in layout.parents]
            seg_names += layout.segments
            counts.append(n)
        take_a = np.asarray(take)
        seg_valid = valid[take_a]
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        names = self._names(("skeletons", *(r[0].name for r in rows)), lambda: (r[0].name for r in rows))
        segments = SegmentArrays(
            ids=np.asarray(ids, np.int32),
            names=self._names(("segments", *seg_names), lambda: seg_names),
            parent_ids=np.asarray(parents, np.int32), positions=positions[take_a],
            orientations=orientations[take_a], valid=seg_valid)
        return SkeletonArrays(
            ids=np.asarray([stable_id(n) for n in names], np.int32), names=names,
            valid=np.asarray([seg_valid[a:b].any() for a, b in zip(offsets[:-1], offsets[1:])], bool),
            segment_offsets=offsets, segments=segments)

    def status(self) -> dict[str, str]:
        out = {"server": self.address, "connected": str(self._connected), "stream_mode": self.stream_mode}
        out.update({k: str(v) for k, v in self.counts.items()})
        if self.last_error:
            out["last_error"] = self.last_error
        return out


def main(args: list[str] | None = None) -> int:
    return run_system(ViconAdapter, "vicon_system", args)


if __name__ == "__main__":
    raise SystemExit(main())
