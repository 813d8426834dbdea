"""The NatNet frame sequencer alone (no sockets, no clock): which frames are the server's
next ones, from frame numbers, server timestamps and arrival times."""

from __future__ import annotations

import pytest

from mocap4r2_drivers.optitrack.sequencer import (
    LATE_WINDOW,
    MIN_FRAME_JUMP,
    RESYNC_FRAMES,
    FrameSequencer,
)

RATE = 100.0


def streaming(
    first: int = 1000, count: int = RESYNC_FRAMES, rate: float = RATE
) -> tuple[FrameSequencer, int]:
    """A sequencer that has followed ``count`` frames of a server at ``rate`` Hz; the
    last frame number."""
    seq = FrameSequencer()
    seq.rate = rate
    for k in range(first, first + count):
        seq.place(k, k / rate, k / rate)
    assert seq.last_number == first + count - 1
    return seq, first + count - 1


def test_the_first_frames_are_handed_out_once_enough_of_them_agree():
    seq = FrameSequencer()
    placed = [seq.place(k, k / RATE, k / RATE).accepted for k in range(50, 50 + RESYNC_FRAMES + 2)]
    assert placed == [False] * (RESYNC_FRAMES - 1) + [True] * 3
    assert seq.last_number == 50 + RESYNC_FRAMES + 1


def test_a_garbage_first_frame_does_not_set_the_numbering():
    seq = FrameSequencer()
    assert not seq.place(2_000_000_000, 0.0, 0.0).accepted  # decodable garbage
    numbers = range(10, 10 + RESYNC_FRAMES)
    placed = [seq.place(k, k / RATE, k / RATE) for k in numbers]
    assert placed[-1].accepted and seq.last_number == numbers[-1]
    assert all(p.rejected is None for p in placed), "the first frames are never reported"


def test_repeats_and_late_frames_are_dropped_quietly_as_duplicates():
    seq, last = streaming()
    assert not seq.place(last, last / RATE, 1.0).accepted  # the same frame on the other socket
    late = seq.place(last - LATE_WINDOW, 0.0, 1.0)  # a reordered datagram
    assert not late.accepted and late.rejected is None
    assert seq.duplicates == 2 and seq.last_number == last


def test_a_frame_far_ahead_is_rejected_until_a_restarted_numbering_agrees():
    seq, last = streaming()
    now = last / RATE
    far = last + 100_000
    first = seq.place(far, 0.0, now)
    assert not first.accepted and first.rejected[0] == "frame_out_of_sequence"
    assert f"frame {far} out of sequence (last {last})" in first.rejected[1]
    placed = [seq.place(far + i, i / RATE, now) for i in range(1, RESYNC_FRAMES)]
    assert [p.accepted for p in placed] == [False] * (RESYNC_FRAMES - 2) + [True]
    assert placed[-1].rejected[0] == "numbering_restart", "followed, and said so"
    assert seq.last_number == far + RESYNC_FRAMES - 1
    assert seq.place(far + RESYNC_FRAMES, 0.1, now).accepted


def test_a_frame_far_behind_is_rejected_not_a_duplicate():
    seq, last = streaming(first=10_000)
    placement = seq.place(last - LATE_WINDOW - 1, 0.0, last / RATE)
    assert not placement.accepted and placement.rejected[0] == "frame_out_of_sequence"
    assert seq.duplicates == 0


def test_the_jump_allowed_grows_with_the_time_since_the_last_frame():
    seq, last = streaming()
    then = last / RATE
    # at once: the rate explains no jump beyond MIN_FRAME_JUMP
    assert not seq.place(last + MIN_FRAME_JUMP + 5, 0.0, then).accepted
    seq, last = streaming()
    # a second later, up to 2 * rate frames more may have been sent
    assert seq.place(last + 150, 0.0, then + 1.0).accepted


def test_a_jump_the_servers_clock_confirms_is_followed_at_once():
    seq, last = streaming()
    then = last / RATE
    skipped = 500  # the server caught up by skipping frames: its timestamps say so
    placement = seq.place(last + skipped, (last + skipped) / RATE, then)
    assert placement.accepted and placement.rejected is None
    # the same jump with a timestamp that does not agree is not a skip
    seq, last = streaming()
    assert not seq.place(last + skipped, last / RATE + 0.01, then).accepted


def test_the_rate_comes_from_the_servers_timestamps_when_not_told():
    seq = FrameSequencer()
    for k in range(100, 100 + RESYNC_FRAMES + 10):
        seq.place(k, k / 240.0, 0.0)
    assert seq.rate == pytest.approx(240.0)


def test_a_told_rate_is_kept():
    seq, _ = streaming(rate=360.0, count=RESYNC_FRAMES + 20)
    assert seq.rate == 360.0


def test_restart_takes_the_numbering_anew_without_a_report():
    seq, last = streaming(first=5000)
    seq.restart()
    placed = [seq.place(k, k / RATE, 100.0) for k in range(1, 1 + RESYNC_FRAMES)]
    assert placed[-1].accepted and all(p.rejected is None for p in placed)
    assert seq.last_number == RESYNC_FRAMES
