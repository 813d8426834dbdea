"""The bodies through the compiled passes (FrameEncoder with ``compiled``: their poses in
bodies_pass.py, their markers in markers_pass.py) give the numpy path's RigidBodies bytes.

Byte for byte against the same FrameEncoder with ``compiled=False`` (the numpy path:
``MarkerRule.reapply`` + ``RigidBodiesEncoder.repeat``) and with ``repeat_unchanged=False``
(the whole rule and encode every frame), on random streams: 0 to 40 bodies with 0 to 30
markers each, NaN and inf marker coordinates, occluded markers, markers never seen,
unlabeled markers, arrays of other types than the pass's, bodies going invalid (flagged,
NaN or inf positions, degenerate, non-unit or float32 quaternions, coordinates whose sums
overflow), bodies never seen, non-ASCII names, structure changes between runs of
unchanged frames. The passes' calls are counted: the bytes must agree because the passes
ran, not because both encoders took numpy.
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
    random_markers,
    random_poses,
)

from mocap4r2_control import bodies_pass, markers_pass
from mocap4r2_control.frame import UNKNOWN_ID, BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.frame_encoder import FrameEncoder


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


def _bodies(rng: np.random.Generator, structure, k: int) -> BodyArrays:
    body_ids, body_names, counts, marker_ids, marker_names = structure
    n = body_ids.shape[0]
    positions, orientations = random_poses(rng, n, k)
    valid = rng.random(n) < rng.choice([1.0, 1.0, 0.7])
    errors = rng.random(n).astype(np.float32)
    if rng.random() < 0.05:  # not the types the pass is compiled for: numpy
        errors = errors.astype(np.float64)
    markers = random_markers(rng, marker_ids, marker_names, k)
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


@pytest.fixture(scope="module")
def poses():
    return loaded_poses_pass()


def _count_poses(encoder: FrameEncoder, found: bodies_pass.BodiesPass) -> Counted:
    encoder._poses_pass, counted = counting_poses(found)
    return counted


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("seed", range(10))
def test_the_bodies_through_the_passes_give_the_numpy_paths_bytes(compiled, poses, seed, markers):
    """RigidBodies (and Markers, and what the encoder hands on for /tf and statistics)
    frame for frame as the numpy path and the whole path give them."""
    kw = {"markers": markers, "skeletons": False, "tf": True}
    fast = FrameEncoder("wörld", **kw)
    assert fast.compiled and fast.compiled_poses and fast._body_pass is not None
    assert (fast._pass is not None) == markers
    counted = fast._body_pass.compiled = Counted(compiled)
    counted_poses = _count_poses(fast, poses)
    numpy_path = FrameEncoder("wörld", compiled=False, **kw)
    whole = FrameEncoder("wörld", repeat_unchanged=False, **kw)
    assert not numpy_path.compiled and not whole.compiled and not numpy_path.compiled_poses
    frames = 0
    for frame in _frames(seed):
        sec, nanosec = 1_700_000_000 + frame.frame_number, frame.frame_number * 1000
        with np.errstate(over="ignore", invalid="ignore"):  # numpy on the overflowing rows
            expected = numpy_path.encode(frame, sec, nanosec)
        for encoder in (fast, whole):
            with np.errstate(over="ignore", invalid="ignore"):
                got = encoder.encode(frame, sec, nanosec)
            assert got.rigid_bodies == expected.rigid_bodies, frame.frame_number
            assert (got.markers, got.tf) == (expected.markers, expected.tf), frame.frame_number
            assert np.array_equal(got.body_valid, expected.body_valid)
            assert np.array_equal(got.body_poses, expected.body_poses)
        frames += 1
    assert counted.calls > frames // 10, (counted.calls, frames)
    assert counted_poses.calls > frames // 5, (counted_poses.calls, frames)


def test_held_body_markers_and_poses_as_the_numpy_path_over_an_occlusion(compiled, poses):
    """Two bodies, one marker occluded for a while and another with NaN, one body invalid
    for a while: the bytes of every frame and the rules' memories."""
    ids, names = np.array([3, 1, 2], dtype=np.int32), ("a", "é", "")
    fast, reference = FrameEncoder("w", markers=False), FrameEncoder("w", markers=False, compiled=False)
    rng = np.random.default_rng(7)
    assert fast._body_pass is not None
    calls = fast._body_pass.compiled = Counted(compiled)
    pose_calls = _count_poses(fast, poses)
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
    assert calls.calls == pose_calls.calls == 58  # every frame after the first


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


def test_the_summation_orders_found_are_numpys_and_the_others_are_told_apart(poses):
    """load() keeps, for one body and for more, the order whose squared norms give
    good_poses' bits on its probe frames; the probe tells the other orders apart (else a
    wrong order could be kept), with other probe frames than load's."""
    for order, counts in ((poses.single, bodies_pass.SINGLE_COUNTS), (poses.many, bodies_pass.MANY_COUNTS)):
        assert bodies_pass.agrees(poses.kernel, order, counts, seed=11)
        others = [o for o in range(len(bodies_pass.ORDERS)) if o != order]
        assert not any(bodies_pass.agrees(poses.kernel, o, counts, seed=11) for o in others)


def test_a_coordinate_where_the_order_could_matter_leaves_the_frame_to_numpy(poses):
    """A valid body at 1e300 m (finite, beyond the pass's safe range): the pass gives the
    frame up before it holds or writes anything, and numpy's bytes come out."""
    markers = MarkerArrays.build(np.array([1], np.int32), np.zeros((1, 3)), ("a",))

    def frame(number: int, x: float) -> MocapFrame:
        bodies = BodyArrays.build(
            [4, 5],
            ("b", "c"),
            [[x, 0.0, 0.0], [1.0, 2.0, 3.0]],
            [[0.0, 0.0, 0.0, 1.0]] * 2,
            markers=markers,
            marker_counts=[1, 0],
        )
        return MocapFrame(frame_number=number, bodies=bodies)

    fast, reference = FrameEncoder("w"), FrameEncoder("w", compiled=False)
    counted = _count_poses(fast, poses)
    compare_past_the_safe_range(fast, reference, frame, "rigid_bodies", lambda e: e._body_last.values)
    assert counted.calls == 4  # frames 1-4 tried; 2 and 3 given back to numpy


def test_poses_as_column_slices_and_a_body_never_tracked_go_through_the_pass(poses):
    """Poses handed over as the columns of one (n, 7) array (not contiguous) and a body
    never valid since the start (so never seen): still the pass, and numpy's bytes."""
    fast, reference = FrameEncoder("w"), FrameEncoder("w", compiled=False)
    counted = _count_poses(fast, poses)
    rng = np.random.default_rng(3)
    for number in range(30):
        rows = np.hstack([rng.normal(size=(4, 3)), np.tile([0.0, 0.6, 0.0, 0.8], (4, 1))])
        rows[1, 3:] = rows[1, 3:].astype(np.float32)  # off unit: rescaled
        bodies = BodyArrays.build(
            [1, 2, 3, 4],
            ("a", "b", "c", "d"),
            rows[:, :3],
            rows[:, 3:],
            valid=[True, True, False, number % 3 > 0],
            mean_errors=[0.1, 0.2, 0.3, 0.4],
        )
        assert not bodies.orientations.flags.c_contiguous
        frame = MocapFrame(frame_number=number, bodies=bodies)
        expected = reference.encode(frame, 2, number)
        got = fast.encode(frame, 2, number)
        assert got.rigid_bodies == expected.rigid_bodies, number
        assert got.body_valid.tolist() == expected.body_valid.tolist()
        assert np.array_equal(fast._body_last.seen, reference._body_last.seen)
    assert not fast._body_last.all_seen
    assert counted.calls == 29


def _recorded_view(array: np.ndarray) -> np.ndarray:
    """``array`` as a frame decoded from recorded CDR holds it: a strided, read-only view
    into a larger buffer (the replay decoder's columns of the message bytes)."""
    wide = np.zeros(
        (*array.shape[:-1], array.shape[-1] + 1) if array.ndim > 1 else (2 * array.shape[0],), array.dtype
    )
    view = wide[..., :-1] if array.ndim > 1 else wide[::2]
    view[...] = array
    view.flags.writeable = False
    return view


def _as_recorded(markers: MarkerArrays) -> MarkerArrays:
    return MarkerArrays(
        markers.ids,
        markers.names,
        _recorded_view(markers.positions),
        _recorded_view(markers.occluded),
        _recorded_view(markers.residuals),
    )


def test_a_frame_of_strided_read_only_arrays_as_replay_decodes_goes_through_the_passes(compiled, poses):
    """A frame decoded from a recording holds strided, read-only views of the message
    bytes. The passes take it (copied as a kernel takes arrays: compiled_kernels.kernel_input)
    with numpy's bytes; before, such a frame always took the numpy path (replay: 104 us a
    frame instead of 46)."""
    fast = FrameEncoder("w", skeletons=False)
    counted_markers = fast._pass.compiled = Counted(compiled)
    counted_body_markers = fast._body_pass.compiled = Counted(compiled)
    counted_poses = _count_poses(fast, poses)
    reference = FrameEncoder("w", compiled=False, skeletons=False)
    rng = np.random.default_rng(11)
    ids, names = np.arange(12, dtype=np.int32), tuple(f"b{i}" for i in range(4))
    for number in range(40):
        markers = _as_recorded(random_markers(rng, ids, tuple(f"m{i}" for i in range(12)), number))
        if markers.positions.dtype != np.float64:
            continue  # random_markers' other-type frames: not what a recording decodes to
        rows = np.hstack([rng.normal(size=(4, 3)), np.tile([0.0, 0.6, 0.0, 0.8], (4, 1))])
        bodies = BodyArrays.build(
            np.arange(1, 5, dtype=np.int32),
            names,
            _recorded_view(rows[:, :3].copy()),
            _recorded_view(rows[:, 3:].copy()),
            valid=_recorded_view(np.array([True, True, number % 4 > 0, True])),
            mean_errors=_recorded_view(rng.random(4).astype(np.float32)),
            markers=markers,
            marker_counts=[3, 3, 3, 3],
        )
        assert not bodies.positions.flags.writeable and not bodies.valid.flags.c_contiguous
        frame = MocapFrame(frame_number=number, markers=markers, bodies=bodies)
        expected = reference.encode(frame, 5, number)
        got = fast.encode(frame, 5, number)
        assert (got.markers, got.rigid_bodies) == (expected.markers, expected.rigid_bodies), number
    assert counted_markers.calls > 20 and counted_body_markers.calls > 20 and counted_poses.calls > 20, (
        counted_markers.calls,
        counted_body_markers.calls,
        counted_poses.calls,
    )
