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


def records(*reports: tuple[int, int, float, float]) -> np.ndarray:
    """Pos_Quat records of (sender id, sensor, x, time) as a datagram carries them."""
    data = b"".join(
        vp.pack_pos_quat_message(
            sender,
            7,
            sensor,
            position=(x, 2.0, 3.0),
            orientation=(0.0, 0.0, 0.0, 1.0),
            seconds=int(t),
            microseconds=round(t % 1 * 1e6),
        )
        for sender, sensor, x, t in reports
    )
    out = vp.pos_quat_records(data, 7)
    assert out is not None
    return out


SENDERS = {1: "drone", 2: "cart", 3: "stranger"}


def frames_report_by_report(assembler: FrameAssembler, recs: np.ndarray) -> list:
    out = []
    for r in recs:
        t = int(r["seconds"]) + int(r["microseconds"]) * 1e-6
        report = vp.PoseReport(
            int(r["sensor"]), tuple(r["position"].tolist()), tuple(r["orientation"].tolist())
        )
        out += [f for f in (assembler.add(SENDERS[int(r["sender"])], report, t), assembler.complete()) if f]
    return out


def frames_by_records(assembler: FrameAssembler, recs: np.ndarray) -> list:
    return assembler.add_records([SENDERS[int(s)] for s in recs["sender"].tolist()], recs)


def assemblers_knowing_the_bodies() -> tuple[FrameAssembler, FrameAssembler]:
    """Two assemblers (report by report, by records) that have seen both bodies once, so
    that the same reports then give them the same frames."""
    by_report = FrameAssembler(trackers=["drone", "cart"])
    by_records = FrameAssembler(trackers=["drone", "cart"])
    known = records((1, 0, 0.0, 0.5), (2, 0, 0.0, 0.5))
    for assembler, take in ((by_report, frames_report_by_report), (by_records, frames_by_records)):
        take(assembler, known)
        assembler.flush()
    return by_report, by_records


def same_frames(got: list, expected: list) -> None:
    """Consecutive frame numbers; the same times, positions and validity, frame by frame."""
    numbers = [f.frame_number for f in got]
    assert numbers == list(range(numbers[0], numbers[0] + len(got)))
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.system_time == theirs.system_time
        np.testing.assert_array_equal(mine.bodies.positions, theirs.bodies.positions)
        np.testing.assert_array_equal(mine.bodies.valid, theirs.bodies.valid)
        assert mine.bodies.names == theirs.bodies.names
        mine.check()


@pytest.mark.parametrize(
    "datagrams",
    [
        # one instant per datagram (what a server sends), then an instant in two datagrams
        [
            [(1, 0, 1.0, 1.0), (2, 0, 2.0, 1.0)],
            [(2, 0, 2.1, 1.01), (1, 0, 1.1, 1.01)],
            [(1, 0, 1.2, 1.02)],
            [(2, 0, 2.2, 1.02)],
        ],
        # two instants in one datagram, a body twice at one time, the pending frame's body again
        [
            [(1, 0, 1.0, 1.0), (2, 0, 2.0, 1.0)],
            [(1, 0, 1.1, 1.01), (2, 0, 2.1, 1.02)],
            [(1, 0, 1.3, 1.03), (1, 0, 1.4, 1.03)],
        ],
        [[(1, 0, 1.0, 1.0), (2, 0, 2.0, 1.0)], [(1, 0, 1.1, 1.01)], [(1, 0, 1.2, 1.01), (2, 0, 2.2, 1.01)]],
        # a sensor other than 0, a tracker that is not configured
        [[(1, 0, 1.0, 1.0), (2, 0, 2.0, 1.0)], [(1, 1, 9.0, 1.01), (3, 0, 9.0, 1.01), (2, 0, 2.1, 1.01)]],
    ],
    ids=["instants", "mixed", "repeat-pending", "ignored"],
)
def test_a_datagram_of_records_gives_the_frames_reports_one_by_one_give(datagrams):
    by_report, by_records = assemblers_knowing_the_bodies()
    expected, got = [], []
    for reports in datagrams:
        recs = records(*reports)
        expected += frames_report_by_report(by_report, recs)
        got += frames_by_records(by_records, recs)
        expected += [f for f in [by_report.flush()] if f]  # the end of the read
        got += [f for f in [by_records.flush()] if f]
    assert len(got) == len(expected) > 0
    same_frames(got, expected)
    assert by_records.ignored_reports == by_report.ignored_reports


@pytest.mark.parametrize(
    "datagrams",
    [
        # three instants, a datagram each (a reader that fell behind)
        [[(1, 0, 1.0, 1.0), (2, 0, 2.0, 1.0)], [(1, 0, 1.1, 1.01), (2, 0, 2.1, 1.01)], [(2, 0, 2.2, 1.02)]],
        # one time in two datagrams, then a body twice at one time, then an earlier time
        [[(1, 0, 1.0, 1.0)], [(2, 0, 2.0, 1.0), (1, 0, 1.1, 1.01)], [(1, 0, 1.2, 1.01), (2, 0, 2.2, 1.0)]],
        # a sensor other than 0 and a tracker not configured between the instants
        [[(1, 0, 1.0, 1.0), (2, 0, 2.0, 1.0)], [(1, 1, 9.0, 1.01), (3, 0, 9.0, 1.01)], [(2, 0, 2.1, 1.01)]],
    ],
    ids=["instants", "repeats", "ignored"],
)
def test_the_datagrams_of_one_read_taken_together_give_the_frames_reports_one_by_one_give(datagrams):
    """The transport decodes the report datagrams of one read as one block of records
    (one decode instead of one per datagram): the frames must be those report-by-report
    assembly gives over the same reports, with the flush at the read's end only."""
    by_report, by_records = assemblers_knowing_the_bodies()
    # report by report splits the bodies' first instant in two
    split_before = by_report.frames_split, by_records.frames_split
    read = records(*[report for datagram in datagrams for report in datagram])
    expected = frames_report_by_report(by_report, read) + [f for f in [by_report.flush()] if f]
    got = frames_by_records(by_records, read) + [f for f in [by_records.flush()] if f]
    assert len(got) == len(expected) >= 2
    same_frames(got, expected)
    assert by_records.ignored_reports == by_report.ignored_reports
    assert by_records.frames_split - split_before[1] == by_report.frames_split - split_before[0]


def test_records_of_new_bodies_form_one_frame_in_id_order():
    a = FrameAssembler()
    a.announce(["VRPN Control", "drone", "cart", "stranger"])
    # announced order gives ids drone 1, cart 2, stranger 3; they report in another order
    frames = frames_by_records(a, records((3, 0, 3.0, 1.0), (1, 0, 1.0, 1.0), (2, 0, 2.0, 1.0)))
    assert len(frames) == 1 and frames[0].bodies.names == ("drone", "cart", "stranger")
    np.testing.assert_array_equal(frames[0].bodies.positions[:, 0], [1.0, 2.0, 3.0])
    assert frames[0].bodies.ids.tolist() == [1, 2, 3] and frames[0].bodies.valid.all()
    assert a.flush() is None


def test_the_same_datagram_layout_again_counts_and_places_its_reports_again():
    # add_records remembers where a list of senders and sensors goes; a repeated list
    # must give what report-by-report does each time, ignored reports counted each time
    by_report = FrameAssembler(trackers=["drone", "cart"])
    by_records = FrameAssembler(trackers=["drone", "cart"])
    for assembler, take in ((by_report, frames_report_by_report), (by_records, frames_by_records)):
        take(assembler, records((1, 0, 0.0, 0.5), (2, 0, 0.0, 0.5)))  # the bodies known first
        assembler.flush()
    for k in range(5):
        t = 1.0 + 0.01 * k
        recs = records((1, 1, 9.0, t), (3, 0, 9.0, t), (1, 0, 1.0 + k, t), (2, 0, 2.0 + k, t))
        expected = frames_report_by_report(by_report, recs) + [f for f in [by_report.flush()] if f]
        got = frames_by_records(by_records, recs) + [f for f in [by_records.flush()] if f]
        assert [f.bodies.positions.tolist() for f in got] == [f.bodies.positions.tolist() for f in expected]
    assert by_records.ignored_reports == by_report.ignored_reports == 10


def test_a_tracker_announced_later_is_taken_from_a_layout_seen_before():
    a = FrameAssembler()
    a.announce(["drone", "cart"])
    layout = lambda t: records((1, 0, 1.0, t), (3, 0, 3.0, t))  # noqa: E731 - drone, stranger
    for t in (1.0, 1.005):  # the second time from what the first remembered
        frames = frames_by_records(a, layout(t)) + [f for f in [a.flush()] if f]
    assert frames[-1].bodies.names == ("drone",) and a.ignored_reports == 2
    a.announce(["drone", "cart", "stranger"])  # the server describes a new sender
    frames = frames_by_records(a, layout(1.01)) + [f for f in [a.flush()] if f]
    assert frames[-1].bodies.names == ("drone", "stranger") and a.ignored_reports == 2
    np.testing.assert_array_equal(frames[-1].bodies.positions[:, 0], [1.0, 3.0])


def test_a_sender_described_again_gives_its_new_name_to_the_next_datagram():
    from mocap4r2_drivers.common import ClientStats
    from mocap4r2_drivers.vrpn.dialog import ServerNames

    names = ServerNames(ClientStats())
    ids = np.array([0, 1], dtype=">i4")
    assert names.block_senders(ids) is None  # not described yet: not a block of reports
    describe = lambda i, n: vp.pack_message(i, vp.SENDER_DESCRIPTION, vp.pack_description(n), 0, 0)  # noqa: E731
    names.dispatch(vp.split_datagram(describe(0, "drone") + describe(1, "cart")), [])
    assert names.block_senders(ids) == ("drone", "cart")
    names.dispatch(vp.split_datagram(describe(1, "truck")), [])
    assert names.block_senders(ids) == ("drone", "truck")
