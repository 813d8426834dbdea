"""MocapFrame.check runs every collection's conditions in one expression (a call per
collection costs more than the comparisons, every frame), and calls the collections'
own checks only to say what is wrong. This keeps the two in step: every field of every
collection is broken in turn (one row too many, one name too many, offsets that do not
partition), and MocapFrame.check must refuse exactly what the collection's check refuses.
A rule added to a collection's check but not to the frame's expression fails here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from mocap4r2_control.frame import (
    BodyArrays,
    MarkerArrays,
    MocapFrame,
    SegmentArrays,
    SkeletonArrays,
)


def _frame() -> MocapFrame:
    """A consistent frame with something in every collection."""
    markers = MarkerArrays.build([1, 2, 3], np.zeros((3, 3)), names=["a", "b", "c"])
    body_markers = MarkerArrays.build([4, 5], np.ones((2, 3)), names=["d", "e"])
    bodies = BodyArrays.build(
        [7, 8], ["p", "q"], np.zeros((2, 3)), [[0, 0, 0, 1]] * 2, markers=body_markers, marker_counts=[1, 1]
    )
    segments = SegmentArrays(
        ids=np.array([1, 2, 3], np.int32),
        names=("s1", "s2", "s3"),
        parent_ids=np.array([0, 1, 2], np.int32),
        positions=np.zeros((3, 3)),
        orientations=np.tile([0.0, 0.0, 0.0, 1.0], (3, 1)),
        valid=np.ones(3, bool),
    )
    skeletons = SkeletonArrays(
        ids=np.array([9], np.int32),
        names=("k",),
        valid=np.ones(1, bool),
        segment_offsets=np.array([0, 3], np.int64),
        segments=segments,
    )
    return MocapFrame(frame_number=5, markers=markers, bodies=bodies, skeletons=skeletons)


def _broken(value: Any) -> Iterator[Any]:
    """Values of a field's type that break its shape (or, for offsets, the partition)."""
    if isinstance(value, tuple):
        yield (*value, "extra")
        yield value[:-1]
    elif isinstance(value, np.ndarray):
        yield np.concatenate([value, value[-1:]])
        yield value[:-1]
        if value.ndim == 2:
            yield value[:, :-1]


def _cases() -> Iterator[tuple[str, Callable[[MocapFrame], Any], Callable[[Any], None]]]:
    """(name, where the collection is in a frame, its own check) for every collection."""
    yield "markers", lambda f: f.markers, lambda c: c.check()
    yield "bodies", lambda f: f.bodies, lambda c: c.check()
    yield "body markers", lambda f: f.bodies.markers, lambda c: c.check("rigid body markers")
    yield "skeletons", lambda f: f.skeletons, lambda c: c.check()
    # segments have no check of their own: the skeletons' check covers them
    yield "segments", lambda f: f.skeletons.segments, None


def _refuses(check: Callable[[], None]) -> bool:
    try:
        check()
    except ValueError:
        return True
    return False


def _mutations() -> Iterator[tuple[str, str, int]]:
    for name, where, _ in _cases():
        collection = where(_frame())
        for f in dataclasses.fields(collection):
            value = getattr(collection, f.name)
            for k, _ in enumerate(_broken(value)):
                yield name, f.name, k


@pytest.mark.parametrize(("collection", "field_name", "variant"), list(_mutations()))
def test_the_frames_check_refuses_what_the_collections_check_refuses(collection, field_name, variant):
    frame = _frame()
    frame.check()  # consistent to begin with
    where, own = next((w, c) for n, w, c in _cases() if n == collection)
    target = where(frame)
    setattr(target, field_name, list(_broken(getattr(target, field_name)))[variant])
    # the segments are checked as part of the skeletons
    collection_refuses = _refuses(lambda: (own or (lambda _: frame.skeletons.check()))(target))
    assert collection_refuses == _refuses(frame.check), (collection, field_name, variant)


@pytest.mark.parametrize("offsets", ["marker_offsets", "segment_offsets"])
@pytest.mark.parametrize("which", [0, -1])
def test_offsets_that_do_not_partition_are_refused_by_both(offsets, which):
    frame = _frame()
    owner = frame.bodies if offsets == "marker_offsets" else frame.skeletons
    getattr(owner, offsets)[which] += 1
    assert _refuses(owner.check)
    assert _refuses(frame.check)


def test_a_consistent_frame_passes_and_a_negative_number_does_not():
    frame = _frame()
    frame.check()
    frame.frame_number = -1
    with pytest.raises(ValueError, match="negative frame number"):
        frame.check()


@pytest.mark.parametrize("where", ["bodies", "segments"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_validity_flags_that_are_not_bool_are_refused_by_both_naming_the_field(where, dtype):
    """Flags of another dtype (an adapter's own uint8 array) passed the check before and
    then failed in the encoder's hold with a cast error naming no field, every frame.
    (A skeleton's own flags are only written out: any integer dtype does there.)"""
    frame = _frame()
    owner = {"bodies": frame.bodies, "skeletons": frame.skeletons, "segments": frame.skeletons.segments}[
        where
    ]
    owner.valid = owner.valid.astype(dtype)
    own = frame.bodies.check if where == "bodies" else frame.skeletons.check
    for check in (own, frame.check):
        with pytest.raises(ValueError, match=f"valid is {np.dtype(dtype)}, must be bool"):
            check()
