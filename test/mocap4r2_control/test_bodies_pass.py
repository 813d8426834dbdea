"""The bodies' markers through the compiled markers pass (FrameEncoder with ``compiled``)
give the numpy path's RigidBodies bytes.

Byte for byte against the same FrameEncoder with ``compiled=False`` (the numpy path:
``MarkerRule.reapply`` + ``RigidBodiesEncoder.repeat``) and with ``repeat_unchanged=False``
(the whole rule and encode every frame), on random streams: 0 to 40 bodies with 0 to 30
markers each, NaN and inf marker coordinates, occluded markers, markers never seen,
unlabeled markers, arrays of other types than the pass's, bodies going invalid (flagged,
NaN or inf positions, degenerate or non-unit quaternions), non-ASCII names, structure
changes between runs of unchanged frames. The pass's calls are counted: the bytes must
agree because the pass ran, not because both encoders took numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_control import markers_pass
from mocap4r2_control.frame import UNKNOWN_ID, BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.frame_encoder import FrameEncoder

NAMES = ("", "m", "Ünïcødé-標記", "tip\u00e9", "a" * 40, "ß")


class Counted:
    """The compiled pass, counting its calls."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return self.compiled(*args)


def _structure(rng: np.random.Generator):
    bodies = int(rng.choice([0, 1, 3, 10, 40]))
    body_ids = rng.permutation(1000)[:bodies].astype(np.int32)
    body_names = tuple(str(rng.choice(NAMES)) + f"b{i}" for i in range(bodies))
    counts = rng.choice([0, 1, 4, 10, 30], size=bodies) * (rng.random(bodies) < 0.9)
    total = int(counts.sum())
    marker_ids = rng.permutation(50_000)[:total].astype(np.int32)
    if rng.random() < 0.15 and total:  # some unlabeled body markers: the numpy path
        marker_ids[rng.random(total) < 0.3] = UNKNOWN_ID
    marker_names = tuple(str(rng.choice(NAMES)) + str(i % 3) for i in range(total))
    return body_ids, body_names, counts, marker_ids, marker_names


def _body_markers(rng: np.random.Generator, ids, names, k: int) -> MarkerArrays:
    count = ids.shape[0]
    positions = rng.normal(scale=3.0, size=(count, 3))
    if count:
        bad = rng.random(count) < rng.choice([0.0, 0.05, 0.5])
        positions[bad, rng.integers(0, 3)] = rng.choice([np.nan, np.inf, -np.inf])
        if k == 0 and rng.random() < 0.3:  # markers never seen at the start: left out
            positions[rng.random(count) < 0.2] = np.nan
    occluded = rng.random(count) < rng.choice([0.0, 0.1, 0.9])
    residuals = rng.random(count).astype(np.float32)
    residuals[rng.random(count) < 0.1] = -1.0
    if rng.random() < 0.1:  # not the types the pass is compiled for: the numpy path
        return MarkerArrays(ids, names, positions, occluded.astype(np.uint8), residuals.astype(np.float64))
    return MarkerArrays(ids, names, positions, occluded, residuals)


def _bodies(rng: np.random.Generator, structure, k: int) -> BodyArrays:
    body_ids, body_names, counts, marker_ids, marker_names = structure
    n = body_ids.shape[0]
    positions = rng.normal(size=(n, 3))
    orientations = rng.normal(size=(n, 4))
    orientations /= np.linalg.norm(orientations, axis=1)[:, None]  # unit: the usual frame
    if n and rng.random() < 0.5:  # bodies going invalid or off unit
        rows = rng.random(n) < 0.3
        kind = int(rng.integers(0, 5))
        if kind == 0:
            positions[rows, rng.integers(0, 3)] = rng.choice([np.nan, np.inf])
        elif kind == 1:
            orientations[rows] *= 2.5  # rescaled by good_poses
        elif kind == 2:
            orientations[rows] = 0.0  # degenerate: not good
        elif kind == 3:
            orientations[rows, 3] = np.nan
    valid = rng.random(n) < rng.choice([1.0, 1.0, 0.7])
    errors = rng.random(n).astype(np.float32)
    markers = _body_markers(rng, marker_ids, marker_names, k)
    return BodyArrays.build(
        body_ids,
        body_names,
        positions,
        orientations,
        valid=valid,
        mean_errors=errors,
        markers=markers,
        marker_counts=counts,
    )


def _frames(seed: int):
    rng = np.random.default_rng(seed)
    number = 0
    for _ in range(6):  # runs of frames with one structure each
        structure = _structure(rng)
        for k in range(int(rng.integers(1, 25))):
            number += 1
            bodies = _bodies(rng, structure, k)
            yield MocapFrame(frame_number=number, markers=bodies.markers, bodies=bodies)


@pytest.fixture(scope="module")
def compiled():
    found = markers_pass.load()
    assert found is not None, "numba is a dependency: the pass must compile in the test environment"
    return found


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("seed", range(10))
def test_the_bodies_markers_through_the_pass_give_the_numpy_paths_bytes(compiled, seed, markers):
    """RigidBodies (and Markers, and what the encoder hands on for /tf and statistics)
    frame for frame as the numpy path and the whole path give them."""
    kw = {"markers": markers, "skeletons": False, "tf": True}
    fast = FrameEncoder("wörld", **kw)
    assert fast.compiled and fast._body_pass is not None
    assert (fast._pass is not None) == markers
    counted = fast._body_pass.compiled = Counted(compiled)
    numpy_path = FrameEncoder("wörld", compiled=False, **kw)
    whole = FrameEncoder("wörld", repeat_unchanged=False, **kw)
    assert not numpy_path.compiled and not whole.compiled
    frames = 0
    for frame in _frames(seed):
        sec, nanosec = 1_700_000_000 + frame.frame_number, frame.frame_number * 1000
        expected = numpy_path.encode(frame, sec, nanosec)
        for encoder in (fast, whole):
            got = encoder.encode(frame, sec, nanosec)
            assert got.rigid_bodies == expected.rigid_bodies, frame.frame_number
            assert (got.markers, got.tf) == (expected.markers, expected.tf), frame.frame_number
            assert np.array_equal(got.body_valid, expected.body_valid)
            assert np.array_equal(got.body_poses, expected.body_poses)
        frames += 1
    assert counted.calls > frames // 5, (counted.calls, frames)


def test_held_body_markers_and_poses_as_the_numpy_path_over_an_occlusion(compiled):
    """Two bodies, one marker occluded for a while and another with NaN, one body invalid
    for a while: the bytes of every frame and the rules' memories."""
    ids, names = np.array([3, 1, 2], dtype=np.int32), ("a", "é", "")
    fast, reference = FrameEncoder("w", markers=False), FrameEncoder("w", markers=False, compiled=False)
    rng = np.random.default_rng(7)
    assert fast._body_pass is not None
    calls = fast._body_pass.compiled = Counted(compiled)
    for number in range(1, 60):
        positions = rng.normal(size=(3, 3))
        occluded = np.array([10 < number < 40, False, False])
        if 20 < number < 30:
            positions[1, 2] = np.nan
        markers = MarkerArrays(ids, names, positions, occluded, np.full(3, 0.25, np.float32))
        bodies = BodyArrays.build(
            np.array([7, 8], dtype=np.int32),
            ("body", "bödy"),
            rng.normal(size=(2, 3)),
            np.tile([0.0, 0.0, 0.0, 1.0], (2, 1)),
            valid=[True, not 15 < number < 45],
            mean_errors=[0.5, 0.125],
            markers=markers,
            marker_counts=[1, 2],
        )
        frame = MocapFrame(frame_number=number, bodies=bodies)
        assert fast.encode(frame, 5, number).rigid_bodies == reference.encode(frame, 5, number).rigid_bodies
        assert np.array_equal(fast._body_marker_rule.last.values, reference._body_marker_rule.last.values)
        assert np.array_equal(fast._body_last.values, reference._body_last.values)
    assert calls.calls == 58  # every frame after the first


def test_bodies_of_other_shapes_than_the_message_fall_back(compiled):
    """mean errors of another length than the bodies: the numpy path's ValueError, and
    nothing written past the message or held first."""
    markers = MarkerArrays.build(np.array([1, 2], np.int32), np.zeros((2, 3)), ("a", "b"))

    def frame(number: int, errors) -> MocapFrame:
        bodies = BodyArrays.build(
            [4], ("b",), np.zeros((1, 3)), [[0.0, 0.0, 0.0, 1.0]], markers=markers, marker_counts=[2]
        )
        bodies.mean_errors = np.asarray(errors, dtype=np.float32)
        return MocapFrame(frame_number=number, bodies=bodies)

    encoder = FrameEncoder("w")
    encoder.encode(frame(1, [0.5]), 0, 0)
    with pytest.raises(ValueError, match="repeat"):
        encoder.encode(frame(2, [0.5, 0.5]), 0, 0)
