"""Foxglove, recorded: `mocap4r2 export SESSION --format foxglove` and the recorder's
``foxglove_schemas``. Each file is read back by the `mcap` library (schemas, channels,
message counts, times), its Foxglove channels are decoded and checked against
@foxglove/schemas by Foxglove's client (client.js schemas), and their schemas are those
foxglove-sdk advertises for its own typed channels."""

from __future__ import annotations

import base64
import json
import math
import subprocess
import time
from pathlib import Path

import foxglove
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from fox_client import require_client, run_client, stamp_ns
from mcap.reader import make_reader
from rclpy.serialization import deserialize_message, serialize_message
from support import INSTALL
from tf2_msgs.msg import TFMessage

from mocap4r2_control.control_plane import ControlClient
from mocap4r2_interfaces.msg import Marker, Markers, RigidBodies, RigidBody, Segment, Skeleton, Skeletons
from mocap4r2_tools.foxglove.mcap_file import SideFile
from mocap4r2_tools.recorder_writer import message_class
from mocap4r2_tools.recording.bag_writer import SessionBag, TopicSpec, qos_profile

FRAMES = 40
T0 = 1_000.0
TYPES = {
    "/lab/markers": "mocap4r2_interfaces/msg/Markers",
    "/lab/rigid_bodies": "mocap4r2_interfaces/msg/RigidBodies",
    "/lab/skeletons": "mocap4r2_interfaces/msg/Skeletons",
    "/tf": "tf2_msgs/msg/TFMessage",
    "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
}


def set_stamp(header, t: float) -> None:
    header.stamp.sec, header.stamp.nanosec = int(t), int(round((t % 1) * 1e9))
    header.frame_id = "world"


def frame_messages(frame: int) -> dict[str, object]:
    """One frame of the test session: a body turning about z, two markers, a skeleton."""
    t = T0 + frame / 100.0
    body = RigidBody(id=1, name="box", tracking_valid=frame % 9 != 0)
    body.pose.position.x, body.pose.position.y, body.pose.position.z = 0.5, 0.01 * frame, 1.0
    body.pose.orientation.z, body.pose.orientation.w = math.sin(0.02 * frame), math.cos(0.02 * frame)
    bodies = RigidBodies(frame_number=frame, rigid_bodies=[body])
    set_stamp(bodies.header, t)
    markers = Markers(frame_number=frame)
    set_stamp(markers.header, t)
    for i in range(2):
        m = Marker(id=i, name=f"box:{i}")
        m.position.x = 0.1 * i
        markers.markers.append(m)
    skeleton = Skeleton(id=1, name="walker", tracking_valid=True)
    for i in range(3):
        segment = Segment(id=i + 1, parent_id=i, name=f"s{i}", tracking_valid=True)
        segment.pose.position.z = 0.5 * i
        segment.pose.orientation.w = 1.0
        skeleton.segments.append(segment)
    skeletons = Skeletons(frame_number=frame, skeletons=[skeleton])
    set_stamp(skeletons.header, t)
    tf = TFMessage()
    from geometry_msgs.msg import TransformStamped

    transform = TransformStamped(child_frame_id="lab/box")
    transform.header = bodies.header
    transform.transform.translation.x = body.pose.position.x
    transform.transform.translation.y = body.pose.position.y
    transform.transform.translation.z = body.pose.position.z
    transform.transform.rotation = body.pose.orientation
    tf.transforms.append(transform)
    out: dict[str, object] = {
        "/lab/markers": markers,
        "/lab/rigid_bodies": bodies,
        "/lab/skeletons": skeletons,
        "/tf": tf,
    }
    if frame % 20 == 0:
        status = DiagnosticStatus(level=DiagnosticStatus.OK, name="lab: sim", hardware_id="/lab/sim")
        status.message = "streaming at 100.0 Hz"
        status.values = [
            KeyValue(key="rate_hz", value="100.00"),
            KeyValue(key="tracking_ratio/box", value="0.9"),
        ]
        diagnostics = DiagnosticArray(status=[status])
        set_stamp(diagnostics.header, t)
        out["/diagnostics"] = diagnostics
    return out


def write_session(directory: Path, side: SideFile | None = None) -> tuple[Path, list[tuple[str, int, bytes]]]:
    """A session bag as the recorder writes it; returns its folder and what went in
    (topic, log time, bytes)."""
    specs = [TopicSpec(t, ty, qos_profile(True, False, 10)) for t, ty in TYPES.items()]
    bag = SessionBag(directory, "fox-01", specs, side=side)
    bag.open()
    written = []
    for frame in range(FRAMES):
        for topic, msg in frame_messages(frame).items():
            data = serialize_message(msg)
            log_time = int((T0 + frame / 100.0 + 0.003) * 1e9)  # received 3 ms after the stamp
            assert bag.put(topic, data, log_time)
            written.append((topic, log_time, data))
    summary = bag.close()
    assert not summary.failure, summary.failure
    return bag.directory, written


def read_mcap(path: Path):
    """(schemas by channel topic, channels by topic, messages by topic) of an MCAP file."""
    with open(path, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        assert summary is not None, f"{path} has no summary"
        channels = {c.topic: c for c in summary.channels.values()}
        schemas = {c.topic: summary.schemas[c.schema_id] for c in summary.channels.values()}
        messages: dict[str, list] = {}
        for _, channel, message in reader.iter_messages(log_time_order=False):
            messages.setdefault(channel.topic, []).append(message)
    return schemas, channels, messages


def sdk_advertised() -> dict[str, tuple[str, str, bytes]]:
    """What foxglove-sdk advertises for its own typed channels: schema name, encoding, data."""
    out = {}
    for cls in (foxglove.channels.SceneUpdateChannel, foxglove.channels.FrameTransformsChannel):
        schema = cls(f"/probe/{cls.__name__}", context=foxglove.Context()).schema()
        out[schema.name] = (schema.name, schema.encoding, bytes(schema.data))
    schema = foxglove.channels.LogChannel("/probe/log", context=foxglove.Context()).schema()
    out[schema.name] = (schema.name, schema.encoding, bytes(schema.data))
    return out


def check_with_the_client(schemas, messages) -> dict[str, dict]:
    """Each Foxglove channel checked against @foxglove/schemas and its first message
    decoded by Foxglove's client; topic -> the client's answer."""
    channels = [
        {
            "topic": topic,
            "schemaName": schema.name,
            "schemaEncoding": schema.encoding,
            "schema": base64.b64encode(schema.data).decode(),
            "messageEncoding": "protobuf",
            "sample": base64.b64encode(messages[topic][0].data).decode(),
        }
        for topic, schema in schemas.items()
        if schema.encoding == "protobuf"
    ]
    return {e["topic"]: e for e in run_client("schemas", stdin=json.dumps(channels))}


def test_export_writes_the_session_and_foxglove_schemas_read_back_by_mcap(tmp_path):
    require_client()
    bag, written = write_session(tmp_path)
    done = subprocess.run(
        [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "export", str(bag), "--format", "foxglove"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "fox-01_foxglove.mcap"
    assert f"wrote {out}" in done.stdout
    schemas, channels, messages = read_mcap(out)

    # every recorded message is there as it was: bytes and log time, schema and encoding
    for topic, type_name in TYPES.items():
        assert channels[topic].message_encoding == "cdr" and schemas[topic].name == type_name
        want = [(t, d) for tp, t, d in written if tp == topic]
        assert [(m.log_time, bytes(m.data)) for m in messages[topic]] == want
    # beside them, Foxglove's channels with the schemas foxglove-sdk advertises
    advertised = sdk_advertised()
    expected = {
        "/foxglove/lab/markers": ("foxglove.SceneUpdate", FRAMES),
        "/foxglove/lab/rigid_bodies": ("foxglove.SceneUpdate", FRAMES),
        "/foxglove/lab/skeletons": ("foxglove.SceneUpdate", FRAMES),
        "/foxglove/tf": ("foxglove.FrameTransforms", FRAMES),
        "/foxglove/diagnostics": ("foxglove.Log", FRAMES // 20),
        "/foxglove/stats/lab/sim": ("mocap4r2.SystemStats", FRAMES // 20),
    }
    for topic, (schema_name, count) in expected.items():
        assert schemas[topic].name == schema_name, (topic, schemas[topic].name)
        assert len(messages[topic]) == count, (topic, len(messages[topic]))
        if schema_name in advertised:
            assert (schemas[topic].name, schemas[topic].encoding, bytes(schemas[topic].data)) == advertised[
                schema_name
            ]
            assert channels[topic].message_encoding == "protobuf"
    assert channels["/foxglove/stats/lab/sim"].message_encoding == "json"
    assert set(channels) == set(TYPES) | set(expected)

    # a Foxglove record plays with the message it comes from (same log time), and carries
    # the header stamp as its publish time
    bodies_times = [m.log_time for m in messages["/lab/rigid_bodies"]]
    assert [m.log_time for m in messages["/foxglove/lab/rigid_bodies"]] == bodies_times
    for m, source in zip(messages["/foxglove/lab/rigid_bodies"], messages["/lab/rigid_bodies"]):
        assert m.publish_time == stamp_ns(deserialize_message(source.data, RigidBodies).header.stamp)

    # decoded by Foxglove's client: the schemas are @foxglove/schemas', the pose the recorded one
    checked = check_with_the_client(schemas, messages)
    for topic in (
        "/foxglove/lab/markers",
        "/foxglove/lab/rigid_bodies",
        "/foxglove/tf",
        "/foxglove/diagnostics",
    ):
        assert checked[topic]["known"] and checked[topic]["missing"] == [] and checked[topic]["extra"] == []
    (entity,) = checked["/foxglove/lab/rigid_bodies"]["sample"]["entities"]
    recorded = deserialize_message(messages["/lab/rigid_bodies"][0].data, RigidBodies).rigid_bodies[0]
    pose = entity["lines"][0]["pose"]
    p, q = recorded.pose.position, recorded.pose.orientation
    assert [pose["position"][k] for k in "xyz"] == [p.x, p.y, p.z]
    assert [pose["orientation"][k] for k in "xyzw"] == pytest.approx([q.x, q.y, q.z, q.w], abs=1e-15)
    assert entity["id"] == "lab/bodies/box"
    assert entity["texts"][0]["text"] == ("box" if recorded.tracking_valid else "box (not tracked)")
    (transform,) = checked["/foxglove/tf"]["sample"]["transforms"]
    assert transform["childFrameId"] == "lab/box" and transform["translation"]["y"] == p.y
    stats = json.loads(messages["/foxglove/stats/lab/sim"][0].data)
    assert stats["rate_hz"] == 100.0 and stats["tracking_ratio"] == {"box": 0.9}

    # never over an existing file; a bag without anything to draw says so
    again = subprocess.run(
        [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "export", str(bag), "--format", "foxglove"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1 and "never overwritten" in again.stderr


def test_the_session_bag_with_a_side_file_stays_a_bag_rosbags_reads(tmp_path):
    """The recorder's live form: the Foxglove channels go to a file of their own beside the
    bag, which stays a rosbag2 bag (rosbags reads protobuf channels in no bag)."""
    require_client()
    side = SideFile(lambda data, type_name: deserialize_message(data, message_class(type_name)))
    bag, written = write_session(tmp_path, side)
    path = bag / "foxglove" / "fox-01_foxglove.mcap"
    schemas, channels, messages = read_mcap(path)
    assert set(channels) == {
        "/foxglove/lab/markers",
        "/foxglove/lab/rigid_bodies",
        "/foxglove/lab/skeletons",
        "/foxglove/tf",
        "/foxglove/diagnostics",
        "/foxglove/stats/lab/sim",
    }
    assert len(messages["/foxglove/lab/rigid_bodies"]) == FRAMES and side.dropped == 0 and side.bad == 0
    recorded_times = [t for topic, t, _ in written if topic == "/lab/rigid_bodies"]
    assert [m.log_time for m in messages["/foxglove/lab/rigid_bodies"]] == recorded_times
    checked = check_with_the_client(schemas, messages)
    assert all(c["known"] and not c["missing"] and not c["extra"] for c in checked.values()), checked

    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    with AnyReader([bag], default_typestore=get_typestore(Stores.EMPTY)) as reader:
        assert {c.topic for c in reader.connections} == set(TYPES)
        assert sum(1 for _ in reader.messages()) == len(written)


def test_the_recorder_writes_foxglove_schemas_live_when_asked(ros, procs, tmp_path):
    require_client()
    scene = tmp_path / "scene.yaml"
    scene.write_text(
        yaml.safe_dump(
            {
                "rate": 100.0,
                "unlabeled_markers": 2,
                "rigid_bodies": [
                    {
                        "name": "box",
                        "id": 1,
                        "trajectory": {"type": "circle", "center": [0, 0, 1], "radius": 0.5},
                    }
                ],
            }
        )
    )
    out = tmp_path / "sessions"
    out.mkdir()
    procs.start(
        "mocap4r2_drivers", "simulated_system", name="sim", namespace="/fxr", params={"scene": str(scene)}
    )
    procs.start(
        "mocap4r2_tools",
        "session_recorder",
        name="session_recorder",
        namespace="/fxr",
        params={"output_dir": str(out), "foxglove_schemas": True},
    )
    client = ControlClient(ros.node)
    try:
        systems = ["/fxr/sim", "/fxr/session_recorder"]
        client.wait_for_systems(names=systems, timeout=30)
        assert client.start(systems=systems, session_id="live-01", timeout=30).ok
        time.sleep(2.0)  # two seconds of a 100 Hz system
        result = client.stop(systems=systems, session_id="live-01", timeout=30)
        assert result.ok, [(a.system, a.message) for a in result.acks]
    finally:
        client.destroy()
    ack = next(a for a in result.acks if a.system == "/fxr/session_recorder")
    assert "foxglove" in ack.message, ack.message
    path = out / "live-01" / "foxglove" / "live-01_foxglove.mcap"
    schemas, channels, messages = read_mcap(path)
    assert schemas["/foxglove/fxr/rigid_bodies"].name == "foxglove.SceneUpdate"
    assert len(messages["/foxglove/fxr/rigid_bodies"]) >= 100
    # the bag is untouched by it: one MCAP file in the session folder, read by rosbags
    assert [p.name for p in (out / "live-01").glob("*.mcap")] == ["live-01_0.mcap"]
    bag_schemas, _, bag_messages = read_mcap(out / "live-01" / "live-01_0.mcap")
    assert all(s.encoding == "ros2msg" for s in bag_schemas.values())
    assert len(bag_messages["/fxr/rigid_bodies"]) == len(messages["/foxglove/fxr/rigid_bodies"])
