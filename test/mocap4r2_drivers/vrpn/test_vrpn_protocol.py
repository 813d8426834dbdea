"""The VRPN wire format: byte layouts written out from vrpn's Format_Of_Protocol.txt and
vrpn_Tracker.C, round trips, and every bound a hostile peer could push against."""

from __future__ import annotations

import contextlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mocap4r2_drivers.vrpn import protocol as vp


def test_cookie_layout_and_major_version_check():
    c = vp.cookie()
    assert len(c) == 24
    assert c == b"vrpn: ver. 07.38  0" + b"\0" * 5
    assert vp.check_cookie(c) == "07.38"
    # another minor version is accepted (vrpn only prints a note)
    assert vp.check_cookie(b"vrpn: ver. 07.35  0" + b"\0" * 5) == "07.35"
    assert vp.check_cookie(vp.cookie(3)) == "07.38"
    with pytest.raises(vp.VrpnProtocolError, match="07.xx"):
        vp.check_cookie(b"vrpn: ver. 06.01  0" + b"\0" * 5)
    with pytest.raises(vp.VrpnProtocolError, match="not a VRPN"):
        vp.check_cookie(b"HTTP/1.1 200 OK\r\n\r\n" + b"\0" * 5)
    with pytest.raises(vp.VrpnProtocolError, match="log mode"):
        vp.check_cookie(b"vrpn: ver. 07.38  9" + b"\0" * 5)
    with pytest.raises(vp.VrpnProtocolError, match="24 bytes"):
        vp.check_cookie(b"vrpn: ver. 07.38")


def test_message_layout_is_the_documented_one():
    # a ping: sender 3, type 7, time 10 s 20 us, no payload: 24 header bytes only
    ping = vp.pack_message(3, 7, b"", 10, 20)
    assert ping == struct.pack(">5i", 24, 10, 20, 3, 7) + b"\0" * 4
    # a 5-byte payload: the length counts it unpadded, the bytes are padded to 8
    msg = vp.pack_message(-1, -2, b"abcde", 1, 2)
    assert struct.unpack(">5i", msg[:20]) == (29, 1, 2, -1, -2)
    assert len(msg) == 32 and msg[24:29] == b"abcde" and msg[29:] == b"\0\0\0"
    (m,) = vp.split_datagram(msg)
    assert (m.seconds, m.microseconds, m.sender, m.type, m.payload) == (1, 2, -1, -2, b"abcde")
    assert m.time == pytest.approx(1.000002)


def test_tracker_report_layout():
    payload = vp.pack_pos_quat(2, (1.0, -2.0, 3.5), (0.0, 0.0, 0.6, 0.8))
    assert len(payload) == 64
    assert payload == struct.pack(">ii7d", 2, 2, 1.0, -2.0, 3.5, 0.0, 0.0, 0.6, 0.8)
    report = vp.unpack_pos_quat(payload)
    assert report == vp.PoseReport(2, (1.0, -2.0, 3.5), (0.0, 0.0, 0.6, 0.8))
    motion = vp.unpack_motion(vp.pack_motion(1, (0.1, 0.2, 0.3), (0, 0, 0, 1), 0.01))
    assert motion.sensor == 1 and motion.vector == (0.1, 0.2, 0.3) and motion.dt == 0.01
    with pytest.raises(vp.VrpnProtocolError, match="64 bytes"):
        vp.unpack_pos_quat(payload[:-1])
    with pytest.raises(vp.VrpnProtocolError, match="sensor -1"):
        vp.unpack_pos_quat(struct.pack(">ii7d", -1, 0, *[0.0] * 7))
    with pytest.raises(vp.VrpnProtocolError, match="72 bytes"):
        vp.unpack_motion(payload)


def test_descriptions():
    payload = vp.pack_description("Tracker0")
    assert payload == struct.pack(">i", 9) + b"Tracker0\0"
    assert vp.parse_description(payload) == "Tracker0"
    # the redundant length wins over trailing bytes, a NUL ends the name
    assert vp.parse_description(struct.pack(">i", 4) + b"abc\0junk") == "abc"
    for bad in (
        b"",
        struct.pack(">i", 1),
        struct.pack(">i", 50) + b"abc\0",
        struct.pack(">i", -5) + b"abc\0",
        struct.pack(">i", 1) + b"\0",
        struct.pack(">i", 200) + b"x" * 200,
    ):
        with pytest.raises(vp.VrpnProtocolError):
            vp.parse_description(bad)
    with pytest.raises(ValueError):
        vp.pack_description("x" * 100)
    port, udp = vp.pack_udp_description("127.0.0.1", 40000)
    assert vp.parse_udp_description(port, udp) == ("127.0.0.1", 40000)
    for port, bad in ((0, b"127.0.0.1\0"), (70000, b"127.0.0.1\0"), (4000, b"\0"), (4000, b"a b\0")):
        with pytest.raises(vp.VrpnProtocolError):
            vp.parse_udp_description(port, bad)


def test_connect_request():
    assert vp.connect_request("127.0.0.1", 40001) == b"127.0.0.1 40001\0"
    assert vp.parse_connect_request(b"127.0.0.1 40001\0") == ("127.0.0.1", 40001)
    for bad in (b"", b"127.0.0.1\0", b"127.0.0.1 80\0", b"host;rm 4000\0", b"h 99999\0", b"h x\0"):
        with pytest.raises(vp.VrpnProtocolError):
            vp.parse_connect_request(bad)


def test_stream_framing_in_any_chunking():
    messages = [vp.pack_message(i, i % 3, bytes(range(i * 7 % 70)), i, i * 10) for i in range(40)]
    stream = b"".join(messages)
    for step in (1, 3, 24, 100, len(stream)):
        reader = vp.MessageReader()
        got = []
        for at in range(0, len(stream), step):
            got += reader.feed(stream[at : at + step])
        assert [(m.sender, m.payload) for m in got] == [(i, bytes(range(i * 7 % 70))) for i in range(40)]
        assert reader.pending == 0


def test_impossible_lengths_are_refused_before_anything_is_held():
    reader = vp.MessageReader()
    with pytest.raises(vp.VrpnProtocolError, match="shorter than"):
        reader.feed(struct.pack(">5i", 8, 0, 0, 0, 0) + b"\0" * 4)
    reader = vp.MessageReader()
    with pytest.raises(vp.VrpnProtocolError, match="limit"):
        reader.feed(struct.pack(">5i", 0x7FFFFFFF, 0, 0, 0, 0) + b"\0" * 4)
    # the largest legal message is held until complete, never more
    reader = vp.MessageReader()
    big = vp.pack_message(0, 0, b"x" * vp.MAX_PAYLOAD, 0, 0)
    assert reader.feed(big[:-1]) == [] and reader.pending == len(big) - 1
    assert len(reader.feed(big[-1:])) == 1 and reader.pending == 0


def test_datagram_with_several_messages_and_truncations():
    data = vp.pack_message(1, 2, b"a" * 64, 5, 6) + vp.pack_message(3, 4, b"", 7, 8)
    assert [(m.sender, m.type) for m in vp.split_datagram(data)] == [(1, 2), (3, 4)]
    for cut in (1, 10, 30, len(data) - 1):
        with pytest.raises(vp.VrpnProtocolError):
            vp.split_datagram(data[:cut])


def test_name_table_bounds_and_renames():
    table = vp.NameTable("sender")
    assert table.describe(0, "VRPN Control") and table.describe(1, "drone")
    assert not table.describe(1, "drone")
    assert table.describe(1, "cart")  # a re-description replaces the name
    assert table.name(1) == "cart" and table.id("drone") is None and table.id("cart") == 1
    assert table.names() == ["VRPN Control", "cart"]
    for bad in (-1, vp.MAX_IDS, 2**31 - 1):
        with pytest.raises(vp.VrpnProtocolError):
            table.describe(bad, "x")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_messages_or_a_protocol_error(data):
    try:
        messages = vp.split_datagram(data)
    except vp.VrpnProtocolError:
        messages = None
    reader = vp.MessageReader()
    try:
        streamed = reader.feed(data)
    except vp.VrpnProtocolError:
        return
    assert reader.pending <= vp.HEADER_SIZE + vp.MAX_PAYLOAD
    if messages is not None:
        assert streamed == messages
    for m in streamed:
        for parse in (vp.parse_description, vp.unpack_pos_quat, vp.unpack_motion):
            with contextlib.suppress(vp.VrpnProtocolError):
                parse(m.payload)


def test_a_whole_report_message_in_one_pack_is_the_same_bytes():
    whole = vp.pack_pos_quat_message(
        3, 7, 2, position=(1.0, 2.0, 3.0), orientation=(0.0, 0.6, 0.0, 0.8), seconds=5, microseconds=6
    )
    assert whole == vp.pack_message(3, 7, vp.pack_pos_quat(2, (1.0, 2.0, 3.0), (0.0, 0.6, 0.0, 0.8)), 5, 6)


def _pos_quat(sender: int, sensor: int, x: float, seconds: int = 5, usec: int = 6, type_id: int = 7) -> bytes:
    return vp.pack_pos_quat_message(
        sender,
        type_id,
        sensor,
        position=(x, 2.0, 3.0),
        orientation=(0.0, 0.6, 0.0, 0.8),
        seconds=seconds,
        microseconds=usec,
    )


def test_a_datagram_of_reports_reads_as_records_equal_to_its_messages():
    data = b"".join(_pos_quat(sender, sensor, 0.5 * sender) for sender, sensor in ((1, 0), (2, 3), (9, 0)))
    records = vp.pos_quat_records(data, 7)
    assert records is not None and len(records) == 3
    for r, m in zip(records, vp.split_datagram(data), strict=True):
        report = vp.unpack_pos_quat(m.payload)
        assert (int(r["sender"]), int(r["type"]), int(r["sensor"])) == (m.sender, m.type, report.sensor)
        assert int(r["seconds"]) + int(r["microseconds"]) * 1e-6 == m.time
        assert tuple(r["position"].tolist()) == report.position
        assert tuple(r["orientation"].tolist()) == report.orientation


def test_records_only_for_datagrams_of_nothing_but_valid_reports_of_the_type():
    good = _pos_quat(1, 0, 1.0)
    assert vp.pos_quat_records(good * 2, 7) is not None
    other_type = _pos_quat(1, 0, 1.0, type_id=8)
    negative_sensor = _pos_quat(1, -1, 1.0)
    ping = vp.pack_message(1, 7, b"", 0, 0)
    velocity = vp.pack_message(1, 7, vp.pack_motion(0, (1.0, 2.0, 3.0), (0, 0, 0, 1.0), 0.01), 0, 0)
    lying_length = bytearray(good)
    lying_length[3] = 80  # length field 80 in a message of 88 bytes
    for bad in (
        b"",
        good + other_type,
        good + negative_sensor,
        good + ping,
        good + velocity,
        bytes(lying_length),
        good[:-8],
        good + good[:40],
    ):
        assert vp.pos_quat_records(bad, 7) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=6), st.binary(max_size=16), st.integers(0, 600))
def test_records_of_any_mutated_datagram_are_its_messages_or_none(kinds, noise, at):
    parts = [
        (_pos_quat(3, 0, 1.5), vp.pack_message(3, 7, b"x" * 64, 0, 0), _pos_quat(2, 1, -1.0, 9, 999_999))[k]
        for k in kinds
    ]
    data = bytearray(b"".join(parts))
    data[at:at] = noise
    records = vp.pos_quat_records(bytes(data), 7)
    if records is None:
        return
    messages = vp.split_datagram(bytes(data))  # records imply a well-framed datagram
    assert len(messages) == len(records)
    for r, m in zip(records, messages, strict=True):
        report = vp.unpack_pos_quat(m.payload)
        assert (int(r["sender"]), int(r["sensor"])) == (m.sender, report.sensor)
        assert np.array_equal(r["position"].astype(float), report.position, equal_nan=True)
        assert np.array_equal(r["orientation"].astype(float), report.orientation, equal_nan=True)
