"""The validity rule on frames that the simulator does not produce: bodies that appear,
vanish and reorder, NaN or degenerate quaternions flagged valid, unlabeled markers."""
from __future__ import annotations

import math

import numpy as np
import pytest

from mocap4r2_interfaces.msg import Markers, RigidBodies
from rclpy.serialization import deserialize_message

from mocap4r2_control.frame import BodyArrays, MarkerArrays, MocapFrame
from mocap4r2_control.frame_encoder import FrameEncoder
from mocap4r2_control.hold_last import LastGoodValues

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
    return {b.id: (b.tracking_valid, (b.pose.position.x, b.pose.position.y, b.pose.position.z)) for b in msg.rigid_bodies}


def test_last_good_values_follow_keys_across_reordering():
    memory = LastGoodValues(1)
    memory.update(np.array([1, 2, 3]), np.array([[10.0], [20.0], [30.0]]), np.array([True, True, False]))
    values, seen = memory.update(np.array([3, 1]), np.array([[NAN], [NAN]]), np.array([False, False]))
    assert values[:, 0].tolist()[1] == 10.0 and seen.tolist() == [False, True]
    values, seen = memory.update(np.array([2, 3, 1]), np.array([[NAN], [33.0], [NAN]]), np.array([False, True, False]))
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
    msg, _ = fm.bodies(MocapFrame(3, bodies=bodies([5, 6, 7], [[9, 9, 9], [NAN] * 3, [NAN] * 3],
                                                           [True, False, False])))
    assert published(msg) == {5: (True, (9.0, 9.0, 9.0)), 6: (False, (0.0, 0.0, 0.0)), 7: (False, (3.0, 3.0, 3.0))}


def test_zero_quaternion_is_not_a_pose():
    fm = Published()
    b = BodyArrays.build([1], ["b"], [[1.0, 2.0, 3.0]], [[0.0, 0.0, 0.0, 0.0]], valid=[True])
    msg, good = fm.bodies(MocapFrame(1, bodies=b))
    assert not msg.rigid_bodies[0].tracking_valid
    b = BodyArrays.build([1], ["b"], [[1.0, 2.0, 3.0]], [[0.0, 0.0, 0.0, 2.0]], valid=[True])
    msg, good = fm.bodies(MocapFrame(2, bodies=b))
    assert msg.rigid_bodies[0].tracking_valid and msg.rigid_bodies[0].pose.orientation.w == 1.0  # normalised


def test_markers_occluded_unlabeled_and_never_seen():
    fm = Published()
    m = MarkerArrays.build([1, 2, -1, -1], [[1, 0, 0], [NAN] * 3, [5, 5, 5], [NAN] * 3],
                           names=["a", "b", "", ""], occluded=[False, True, False, False],
                           residuals=[0.001, 0.002, 0.003, 0.004])
    msg = fm.markers(MocapFrame(1, markers=m))
    # marker 2 was never seen: left out; the unlabeled NaN marker has no position: left out
    assert [(x.id, x.name, x.occluded) for x in msg.markers] == [(1, "a", False), (-1, "", False)]
    m = MarkerArrays.build([1, 2, -1], [[NAN] * 3, [2, 2, 2], [6, 6, 6]], names=["a", "b", ""],
                           occluded=[True, False, False], residuals=[0.1, 0.2, 0.3])
    msg = fm.markers(MocapFrame(2, markers=m))
    got = [(x.id, x.name, x.occluded, (x.position.x, x.position.y, x.position.z), round(x.residual, 3))
           for x in msg.markers]
    assert got == [(1, "a", True, (1.0, 0.0, 0.0), -1.0), (2, "b", False, (2.0, 2.0, 2.0), 0.2),
                   (-1, "", False, (6.0, 6.0, 6.0), 0.3)]
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
    markers = MarkerArrays.build([11, 12, 21, 22, 23], [[1, 0, 0], [NAN] * 3, [2, 0, 0], [3, 0, 0], [NAN] * 3],
                                 names=["a1", "a2", "b1", "b2", "b3"], occluded=[False, True, False, False, True])
    b = BodyArrays.build([1, 2], ["a", "b"], [[0, 0, 0], [1, 1, 1]], [[0, 0, 0, 1]] * 2, markers=markers,
                         marker_counts=[2, 3])
    msg, _ = fm.bodies(MocapFrame(1, bodies=b))
    assert [[m.name for m in body.markers] for body in msg.rigid_bodies] == [["a1"], ["b1", "b2"]]
    # a2 shows up; b1 is occluded and keeps its last position
    markers = MarkerArrays.build([11, 12, 21, 22, 23], [[1, 0, 0], [5, 5, 5], [NAN] * 3, [3, 0, 0], [NAN] * 3],
                                 names=["a1", "a2", "b1", "b2", "b3"], occluded=[False, False, True, False, True])
    b = BodyArrays.build([1, 2], ["a", "b"], [[0, 0, 0], [1, 1, 1]], [[0, 0, 0, 1]] * 2, markers=markers,
                         marker_counts=[2, 3])
    msg, _ = fm.bodies(MocapFrame(2, bodies=b))
    got = [[(m.name, m.occluded, m.position.x) for m in body.markers] for body in msg.rigid_bodies]
    assert got == [[("a1", False, 1.0), ("a2", False, 5.0)], [("b1", True, 2.0), ("b2", False, 3.0)]]
