"""The foxglove node end to end, read by Foxglove's own client: the simulated system on
real DDS (loopback), the node as its installed executable, and @foxglove/ws-protocol
(test/fixtures/foxglove_client/client.js) subscribing over a real WebSocket, decoding
each channel with the schema the server advertised and checking that schema against
@foxglove/schemas. Names, poses and stamps are compared with what the system published
(the harness subscribes to the same topics)."""

from __future__ import annotations

import math
import socket
import time

import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from fox_client import client_events, live_client, messages, require_client, stamp_ns, start_foxglove
from rclpy.qos import QoSProfile, ReliabilityPolicy
from scenes import cart_on_a_figure_eight, circling_drone, circling_walker
from tf2_msgs.msg import TFMessage

from bench.bench_foxglove import client_frame, handshake, read_frame
from mocap4r2_control.tf_out import TF_QOS
from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

RELIABLE = QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE)


def scene_file(tmp_path, rate: float, **extra) -> str:
    scene = {
        "seed": 3,
        "rate": rate,
        "latency": 0.002,
        "noise": 0.0005,
        "unlabeled_markers": 3,
        "rigid_bodies": [circling_drone(), cart_on_a_figure_eight(every=1.0, duration=0.3)],
        "skeletons": [circling_walker(every=1.5, duration=0.3)],
        **extra,
    }
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(scene))
    return str(path)


def start_sim(procs, tmp_path, ns: str, rate: float, **params):
    return procs.start(
        "mocap4r2_drivers",
        "simulated_system",
        name="sim",
        namespace=ns,
        params={"scene": scene_file(tmp_path, rate), "autostart": True, **params},
    )


def close(a: float, b: float, tol: float = 1e-9) -> bool:
    return abs(a - b) <= tol


def test_foxglove_client_sees_names_poses_and_stamps_of_the_system(ros, procs, tmp_path):
    require_client()
    ns = "/fx1"
    sim = start_sim(procs, tmp_path, ns, 100.0, publish_tf=True, tf_prefix="fx1/")
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    markers = ros.subscribe(f"{ns}/markers", Markers, RELIABLE)
    skeletons = ros.subscribe(f"{ns}/skeletons", Skeletons, RELIABLE)
    tf = ros.subscribe("/tf", TFMessage, TF_QOS)
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray, RELIABLE)
    # every frame (max_rate 0), the system given explicitly and discovered as well
    node, port = start_foxglove(procs, "fox1", {"max_rate": 0.0, "systems": [ns]})
    bodies.wait_for(lambda m: len(m.rigid_bodies) == 2, timeout=30)
    client = live_client(port, 4.0)
    events = client_events(client)
    assert node.alive() and sim.alive()

    # the channels: Foxglove's schemas, as @foxglove/schemas defines them
    schemas = {e["topic"]: e for e in events if e["event"] == "schema"}
    for topic, kind in (
        (f"/foxglove{ns}/rigid_bodies", "foxglove.SceneUpdate"),
        (f"/foxglove{ns}/markers", "foxglove.SceneUpdate"),
        (f"/foxglove{ns}/skeletons", "foxglove.SceneUpdate"),
        ("/foxglove/tf", "foxglove.FrameTransforms"),
        ("/foxglove/diagnostics", "foxglove.Log"),
    ):
        assert topic in schemas, sorted(schemas)
        check = schemas[topic]
        assert check["schemaName"] == kind and check["known"], check
        assert check["missing"] == [] and check["extra"] == [], check

    # rigid bodies: every decoded frame equals the published one of the same stamp (once
    # the harness, which may lag on a loaded machine, has seen as far)
    frames = messages(events, f"/foxglove{ns}/rigid_bodies")
    assert frames, sorted({e.get("topic") for e in events})
    bodies.wait_for(lambda m: stamp_ns(m.header.stamp) >= int(frames[-1]["logTime"]), timeout=30)
    sources = {stamp_ns(m.header.stamp): m for m in bodies.snapshot()}
    assert len(frames) >= 100, f"{len(frames)} SceneUpdates in 4 s of a 100 Hz system"
    matched = 0
    seen_untracked = False
    for frame in frames:
        entities = frame["message"]["entities"]
        stamp = int(frame["logTime"])
        source = sources.get(stamp)
        if source is None:
            continue  # the harness missed it (best effort): nothing to compare with
        matched += 1
        assert {stamp_ns(e["timestamp"]) for e in entities} == {stamp}, "entity stamps are the header stamp"
        by_id = {e["id"]: e for e in entities}
        assert set(by_id) == {f"fx1/bodies/{b.name}" for b in source.rigid_bodies}
        for body in source.rigid_bodies:
            entity = by_id[f"fx1/bodies/{body.name}"]
            assert entity["frameId"] == source.header.frame_id
            pose = entity["lines"][0]["pose"]
            p, q = body.pose.position, body.pose.orientation
            norm = math.sqrt(q.x**2 + q.y**2 + q.z**2 + q.w**2)
            assert all(close(pose["position"][k], getattr(p, k)) for k in "xyz"), (pose, p)
            assert all(close(pose["orientation"][k], getattr(q, k) / norm) for k in "xyzw"), (pose, q)
            text = entity["texts"][0]["text"]
            if body.tracking_valid:
                assert text == body.name
            else:
                seen_untracked = True
                assert text == f"{body.name} (not tracked)"
            assert entity["metadata"] == [
                {"key": "tracking_valid", "value": "true" if body.tracking_valid else "false"}
            ]
    assert matched >= 0.8 * len(frames), f"only {matched} of {len(frames)} frames found among the published"
    assert seen_untracked, "the cart is lost 0.3 s a second: some frame must show it not tracked"
    stamps = [int(f["logTime"]) for f in frames]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps), "every frame once, in order"

    # markers (read by the node from their CDR bytes): each kind's entity holds, in the
    # published order, a sphere at each of the published markers of that kind (the kind
    # follows the marker's id, name and occlusion), at the frame's stamp and frame
    marker_sources = {stamp_ns(m.header.stamp): m for m in markers.snapshot()}
    compared = 0
    for frame in messages(events, f"/foxglove{ns}/markers"):
        source = marker_sources.get(int(frame["logTime"]))
        if source is None:
            continue
        compared += 1
        entities = {e["id"]: e for e in frame["message"]["entities"]}
        assert set(entities) == {f"fx1/markers/{kind}" for kind in ("labeled", "unlabeled", "occluded")}
        by_kind: dict[str, list] = {"labeled": [], "unlabeled": [], "occluded": []}
        for m in source.markers:
            kind = "occluded" if m.occluded else "unlabeled" if m.id == -1 and not m.name else "labeled"
            by_kind[kind].append(m.position)
        for kind, positions in by_kind.items():
            entity = entities[f"fx1/markers/{kind}"]
            assert stamp_ns(entity["timestamp"]) == stamp_ns(source.header.stamp)
            assert entity["frameId"] == source.header.frame_id
            assert entity["metadata"] == [{"key": "frame_number", "value": str(source.frame_number)}]
            got = [s["pose"]["position"] for s in entity["spheres"]]
            assert len(got) == len(positions), (kind, len(got), len(positions))
            for sphere, p in zip(got, positions):
                assert all(close(sphere[k], getattr(p, k)) for k in "xyz"), (kind, sphere, p)
    assert compared >= 50
    assert any(m.name for m in markers.snapshot()[-1].markers), "the bodies' markers carry names"

    # skeletons: one entity per skeleton, a joint per segment
    skeleton_sources = {stamp_ns(m.header.stamp): m for m in skeletons.snapshot()}
    compared = 0
    for frame in messages(events, f"/foxglove{ns}/skeletons"):
        source = skeleton_sources.get(int(frame["logTime"]))
        if source is None:
            continue
        compared += 1
        (entity,) = frame["message"]["entities"]
        assert entity["id"] == "fx1/skeletons/walker"
        assert len(entity["spheres"]) == len(source.skeletons[0].segments)
    assert compared >= 50

    # /tf: the system's transforms, same frames, poses and stamps
    tf_sources = {}
    for msg in tf.snapshot():
        for t in msg.transforms:
            tf_sources[(t.child_frame_id, stamp_ns(t.header.stamp))] = t
    compared = 0
    for frame in messages(events, "/foxglove/tf"):
        for t in frame["message"]["transforms"]:
            source = tf_sources.get((t["childFrameId"], stamp_ns(t["timestamp"])))
            if source is None:
                continue
            compared += 1
            assert t["parentFrameId"] == source.header.frame_id == "world"
            tr = source.transform.translation
            assert all(close(t["translation"][k], getattr(tr, k)) for k in "xyz")
            assert {t["childFrameId"] for t in frame["message"]["transforms"]} <= {"fx1/drone", "fx1/cart"}
    assert compared >= 50

    # /diagnostics: the system's status as a Log, its figures as a plottable record
    logs = [e["message"] for e in messages(events, "/foxglove/diagnostics")]
    assert any("fx1" in log["name"] and log["level"] == "INFO" for log in logs), logs[:3]
    stats = [e for e in events if e["event"] == "message" and e["topic"].startswith("/foxglove/stats/fx1")]
    assert stats, sorted({e.get("topic") for e in events})
    last = stats[-1]["message"]
    # the figures are the system's own report of that stamp (its rate is what the
    # simulator achieved, which a loaded machine may keep below the scene's 100 Hz)
    stamp = stamp_ns(last["timestamp"])
    diagnostics.wait_for(lambda m: stamp_ns(m.header.stamp) >= stamp, timeout=30)
    reports = [
        {kv.key: kv.value for kv in status.values}
        for m in diagnostics.snapshot()
        if stamp_ns(m.header.stamp) == stamp
        for status in m.status
        if "fx1" in status.hardware_id
    ]
    assert reports, f"no /diagnostics report of fx1 stamped {stamp}"
    assert close(last["rate_hz"], float(reports[0]["rate_hz"])) and 0.0 < last["rate_hz"] <= 120.0, last
    assert last["latency_mean_ms"] is not None and last["dropped_frames_total"] is not None
    assert set(last["tracking_ratio"]) == {"drone", "cart"}
    assert 0.0 <= last["tracking_ratio_min"] <= last["tracking_ratio_mean"] <= 1.0
    assert int(stats[-1]["logTime"]) == stamp_ns(last["timestamp"])


# ---------------------------------------------------------------------- a slow client
def _subscribe_all(sock: socket.socket, topics: set[str], timeout: float = 20.0) -> dict[str, int]:
    """Read the server's text frames until ``topics`` are advertised (channels appear
    with their first message, in any order), subscribe to them; returns topic ->
    subscription id."""
    import json

    deadline = time.monotonic() + timeout
    advertised: dict[str, int] = {}
    while time.monotonic() < deadline and not topics <= set(advertised):
        opcode, payload = read_frame(sock)
        if opcode == 1:
            message = json.loads(payload)
            if message.get("op") == "advertise":
                advertised.update({c["topic"]: c["id"] for c in message["channels"]})
    assert topics <= set(advertised), f"{sorted(topics)} not all advertised: {sorted(advertised)}"
    ids = {topic: i + 1 for i, topic in enumerate(sorted(topics))}
    subscriptions = [{"id": ids[topic], "channelId": advertised[topic]} for topic in ids]
    sock.sendall(client_frame(json.dumps({"op": "subscribe", "subscriptions": subscriptions}).encode()))
    return ids


def test_a_slow_client_loses_messages_and_no_one_else_does(ros, procs, tmp_path):
    """A client that stops reading (its TCP window full) loses messages in the SDK's
    bounded outbox; a client reading at the same time gets every frame, and the node
    keeps taking every message the system publishes."""
    require_client()
    ns = "/fx2"
    # 300 unlabeled markers: 20 kB a frame, so that the slow client's socket buffers
    # fill within the test and the server's outbox for it overflows
    procs.start(
        "mocap4r2_drivers",
        "simulated_system",
        name="sim",
        namespace=ns,
        params={"scene": scene_file(tmp_path, 200.0, unlabeled_markers=300), "autostart": True},
    )
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies, RELIABLE)
    node, port = start_foxglove(procs, "fox2", {"max_rate": 0.0, "client_backlog": 64, "stats_period": 0.5})
    bodies.wait_for(lambda m: len(m.rigid_bodies) == 2, timeout=30)
    slow = handshake(port, rcvbuf=4096)
    slow_ids = _subscribe_all(
        slow, {f"/foxglove{ns}/{kind}" for kind in ("markers", "rigid_bodies", "skeletons")}
    )
    # the slow client reads nothing from now on, while a reading client takes 4 s
    client = live_client(port, 6.0, pattern=f"^/foxglove({ns}/rigid_bodies|/node)$", summary=True)
    events = client_events(client)
    topic = f"/foxglove{ns}/rigid_bodies"
    # every frame the node sent between two of its counter reports reached the reading
    # client (one connection keeps the order of what the node logs)
    reports = [i for i, e in enumerate(events) if e["event"] == "message" and e["topic"] == "/foxglove/node"]
    assert len(reports) >= 4, f"{len(reports)} counter reports in 4 s at 0.5 s"
    first, last = events[reports[0]]["message"], events[reports[-1]]["message"]
    sent = last["sent_per_topic"][topic] - first["sent_per_topic"].get(topic, 0)
    got = len(messages(events[reports[0] : reports[-1]], topic))
    assert sent > 100 and got >= 0.98 * sent, f"the reading client got {got} of the {sent} frames sent"
    # the node took every message (what it could not convert in time is counted, not lost
    # silently), and none was bad
    assert last["dropped"] == 0 and last["bad"] == 0, last
    # both clients' connections had Nagle's algorithm turned off when they subscribed
    assert last["nodelay_connections"] >= 2, last
    assert last["received"] > 0.9 * 3 * 200 * 3, last  # 3 topics at 200 Hz, over 3 s at least

    # the slow client now reads what it was left of the same frames: far fewer (a
    # MessageData frame: opcode 1, subscription id u32, log time u64, then the message)
    window = [int(e["logTime"]) for e in messages(events[reports[0] : reports[-1]], topic)]
    slow.settimeout(2.0)
    kept = received = 0
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        opcode, payload = read_frame(slow)
        if opcode != 2 or payload[0] != 1:
            continue
        received += 1
        subscription = int.from_bytes(payload[1:5], "little")
        log_time = int.from_bytes(payload[5:13], "little")
        if log_time > window[-1]:
            break  # past the window (the order of a connection is kept)
        kept += subscription == slow_ids[topic] and log_time >= window[0]
    slow.close()
    # it was served (what its socket held before it stopped reading, and the newest
    # after), but of the window it kept far from all: its outbox dropped the oldest
    assert received > 0, "the slow client never got a frame"
    assert kept < 0.8 * len(window), f"the slow client kept {kept} of the {len(window)} frames"
    assert node.alive()


# ---------------------------------------------------------------------- hostile network
JUNK = [
    b"\x00\x01\x02garbage that is not HTTP\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # no upgrade
    b"GET / HTTP/1.1\r\n" + b"X-Long: " + b"a" * 70000 + b"\r\n\r\n",  # an endless header
]


def test_junk_from_the_network_does_not_kill_it(ros, procs, tmp_path):
    require_client()
    ns = "/fx3"
    start_sim(procs, tmp_path, ns, 100.0)
    node, port = start_foxglove(procs, "fox3")
    for junk in JUNK:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            try:
                sock.sendall(junk)
                sock.recv(4096)
            except OSError:
                pass  # the server may close on us: that is its answer
    frames = [
        client_frame(b"not json"),
        client_frame(b'{"op": "subscribe", "subscriptions": "everything"}'),
        client_frame(b'{"op": "subscribe", "subscriptions": [{"id": 1, "channelId": 999999}]}'),
        client_frame(b'{"op": "unsubscribe", "subscriptionIds": [42]}'),
        client_frame(
            b'{"op": "advertise", "channels": [{"id": 1, "topic": "/x", "encoding": "json", '
            b'"schemaName": "x"}]}'
        ),
        client_frame(b"\x01" + b"\xff" * 64, opcode=2),  # client message data on a channel never advertised
        client_frame(b'{"op": "getParameters", "parameterNames": ["a"]}'),
        client_frame(bytes(range(256)) * 4, opcode=1),  # not UTF-8
    ]
    for frame in frames:
        sock = handshake(port)
        try:
            sock.sendall(frame)
            # a frame header announcing 2^62 bytes, then nothing: bounded, never awaited
            sock.sendall(b"\x82\xff" + (1 << 62).to_bytes(8, "big") + b"\x00\x00\x00\x00" + b"x" * 100)
        except OSError:
            pass
        sock.close()
    assert node.alive(), node.log()
    events = client_events(live_client(port, 2.0, pattern=f"^/foxglove{ns}/rigid_bodies$", summary=True))
    assert len(messages(events, f"/foxglove{ns}/rigid_bodies")) >= 20
    assert "Traceback" not in node.log(), node.log()


def test_a_port_in_use_is_refused_with_the_reason(procs):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = procs.start("mocap4r2_tools", "foxglove", name="fox4", params={"port": port})
        deadline = time.monotonic() + 30
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not proc.alive(), "the node must stop when it cannot serve"
        assert str(port) in proc.log() and "Traceback" not in proc.log(), proc.log()


@pytest.mark.parametrize("value", ["nan", "-1.0"])
def test_a_bad_max_rate_is_refused_and_the_node_serves(procs, value):
    proc = procs.start(
        "mocap4r2_tools", "foxglove", name="fox5", params={"port": 0, "max_rate": float(value)}
    )
    assert proc.wait_log("serving Foxglove WebSocket", timeout=30), proc.log()
    assert "max_rate" in proc.log() and proc.alive()


def test_the_mocap4r2_foxglove_verb_starts_the_node_with_its_arguments(procs):
    from support import INSTALL

    verb = [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "foxglove"]
    proc = procs.start_command([*verb, "--port", "0", "--systems", "/v1"], "verb")
    assert proc.wait_log("serving Foxglove WebSocket on ws://127.0.0.1:", timeout=60), proc.log()
    assert "(/v1 and every announced system)" in proc.log(), proc.log()
    assert proc.stop() == 0, proc.log()
