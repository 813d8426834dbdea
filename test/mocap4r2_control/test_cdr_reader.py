"""mocap4r2_control.cdr_reader: the reader's side of the wire rules, proven on bytes that
rclpy serialized (``serialize_message``, Fast DDS's own serializer) and on the bytes of
the suite's writer: both readers (replay, tracker) walk with it."""

from __future__ import annotations

import numpy as np
import pytest
from rclpy.serialization import serialize_message

from mocap4r2_control.cdr import RigidBodiesEncoder
from mocap4r2_control.cdr_reader import (
    CdrCursor,
    CdrDecodeError,
    MarkerOffsets,
    check_encapsulation,
    walk_message,
)
from mocap4r2_interfaces.msg import Marker, Markers


def _markers(names: list[str]) -> bytes:
    msg = Markers()
    msg.header.frame_id = "world"
    msg.frame_number = 7
    for i, name in enumerate(names):
        m = Marker(id=i + 10, name=name)
        m.position.x, m.position.y, m.position.z = 0.5 * i, -1.0, float(i) ** 2
        msg.markers.append(m)
    return bytes(serialize_message(msg))


@pytest.mark.parametrize("names", [[], ["", "", ""], ["a", "", "body:marker_2", "xyz"]])
def test_walked_marker_fields_hold_what_rclpy_wrote(names):
    data = _markers(names)
    walk = walk_message("markers", data)
    assert walk.frame_id == "world" and walk.count == len(names)
    assert np.frombuffer(data, "<u8", 1, walk.number)[0] == 7
    fields = {f.name: f for f in walk.fields}
    ids = [int(np.frombuffer(data, "<i4", 1, at)[0]) for at in fields["m_ids"].offsets]
    xyz = [np.frombuffer(data, "<f8", 3, at).tolist() for at in fields["m_positions"].offsets]
    assert ids == [i + 10 for i in range(len(names))]
    assert xyz == [[0.5 * i, -1.0, float(i) ** 2] for i in range(len(names))]
    assert walk.item_names == tuple(names)


def test_walked_body_fields_hold_what_the_writer_wrote():
    poses = np.arange(14, dtype=float).reshape(2, 7)
    data = RigidBodiesEncoder().encode(
        sec=1,
        nanosec=2,
        frame_id="map",
        frame_number=3,
        ids=[4, 5],
        names=("one", "two_"),
        valid=[True, False],
        poses=poses,
        mean_errors=[0.25, 0.5],
        marker_offsets=[0, 1, 3],
        marker_ids=[1, 2, 3],
        marker_names=("m", "", "nn"),
        marker_positions=np.ones((3, 3)),
        marker_occluded=[False, True, False],
        marker_residuals=[0.0, 0.0, 0.0],
    )
    walk = walk_message("rigid_bodies", data)
    fields = {f.name: f for f in walk.fields}
    read = [np.frombuffer(data, "<f8", 7, at).tolist() for at in fields["pose"].offsets]
    assert read == poses.tolist()
    assert walk.names == ("one", "two_") and walk.counts == [1, 2]
    assert walk.item_names == ("m", "", "nn")


def test_one_encapsulation_check_with_each_readers_error():
    class Mine(CdrDecodeError):
        pass

    for bad in (b"", b"\x00", b"\x01\x00\x00\x00", b"\x00\x00\x00\x00"):
        with pytest.raises(Mine, match="little-endian"):
            check_encapsulation(bad, Mine)
        with pytest.raises(Mine):
            CdrCursor(bad, error=Mine)
    check_encapsulation(b"\x00\x01\x00\x00")


def test_counts_and_strings_are_bounded_by_the_bytes_there():
    data = _markers(["abc"])
    cursor = CdrCursor(data)
    cursor.header()
    assert cursor.count(limit=1, what="markers") == 1
    cursor = CdrCursor(data)
    cursor.header()
    with pytest.raises(CdrDecodeError, match="more than the 0 allowed"):
        cursor.count(limit=0, what="markers")
    cursor = CdrCursor(data)
    cursor.header()
    with pytest.raises(CdrDecodeError, match="cannot fit"):
        cursor.count(min_size=len(data))
    walked = MarkerOffsets()
    cursor = CdrCursor(data[:-3])  # the residual cut
    cursor.header()
    cursor.count()
    with pytest.raises(CdrDecodeError, match="truncated"):
        walked.walk(cursor)
