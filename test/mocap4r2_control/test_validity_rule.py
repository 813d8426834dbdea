"""The validity rule on frames that the simulator does not produce: bodies that appear,
vanish and reorder, NaN or degenerate quaternions flagged valid, unlabeled markers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rclpy.serialization import deserialize_message

from mocap4r2_control.frame import BodyArrays, MarkerArrays, MocapFrame, SegmentArrays, SkeletonArrays
from mocap4r2_control.frame_encoder import FrameEncoder
from mocap4r2_control.geometry import MIN_QUATERNION_NORM
from mocap4r2_control.hold_last import LastGoodValues, good_poses
from mocap4r2_interfaces.msg import Markers, RigidBodies

NAN = float("nan")


def bodies(ids, positions, valid, names=None):
    n = len(ids)
    quats = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
    return BodyArrays.build(ids, names or [f"b{i}" for i in ids], positions, quats, valid=valid)


class Published:
    """A FrameEncoder and the messages its bytes decode to."""

    def __init__(self):
        self.encoder = FrameEncoder("world")

    def bodies(self, frame):
        encoded = self.encoder.encode(frame, 1, 2)
        return deserialize_message(encoded.rigid_bodies, RigidBodies), encoded.body_valid

    def markers(self, frame):
        return deserialize_message(self.encoder.encode(frame, 1, 2).markers, Markers)


def published(msg):
    return {
        b.id: (b.tracking_valid, (b.pose.position.x, b.pose.position.y, b.pose.position.z))
        for b in msg.rigid_bodies
    }


def test_last_good_values_follow_keys_across_reordering():
    memory = LastGoodValues(1)
    memory.update(np.array([1, 2, 3]), np.array([[10.0], [20.0], [30.0]]), np.array([True, True, False]))
    values, seen = memory.update(np.array([3, 1]), np.array([[NAN], [NAN]]), np.array([False, False]))
    assert values[:, 0].tolist()[1] == 10.0 and seen.tolist() == [False, True]
    values, seen = memory.update(
        np.array([2, 3, 1]), np.array([[NAN], [33.0], [NAN]]), np.array([False, True, False])
    )
    assert values[:, 0].tolist() == [20.0, 33.0, 10.0]
    assert seen.tolist() == [True, True, True]


def test_bodies_appearing_vanishing_and_nan():
    fm = Published()
    msg, good = fm.bodies(MocapFrame(1, bodies=bodies([5, 6], [[1, 1, 1], [2, 2, 2]], [True, False])))
    assert published(msg) == {5: (True, (1.0, 1.0, 1.0)), 6: (False, (0.0, 0.0, 0.0))}
    assert msg.rigid_bodies[1].pose.orientation.w == 1.0  # never tracked: identity at the origin
    # body 7 appears, 6 vanishes, 5 reports NaN while flagged valid (a vendor bug)
    msg, good = fm.bodies(MocapFrame(2, bodies=bodies([7, 5], [[3, 3, 3], [NAN, 0, 0]], [True, True])))
    assert published(msg) == {7: (True, (3.0, 3.0, 3.0)), 5: (False, (1.0, 1.0, 1.0))}
    assert good.tolist() == [True, False]
    # 6 comes back untracked: its last pose was never known
    msg, _ = fm.bodies(
        MocapFrame(3, bodies=bodies([5, 6, 7], [[9, 9, 9], [NAN] * 3, [NAN] * 3], [True, False, False]))
    )
    assert published(msg) == {
        5: (True, (9.0, 9.0, 9.0)),
        6: (False, (0.0, 0.0, 0.0)),
        7: (False, (3.0, 3.0, 3.0)),
    }


def test_zero_quaternion_is_not_a_pose():
    fm = Published()
    b = BodyArrays.build([1], ["b"], [[1.0, 2.0, 3.0]], [[0.0, 0.0, 0.0, 0.0]], valid=[True])
    msg, good = fm.bodies(MocapFrame(1, bodies=b))
    assert not msg.rigid_bodies[0].tracking_valid
    b = BodyArrays.build([1], ["b"], [[1.0, 2.0, 3.0]], [[0.0, 0.0, 0.0, 2.0]], valid=[True])
    msg, good = fm.bodies(MocapFrame(2, bodies=b))
    assert msg.rigid_bodies[0].tracking_valid and msg.rigid_bodies[0].pose.orientation.w == 1.0  # normalised


def _usable_row(valid, position, quaternion):
    """The rule of a usable pose, row by row in plain Python floats: flagged valid,
    every component finite, and a quaternion norm that is finite and above 1e-6 (a
    component too large to square overflows to inf: not usable)."""
    squared = math.fsum(c * c for c in quaternion)
    return (
        bool(valid)
        and all(math.isfinite(c) for c in (*position, *quaternion))
        and math.isfinite(squared)
        and math.sqrt(squared) > MIN_QUATERNION_NORM
    )


def test_good_poses_agree_with_the_rule_on_hostile_values():
    rng = np.random.default_rng(7)
    hostile = [NAN, math.inf, -math.inf, 1e200, -1e200, 1e155, 1e-200, 0.0, 1e-7, 4e-7, 1e-3]
    for _ in range(3000):
        n = int(rng.integers(0, 5))
        positions, quaternions = rng.normal(size=(n, 3)), rng.normal(size=(n, 4))
        for values in (positions, quaternions):
            replaced = rng.random(values.shape) < 0.2
            values[replaced] = rng.choice(hostile, size=int(replaced.sum()))
        valid = rng.random(n) < 0.8
        with np.errstate(all="ignore"):
            good, poses = good_poses(positions, quaternions, valid)
        expected = [_usable_row(*row) for row in zip(valid, positions.tolist(), quaternions.tolist())]
        assert good.tolist() == expected, (positions, quaternions, valid)
        for row in np.flatnonzero(good):
            assert poses[row, :3].tolist() == positions[row].tolist()
            norm = math.sqrt(math.fsum(c * c for c in quaternions[row]))
            assert poses[row, 3:] == pytest.approx(quaternions[row] / norm, rel=1e-12)


def test_good_poses_leaves_unit_quaternions_bit_for_bit():
    """A quaternion that is already unit (a pose published once, recorded and played
    again) keeps its bits: dividing it by its computed norm, 1 give or take an ulp,
    would move its last bit, and a replayed message would differ from the recorded one."""
    rng = np.random.default_rng(11)
    raw = rng.normal(size=(20_000, 4)) * rng.uniform(1e-3, 1e3, (20_000, 1))
    valid = np.ones(len(raw), dtype=bool)
    _, once = good_poses(np.zeros((len(raw), 3)), raw, valid)
    good, twice = good_poses(once[:, :3], once[:, 3:], valid)
    assert good.all()
    assert twice.tobytes() == once.tobytes()
    # exactly unit quaternions as vendors send them are published as they came
    angles = rng.uniform(-math.pi, math.pi, 1000)
    unit = np.stack([np.zeros(1000), np.sin(angles / 2), np.zeros(1000), np.cos(angles / 2)], axis=1)
    _, poses = good_poses(np.zeros((1000, 3)), unit, valid[:1000])
    assert poses[:, 3:].tobytes() == unit.tobytes()
    # a quaternion off unit by more than rounding is still normalised
    _, poses = good_poses(np.zeros((1, 3)), np.array([[0.0, 0.0, 0.0, 1.0 + 1e-12]]), valid[:1])
    assert poses[0, 6] == 1.0


def test_markers_occluded_unlabeled_and_never_seen():
    fm = Published()
    m = MarkerArrays.build(
        [1, 2, -1, -1],
        [[1, 0, 0], [NAN] * 3, [5, 5, 5], [NAN] * 3],
        names=["a", "b", "", ""],
        occluded=[False, True, False, False],
        residuals=[0.001, 0.002, 0.003, 0.004],
    )
    msg = fm.markers(MocapFrame(1, markers=m))
    # marker 2 was never seen: left out; the unlabeled NaN marker has no position: left out
    assert [(x.id, x.name, x.occluded) for x in msg.markers] == [(1, "a", False), (-1, "", False)]
    m = MarkerArrays.build(
        [1, 2, -1],
        [[NAN] * 3, [2, 2, 2], [6, 6, 6]],
        names=["a", "b", ""],
        occluded=[True, False, False],
        residuals=[0.1, 0.2, 0.3],
    )
    msg = fm.markers(MocapFrame(2, markers=m))
    got = [
        (x.id, x.name, x.occluded, (x.position.x, x.position.y, x.position.z), round(x.residual, 3))
        for x in msg.markers
    ]
    assert got == [
        (1, "a", True, (1.0, 0.0, 0.0), -1.0),
        (2, "b", False, (2.0, 2.0, 2.0), 0.2),
        (-1, "", False, (6.0, 6.0, 6.0), 0.3),
    ]
    for x in msg.markers:
        assert all(math.isfinite(v) for v in (x.position.x, x.position.y, x.position.z))


def test_inconsistent_frames_are_rejected_by_check():
    frame = MocapFrame(1, bodies=BodyArrays.build([1, 2], ["a"], np.zeros((2, 3)), np.zeros((2, 4))))
    with pytest.raises(ValueError, match="1 names for 2 ids"):
        frame.check()
    frame = MocapFrame(-3)
    with pytest.raises(ValueError, match="negative frame number"):
        frame.check()


def test_body_markers_never_seen_are_left_out_and_counts_follow():
    fm = Published()
    markers = MarkerArrays.build(
        [11, 12, 21, 22, 23],
        [[1, 0, 0], [NAN] * 3, [2, 0, 0], [3, 0, 0], [NAN] * 3],
        names=["a1", "a2", "b1", "b2", "b3"],
        occluded=[False, True, False, False, True],
    )
    b = BodyArrays.build(
        [1, 2], ["a", "b"], [[0, 0, 0], [1, 1, 1]], [[0, 0, 0, 1]] * 2, markers=markers, marker_counts=[2, 3]
    )
    msg, _ = fm.bodies(MocapFrame(1, bodies=b))
    assert [[m.name for m in body.markers] for body in msg.rigid_bodies] == [["a1"], ["b1", "b2"]]
    # a2 shows up; b1 is occluded and keeps its last position
    markers = MarkerArrays.build(
        [11, 12, 21, 22, 23],
        [[1, 0, 0], [5, 5, 5], [NAN] * 3, [3, 0, 0], [NAN] * 3],
        names=["a1", "a2", "b1", "b2", "b3"],
        occluded=[False, False, True, False, True],
    )
    b = BodyArrays.build(
        [1, 2], ["a", "b"], [[0, 0, 0], [1, 1, 1]], [[0, 0, 0, 1]] * 2, markers=markers, marker_counts=[2, 3]
    )
    msg, _ = fm.bodies(MocapFrame(2, bodies=b))
    got = [[(m.name, m.occluded, m.position.x) for m in body.markers] for body in msg.rigid_bodies]
    assert got == [[("a1", False, 1.0), ("a2", False, 5.0)], [("b1", True, 2.0), ("b2", False, 3.0)]]


class _StreamOfStructures:
    """Frames of a system whose assets change now and then: a structure (ids, names,
    offsets) is kept for a random run of frames, with new values each frame (NaN,
    occlusion, tracking loss), the way adapters pass it (the same names tuples while
    nothing changes; sometimes an equal copy, or a list)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.structure = None

    def _new_structure(self) -> dict:
        rng = self.rng
        body_ids = rng.choice(np.arange(1, 9), size=int(rng.integers(0, 5)), replace=False).astype(np.int32)
        counts = rng.integers(0, 4, size=len(body_ids))
        marker_ids = np.repeat(body_ids.astype(np.int64) * 100, counts) + np.concatenate(
            [np.arange(c) for c in counts] + [np.zeros(0, int)]
        )
        labeled = rng.choice(np.arange(1, 30), size=int(rng.integers(0, 6)), replace=False)
        frame_ids = np.concatenate([labeled, -np.ones(int(rng.integers(0, 3)), int)]).astype(np.int32)
        segments = [int(n) for n in rng.integers(1, 4, size=int(rng.integers(0, 3)))]
        return {
            "body_ids": body_ids,
            "body_names": tuple(f"body{i}" for i in body_ids),
            "counts": counts,
            "body_marker_ids": marker_ids.astype(np.int32),
            "body_marker_names": tuple(f"m{i}" for i in marker_ids),
            "ids": frame_ids,
            "names": tuple(f"l{i}" if i >= 0 else "" for i in frame_ids),
            "segments": segments,
            "skeleton_names": tuple(f"sk{i}" for i in range(len(segments))),
            "segment_names": tuple(f"seg{j}" for j in range(sum(segments))),
        }

    def _names(self, names: tuple):
        roll = self.rng.random()
        return list(names) if roll < 0.05 else tuple(list(names)) if roll < 0.1 else names

    def _points(self, n: int) -> np.ndarray:
        values = self.rng.normal(size=(n, 3))
        values[self.rng.random(n) < 0.1] = NAN
        return values

    def frame(self, number: int) -> MocapFrame:
        rng = self.rng
        if self.structure is None or rng.random() < 0.08:
            self.structure = self._new_structure()
        s = self.structure
        n, m, k = len(s["ids"]), len(s["body_marker_ids"]), len(s["body_ids"])
        markers = MarkerArrays.build(
            s["ids"],
            self._points(n),
            names=self._names(s["names"]),
            occluded=rng.random(n) < 0.2,
            residuals=rng.random(n),
        )
        body_markers = MarkerArrays.build(
            s["body_marker_ids"],
            self._points(m),
            names=self._names(s["body_marker_names"]),
            occluded=rng.random(m) < 0.2,
            residuals=rng.random(m),
        )
        quats = rng.normal(size=(k, 4))
        quats[rng.random(k) < 0.1] = 0.0
        bodies = BodyArrays.build(
            s["body_ids"],
            self._names(s["body_names"]),
            self._points(k),
            quats,
            valid=rng.random(k) < 0.8,
            mean_errors=rng.random(k),
            markers=body_markers,
            marker_counts=s["counts"],
        )
        total = sum(s["segments"])
        offsets = np.concatenate([[0], np.cumsum(s["segments"])]).astype(np.int64)
        parents = np.array(
            [
                j - 1 if j > offsets[np.searchsorted(offsets, j, side="right") - 1] else -1
                for j in range(total)
            ],
            dtype=np.int32,
        )
        segments = SegmentArrays(
            ids=np.arange(total, dtype=np.int32),
            names=s["segment_names"],
            parent_ids=parents,
            positions=self._points(total),
            orientations=rng.normal(size=(total, 4)),
            valid=rng.random(total) < 0.8,
        )
        skeletons = SkeletonArrays(
            ids=np.arange(len(s["segments"]), dtype=np.int32),
            names=s["skeleton_names"],
            valid=rng.random(len(s["segments"])) < 0.9,
            segment_offsets=offsets,
            segments=segments,
        )
        return MocapFrame(number, markers=markers, bodies=bodies, skeletons=skeletons)


def test_repeating_an_unchanged_structure_gives_the_bytes_of_the_whole_path():
    """FrameEncoder writes only the numbers of a frame whose structure is the previous
    frame's (the encoders' repeat()); every frame of a stream whose assets come and go
    must give the bytes the whole rule and encode give."""
    repeated = {"markers": 0, "rigid_bodies": 0, "skeletons": 0}
    for seed in range(6):
        stream = _StreamOfStructures(seed)
        fast = FrameEncoder("world", "p/", tf=True)
        whole = FrameEncoder("world", "p/", tf=True, repeat_unchanged=False)
        for topic, encoder in (
            ("markers", fast._markers),
            ("rigid_bodies", fast._bodies),
            ("skeletons", fast._skeletons),
        ):
            # every repeated RigidBodies or Skeletons frame goes through restamp
            # (repeat's own and the compiled poses pass's: bodies_pass.py), not always
            # through repeat
            method = "repeat" if topic == "markers" else "restamp"
            original = getattr(encoder, method)

            def counted(_repeat=original, _topic=topic, **fields):
                repeated[_topic] += 1
                return _repeat(**fields)

            setattr(encoder, method, counted)
        for number in range(400):
            frame = stream.frame(number)
            frame.check()
            a, b = fast.encode(frame, 5, number), whole.encode(frame, 5, number)
            for field in ("markers", "rigid_bodies", "skeletons", "tf"):
                assert getattr(a, field) == getattr(b, field), (seed, number, field)
            assert a.body_valid.tolist() == b.body_valid.tolist()
            assert a.body_poses.tolist() == b.body_poses.tolist()
    # the comparison covered the repeated path of every topic, many times
    assert min(repeated.values()) > 500, repeated


def test_names_list_changed_in_place_is_not_taken_for_the_same_names():
    """An adapter that keeps one names list and renames in place: the next frame has the
    same list object, with other names; they must reach the message."""
    names = ["a", "b"]
    encoder = Published()
    for number, renamed in enumerate(("a", "z", "z")):
        names[0] = renamed
        frame = MocapFrame(
            number, bodies=BodyArrays.build([1, 2], names, np.zeros((2, 3)), [[0, 0, 0, 1]] * 2)
        )
        frame.bodies.names = names  # the adapter's own list, not a copy
        msg, _ = encoder.bodies(frame)
        assert [b.name for b in msg.rigid_bodies] == [renamed, "b"]


def test_ids_with_the_same_bytes_in_another_dtype_are_other_ids():
    """int32 -5 and uint32 4294967291 are the same four bytes: the second is not an int32
    id at all and must be refused, not repeated as -5."""
    encoder = Published()
    names = ("a",)
    first = BodyArrays.build([-5], names, np.zeros((1, 3)), [[0, 0, 0, 1]])
    encoder.bodies(MocapFrame(1, bodies=first))
    second = BodyArrays.build([0], names, np.zeros((1, 3)), [[0, 0, 0, 1]])
    second.ids = np.array([2**32 - 5], dtype=np.uint32)
    with pytest.raises(ValueError, match="outside the int32 range"):
        encoder.bodies(MocapFrame(2, bodies=second))
