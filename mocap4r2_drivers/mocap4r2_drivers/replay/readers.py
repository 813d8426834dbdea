"""Recorded files as a sequence of frames: rosbag2 bags (MCAP or sqlite3) and C3D files.

Every reader opens and checks its file in ``open_source`` (so a configure fails with the
reason, never later), then hands out :class:`TimedFrame` items in file order from
``frames()``, which may be called again for every loop. A reader knows nothing of ROS
nodes or wall time; the replay system paces what it gets.

* **bags** (``rosbags``, which reads rosbag2 folders in both storages and a bare
  ``.mcap``): the mocap4r2_interfaces topics of one system (``source``, a namespace such
  as ``/sim``), decoded straight from their CDR bytes (convert.py), a chunk at a time
  when the bag is one uncompressed MCAP file (mcap_chunks.py: what the recorder writes,
  read without a message object per message); without those, every
  ``geometry_msgs/PoseStamped`` topic as one body (``/<ns>/<body>/pose`` is named
  ``<body>``), else the child frames of ``/tf`` as bodies;
* **C3D** (``c3d``): labeled points as markers (id = label index), negative residuals
  occluded, ``POINT:UNITS`` to metres, the vertical axis from ``up_axis``, and rigid
  bodies fitted to the markers named in ``bodies`` with the shared Kabsch fit.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mocap4r2_control.frame import AssetNames, BodyArrays, MocapFrame, RecordedMessages

from ..common import stable_id
from .c3d_source import C3DSource
from .convert import MessageDecoder, ReplayDecodeError
from .damage import bag_damage
from .mcap_chunks import McapChunks, McapFormatError, fast_readable
from .source import RecordingShape, ReplayFileError, ReplaySource, SourceInfo, TimedFrame, file_signature

__all__ = [
    "BagSource",
    "C3DSource",
    "ReplayFileError",
    "ReplaySource",
    "SourceInfo",
    "TimedFrame",
    "file_signature",
    "open_source",
]

MARKERS = "mocap4r2_interfaces/msg/Markers"
RIGID_BODIES = "mocap4r2_interfaces/msg/RigidBodies"
SKELETONS = "mocap4r2_interfaces/msg/Skeletons"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
TF_MESSAGE = "tf2_msgs/msg/TFMessage"
MOCAP_TYPES = {MARKERS: "markers", RIGID_BODIES: "rigid_bodies", SKELETONS: "skeletons"}


def open_source(
    path: str | os.PathLike,
    source: str = "",
    up_axis: str = "z",
    bodies: Mapping[str, Sequence[str]] | None = None,
) -> ReplaySource:
    """Open ``path`` (a bag folder, an ``.mcap``, a ``.db3`` or a ``.c3d``); raises
    ReplayFileError with the reason."""
    p = Path(path).expanduser()
    if not str(path):
        raise ReplayFileError(
            "no file to replay: the parameter 'file' is not set; set it to a bag folder, "
            "an .mcap, a .db3 or a .c3d"
        )
    if not p.exists():
        raise ReplayFileError(f"{p} does not exist")
    if p.suffix.lower() == ".c3d":
        return C3DSource(p, up_axis, bodies or {})
    if bodies:
        raise ReplayFileError("bodies applies to C3D files only (a bag has its rigid bodies)")
    return BagSource(p, source)


# ====================================================================== bags
def _bag_reader(path: Path) -> Any:
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    # a file inside a bag folder: the folder (its metadata.yaml says what the files are)
    if path.is_file() and (path.parent / "metadata.yaml").is_file():
        path = path.parent
    return AnyReader([path], default_typestore=get_typestore(Stores.LATEST))


def _single_mcap(path: Path) -> Path | None:
    """The one MCAP file of a bag (a bare file or a folder holding one), when it can be
    read chunk by chunk (mcap_chunks.fast_readable); None otherwise."""
    if path.is_dir():
        files = [p for p in path.iterdir() if p.suffix in (".mcap", ".db3")]
        path = files[0] if len(files) == 1 else path
    elif (path.parent / "metadata.yaml").is_file() and len(list(path.parent.glob("*.mcap"))) != 1:
        return None
    return path if path.suffix == ".mcap" and path.is_file() and fast_readable(path) else None


def _namespace(topic: str) -> str:
    return topic.rsplit("/", 1)[0] or "/"


class BagSource(ReplaySource):
    """A rosbag2 bag (folder, .mcap or .db3): one system's mocap topics, or poses, or /tf.

    With ``keep_recorded`` set (mocap topics only), every frame carries the serialized
    messages it was decoded from (``MocapFrame.recorded``), for the node to publish as
    they are; ``recording_shape`` says what decides whether it may."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self._decoders: dict[str, MessageDecoder] = {}
        try:
            reader = _bag_reader(path)
            reader.open()
        except Exception as exc:  # rosbags raises its own errors for every kind of damage
            raise ReplayFileError(bag_damage(path, f"{type(exc).__name__}: {exc}")) from None
        self._reader = reader
        #: the bag's MCAP file read chunk by chunk (None: messages read through rosbags)
        self.mcap_file = _single_mcap(path)
        try:
            self._choose(source)
            self._check_first()
        except ReplayFileError:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001 - damage found while reading the first frame
            self.close()
            raise ReplayFileError(bag_damage(path, f"{type(exc).__name__}: {exc}")) from None

    def _choose(self, source: str) -> None:
        conns = list(self._reader.connections)
        mocap = [c for c in conns if c.msgtype in MOCAP_TYPES]
        namespaces = sorted({_namespace(c.topic) for c in mocap})
        wanted = "/" + source.strip("/") if source.strip("/") else ""
        if mocap:
            if not wanted:
                if len(namespaces) != 1:
                    raise ReplayFileError(
                        f"{self.path} holds {len(namespaces)} systems ({', '.join(namespaces)}); "
                        "choose one with source"
                    )
                wanted = namespaces[0]
            chosen = [c for c in mocap if _namespace(c.topic) == wanted]
            if not chosen:
                raise ReplayFileError(
                    f"{self.path}: no mocap topics under {wanted} (systems: {', '.join(namespaces)})"
                )
            self.mode = "mocap"
        else:
            poses = [c for c in conns if c.msgtype == POSE_STAMPED]
            tfs = [c for c in conns if c.msgtype == TF_MESSAGE and c.topic in ("/tf", f"{wanted}/tf")]
            if wanted:
                poses = [c for c in poses if c.topic.startswith(wanted + "/")]
            if poses:
                chosen, self.mode = poses, "poses"
            elif tfs:
                chosen, self.mode = tfs, "tf"
            else:
                types = sorted({c.msgtype for c in conns})
                raise ReplayFileError(
                    f"{self.path} has no mocap topics (mocap4r2_interfaces Markers, RigidBodies, "
                    "Skeletons; geometry_msgs/PoseStamped; tf2_msgs/TFMessage); it holds "
                    f"{', '.join(types) or 'nothing'}"
                )
        self.namespace = wanted
        self.connections = chosen
        self.topics = {c.topic: c for c in chosen}
        self._body_names: dict[str, str] = {c.topic: _pose_body_name(c.topic) for c in chosen}
        counts = {c.topic: c.msgcount for c in chosen}
        duration = max(0.0, (self._reader.end_time - self._reader.start_time) * 1e-9)
        frame_count = max(counts.values()) if self.mode != "poses" else max(counts.values())
        rate = (frame_count - 1) / duration if duration > 0 and frame_count > 1 else 0.0
        self.info = SourceInfo(
            kind=f"bag ({self.mode})",
            rate=rate,
            frame_count=frame_count,
            duration=duration,
            names=AssetNames(),
            details={"topics": ", ".join(sorted(self.topics))},
        )

    def _check_first(self) -> None:
        """Read the first frame: a file whose first messages cannot be decoded fails here."""
        first = next(iter(self.frames()), None)
        if first is None:
            raise ReplayFileError(f"{self.path}: the mocap topics hold no messages")
        f = first.frame
        body_names = f.bodies.names
        if self.mode == "tf":
            body_names = tuple(self._tf_children())
        self.info.names = AssetNames(
            rigid_bodies=tuple(body_names), markers=tuple(f.markers.names), skeletons=tuple(f.skeletons.names)
        )
        if self.mode == "mocap":
            frame_ids = {d.kind: d.frame_id for d in self._decoders.values()}
            self.recording_shape = RecordingShape(
                {kind: fid for kind, fid in frame_ids.items() if fid is not None}, len(f.bodies.markers) > 0
            )

    def _tf_children(self, budget: int = 2000) -> list[str]:
        seen: dict[str, None] = {}
        for i, (conn, _, raw) in enumerate(self._reader.messages(connections=self.connections)):
            if i >= budget:
                break
            for t in self._reader.deserialize(raw, conn.msgtype).transforms:
                seen.setdefault(t.child_frame_id, None)
        return list(seen)

    def frames(self, start: float = 0.0, end: float = math.inf) -> Iterator[TimedFrame]:
        if self.mode == "mocap":
            yield from self._mocap_frames(start, end)
        else:
            yield from self._pose_frames(start, end)

    def _mocap_frames(self, start: float, end: float) -> Iterator[TimedFrame]:
        """The messages of one frame number together (they are written one after
        another), as frames between ``start`` and ``end`` seconds after the first.

        One loop over the messages of a window (lists, not a generator per message and
        per step: this runs for every message of a replay)."""
        group: dict[str, Any] = {}
        raws: dict[str, bytes | memoryview] = {}  # the group's messages, when kept
        number = -1
        first = (0, 0)  # the stamp of the group's first message
        origin: int | None = None
        for window in self._windows():
            for kind, sec, nanosec, frame_number, part, raw in window:
                if group and (frame_number != number or kind in group):
                    # in integer ns: a float of today's Unix time is only good to 240 ns
                    ns = first[0] * 1_000_000_000 + first[1]
                    if origin is None:
                        origin = ns
                    offset = (ns - origin) * 1e-9
                    if offset > end:
                        return
                    if offset >= start:
                        yield TimedFrame(offset, first[0], first[1], _frame(number, group, raws))
                    group = {}
                    raws = {}
                if not group:
                    first = (sec, nanosec)
                number = frame_number
                group[kind] = part
                if raw is not None:
                    raws[kind] = raw
        if group:
            ns = first[0] * 1_000_000_000 + first[1]
            offset = (ns - (ns if origin is None else origin)) * 1e-9
            if start <= offset <= end:
                yield TimedFrame(offset, first[0], first[1], _frame(number, group, raws))

    def _windows(self) -> Iterator[list[tuple[str, int, int, int, Any, bytes | memoryview | None]]]:
        """(kind, sec, nanosec, frame number, arrays, the message's bytes or None when
        not kept) of the messages in file order, in lists: a window of a chunk at a time
        straight from an uncompressed MCAP file (what the recorder writes), else one
        message at a time through rosbags."""
        decoders = {c.topic: MessageDecoder(MOCAP_TYPES[c.msgtype]) for c in self.connections}
        self._decoders = decoders
        keep = self.keep_recorded
        if self.mcap_file is not None:
            try:
                yield from _chunk_windows(self.mcap_file, decoders, self.decode_batch, keep)
            except McapFormatError as exc:
                raise ReplayFileError(f"{self.mcap_file}: {exc}") from None
            return
        for conn, _, raw in self._reader.messages(connections=self.connections):
            decoder = decoders[conn.topic]
            data = bytes(raw)
            try:
                d = decoder.decode(data)
            except ReplayDecodeError as exc:
                raise ReplayFileError(f"{conn.topic}: {exc}") from None
            part = d.markers if d.markers is not None else d.bodies if d.bodies is not None else d.skeletons
            yield [(decoder.kind, d.sec, d.nanosec, d.frame_number, part, data if keep else None)]

    def _pose_frames(self, start: float, end: float) -> Iterator[TimedFrame]:
        """PoseStamped or TF messages grouped by stamp: one frame per capture time."""
        names: dict[str, int] = {}
        order: list[str] = list(self.info.names.rigid_bodies)
        for n in order:
            names[n] = len(names)
        current: dict[str, np.ndarray] = {}
        stamp: tuple[int, int] | None = None
        origin: int | None = None
        number = 0
        for conn, _, raw in self._reader.messages(connections=self.connections):
            msg = self._reader.deserialize(raw, conn.msgtype)
            if self.mode == "poses":
                items = [
                    (self._body_names[conn.topic], msg.header.stamp, msg.pose.position, msg.pose.orientation)
                ]
            else:
                items = [
                    (t.child_frame_id, t.header.stamp, t.transform.translation, t.transform.rotation)
                    for t in msg.transforms
                ]
            for name, st, p, q in items:
                key = (int(st.sec), int(st.nanosec))
                if stamp is not None and key != stamp and current:
                    ns = stamp[0] * 1_000_000_000 + stamp[1]
                    origin = ns if origin is None else origin
                    t = (ns - origin) * 1e-9
                    if t > end:
                        return
                    if t >= start:
                        yield TimedFrame(t, stamp[0], stamp[1], _pose_frame(number, order, current))
                    number += 1
                    current = {}
                stamp = key
                if name not in names:
                    names[name] = len(names)
                    order.append(name)
                current[name] = np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w])
        if stamp is not None and current:
            ns = stamp[0] * 1_000_000_000 + stamp[1]
            origin = ns if origin is None else origin
            t = (ns - origin) * 1e-9
            if start <= t <= end:
                yield TimedFrame(t, stamp[0], stamp[1], _pose_frame(number, order, current))

    def close(self) -> None:
        reader, self._reader = getattr(self, "_reader", None), None
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()


def _chunk_windows(
    path: Path, decoders: dict[str, MessageDecoder], batch: int, keep: bool = False
) -> Iterator[list[tuple[str, int, int, int, Any, bytes | memoryview | None]]]:
    """The messages of an uncompressed MCAP file, ``batch`` frames' worth at a time (of
    each topic about ``batch`` messages, decoded by one decode_columns): a frame waits
    for one window, never for a whole chunk. ``keep``: with each message's bytes."""
    reader = McapChunks(path, set(decoders))
    for chunk in reader.chunks():
        topics = [reader.topics[c] for c in chunk.channels]
        size = batch * max(1, len(set(topics)))
        for lo in range(0, len(topics), size):
            in_window = topics[lo : lo + size]
            columns = {}
            for topic in set(in_window):
                rows = [lo + k for k, t in enumerate(in_window) if t == topic]
                decoder = decoders[topic]
                try:
                    got = decoder.decode_columns(
                        chunk.data, [chunk.starts[k] for k in rows], [chunk.lengths[k] for k in rows]
                    )
                except ReplayDecodeError as exc:
                    raise ReplayFileError(f"{topic}: {exc}") from None
                # views, not copies: a window's frames holding megabytes of fresh copies
                # cost their page faults (13-16 us a frame); the node copies each once
                raw = memoryview(chunk.raw)
                raws: Iterator[memoryview | None] = (
                    iter([raw[chunk.starts[k] : chunk.starts[k] + chunk.lengths[k]] for k in rows])
                    if keep
                    else itertools.repeat(None)
                )
                columns[topic] = zip(
                    itertools.repeat(decoder.kind), got.secs, got.nanosecs, got.numbers, got.parts, raws
                )
            yield [next(columns[topic]) for topic in in_window]


def _frame(number: int, parts: dict[str, Any], raws: dict[str, bytes | memoryview]) -> MocapFrame:
    """One frame of the arrays of its messages, by kind (any may be missing), with the
    messages' bytes attached when they were kept."""
    markers, bodies, skeletons = parts.get("markers"), parts.get("rigid_bodies"), parts.get("skeletons")
    if markers is not None and bodies is not None and skeletons is not None:
        frame = MocapFrame(number, markers, bodies, skeletons)
    else:
        # a default made and then replaced would cost the empty arrays of every field
        given = {"markers": markers, "bodies": bodies, "skeletons": skeletons}
        frame = MocapFrame(number, **{k: v for k, v in given.items() if v is not None})
    if raws:
        frame.recorded = RecordedMessages(
            raws.get("markers"), raws.get("rigid_bodies"), raws.get("skeletons")
        )
    return frame


def _pose_body_name(topic: str) -> str:
    parts = [p for p in topic.split("/") if p]
    if len(parts) >= 2 and parts[-1] == "pose":
        return parts[-2]
    return parts[-1] if parts else topic


def _pose_frame(number: int, order: list[str], current: dict[str, np.ndarray]) -> MocapFrame:
    n = len(order)
    poses = np.full((n, 7), np.nan)
    valid = np.zeros(n, dtype=bool)
    for i, name in enumerate(order):
        pose = current.get(name)
        if pose is not None and np.all(np.isfinite(pose)):
            poses[i] = pose
            valid[i] = True
    bodies = BodyArrays.build(
        [stable_id(name) for name in order], tuple(order), poses[:, :3], poses[:, 3:], valid=valid
    )
    return MocapFrame(number, bodies=bodies)
