"""Foxglove records written to an MCAP file, and a whole recorded session converted.

* :class:`RecordWriter`: registers each schema once and each channel on its first
  record, with the same schema bytes the live server advertises (records.py), so an MCAP
  channel and a WebSocket channel read alike.
* :func:`export_session`: ``mocap4r2 export SESSION --format foxglove``. One MCAP with
  every recorded message copied as it was (schema, channel, bytes, times) and, beside
  them, the Foxglove channels of the convertible topics (``/foxglove/...``), so
  Foxglove's 3D panel plays the session and its Plot and Log panels show the systems'
  figures. A Foxglove record takes the log time of the message it comes from (both play
  together) and the header stamp as its publish time. rosbags cannot read protobuf
  channels inside a rosbag2 bag, so the file is an export for Foxglove, never a bag the
  suite reads back (its recorded topics stay readable by the mcap library).
* :class:`SideFile`: the recorder's live form (``foxglove_schemas``): only the Foxglove
  channels, in ``<session>/foxglove/<session>_foxglove.mcap`` beside the bag (never
  inside its MCAP, which must stay a rosbag2 file), written by its own thread from a
  bounded queue so converting never delays the bag.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from mcap.reader import make_reader
from mcap.writer import CompressionType, Writer

from . import convert
from .convert import DEFAULT_STYLE, Style
from .records import Record, records_raw

LIBRARY = "mocap4r2 foxglove"


class RecordWriter:
    """Foxglove records into an MCAP ``Writer`` that the caller started."""

    def __init__(self, writer: Writer):
        self.writer = writer
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._sequence: dict[str, int] = {}
        self.counts: dict[str, int] = {}

    def write(self, record: Record, log_time: int | None = None, publish_time: int | None = None) -> None:
        """Write one record; ``log_time`` defaults to the record's (its header stamp)."""
        channel = self._channels.get(record.topic)
        if channel is None:
            schema = self._schemas.get(record.schema.name)
            if schema is None:
                schema = self.writer.register_schema(
                    record.schema.name, record.schema.encoding, record.schema.data
                )
                self._schemas[record.schema.name] = schema
            channel = self.writer.register_channel(record.topic, record.schema.message_encoding, schema)
            self._channels[record.topic] = channel
        sequence = self._sequence[record.topic] = self._sequence.get(record.topic, 0) + 1
        self.writer.add_message(
            channel,
            record.log_time if log_time is None else log_time,
            record.data,
            record.log_time if publish_time is None else publish_time,
            sequence,
        )
        self.counts[record.topic] = self.counts.get(record.topic, 0) + 1


class _Copier:
    """Copies messages of another MCAP file as they were: schema, channel (with its
    metadata, e.g. rosbag2's offered QoS), bytes, log and publish times, sequence."""

    def __init__(self, writer: Writer):
        self.writer = writer
        self._schemas: dict[int, int] = {}
        self._channels: dict[int, int] = {}

    def copy(self, schema: Any, channel: Any, message: Any) -> None:
        new_channel = self._channels.get(channel.id)
        if new_channel is None:
            new_schema = 0
            if schema is not None:
                new_schema = self._schemas.get(schema.id, 0)
                if not new_schema:
                    new_schema = self.writer.register_schema(schema.name, schema.encoding, schema.data)
                    self._schemas[schema.id] = new_schema
            new_channel = self.writer.register_channel(
                channel.topic, channel.message_encoding, new_schema, dict(channel.metadata)
            )
            self._channels[channel.id] = new_channel
        self.writer.add_message(
            new_channel, message.log_time, message.data, message.publish_time, message.sequence
        )


def session_files(bag: Path) -> list[Path]:
    """The MCAP files of a recorded session (a rosbag2 directory) or the file itself."""
    if bag.is_file():
        return [bag]
    files = sorted(bag.glob("*.mcap"))
    if not files:
        raise FileNotFoundError(f"no .mcap file in {bag}")
    return files


def export_session(
    bag: str | Path,
    out: str | Path,
    system: str | None = None,
    style: Style = DEFAULT_STYLE,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Path, dict[str, int]]:
    """Write ``out``: the session's messages and their Foxglove records (of every system,
    or of ``system``'s namespace only for the scene topics). Returns the path and the
    records written per Foxglove topic. Raises OSError, or ValueError for a bag without
    anything to convert."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    bag = Path(bag)
    out = Path(out)
    prefix = "/" + system.strip("/") + "/" if system and system.strip("/") else None
    files = session_files(bag)
    # rosbags knows the recorded types (from the bag's own schemas) and deserializes
    with AnyReader([bag], default_typestore=get_typestore(Stores.EMPTY)) as reader:
        convertible = {
            c.topic: c.msgtype
            for c in reader.connections
            if convert.source_kind(c.msgtype) is not None
            and (prefix is None or convert.source_kind(c.msgtype) != "scene" or c.topic.startswith(prefix))
        }
        if not convertible:
            raise ValueError(f"{bag}: nothing Foxglove can draw (no Markers, RigidBodies, Skeletons, /tf)")
        total = sum(c.msgcount for c in reader.connections)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "xb") as stream:
            writer = Writer(stream, compression=CompressionType.NONE)
            writer.start(profile="", library=LIBRARY)
            copier = _Copier(writer)
            foxglove = RecordWriter(writer)
            done = 0
            for path in files:
                with open(path, "rb") as source:
                    for schema, channel, message in make_reader(source).iter_messages(log_time_order=True):
                        done += 1
                        copier.copy(schema, channel, message)
                        type_name = convertible.get(channel.topic)
                        if type_name is not None:
                            data = message.data
                            for record in records_raw(
                                channel.topic, type_name, data, reader.deserialize, style
                            ):
                                foxglove.write(record, message.log_time, publish_time=record.log_time)
                        if progress is not None and (done % 2000 == 0 or done == total):
                            progress(done, total)
            writer.finish()
    return out, foxglove.counts


class SideFile:
    """The recorder's Foxglove file beside a session bag: ``put`` (the bag's writer
    thread, O(1)) queues a recorded message; this class's thread converts and writes it.
    A full queue drops (counted) rather than slowing the bag; a conversion error is
    counted, never raised."""

    def __init__(
        self,
        deserialize: Callable[[bytes, str], Any],
        style: Style = DEFAULT_STYLE,
        queue_size: int = 10_000,
        flush_period: float = 0.5,
    ):
        self.path = Path()
        self._deserialize = deserialize
        self._style = style
        self._queue: collections.deque[tuple[str, str, bytes, int]] = collections.deque()
        self.queue_size = queue_size
        self.flush_period = flush_period
        self.dropped = 0
        self.bad = 0
        self.failure = ""
        self._stop = threading.Event()
        self._stream: BinaryIO | None = None
        self._records: RecordWriter | None = None
        self._thread: threading.Thread | None = None

    @property
    def counts(self) -> dict[str, int]:
        return dict(self._records.counts) if self._records is not None else {}

    def open(self, directory: Path) -> None:
        """Create ``<directory>/foxglove/<directory name>_foxglove.mcap`` (never over an
        existing file) and start the thread."""
        self.path = directory / "foxglove" / f"{directory.name}_foxglove.mcap"
        self.path.parent.mkdir(exist_ok=True)
        self._stream = open(self.path, "xb", buffering=1 << 20)  # noqa: SIM115 - closed by close()
        writer = Writer(self._stream, compression=CompressionType.NONE)
        writer.start(profile="", library=LIBRARY)
        self._records = RecordWriter(writer)
        self._thread = threading.Thread(target=self._run, name="foxglove-side-file", daemon=True)
        self._thread.start()

    def put(self, topic: str, type_name: str, data: bytes, log_time: int) -> None:
        if convert.source_kind(type_name) is None:
            return
        if len(self._queue) >= self.queue_size or self.failure:
            self.dropped += 1
            return
        self._queue.append((topic, type_name, data, log_time))

    def _run(self) -> None:
        records_writer = self._records
        assert records_writer is not None  # started by open()
        last_flush = time.monotonic()
        try:
            while True:
                stopping = self._stop.is_set()
                while self._queue:
                    topic, type_name, data, log_time = self._queue.popleft()
                    try:
                        out = records_raw(topic, type_name, data, self._deserialize, self._style)
                    except Exception:  # noqa: BLE001 - a malformed message is counted, never fatal
                        self.bad += 1
                        continue
                    for record in out:
                        records_writer.write(record, log_time=log_time, publish_time=record.log_time)
                if time.monotonic() - last_flush >= self.flush_period:
                    records_writer.writer.flush()
                    last_flush = time.monotonic()
                if stopping and not self._queue:
                    break
                time.sleep(0.005)
        except Exception as exc:  # noqa: BLE001 - disk full...: reported, the bag goes on
            self.failure = f"{type(exc).__name__}: {exc}"
            self._queue.clear()

    def close(self) -> dict[str, Any]:
        """Drain, finish the file; what it holds and lost."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._records is not None:
                self._records.writer.finish()
        except Exception as exc:  # noqa: BLE001 - reported in the summary
            self.failure = self.failure or f"{type(exc).__name__}: {exc}"
        if self._stream is not None:
            self._stream.close()
        return {
            "path": str(self.path),
            "counts": self.counts,
            "dropped": self.dropped,
            "bad": self.bad,
            "failure": self.failure,
        }
