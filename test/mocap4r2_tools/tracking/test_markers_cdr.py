"""The numpy reader of serialized Markers against rclpy's own serializer: clouds and labeled
markers, any frame_id length (every alignment of the first element), NaN positions kept,
and bytes that do not hold what they say refused with the reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rclpy.serialization import serialize_message

from mocap4r2_interfaces.msg import Marker, Markers
from mocap4r2_tools.tracking.markers_cdr import MarkersDecodeError, decode_markers


def _message(frame_id: str, names: list[str], positions: np.ndarray, number: int = 7) -> Markers:
    msg = Markers()
    msg.header.frame_id = frame_id
    msg.header.stamp.sec = 1_700_000_123
    msg.header.stamp.nanosec = 456_789_012
    msg.frame_number = number
    for i, (name, p) in enumerate(zip(names, positions, strict=True)):
        m = Marker()
        m.id = -1 if not name else 1000 + i
        m.name = name
        m.position.x, m.position.y, m.position.z = (float(v) for v in p)
        m.occluded = i % 5 == 3
        m.residual = 0.001 * i
        msg.markers.append(m)
    return msg


@settings(max_examples=60, deadline=None)
@given(
    frame_id=st.text(alphabet="abcdefgh/_", max_size=11),
    count=st.integers(0, 40),
    labeled=st.sampled_from(["none", "all", "some"]),
    seed=st.integers(0, 2**16),
)
def test_every_marker_as_rclpy_serialized_it(frame_id, count, labeled, seed):
    rng = np.random.default_rng(seed)
    positions = rng.normal(size=(count, 3))
    names = [
        "" if labeled == "none" or (labeled == "some" and i % 2) else f"body{i}:" + "x" * (i % 7)
        for i in range(count)
    ]
    msg = _message(frame_id, names, positions, number=seed)
    decoded = decode_markers(serialize_message(msg))
    assert (decoded.sec, decoded.nanosec, decoded.frame_id, decoded.frame_number) == (
        1_700_000_123,
        456_789_012,
        frame_id,
        seed,
    )
    assert decoded.stamp == pytest.approx(1_700_000_123.456789012)
    assert np.array_equal(decoded.positions, positions.reshape(-1, 3))
    assert decoded.ids.tolist() == [m.id for m in msg.markers]
    assert decoded.occluded.tolist() == [m.occluded for m in msg.markers]


def test_nan_positions_are_read_as_sent():
    positions = np.array([[0.1, 0.2, 0.3], [math.nan, 1.0, 2.0], [math.inf, -math.inf, 0.0]])
    decoded = decode_markers(serialize_message(_message("world", ["", "", ""], positions)))
    assert np.array_equal(decoded.positions, positions, equal_nan=True)


@pytest.mark.parametrize("names", [["", "", "", ""], ["a:1", "", "bb:2", ""]])
def test_bytes_that_do_not_hold_what_they_say_are_refused(names):
    data = serialize_message(_message("world", names, np.ones((4, 3))))
    for cut in range(0, len(data), 7):  # every truncation refused, never read past the end
        with pytest.raises(MarkersDecodeError):
            decode_markers(data[:cut])
    big_endian = b"\x00\x00" + data[2:]
    with pytest.raises(MarkersDecodeError, match="little-endian"):
        decode_markers(big_endian)
    # a count far beyond the bytes: refused by the count, nothing allocated for it
    count_at = 4 + 24  # frame_id "world": number at 24, count at 32 after the encapsulation
    forged = bytearray(data)
    forged[count_at + 8 : count_at + 12] = (2**31).to_bytes(4, "little")
    with pytest.raises(MarkersDecodeError, match="markers"):
        decode_markers(bytes(forged))
    with pytest.raises(MarkersDecodeError, match="more than the 3 allowed"):
        decode_markers(data, max_markers=3)
