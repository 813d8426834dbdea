"""The skeletons' segments through the compiled poses pass (FrameEncoder with ``compiled``:
bodies_pass.py's kernel with no mean error, the stamp and the skeletons' validity by
``SkeletonsEncoder.restamp``) give the numpy path's Skeletons bytes.

Byte for byte against the same FrameEncoder with ``compiled=False`` (``good_poses`` + hold
+ ``SkeletonsEncoder.repeat``) and with ``repeat_unchanged=False`` (the whole rule and
encode every frame), on random streams: 0 to 4 skeletons of 0 to 25 segments, NaN and inf
coordinates, degenerate, non-unit and float32-rounded quaternions, arrays of other types
than the pass's, segments flagged invalid or never seen, skeletons invalid, coordinates
whose sums overflow, non-ASCII names, structure changes between runs of unchanged frames;
/tf (from the bodies) with ``tf=True``. The pass's calls are counted: the bytes must agree
because the pass ran, not because every encoder took numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from marker_streams import (
    NAMES,
    Counted,
    compare_past_the_safe_range,
    counting_poses,
    loaded_poses_pass,
    random_poses,
)

from mocap4r2_control import bodies_pass
from mocap4r2_control.frame import BodyArrays, MocapFrame, SegmentArrays, SkeletonArrays
from mocap4r2_control.frame_encoder import FrameEncoder


@pytest.fixture(scope="module")
def poses():
    return loaded_poses_pass()


def _count_segments(encoder: FrameEncoder, found: bodies_pass.BodiesPass) -> Counted:
    encoder._segments_pass, counted = counting_poses(found)
    return counted


def _structure(rng: np.random.Generator):
    skeletons = int(rng.integers(0, 5))
    ids = rng.permutation(100)[:skeletons].astype(np.int32)
    names = tuple(str(rng.choice(NAMES)) + f"s{i}" for i in range(skeletons))
    counts = rng.choice([0, 1, 2, 7, 25], size=skeletons)
    offsets = np.zeros(skeletons + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    segment_ids = rng.integers(0, 40, size=total).astype(np.int32)
    parents = rng.integers(-1, 40, size=total).astype(np.int32)
    segment_names = tuple(str(rng.choice(NAMES)) + str(i % 4) for i in range(total))
    return ids, names, offsets, segment_ids, segment_names, parents


def _segment_poses(rng: np.random.Generator, m: int, k: int):
    positions, orientations = random_poses(rng, m, k)
    valid = rng.random(m) < rng.choice([1.0, 1.0, 0.7])
    if rng.random() < 0.05:  # not the types the pass is compiled for: numpy
        return positions, orientations.astype(np.float32), valid
    if rng.random() < 0.1:  # columns of one (n, 7) array: not contiguous, copied for the pass
        rows7 = np.hstack([positions, orientations])
        return rows7[:, :3], rows7[:, 3:], valid
    return positions, orientations, valid


def _skeletons(rng: np.random.Generator, structure, k: int) -> SkeletonArrays:
    ids, names, offsets, segment_ids, segment_names, parents = structure
    positions, orientations, valid = _segment_poses(rng, segment_ids.shape[0], k)
    skeleton_valid = rng.random(ids.shape[0]) < 0.8
    if rng.random() < 0.1:
        skeleton_valid = skeleton_valid.astype(np.int32)  # flags of another type
    segments = SegmentArrays(segment_ids, segment_names, parents, positions, orientations, valid)
    return SkeletonArrays(ids, names, skeleton_valid, offsets, segments)


def _bodies(rng: np.random.Generator) -> BodyArrays:
    orientations = rng.normal(size=(3, 4))
    orientations /= np.linalg.norm(orientations, axis=1)[:, None]
    return BodyArrays.build(
        np.array([5, 6, 7], dtype=np.int32),
        ("b", "bödy", ""),
        rng.normal(size=(3, 3)),
        orientations,
        valid=rng.random(3) < 0.8,
        mean_errors=rng.random(3).astype(np.float32),
    )


def _frames(seed: int):
    rng = np.random.default_rng(seed)
    number = 0
    for _ in range(8):  # runs of frames with one structure each
        structure = _structure(rng)
        for k in range(int(rng.integers(1, 20))):
            number += 1
            skeletons = _skeletons(rng, structure, k)
            yield MocapFrame(frame_number=number, bodies=_bodies(rng), skeletons=skeletons)


@pytest.mark.parametrize("seed", range(12))
def test_the_segments_through_the_pass_give_the_numpy_paths_bytes(poses, seed):
    """Skeletons and /tf frame for frame as the numpy path and the whole path give them,
    and the segments' held poses as numpy holds them."""
    fast = FrameEncoder("wörld", markers=False, tf=True)
    assert fast._segments_pass is not None
    counted = _count_segments(fast, poses)
    numpy_path = FrameEncoder("wörld", markers=False, tf=True, compiled=False)
    whole = FrameEncoder("wörld", markers=False, tf=True, repeat_unchanged=False)
    assert numpy_path._segments_pass is None and whole._segments_pass is None
    frames = 0
    for frame in _frames(seed):
        frame.check()
        sec, nanosec = 1_700_000_000 + frame.frame_number, frame.frame_number * 1000
        with np.errstate(over="ignore", invalid="ignore"):  # numpy on the overflowing rows
            expected = numpy_path.encode(frame, sec, nanosec)
        for encoder in (fast, whole):
            with np.errstate(over="ignore", invalid="ignore"):
                got = encoder.encode(frame, sec, nanosec)
            assert got.skeletons == expected.skeletons, frame.frame_number
            assert (got.tf, got.rigid_bodies) == (expected.tf, expected.rigid_bodies), frame.frame_number
        assert np.array_equal(fast._segment_last.values, numpy_path._segment_last.values)
        assert np.array_equal(fast._segment_last.seen, numpy_path._segment_last.seen)
        frames += 1
    assert counted.calls > frames // 5, (counted.calls, frames)


def test_a_segment_invalid_for_a_while_and_one_never_seen_are_held_as_numpy_holds_them(poses):
    """One skeleton of three segments: one invalid for a while, one never valid, the
    skeleton itself invalid for a while; every frame after the first through the pass."""
    fast, reference = FrameEncoder("w"), FrameEncoder("w", compiled=False)
    counted = _count_segments(fast, poses)
    rng = np.random.default_rng(5)
    for number in range(1, 40):
        orientations = np.tile([0.0, 0.6, 0.0, 0.8], (3, 1))
        orientations[0] = orientations[0].astype(np.float32)  # off unit: rescaled
        segments = SegmentArrays(
            np.array([1, 2, 3], dtype=np.int32),
            ("hip", "knée", ""),
            np.array([-1, 1, 2], dtype=np.int32),
            rng.normal(size=(3, 3)),
            orientations,
            np.array([True, not 10 < number < 30, False]),
        )
        skeletons = SkeletonArrays(
            np.array([9], dtype=np.int32),
            ("skel",),
            np.array([not 5 < number < 15]),
            np.array([0, 3], dtype=np.int64),
            segments,
        )
        frame = MocapFrame(frame_number=number, skeletons=skeletons)
        assert fast.encode(frame, 3, number).skeletons == reference.encode(frame, 3, number).skeletons
        assert np.array_equal(fast._segment_last.values, reference._segment_last.values)
    assert not fast._segment_last.all_seen
    assert counted.calls == 38  # every frame after the first


def test_a_segment_where_the_order_could_matter_leaves_the_frame_to_numpy(poses):
    """A valid segment at 1e300 m: the pass gives the frame up before it holds or writes
    a segment, and numpy's bytes come out (the skeleton's validity restamped, then
    written again by numpy)."""

    def frame(number: int, x: float) -> MocapFrame:
        segments = SegmentArrays(
            np.array([1, 2], dtype=np.int32),
            ("a", "b"),
            np.array([-1, 1], dtype=np.int32),
            np.array([[x, 0.0, 0.0], [1.0, 2.0, 3.0]]),
            np.tile([0.0, 0.0, 0.0, 1.0], (2, 1)),
            np.ones(2, dtype=bool),
        )
        skeletons = SkeletonArrays(
            np.array([4], dtype=np.int32), ("s",), np.array([number % 2 == 0]), np.array([0, 2]), segments
        )
        return MocapFrame(frame_number=number, skeletons=skeletons)

    fast, reference = FrameEncoder("w"), FrameEncoder("w", compiled=False)
    counted = _count_segments(fast, poses)
    compare_past_the_safe_range(fast, reference, frame, "skeletons", lambda e: e._segment_last.values)
    assert counted.calls == 4  # frames 1-4 tried; 2 and 3 given back to numpy


def test_skeleton_validity_of_another_length_raises_as_repeat_does(poses):
    """The skeletons' validity shaped otherwise than the message's: repeat's ValueError
    from restamp, before the segments are held or written."""

    def frame(number: int, valid) -> MocapFrame:
        segments = SegmentArrays(
            np.array([1], dtype=np.int32),
            ("a",),
            np.array([-1], dtype=np.int32),
            np.zeros((1, 3)),
            np.array([[0.0, 0.0, 0.0, 1.0]]),
            np.ones(1, dtype=bool),
        )
        skeletons = SkeletonArrays(np.array([4], dtype=np.int32), ("s",), valid, np.array([0, 1]), segments)
        return MocapFrame(frame_number=number, skeletons=skeletons)

    encoder = FrameEncoder("w")
    encoder.encode(frame(1, np.array([True])), 0, 0)
    with pytest.raises(ValueError, match="repeat"):
        encoder.encode(frame(2, np.array([True, False])), 0, 0)
