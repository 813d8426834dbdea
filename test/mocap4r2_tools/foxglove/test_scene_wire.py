"""scene_wire against the SDK: the bodies and markers scenes written straight to bytes
decode, in Foxglove's own client, to exactly the message foxglove-sdk encodes from
convert's objects; where no coordinate is zero (the one field the wire writer always
writes) the bytes are the SDK's own, byte for byte. Random scenes: zeros, negative
zeros, NaN and infinite values, untracked bodies, empty and non-ASCII names, every kind
of marker, empty frame ids and stamps at 0."""

from __future__ import annotations

import base64
import json
import math
import random
from types import SimpleNamespace as NS

import numpy as np
from fox_client import run_client

from mocap4r2_tools.foxglove import convert, records, scene_wire

STYLES = (
    convert.DEFAULT_STYLE,
    convert.Style(lifetime=0.0),
    convert.Style(lifetime=0.3, axis_length=0.2, text_size=0.1, line_width=0.0001, marker_size=0.5),
)


def scene(seed: int, n: int, zeros: bool = True) -> NS:
    rnd = random.Random(seed)

    def value() -> float:
        choices = [rnd.uniform(-5, 5), 1.0, -2.5, 1e-300, 123456.789]
        return rnd.choice(choices + ([0.0, -0.0] if zeros else []))

    bodies = []
    for i in range(n):
        v = [value() for _ in range(7)]
        if zeros and i % 7 == 3:
            v[rnd.randrange(7)] = rnd.choice([math.nan, math.inf])
        bodies.append(
            NS(
                name=rnd.choice(["", f"b{i}", "ünïcödé body"]),
                id=i,
                tracking_valid=rnd.random() < 0.7,
                pose=NS(position=NS(x=v[0], y=v[1], z=v[2]), orientation=NS(x=v[3], y=v[4], z=v[5], w=v[6])),
            )
        )
    markers = [
        NS(
            id=rnd.choice([-1, 1, 2]),
            name=rnd.choice(["", "m:1"]),
            occluded=rnd.random() < 0.2,
            position=NS(x=value(), y=rnd.choice([value(), math.nan]) if zeros else value(), z=value()),
        )
        for _ in range(3 * n)
    ]
    stamp = NS(sec=rnd.choice([0, 5, 1796564832]), nanosec=rnd.choice([0, 7, 999_999_999]))
    return NS(
        header=NS(stamp=stamp, frame_id=rnd.choice(["", "world"])),
        rigid_bodies=bodies,
        markers=markers,
        frame_number=rnd.randint(0, 10**9),
    )


def test_where_no_coordinate_is_zero_the_bytes_are_the_sdks():
    for seed in range(100):
        msg = scene(seed, seed % 9, zeros=False)
        for style in STYLES:
            assert (
                scene_wire.bodies_scene(msg, "sim", style) == convert.bodies_scene(msg, "sim", style).encode()
            )
            assert (
                scene_wire.markers_scene(msg, "sim", style)
                == convert.markers_scene(msg, "sim", style).encode()
            )


def test_foxglove_decodes_the_same_message_from_both():
    entries = []
    for seed in range(40):
        msg = scene(seed, seed % 12)
        for style in STYLES:
            for fast, reference in (
                (scene_wire.bodies_scene, convert.bodies_scene),
                (scene_wire.markers_scene, convert.markers_scene),
            ):
                for data in (fast(msg, "sim", style), reference(msg, "sim", style).encode()):
                    entries.append(
                        {
                            "topic": f"{seed}",
                            "schemaName": records.SCENE_UPDATE.name,
                            "schemaEncoding": "protobuf",
                            "schema": base64.b64encode(records.SCENE_UPDATE.data).decode(),
                            "messageEncoding": "protobuf",
                            "sample": base64.b64encode(data).decode() or "AA==",
                        }
                    )
    # an empty update is b"": sent as one zero byte would not decode, so compare it here
    decoded = run_client("schemas", stdin=json.dumps([e for e in entries if e["sample"] != "AA=="]))
    assert len(decoded) == sum(1 for e in entries if e["sample"] != "AA==") > 300
    pairs = list(zip(decoded[::2], decoded[1::2]))
    different = [(a["sample"], b["sample"]) for a, b in pairs if a["sample"] != b["sample"]]
    assert not different, json.dumps(different[0])[:2000]
    assert any(e["sample"]["entities"] for e, _ in pairs)


def test_the_records_use_the_wire_writer():
    msg = scene(1, 5, zeros=False)
    (bodies,) = records.records("/sim/rigid_bodies", convert.RIGID_BODIES, msg)
    (markers,) = records.records("/sim/markers", convert.MARKERS, msg)
    assert bodies.data == scene_wire.bodies_scene(msg, "sim") == convert.bodies_scene(msg, "sim").encode()
    assert markers.data == scene_wire.markers_scene(msg, "sim")


def _serialized_bodies(seed: int, n: int) -> bytes:
    from rclpy.serialization import serialize_message

    from mocap4r2_interfaces.msg import Marker, RigidBodies, RigidBody

    rnd = random.Random(seed)
    msg = RigidBodies(frame_number=seed)
    msg.header.stamp.sec, msg.header.stamp.nanosec = rnd.randint(0, 2**31 - 1), rnd.randint(0, 999_999_999)
    msg.header.frame_id = rnd.choice(["", "world", "ünï"])
    for i in range(n):
        body = RigidBody(id=rnd.randint(-5, 100), name=rnd.choice(["", f"b{i}", "ünïcödé"]))
        body.tracking_valid = rnd.random() < 0.7
        body.pose.position.x = rnd.choice([0.0, 1.5, math.nan, -math.inf])
        body.pose.position.y, body.pose.position.z = rnd.uniform(-3, 3), rnd.uniform(0, 2)
        body.pose.orientation.z, body.pose.orientation.w = rnd.choice([0.0, 0.5]), rnd.choice([0.0, 1.0, 3.0])
        for k in range(rnd.randint(0, 5)):
            marker = Marker(id=k, name=rnd.choice(["", f"b{i}:{k}"]))
            marker.position.x = rnd.uniform(-1, 1)
            body.markers.append(marker)
        msg.rigid_bodies.append(body)
    return serialize_message(msg)


def test_bodies_read_in_place_from_cdr_equal_the_deserialized_ones():
    """records_raw reads RigidBodies from their bytes (bodies_frame_cdr) instead of
    rclpy's deserializer: the scene is the same, byte for byte."""
    from rclpy.serialization import deserialize_message

    from mocap4r2_interfaces.msg import RigidBodies

    for seed in range(300):
        data = _serialized_bodies(seed, seed % 15)
        msg = deserialize_message(data, RigidBodies)
        assert scene_wire.bodies_scene_cdr(data, "sim") == scene_wire.bodies_scene(msg, "sim")
        (record,) = records.records_raw("/sim/rigid_bodies", convert.RIGID_BODIES, data, None)  # type: ignore[arg-type]
        assert record.data == scene_wire.bodies_scene(msg, "sim")
        assert record.log_time == convert.stamp_ns(msg.header.stamp)


def test_bodies_cdr_that_lies_about_itself_is_refused_with_the_reason():
    import pytest

    data = _serialized_bodies(7, 6)
    for cut in range(0, len(data), 7):
        with pytest.raises(scene_wire.BadCdr):
            scene_wire.bodies_frame_cdr(data[:cut])
    big_endian = b"\x00\x00" + data[2:]
    with pytest.raises(scene_wire.BadCdr, match="little-endian"):
        scene_wire.bodies_frame_cdr(big_endian)
    # a body count far beyond the bytes there: refused before anything is allocated
    from mocap4r2_control.cdr_reader import CdrCursor

    cursor = CdrCursor(data)
    cursor.header()
    count_at = cursor.fixed(4)  # the count follows the header
    lying = bytearray(data)
    lying[count_at : count_at + 4] = (1 << 30).to_bytes(4, "little")
    with pytest.raises(scene_wire.BadCdr, match="rigid bodies"):
        scene_wire.bodies_frame_cdr(bytes(lying))


def _serialized_markers(seed: int, n: int) -> bytes:
    """A Markers message as rclpy serializes it: every kind (a name without an id is
    labeled, an id without a name too, neither is unlabeled), non-ASCII names, NaN and
    infinite positions, frame ids of every alignment; a cloud (no names) one seed in 4."""
    from rclpy.serialization import serialize_message

    from mocap4r2_interfaces.msg import Marker, Markers

    rnd = random.Random(seed)
    msg = Markers(frame_number=rnd.randint(0, 2**63))
    msg.header.stamp.sec, msg.header.stamp.nanosec = rnd.randint(0, 2**31 - 1), rnd.randint(0, 999_999_999)
    msg.header.frame_id = rnd.choice(["", "w", "world", "ünï", "mocap_frame"])
    cloud = seed % 4 == 0
    for i in range(n):
        marker = Marker(id=-1 if cloud else rnd.choice([-1, -1, i, 0]))
        marker.name = "" if cloud else rnd.choice(["", "", f"b{i}:m", "ü"])
        marker.occluded = rnd.random() < 0.15
        marker.position.x = rnd.choice([rnd.uniform(-3, 3), 0.0, -0.0, math.nan, math.inf])
        marker.position.y, marker.position.z = rnd.uniform(-3, 3), rnd.choice([rnd.uniform(0, 2), -math.inf])
        msg.markers.append(marker)
    return serialize_message(msg)


def test_markers_read_in_place_from_cdr_equal_the_deserialized_ones():
    """records_raw reads Markers from their bytes (markers_frame_cdr, on the suite's Markers
    reader) instead of rclpy's deserializer: the same scene byte for byte, so the same
    spheres at the same positions in the same entities (whose kind follows each
    marker's id, name and occlusion) as the published message gives."""
    from rclpy.serialization import deserialize_message

    from mocap4r2_interfaces.msg import Markers

    kinds_seen: set[str] = set()
    for seed in range(300):
        data = _serialized_markers(seed, seed % 23)
        msg = deserialize_message(data, Markers)
        for style in STYLES:
            fast = scene_wire.markers_scene_cdr(data, "sim", style)
            assert fast == scene_wire.markers_scene(msg, "sim", style)
            if not any(getattr(m.position, k) == 0.0 for m in msg.markers for k in "xyz"):
                assert fast == convert.markers_scene(msg, "sim", style).encode()
        (record,) = records.records_raw("/sim/markers", convert.MARKERS, data, None)  # type: ignore[arg-type]
        assert record.topic == "/foxglove/sim/markers"
        assert record.log_time == convert.stamp_ns(msg.header.stamp)
        assert record.data == scene_wire.markers_scene(msg, "sim")
        frame = scene_wire.markers_frame_cdr(data)
        assert frame.frame_id == msg.header.frame_id and frame.frame_number == msg.frame_number
        for marker, position, kind in zip(msg.markers, frame.positions.tolist(), frame.kinds.tolist()):
            p = marker.position
            assert position == [p.x, p.y, p.z] or not all(map(math.isfinite, (p.x, p.y, p.z)))
            assert scene_wire.MARKER_KINDS[kind] == convert.marker_kind(marker)
            kinds_seen.add(scene_wire.MARKER_KINDS[kind])
    assert kinds_seen == set(scene_wire.MARKER_KINDS)


def test_markers_cdr_that_lies_about_itself_is_refused_with_the_reason():
    import pytest

    for seed in (1, 4):  # labeled, and a cloud
        data = _serialized_markers(seed, 9)
        for cut in range(0, len(data), 5):
            with pytest.raises(scene_wire.BadCdr):
                scene_wire.markers_frame_cdr(data[:cut])
        with pytest.raises(scene_wire.BadCdr, match="little-endian"):
            scene_wire.markers_frame_cdr(b"\x00\x00" + data[2:])
        from mocap4r2_control.cdr_reader import CdrCursor

        cursor = CdrCursor(data)
        cursor.header()
        count_at = cursor.fixed(4)
        lying = bytearray(data)
        lying[count_at : count_at + 4] = (1 << 30).to_bytes(4, "little")
        with pytest.raises(scene_wire.BadCdr, match="markers"):
            scene_wire.markers_frame_cdr(bytes(lying))


def test_a_topics_bodies_layout_is_reused_only_for_messages_of_its_structure():
    """bodies_frame_cdr(data, topic) gathers the fields at the offsets of the topic's
    previous message when this one has its structure; a message of another structure
    (another body name of the same length, marker names of other lengths in a message of
    the same length, more bodies) is walked again: every frame equals the one read
    without a layout, and the scene the deserialized message gives."""
    from rclpy.serialization import deserialize_message, serialize_message

    from mocap4r2_interfaces.msg import Marker, RigidBodies, RigidBody

    def message(seed: int, names: list[str], marker_names: list[str]) -> bytes:
        rnd = random.Random(seed)
        msg = RigidBodies(frame_number=seed)
        msg.header.stamp.sec, msg.header.stamp.nanosec = 1796564832 + seed, rnd.randint(0, 999_999_999)
        msg.header.frame_id = "world"
        for i, name in enumerate(names):
            body = RigidBody(id=i + 1, name=name, tracking_valid=rnd.random() < 0.8)
            body.pose.position.x, body.pose.position.y = rnd.uniform(-2, 2), rnd.choice([0.0, math.nan, 1.5])
            body.pose.orientation.z, body.pose.orientation.w = rnd.uniform(-1, 1), rnd.uniform(-1, 1)
            body.markers = [Marker(id=k, name=m) for k, m in enumerate(marker_names)]
            msg.rigid_bodies.append(body)
        return serialize_message(msg)

    topic = "/layout_test/rigid_bodies"
    structures = [
        (["b1", "b2"], ["a", "bb"]),
        (["b1", "b3"], ["a", "bb"]),  # a name of the same length
        (["b1", "b3"], ["aa", "b"]),  # the same message length, markers placed otherwise
        (["b1", "b3", "c"], ["aa", "b"]),
        ([], []),
    ]
    walked = 0
    for seed in range(60):
        names, marker_names = structures[(seed // 6) % len(structures)]
        data = message(seed, names, marker_names)
        before = scene_wire._BODIES_LAYOUTS.get(topic)
        frame = scene_wire.bodies_frame_cdr(data, topic)
        walked += scene_wire._BODIES_LAYOUTS.get(topic) is not before
        alone = scene_wire.bodies_frame_cdr(data)
        assert (frame.stamp_ns, frame.frame_id, frame.names, frame.ids, frame.valid) == (
            alone.stamp_ns,
            alone.frame_id,
            alone.names,
            alone.ids,
            alone.valid,
        )
        assert np.array_equal(frame.rows, alone.rows, equal_nan=True)
        msg = deserialize_message(data, RigidBodies)
        (record,) = records.records_raw(topic, convert.RIGID_BODIES, data, None)  # type: ignore[arg-type]
        assert record.data == scene_wire.bodies_scene(msg, "layout_test")
    assert walked == 10, f"{walked} walks for 10 runs of one structure"  # once per run of 6


def test_a_topics_markers_layout_is_kept_once_its_messages_keep_their_length():
    """markers_frame_cdr(data, topic): a labeled stream (names kept) is walked once its
    second message has the first's length and then read at the kept offsets; a marker
    renamed at the same length is walked again; a cloud whose count changes every frame
    is never walked (read by decode_markers). Every frame equals the one read without a
    topic, and its scene the deserialized message's."""
    from rclpy.serialization import deserialize_message, serialize_message

    from mocap4r2_interfaces.msg import Marker, Markers

    def message(seed: int, names: list[str]) -> bytes:
        rnd = random.Random(seed)
        msg = Markers(frame_number=seed * 7919)
        msg.header.stamp.sec, msg.header.stamp.nanosec = 1796564832 + seed, rnd.randint(0, 999_999_999)
        msg.header.frame_id = "world"
        for i, name in enumerate(names):
            marker = Marker(id=rnd.choice([-1, i]), name=name, occluded=rnd.random() < 0.2)
            marker.position.x, marker.position.y = rnd.uniform(-2, 2), rnd.choice([0.0, math.nan, 1.5])
            marker.position.z = rnd.uniform(0, 2)
            msg.markers.append(marker)
        return serialize_message(msg)

    def check(topic: str, data: bytes) -> None:
        frame = scene_wire.markers_frame_cdr(data, topic)
        alone = scene_wire.markers_frame_cdr(data)
        assert (frame.stamp_ns, frame.frame_id, frame.frame_number) == (
            alone.stamp_ns,
            alone.frame_id,
            alone.frame_number,
        )
        assert np.array_equal(frame.positions, alone.positions, equal_nan=True)
        assert frame.kinds.tolist() == alone.kinds.tolist()
        msg = deserialize_message(data, Markers)
        scene = scene_wire.markers_scene_of(frame, "m", convert.DEFAULT_STYLE)
        assert scene == scene_wire.markers_scene(msg, "m")

    def walks(topic: str, messages: list[bytes]) -> int:
        count = 0
        for data in messages:
            before = scene_wire._MARKERS_LAYOUTS.get(topic)
            check(topic, data)
            after = scene_wire._MARKERS_LAYOUTS.get(topic)
            count += isinstance(after, scene_wire._MarkersLayout) and after is not before
        return count

    labeled = [message(s, ["b1:a", "b1:b", "", "b2:c"]) for s in range(10)]
    renamed = [message(s, ["b1:a", "b1:x", "", "b2:c"]) for s in range(10, 20)]
    assert walks("/layout_test/markers", labeled + renamed) == 2
    clouds = [message(s, [""] * (3 + s % 4)) for s in range(20)]
    assert walks("/layout_test/cloud", clouds) == 0
