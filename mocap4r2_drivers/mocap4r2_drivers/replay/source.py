"""What every replay reader hands the replay system: an opened file (:class:`ReplaySource`)
with its :class:`SourceInfo`, frames as :class:`TimedFrame` items, and the one error a
user sees (:class:`ReplayFileError`). The readers (bags in readers.py, C3D in
c3d_source.py) build on these; the replay system needs nothing else of them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mocap4r2_control.frame import AssetNames, MocapFrame


class ReplayFileError(ValueError):
    """A file that cannot be replayed, in words a user can act on."""


@dataclass(slots=True)
class TimedFrame:
    """A frame with its place in the file: ``offset`` seconds after the file's first
    frame, and the capture stamp the file holds for it."""

    offset: float
    sec: int
    nanosec: int
    frame: MocapFrame


@dataclass
class SourceInfo:
    """What /diagnostics and the log say about an opened file."""

    kind: str
    rate: float
    frame_count: int
    duration: float
    names: AssetNames
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordingShape:
    """What of a recording of mocap4r2_interfaces messages decides whether the node's
    encoder would write them again byte for byte (pass_through.pass_through_problem):
    the header frame_id of each recorded topic (by topic: markers, rigid_bodies,
    skeletons) and whether the recorded rigid bodies carry their markers."""

    frame_ids: dict[str, str]
    body_markers: bool


#: messages of a topic decoded by one numpy gather while frames are paced: enough to
#: share its fixed cost, few enough that the thread decoding holds the interpreter briefly
DECODE_BATCH = 16
#: the same when frames are played as fast as they go: a gather's fixed cost shared by more
FAST_DECODE_BATCH = 128


class ReplaySource:
    """An opened file: ``info`` and the frames between ``start`` and ``end`` seconds."""

    info: SourceInfo
    path: Path
    #: how many messages of a topic a reader that batches decodes at once (see DECODE_BATCH)
    decode_batch: int = DECODE_BATCH
    #: a recording of mocap4r2_interfaces messages: its shape (None for any other file)
    recording_shape: RecordingShape | None = None
    #: attach to each frame the recorded messages it was decoded from
    #: (``MocapFrame.recorded``; the replay system sets it at configure when the node may
    #: publish them as they are; only where recording_shape is not None)
    keep_recorded: bool = False

    def frames(self, start: float = 0.0, end: float = math.inf) -> Iterator[TimedFrame]:
        raise NotImplementedError

    def close(self) -> None:
        """Release the file (safe twice)."""


def file_signature(path: Path) -> tuple[int, int]:
    """(size, modification time in ns) of a file, or of every file in a bag folder."""
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    size, mtime = 0, 0
    for p in files:
        st = p.stat()
        size += st.st_size
        mtime = max(mtime, st.st_mtime_ns)
    return size, mtime
