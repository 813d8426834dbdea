"""The messages of an uncompressed MCAP file, a chunk at a time, as offsets into its bytes.

rosbags reads any bag, one message object at a time; replaying a long session as fast
as it goes needs less per message. This reader walks the records of an MCAP file (the
public format: an 8-byte magic, then records of a 1-byte opcode, a u64 length and their
content, little endian) and hands out, per chunk, the chunk's bytes as a numpy array and,
for every message of the wanted channels in file order, its channel id and where its
data lies, so a decoder can gather the fields of many messages in one numpy operation.

Only what the session recorder writes is read here: chunks stored without compression.
``fast_readable`` says whether a file is such (every chunk uncompressed, nothing cut
short); callers read other files with rosbags. Every length is checked against the bytes
that hold it before it is used.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

MAGIC = b"\x89MCAP0\r\n"
OP_FOOTER = 0x02
OP_CHANNEL = 0x04
OP_MESSAGE = 0x05
OP_CHUNK = 0x06
OP_DATA_END = 0x0F
_RECORD = struct.Struct("<BQ")  # opcode, content length
_CHUNK_HEAD = struct.Struct("<QQQI")  # start time, end time, uncompressed size, uncompressed crc
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
#: message records: channel id (u16), sequence (u32), log time, publish time (u64)
_MESSAGE_HEAD = 2 + 4 + 8 + 8
#: the largest chunk read whole (the recorder writes 1 MiB chunks)
MAX_CHUNK_BYTES = 256 << 20


class McapFormatError(ValueError):
    """Bytes that are not the MCAP records they should be."""


@dataclass(slots=True)
class ChunkMessages:
    """The messages of one chunk: ``data[starts[i]:starts[i] + lengths[i]]`` is message
    i's serialized data, of channel ``channels[i]``, in file order; ``raw`` holds the
    same bytes as ``data`` (a slice of it is a message's bytes, to publish as they are)."""

    data: npt.NDArray[np.uint8]
    channels: list[int]
    starts: list[int]
    lengths: list[int]
    raw: bytes = b""


def _string(buf: bytes | memoryview, pos: int, end: int) -> tuple[str, int]:
    if pos + 4 > end:
        raise McapFormatError(f"a string's length runs past its record at byte {pos}")
    (length,) = _U32.unpack_from(buf, pos)
    pos += 4
    if pos + length > end:
        raise McapFormatError(f"a string of {length} bytes runs past its record at byte {pos}")
    return bytes(buf[pos : pos + length]).decode("utf-8", "replace"), pos + length


class McapChunks:
    """An uncompressed MCAP file read as chunks of messages (see the module's text)."""

    def __init__(self, path: Path, topics: set[str] | None = None) -> None:
        self.path = path
        #: the topics whose messages are wanted (None: all)
        self.wanted_topics = topics
        #: channel id -> topic, from the Channel records met so far
        self.topics: dict[int, str] = {}
        self._wanted: set[int] = set()

    def chunks(self) -> Iterator[ChunkMessages]:
        """Every chunk's messages of the wanted topics, in file order (chunks without
        any are skipped); Channel records seen on the way fill ``topics``."""
        with open(self.path, "rb") as handle:
            if handle.read(len(MAGIC)) != MAGIC:
                raise McapFormatError(f"{self.path} does not start with the MCAP magic")
            while True:
                head = handle.read(_RECORD.size)
                if not head:
                    return
                if len(head) < _RECORD.size:
                    raise McapFormatError("a record header cut short at the end of the file")
                opcode, length = _RECORD.unpack(head)
                if opcode in (OP_DATA_END, OP_FOOTER):
                    return
                if opcode == OP_CHUNK:
                    if length > MAX_CHUNK_BYTES:
                        raise McapFormatError(f"a chunk of {length} bytes (at most {MAX_CHUNK_BYTES})")
                    content = handle.read(length)
                    if len(content) < length:
                        raise McapFormatError("a chunk cut short at the end of the file")
                    chunk = self._chunk(content)
                    if chunk.starts:
                        yield chunk
                elif opcode == OP_CHANNEL:
                    content = handle.read(min(length, 1 << 20))
                    self._channel(content, 0, len(content))
                    handle.seek(length - len(content), 1)
                else:
                    handle.seek(length, 1)

    def _channel(self, blob: bytes | memoryview, start: int, end: int) -> None:
        if start + 4 > end:
            raise McapFormatError("a Channel record cut short")
        (channel_id,) = _U16.unpack_from(blob, start)
        topic, _ = _string(blob, start + 4, end)
        self.topics[channel_id] = topic
        if self.wanted_topics is None or topic in self.wanted_topics:
            self._wanted.add(channel_id)
        else:
            self._wanted.discard(channel_id)

    def _chunk(self, content: bytes) -> ChunkMessages:
        if len(content) < _CHUNK_HEAD.size + 4:
            raise McapFormatError("a Chunk record cut short")
        compression, pos = _string(content, _CHUNK_HEAD.size, len(content))
        if compression:
            raise McapFormatError(f"a chunk compressed with {compression} (only uncompressed chunks here)")
        if pos + 8 > len(content):
            raise McapFormatError("a Chunk record cut short")
        (size,) = _U64.unpack_from(content, pos)
        pos += 8
        if size > len(content) - pos:
            raise McapFormatError(f"a chunk's records of {size} bytes run past the chunk")
        chans: list[int] = []
        starts: list[int] = []
        lengths: list[int] = []
        view = memoryview(content)
        # the records (1-byte opcode, u64 length, content) walked in one loop: a chunk
        # holds thousands of messages, and a generator step per record costs more than
        # reading it
        record, u16, wanted = _RECORD.unpack_from, _U16.unpack_from, self._wanted
        end_of_records = pos + size
        while pos < end_of_records:
            if pos + _RECORD.size > end_of_records:
                raise McapFormatError(f"a record header cut short at byte {pos}")
            opcode, length = record(content, pos)
            start = pos + _RECORD.size
            if length > end_of_records - start:
                raise McapFormatError(f"a record of {length} bytes runs past the end at byte {pos}")
            pos = start + length
            if opcode == OP_MESSAGE:
                if length < _MESSAGE_HEAD:
                    raise McapFormatError("a Message record cut short")
                channel_id = u16(content, start)[0]
                if channel_id in wanted:
                    chans.append(channel_id)
                    starts.append(start + _MESSAGE_HEAD)
                    lengths.append(length - _MESSAGE_HEAD)
            elif opcode == OP_CHANNEL:
                self._channel(view, start, pos)
        return ChunkMessages(np.frombuffer(content, dtype=np.uint8), chans, starts, lengths, content)


def fast_readable(path: Path) -> bool:
    """Whether ``path`` is an MCAP file whose chunks are all stored uncompressed and
    whole (what :class:`McapChunks` reads); it reads only the records' headers."""
    try:
        with open(path, "rb") as handle:
            if handle.read(len(MAGIC)) != MAGIC:
                return False
            size = path.stat().st_size
            pos = len(MAGIC)
            while True:
                head = handle.read(_RECORD.size)
                if len(head) < _RECORD.size:
                    return False  # no DataEnd: a file cut short
                opcode, length = _RECORD.unpack(head)
                pos += _RECORD.size
                if length > size - pos:
                    return False
                if opcode in (OP_DATA_END, OP_FOOTER):
                    return True
                if opcode == OP_CHUNK:
                    fixed = handle.read(_CHUNK_HEAD.size + 4)
                    if len(fixed) < _CHUNK_HEAD.size + 4 or _U32.unpack_from(fixed, _CHUNK_HEAD.size)[0]:
                        return False  # a compression named
                    handle.seek(length - len(fixed), 1)
                else:
                    handle.seek(length, 1)
                pos += length
    except OSError:
        return False
