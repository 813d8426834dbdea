"""A capture session as a rosbag2 bag in MCAP storage, written by one thread.

``SessionBag.open()`` creates ``<output_dir>/<session_id>/`` (never an existing one),
the MCAP file ``<session_id>_0.mcap`` with its header, schemas and channels, and starts
the writer thread. ``put()`` is what a subscription callback calls: it appends the
serialized bytes and their receive time to a bounded queue and returns at once (a full
queue counts a drop instead of blocking the caller). The writer thread appends the
messages to chunks and closes the chunk in progress every ``flush_period`` seconds, so a
process killed at any moment leaves every message older than that period in complete
chunks on disk (``recover`` rebuilds the rest of the file). ``close()`` drains the
queue, writes the MCAP summary and ``metadata.yaml``, and returns a :class:`Summary`.

A write error (disk full, file size limit) stops the writing for good: ``failure``
gives the reason, what was written so far stays on disk, and the bag is closed as well
as the disk allows.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

import yaml
from mcap.writer import CompressionType, Writer

from .frames import FRAME_TYPES, FrameTrack, frame_number, system_gaps
from .schemas import SchemaError, ros2msg_schema, share_msg_finder
from .session_id import session_dir

LIBRARY = "mocap4r2 session_recorder"


class SideWriter(Protocol):
    """What else receives every message the bag writes (e.g. the recorder's Foxglove file,
    mocap4r2_tools.foxglove.mcap_file.SideFile): ``put`` is called from the writer thread
    and must return at once; ``close`` returns its summary."""

    def open(self, directory: Path) -> None: ...

    def put(self, topic: str, type_name: str, data: bytes, log_time: int) -> None: ...

    def close(self) -> dict: ...


ROSBAG2_VERSION = 9


@dataclass
class TopicSpec:
    """A topic to record: its name, message type and the QoS its publishers offer (stored in the bag so a
    replay can offer the same)."""

    name: str
    type: str
    qos: list[dict] = field(default_factory=list)  # offered QoS profiles, rosbag2 v9 form
    system: str = ""  # the announcing system, if any


@dataclass
class Summary:
    """What a closed session bag holds: time span, messages per topic, frame gaps per system and messages
    dropped because the write queue was full."""

    path: str
    start_ns: int
    end_ns: int
    counts: dict[str, int]
    frames: dict[str, dict]  # system -> gap figures
    queue_drops: int
    failure: str
    side: dict = field(default_factory=dict)  # the side file's summary (SideFile.close), if any

    def as_dict(self) -> dict:
        out = {
            "path": self.path,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "counts": self.counts,
            "frames": self.frames,
            "queue_drops": self.queue_drops,
            "failure": self.failure,
        }
        if self.side:
            out["side"] = self.side
        return out

    @property
    def duration(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    def describe(self) -> str:
        counts = ", ".join(f"{t}: {n}" for t, n in sorted(self.counts.items()))
        systems = (
            "; ".join(
                f"{s}: {f['frames']} frames, {f['gaps']} frame gaps ({f['reported_dropped']} dropped by the "
                "system, "
                f"{f['missed']} missed by the recorder)"
                for s, f in sorted(self.frames.items())
            )
            or "no frame topics"
        )
        text = (
            f"recorded {self.path} ({self.duration:.2f} s); messages per topic: {counts or 'none'}; "
            f"frames: {systems}; queue drops: {self.queue_drops}"
        )
        if self.side:
            side = self.side
            text += (
                f"; beside it {side['path']} ({sum(side['counts'].values())} records, "
                f"{side['dropped']} dropped, {side['bad']} not convertible)"
            )
            if side["failure"]:
                text += f" FAILED: {side['failure']}"
        if self.failure:
            text += f"; WRITE FAILED: {self.failure}"
        return text


def qos_profile(reliable: bool, transient_local: bool, depth: int) -> list[dict]:
    """One offered QoS profile as rosbag2 (metadata version 9) writes it."""

    def infinite():  # one dict each: a shared one becomes a YAML anchor some readers dislike
        return {"sec": 2147483647, "nsec": 4294967295}

    return [
        {
            "history": "keep_last",
            "depth": depth,
            "reliability": "reliable" if reliable else "best_effort",
            "durability": "transient_local" if transient_local else "volatile",
            "deadline": infinite(),
            "lifespan": infinite(),
            "liveliness": "automatic",
            "liveliness_lease_duration": infinite(),
            "avoid_ros_namespace_conventions": False,
        }
    ]


class SessionBag:
    """One session written as a rosbag2 MCAP bag: messages go through a bounded queue to a writer thread, so a
    slow disk drops (and counts) messages instead of blocking the subscribers."""

    def __init__(
        self,
        output_dir: str | os.PathLike,
        session_id: str,
        topics: list[TopicSpec],
        *,
        chunk_size: int = 1 << 20,
        flush_period: float = 0.5,
        queue_size: int = 100_000,
        compression: str = "none",
        find_msg: Callable[[str, str], str] | None = None,
        custom_data: dict[str, str] | None = None,
        side: SideWriter | None = None,
    ):
        self.session_id = session_id
        self.side = side  # also gets every written message (the recorder's Foxglove file)
        self.directory = session_dir(output_dir, session_id)  # raises ValueError with the reason
        self.output_dir = Path(output_dir)
        self.file = self.directory / f"{session_id}_0.mcap"
        self.chunk_size = chunk_size
        self.flush_period = flush_period
        self.queue_size = queue_size
        self.compression = {
            "none": CompressionType.NONE,
            "lz4": CompressionType.LZ4,
            "zstd": CompressionType.ZSTD,
        }[compression]
        self._find = find_msg or share_msg_finder()
        self.custom_data = dict(custom_data or {})
        self.topics: dict[str, TopicSpec] = {}
        self._initial = list(topics)
        self._queue: collections.deque = collections.deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer: Writer | None = None
        self._stream: BinaryIO | None = None
        self._channels: dict[str, int] = {}
        self._schemas: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.tracks: dict[str, FrameTrack] = {}
        self.bytes_written = 0
        self.queue_drops = 0
        self.failure = ""
        self.start_ns = 0
        self.end_ns = 0
        self._closed = False
        self._final: Summary | None = None
        self._side_summary: dict = {}
        self.schema_warnings: list[str] = []

    # ------------------------------------------------------------------ opening
    def open(self) -> None:
        """Create the directory and file and start the writer thread. Raises OSError or
        ValueError with the reason; nothing existing is touched."""
        if not self.output_dir.is_dir():
            raise OSError(f"the output directory {self.output_dir} does not exist")
        if not os.access(self.output_dir, os.W_OK | os.X_OK):
            raise OSError(f"the output directory {self.output_dir} is not writable")
        try:
            self.directory.mkdir()  # never exist_ok: an existing session is not overwritten
        except FileExistsError:
            raise OSError(
                f"{self.directory} already exists; a session is never overwritten (choose another session id)"
            ) from None
        try:
            # the writer thread owns the stream until close(); a failure below closes it here
            stream = self._stream = open(self.file, "xb", buffering=1 << 20)  # noqa: SIM115 - closed by close()
            self._writer = Writer(stream, chunk_size=self.chunk_size, compression=self.compression)
            self._writer.start(profile="ros2", library=LIBRARY)
            for spec in self._initial:
                self._register(spec)
            self._writer.flush()
            if self.side is not None:
                self.side.open(self.directory)
        except Exception:
            if self._stream is not None:
                self._stream.close()
            raise
        self._thread = threading.Thread(target=self._run, name="session-bag-writer", daemon=True)
        self._thread.start()

    def _register(self, spec: TopicSpec) -> None:
        if spec.name in self._channels:
            return
        writer = self._writer
        if writer is None:
            raise RuntimeError("register a topic on an open bag")
        schema_id = self._schemas.get(spec.type)
        if schema_id is None:
            try:
                text = ros2msg_schema(spec.type, self._find)
                schema_id = writer.register_schema(spec.type, "ros2msg", text.encode())
            except SchemaError as exc:
                # still recorded (the bytes are kept); readers need the type installed
                self.schema_warnings.append(f"{spec.name}: {exc}")
                schema_id = 0
            self._schemas[spec.type] = schema_id
        qos_text = yaml.safe_dump(spec.qos, default_flow_style=False) if spec.qos else ""
        channel = writer.register_channel(spec.name, "cdr", schema_id, {"offered_qos_profiles": qos_text})
        self._channels[spec.name] = channel
        self.topics[spec.name] = spec
        self.counts[spec.name] = 0
        if spec.type in FRAME_TYPES:
            self.tracks[spec.name] = FrameTrack()

    # ------------------------------------------------------------------ hot path
    def put(self, topic: str, data: bytes, log_time_ns: int) -> bool:
        """Queue one message (any thread). False when it was dropped (queue full or
        the bag failed or closed)."""
        queue = self._queue
        if len(queue) >= self.queue_size or self.failure or self._stop.is_set():
            self.queue_drops += 1
            return False
        queue.append((topic, data, log_time_ns))
        return True

    def add_topic(self, spec: TopicSpec) -> None:
        """A topic discovered after opening; its messages may follow at once."""
        self._queue.append((None, spec, 0))

    @property
    def queued(self) -> int:
        return len(self._queue)

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        queue = self._queue
        writer = self._writer
        if writer is None:  # started by open() only after the writer exists
            raise RuntimeError("the bag writer thread needs an open bag")
        channels = self._channels
        counts = self.counts
        tracks = self.tracks
        side = self.side
        last_flush = time.monotonic()
        try:
            while True:
                stopping = self._stop.is_set()
                while queue:
                    topic, data, stamp = queue.popleft()
                    if topic is None:
                        self._register(data)
                        continue
                    channel = channels.get(topic)
                    if channel is None:
                        continue
                    if not self.start_ns:
                        self.start_ns = stamp
                    self.end_ns = max(self.end_ns, stamp)
                    count = counts[topic] = counts[topic] + 1
                    track = tracks.get(topic)
                    if track is not None:
                        track.add(frame_number(data))
                    writer.add_message(channel, stamp, data, stamp, count)
                    self.bytes_written += len(data)
                    if side is not None:
                        side.put(topic, self.topics[topic].type, data, stamp)
                now = time.monotonic()
                if now - last_flush >= self.flush_period:
                    writer.flush()  # closes the chunk in progress: on disk even if we die now
                    last_flush = now
                if stopping and not queue:
                    break
                time.sleep(0.002)
        except Exception as exc:  # noqa: BLE001 - disk full, size limit, ...: reported, not raised
            self.failure = f"{type(exc).__name__}: {exc}"
            queue.clear()

    # ------------------------------------------------------------------ closing
    def close(
        self,
        reported_dropped: dict[str, int] | None = None,
        system_topics: dict[str, list[str]] | None = None,
    ) -> Summary:
        """Drain, finish the MCAP summary, write metadata.yaml. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            if self.side is not None:
                self._side_summary = self.side.close()
            if self._writer is not None:
                try:
                    self._writer.finish()
                except Exception as exc:  # noqa: BLE001 - the data chunks are on disk already
                    self.failure = self.failure or f"{type(exc).__name__}: {exc}"
                try:
                    if self._stream is not None:
                        self._stream.close()
                except Exception as exc:  # noqa: BLE001 - reported in the summary, not raised
                    self.failure = self.failure or f"{type(exc).__name__}: {exc}"
            summary = self.summary(reported_dropped, system_topics)
            custom = dict(self.custom_data)
            custom["mocap4r2.summary"] = json.dumps(summary.as_dict(), sort_keys=True)
            try:
                write_metadata(
                    self.directory,
                    self.file.name,
                    start_ns=self.start_ns,
                    end_ns=self.end_ns,
                    topics=[(self.topics[t], self.counts[t]) for t in self.topics],
                    custom_data=custom,
                )
            except Exception as exc:  # noqa: BLE001 - reported in the summary, not raised
                self.failure = self.failure or f"metadata.yaml: {type(exc).__name__}: {exc}"
            self._final = self.summary(reported_dropped, system_topics)
        assert self._final is not None  # set by the first close()
        return self._final

    def summary(
        self,
        reported_dropped: dict[str, int] | None = None,
        system_topics: dict[str, list[str]] | None = None,
    ) -> Summary:
        frames = {}
        for system, topics in (system_topics or {}).items():
            tracks = [self.tracks[t] for t in topics if t in self.tracks]
            if not tracks:
                continue
            whole, partial = system_gaps(tracks)
            reported = min(whole, (reported_dropped or {}).get(system, 0))
            frames[system] = {
                "frames": max((t.received for t in tracks), default=0),
                "gaps": whole,
                "reported_dropped": reported,
                "missed": partial + whole - reported,
            }
        return Summary(
            path=str(self.directory),
            start_ns=self.start_ns,
            end_ns=self.end_ns,
            counts=dict(self.counts),
            frames=frames,
            queue_drops=self.queue_drops,
            failure=self.failure,
            side=self._side_summary,
        )


def write_metadata(
    directory: Path,
    file_name: str,
    *,
    start_ns: int,
    end_ns: int,
    topics: list[tuple[TopicSpec, int]],
    custom_data: dict[str, str] | None = None,
) -> Path:
    """rosbag2's metadata.yaml (version 9) for one MCAP file; written to a temporary
    name and renamed, so a reader never sees half of it."""
    duration = max(0, end_ns - start_ns)
    total = sum(count for _, count in topics)
    info = {
        "version": ROSBAG2_VERSION,
        "storage_identifier": "mcap",
        "relative_file_paths": [file_name],
        "duration": {"nanoseconds": duration},
        "starting_time": {"nanoseconds_since_epoch": start_ns},
        "message_count": total,
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": spec.name,
                    "type": spec.type,
                    "serialization_format": "cdr",
                    "offered_qos_profiles": spec.qos,
                    "type_description_hash": "",
                },
                "message_count": count,
            }
            for spec, count in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "files": [
            {
                "path": file_name,
                "starting_time": {"nanoseconds_since_epoch": start_ns},
                "duration": {"nanoseconds": duration},
                "message_count": total,
            }
        ],
        "custom_data": dict(custom_data or {}),
        "ros_distro": os.environ.get("ROS_DISTRO", "kilted"),
    }
    path = directory / "metadata.yaml"
    tmp = directory / ".metadata.yaml.tmp"
    tmp.write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False))
    tmp.replace(path)
    return path
