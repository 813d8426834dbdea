"""A DiagnosticArray serialized (CDR) from plain strings, without message objects.

Why: a system's report is one DiagnosticStatus with a KeyValue per figure and per body
(about 80 of them with 50 bodies). Building those message objects and converting them to
C for publishing held the interpreter about 0.4 ms of the report's 1 ms, once a second,
while the reader thread waited for it with a frame arriving every millisecond: the frames
around each report were the slowest of a 1 kHz stream. Publishing bytes (``Publisher.publish``
takes them, as for the frames, see cdr.py) leaves only the strings to write.

The wire rules are those of every other message here (cdr_layout.py, whose ``align`` this
uses): little-endian CDR
after the 4-byte encapsulation, a string as its uint32 length with the NUL, its bytes and
the NUL, aligned to 4; a sequence as its uint32 count, aligned to 4, then its elements; a
``byte`` as one octet. A text is written as rclpy writes a ``str``: its UTF-8 bytes up to
the first NUL (rclpy copies a C string); one that UTF-8 cannot encode (a lone surrogate,
which rclpy refuses) has it replaced by "?", so a report is never lost to one name.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .cdr_layout import ENCAPSULATION, align

__all__ = ["StatusFields", "encode_diagnostic_array"]

_COUNT = struct.Struct("<I")
_STAMP = struct.Struct("<iI")


class StatusFields(NamedTuple):
    """The fields of one diagnostic_msgs/DiagnosticStatus."""

    level: int  # DiagnosticStatus.OK (0), WARN (1), ERROR (2) or STALE (3)
    name: str
    message: str
    hardware_id: str
    values: Mapping[str, str]  # KeyValue key -> value, in order


def _text(out: list[bytes], size: int, text: str) -> int:
    """Append ``text`` as a CDR string at offset ``size`` (after the encapsulation); the
    offset after it."""
    string = _cdr_string(text)
    start: int = align(size, 4)
    out.append(_PADDING[start - size] + string)
    return start + len(string)


#: the zero bytes that align an offset to 4, by how many
_PADDING = (b"", b"\0", b"\0\0", b"\0\0\0")


@functools.lru_cache(maxsize=1024)
def _cdr_string(text: str) -> bytes:
    """``text`` as a CDR string without its alignment: uint32 length with the NUL, the
    bytes, the NUL. Remembered (a bounded number): a report's keys, names and most of its
    values are those of the report before, and writing them anew was a third of the
    report, which holds the interpreter the reader thread needs."""
    raw = text.encode("utf-8", "replace").split(b"\0", 1)[0]
    return _COUNT.pack(len(raw) + 1) + raw + b"\0"


def _count(out: list[bytes], size: int, count: int) -> int:
    """Append a sequence's ``count`` at offset ``size``; the offset after it."""
    start: int = align(size, 4)
    out.append(_PADDING[start - size] + _COUNT.pack(count))
    return start + 4


def encode_diagnostic_array(sec: int, nanosec: int, frame_id: str, statuses: Sequence[StatusFields]) -> bytes:
    """The serialized diagnostic_msgs/DiagnosticArray of header (``sec``, ``nanosec``,
    ``frame_id``) and ``statuses``: the bytes ``rclpy.serialization.serialize_message``
    gives for the same message."""
    out = [ENCAPSULATION, _STAMP.pack(sec, nanosec)]
    size = _text(out, _STAMP.size, frame_id)
    size = _count(out, size, len(statuses))
    for status in statuses:
        if not 0 <= status.level <= 255:
            raise ValueError(f"a diagnostic level is one octet, got {status.level}")
        out.append(bytes((status.level,)))
        size += 1
        for text in (status.name, status.message, status.hardware_id):
            size = _text(out, size, text)
        size = _count(out, size, len(status.values))
        for key, value in status.values.items():
            size = _text(out, size, key)
            size = _text(out, size, value)
    return b"".join(out)
