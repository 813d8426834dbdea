"""Rebuilding a bag whose writer died: `mocap4r2 recover BAG`.

A recorder killed mid-session leaves its MCAP file without the summary section and
footer (and possibly cut inside a record), and no metadata.yaml. Every chunk closed
before the end is complete, so reading the records in order until the first incomplete
one gets everything the writer had flushed. The records are copied into a new, complete
MCAP file (the damaged one is kept as ``*.damaged`` unless told otherwise) and
metadata.yaml is written from what was found.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType, Writer

from .bag_writer import LIBRARY, TopicSpec, write_metadata


@dataclass
class Recovered:
    """What recover() saved from a bag: the rewritten file and its message counts."""

    path: Path
    messages: int
    counts: dict[str, int]
    stopped_by: str  # why reading ended early, "" when the file was complete


def _mcap_file(bag: Path) -> Path:
    if bag.is_file():
        return bag
    files = sorted(p for p in bag.glob("*.mcap"))
    if not files:
        raise FileNotFoundError(f"no .mcap file in {bag}")
    if len(files) > 1:
        raise ValueError(
            f"{bag} holds {len(files)} MCAP files; recover one of them: {[f.name for f in files]}"
        )
    return files[0]


def recover(bag: str | Path, keep_damaged: bool = True) -> Recovered:
    """Rewrite a bag whose recorder was killed (no index, no metadata.yaml) from the messages readable in its
    MCAP file, up to the first damaged record."""
    source = _mcap_file(Path(bag))
    directory = source.parent
    target = source.with_name(source.name + ".recovering")
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    new_schema: dict[int, int] = {}
    new_channel: dict[int, int] = {}
    counts: dict[int, int] = {}
    start = end = 0
    stopped_by = ""
    with open(source, "rb") as f, open(target, "wb") as out:
        writer = Writer(out, compression=CompressionType.NONE)
        writer.start(profile="ros2", library=LIBRARY)
        try:
            for record in StreamReader(f, skip_magic=False).records:
                if isinstance(record, Schema):
                    if record.id not in new_schema:
                        schemas[record.id] = record
                        new_schema[record.id] = writer.register_schema(
                            record.name, record.encoding, record.data
                        )
                elif isinstance(record, Channel):
                    if record.id not in new_channel:
                        channels[record.id] = record
                        new_channel[record.id] = writer.register_channel(
                            record.topic,
                            record.message_encoding,
                            new_schema.get(record.schema_id, 0),
                            dict(record.metadata),
                        )
                        counts[record.id] = 0
                elif isinstance(record, Message) and record.channel_id in new_channel:
                    writer.add_message(
                        new_channel[record.channel_id],
                        record.log_time,
                        record.data,
                        record.publish_time,
                        record.sequence,
                    )
                    counts[record.channel_id] += 1
                    start = record.log_time if not start else min(start, record.log_time)
                    end = max(end, record.log_time)
        except Exception as exc:  # noqa: BLE001 - the cut end of a killed writer's file
            stopped_by = f"{type(exc).__name__}: {exc}"
        writer.finish()
    if keep_damaged:
        source.replace(source.with_name(source.name + ".damaged"))
    target.replace(source)
    topics = []
    for cid, channel in channels.items():
        schema = schemas.get(channel.schema_id)
        qos_text = channel.metadata.get("offered_qos_profiles", "")
        try:
            qos = yaml.safe_load(qos_text) or [] if qos_text else []
        except yaml.YAMLError:
            qos = []
        topics.append(
            (
                TopicSpec(channel.topic, schema.name if schema else "", qos if isinstance(qos, list) else []),
                counts[cid],
            )
        )
    write_metadata(
        directory,
        source.name,
        start_ns=start,
        end_ns=end,
        topics=topics,
        custom_data={"mocap4r2.recovered": "true"},
    )
    by_topic = {channels[cid].topic: n for cid, n in counts.items()}
    return Recovered(path=directory, messages=sum(counts.values()), counts=by_topic, stopped_by=stopped_by)
