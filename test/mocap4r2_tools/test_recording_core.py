"""The rclpy-free parts of the session recorder: session ids as path names, frame numbers
read from serialized bytes (against rclpy's own serializer), gap bookkeeping, and a bag
written by SessionBag read back by rosbags."""

from __future__ import annotations

import time

import pytest
from rclpy.serialization import serialize_message

from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons
from mocap4r2_tools.recording.bag_writer import SessionBag, TopicSpec, qos_profile
from mocap4r2_tools.recording.frames import FrameTrack, frame_number, system_gaps
from mocap4r2_tools.recording.session_id import session_dir, session_id_problem


@pytest.mark.parametrize(
    "bad, reason",
    [
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("..", ".."),
        ("a..b", ".."),
        ("a\x00b", "NUL"),
        ("a\tb", "control character"),
        ("a\x7fb", "control character"),
        ("x" * 129, "more than 128"),
        ("\u00e9" * 65, "more than 128"),
        ("", "empty"),
        (".hidden", "starts with '.'"),
        (" trial", "white space"),
    ],
)
def test_bad_session_ids_are_refused_with_the_reason(bad, reason, tmp_path):
    problem = session_id_problem(bad)
    assert problem is not None and reason in problem, problem
    with pytest.raises(ValueError):
        session_dir(tmp_path, bad)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("good", ["trial-01", "subject 3 walk", "x" * 128, "\u00e9" * 64, "T_2026-12-01"])
def test_good_session_ids_name_a_direct_child(good, tmp_path):
    assert session_id_problem(good) is None
    assert session_dir(tmp_path, good).parent == tmp_path.resolve()


@pytest.mark.parametrize("frame_id", ["", "w", "wo", "wor", "worl", "world", "a_longer_frame_id_x"])
def test_frame_number_from_bytes_matches_rclpy_serialization(frame_id):
    for cls in (Markers, RigidBodies, Skeletons):
        msg = cls()
        msg.header.frame_id = frame_id
        msg.header.stamp.sec = 12
        msg.frame_number = 2**40 + 17
        assert frame_number(serialize_message(msg)) == 2**40 + 17, (cls, frame_id)


def test_frame_number_of_garbage_is_none():
    assert frame_number(b"") is None
    assert frame_number(b"\x00\x01\x00\x00" + b"\xff" * 12) is None  # a string length past the end


def test_gaps_whole_frames_and_partial_misses():
    a, b = FrameTrack(), FrameTrack()
    for n in [1, 2, 3, 6, 7, 8, 9, 10]:  # 4, 5 missing
        a.add(n)
    for n in [1, 2, 3, 5, 6, 7, 9, 10]:  # 4 and 8 missing
        b.add(n)
    assert (a.missing, b.missing) == (2, 2)
    whole, partial = system_gaps([a, b])
    assert whole == 1  # frame 4: on no topic
    assert partial == 2  # 5 missing on a only, 8 on b only


def test_session_bag_counts_and_frame_gaps_read_back_by_rosbags(tmp_path):
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    spec = TopicSpec("/s/rigid_bodies", "mocap4r2_interfaces/msg/RigidBodies", qos_profile(True, False, 10))
    bag = SessionBag(tmp_path, "t1", [spec], flush_period=0.05)
    bag.open()
    numbers = [n for n in range(100) if n not in (40, 41, 77)]
    for n in numbers:
        msg = RigidBodies()
        msg.header.frame_id = "world"
        msg.frame_number = n
        assert bag.put(spec.name, serialize_message(msg), time.time_ns())
    summary = bag.close({"/s": 2}, {"/s": [spec.name]})
    assert summary.counts == {spec.name: len(numbers)}
    assert summary.frames["/s"] == {"frames": len(numbers), "gaps": 3, "reported_dropped": 2, "missed": 1}
    with pytest.raises(OSError, match="already exists"):
        SessionBag(tmp_path, "t1", [spec]).open()
    with AnyReader([tmp_path / "t1"], default_typestore=get_typestore(Stores.EMPTY)) as reader:
        got = [reader.deserialize(raw, c.msgtype).frame_number for c, _, raw in reader.messages()]
    assert got == numbers
