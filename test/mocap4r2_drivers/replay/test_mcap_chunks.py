"""mcap_chunks.py: the messages of a session as session_recorder writes it, read chunk by
chunk, are the messages the mcap library (the format's reference implementation) reads
from the same file, in the same order; a compressed or cut-short file is not taken for
one it can read (replay reads those through rosbags, to the same frames), and damaged
records are refused with the reason, never an IndexError or a hang."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader

sys.path.insert(0, str(Path(__file__).parent))

from session_fixture import record_session  # noqa: E402

from mocap4r2_drivers.replay.mcap_chunks import McapChunks, McapFormatError, fast_readable  # noqa: E402
from mocap4r2_drivers.replay.readers import ReplayFileError, open_source  # noqa: E402


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    directory, _, _ = record_session(tmp_path_factory.mktemp("plain"), frames=90)
    return directory / "s1_0.mcap"


def _chunked(path: Path, topics: set[str] | None = None) -> list[tuple[str, bytes]]:
    reader = McapChunks(path, topics)
    out = []
    for chunk in reader.chunks():
        data = chunk.data.tobytes()
        for channel, start, length in zip(chunk.channels, chunk.starts, chunk.lengths):
            out.append((reader.topics[channel], data[start : start + length]))
    return out


def test_messages_are_those_the_mcap_library_reads_in_file_order(session):
    assert fast_readable(session)
    with open(session, "rb") as handle:
        reference = [
            (channel.topic, bytes(message.data))
            for _, channel, message in make_reader(handle).iter_messages(log_time_order=False)
        ]
    assert len(reference) == 3 * 90
    assert _chunked(session) == reference
    wanted = {"/sim/rigid_bodies", "/sim/skeletons"}
    assert _chunked(session, wanted) == [m for m in reference if m[0] in wanted]


def test_a_compressed_session_is_read_through_rosbags_to_the_same_frames(session, tmp_path):
    directory, _, _ = record_session(tmp_path, frames=90, compression="zstd")
    packed = directory / "s1_0.mcap"
    assert not fast_readable(packed)
    with pytest.raises(McapFormatError, match="zstd"):
        _chunked(packed)
    plain, compressed = open_source(session, "/sim"), open_source(packed, "/sim")
    assert plain.mcap_file is not None and compressed.mcap_file is None
    a, b = list(plain.frames()), list(compressed.frames())
    assert [(t.sec, t.nanosec, t.frame.frame_number) for t in a] == [
        (t.sec, t.nanosec, t.frame.frame_number) for t in b
    ]
    assert all(x.frame.bodies.positions.tobytes() == y.frame.bodies.positions.tobytes() for x, y in zip(a, b))


def test_a_file_cut_short_is_not_fast_readable_and_its_cut_chunk_is_refused(session, tmp_path):
    data = session.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: len(data) // 2])
    assert not fast_readable(cut)
    with pytest.raises(McapFormatError, match="cut short"):
        _chunked(cut)


def test_damaged_records_are_refused_with_the_reason(session, tmp_path):
    data = bytearray(session.read_bytes())
    assert data[8] == 0x01  # the header record comes first
    header_len = struct.unpack_from("<Q", data, 9)[0]
    chunk = 8 + 9 + header_len
    assert data[chunk] == 0x06
    # the chunk's records claim more bytes than the chunk holds
    records_len_at = chunk + 9 + 8 + 8 + 8 + 4 + 4  # times, sizes, crc, empty compression name
    bad = bytearray(data)
    struct.pack_into("<Q", bad, records_len_at, 1 << 40)
    path = tmp_path / "bad_records.mcap"
    path.write_bytes(bytes(bad))
    with pytest.raises(McapFormatError, match="run past"):
        _chunked(path)
    # a record inside the chunk claims more bytes than are left
    bad = bytearray(data)
    struct.pack_into("<Q", bad, records_len_at + 8 + 1, 1 << 40)
    path.write_bytes(bytes(bad))
    with pytest.raises(McapFormatError, match="runs past"):
        _chunked(path)
    # not MCAP at all
    path.write_bytes(b"not an mcap file at all")
    assert not fast_readable(path)
    with pytest.raises(McapFormatError, match="magic"):
        _chunked(path)


def test_corrupted_bytes_give_a_replay_error_or_frames_never_another_exception(session, tmp_path):
    """Bytes changed anywhere in a session (a disk or a copy gone wrong): opening and
    playing it either works or fails with ReplayFileError, the error configure and the
    read-ahead thread report with its reason."""
    data = session.read_bytes()
    rng = np.random.default_rng(4)
    path = tmp_path / "damaged.mcap"
    outcomes = {"played": 0, "refused": 0}
    for _ in range(120):
        damaged = bytearray(data)
        for at in rng.integers(8, len(data), size=int(rng.integers(1, 4))):
            damaged[at] = int(rng.integers(0, 256))
        path.write_bytes(bytes(damaged))
        try:
            frames = list(open_source(path, "/sim").frames())
        except ReplayFileError:
            outcomes["refused"] += 1
        else:
            assert all(t.frame.frame_number >= 0 for t in frames)
            outcomes["played"] += 1
    assert outcomes["played"] and outcomes["refused"], outcomes
