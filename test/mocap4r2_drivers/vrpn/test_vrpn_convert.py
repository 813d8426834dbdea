"""How VRPN tracker reports become frames: one message time per frame, published as soon
as the frame is complete, ids in announcement or configured order, multi-sensor bodies,
validity by the age of a body's last report."""

from __future__ import annotations

import numpy as np
import pytest

from mocap4r2_drivers.vrpn import protocol as vp
from mocap4r2_drivers.vrpn.convert import FrameAssembler, parse_body_names


def report(sensor: int, x: float) -> vp.PoseReport:
    return vp.PoseReport(sensor, (x, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0))


def test_a_frame_is_the_reports_of_one_time_and_is_out_when_complete():
    a = FrameAssembler()
    a.announce(["VRPN Control", "drone", "cart"])
    assert a.add("drone", report(0, 1.0), 10.0) is None
    # cart is not known as a body yet: the frame is complete with drone alone
    frame = a.complete()
    assert frame is not None and frame.frame_number == 0 and frame.system_time == 10.0
    assert frame.bodies.names == ("drone",) and frame.bodies.ids.tolist() == [1]
    a.add("cart", report(0, 5.0), 10.01)
    assert a.complete() is None  # drone has not reported at 10.01
    frame = a.flush()  # the end of a read
    assert frame.bodies.names == ("drone", "cart") and frame.bodies.valid.all()  # drone's pose is fresh
    assert a.add("drone", report(0, 1.5), 10.02) is None
    assert a.complete() is None  # cart has not reported at 10.02 yet
    assert a.add("cart", report(0, 5.5), 10.02) is None
    frame = a.complete()
    assert frame.frame_number == 2 and frame.bodies.names == ("drone", "cart")
    assert frame.bodies.ids.tolist() == [1, 2]
    np.testing.assert_array_equal(frame.bodies.positions[:, 0], [1.5, 5.5])
    assert frame.bodies.valid.all()
    frame.check()


def test_another_time_or_a_repeated_body_closes_the_frame_and_flush_ends_a_read():
    a = FrameAssembler()
    a.announce(["drone", "cart"])
    a.add("drone", report(0, 1.0), 1.0)
    a.add("cart", report(0, 2.0), 1.0)
    a.complete()
    a.add("drone", report(0, 1.1), 1.01)
    done = a.add("drone", report(0, 1.2), 1.02)  # cart never came at 1.01
    assert done is not None and done.system_time == 1.01 and done.bodies.positions[0, 0] == 1.1
    done = a.add("drone", report(0, 1.3), 1.02)  # twice at one time: two frames
    assert done is not None and done.bodies.positions[0, 0] == 1.2
    last = a.flush()
    assert last is not None and last.bodies.positions[0, 0] == 1.3 and a.frames_split == 1
    assert [done.frame_number, last.frame_number] == [2, 3]
    assert a.flush() is None


def test_untracked_after_a_silence_on_the_servers_clock():
    a = FrameAssembler(untracked_after=0.1)
    a.announce(["drone", "cart"])
    a.add("drone", report(0, 1.0), 0.0)
    a.add("cart", report(0, 2.0), 0.0)
    a.complete()
    a.add("drone", report(0, 1.0), 0.05)
    frame = a.flush()
    assert frame.bodies.valid.tolist() == [True, True]
    assert frame.bodies.positions[1, 0] == 2.0  # cart's last pose
    a.add("drone", report(0, 1.0), 0.2)
    frame = a.flush()
    assert frame.bodies.valid.tolist() == [True, False]


def test_configured_trackers_give_ids_and_keep_the_rest_out():
    a = FrameAssembler(trackers=["cart", "drone"], body_names={"drone": "uav"})
    a.announce(["drone", "cart", "stranger"])
    assert a.asset_names(["drone", "cart", "stranger"]) == ("cart", "uav")
    a.add("stranger", report(0, 9.0), 1.0)
    a.add("drone", report(0, 1.0), 1.0)
    a.add("cart", report(0, 2.0), 1.0)
    frame = a.complete()
    assert frame.bodies.names == ("cart", "uav") and frame.bodies.ids.tolist() == [1, 2]
    assert a.ignored_reports == 1


def test_multi_sensor_bodies_and_sensor_zero_otherwise():
    single = FrameAssembler()
    single.announce(["rig"])
    single.add("rig", report(1, 1.0), 1.0)
    assert single.flush() is None and single.ignored_reports == 1
    multi = FrameAssembler(multi_sensor=True, body_names=parse_body_names(["rig/1=left_hand"]))
    multi.announce(["VRPN Control", "rig"])
    for sensor in (2, 0, 1):
        multi.add("rig", report(sensor, float(sensor)), 1.0)
    frame = multi.flush()
    assert frame.bodies.names == ("rig/0", "left_hand", "rig/2")
    assert frame.bodies.ids.tolist() == [1000, 1001, 1002]
    np.testing.assert_array_equal(frame.bodies.positions[:, 0], [0.0, 1.0, 2.0])
    multi.add("rig", report(5000, 1.0), 2.0)
    assert multi.rejected_reports == 1


def test_up_axis():
    a = FrameAssembler(up_axis="+Y")
    a.announce(["b"])
    a.add("b", vp.PoseReport(0, (1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0)), 1.0)
    frame = a.flush()
    np.testing.assert_allclose(frame.bodies.positions[0], [1.0, -3.0, 2.0])


def test_body_names_are_checked():
    assert parse_body_names(["T/0=a", " T = b "]) == {"T/0": "a", "T": "b"}
    for bad in (["T/0"], ["=a"], ["T="]):
        with pytest.raises(ValueError, match="Tracker0/1=left_hand"):
            parse_body_names(bad)
