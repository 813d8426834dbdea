"""The pure half of the Foxglove node: the interfaces -> Foxglove schemas (convert.py,
records.py) and the bounded feed (feed.py), without ROS. Messages are built as plain
objects with the interfaces' field names (what rosbags gives for a bag), and every
record is decoded back: protobuf records through the SDK's own schema by Foxglove's
client (client.js schemas), JSON ones with json."""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from types import SimpleNamespace as NS

import pytest
from fox_client import run_client, stamp_ns

from mocap4r2_tools.foxglove import convert, records
from mocap4r2_tools.foxglove.feed import Feed


def stamp(sec: int, nanosec: int) -> NS:
    return NS(sec=sec, nanosec=nanosec)


def header(sec: int = 100, nanosec: int = 5, frame: str = "world") -> NS:
    return NS(stamp=stamp(sec, nanosec), frame_id=frame)


def pose(p, q) -> NS:
    return NS(position=NS(x=p[0], y=p[1], z=p[2]), orientation=NS(x=q[0], y=q[1], z=q[2], w=q[3]))


def body(name: str, p, q, valid: bool = True, id_: int = 1) -> NS:
    return NS(name=name, id=id_, tracking_valid=valid, pose=pose(p, q))


def bodies(*items: NS) -> NS:
    return NS(header=header(), frame_number=7, rigid_bodies=list(items))


def decode(record: records.Record) -> dict:
    """A record decoded as the Foxglove app would: by the schema it carries."""
    if record.schema.message_encoding == "json":
        return json.loads(record.data)
    (out,) = run_client(
        "schemas",
        stdin=json.dumps(
            [
                {
                    "topic": record.topic,
                    "schemaName": record.schema.name,
                    "schemaEncoding": record.schema.encoding,
                    "schema": base64.b64encode(record.schema.data).decode(),
                    "messageEncoding": record.schema.message_encoding,
                    "sample": base64.b64encode(record.data).decode(),
                }
            ]
        ),
    )
    assert out["known"] and out["missing"] == [] and out["extra"] == [], out
    return out["sample"]


def test_bodies_carry_name_pose_stamp_and_tracking():
    q = (0.0, 0.0, math.sin(0.3), math.cos(0.3))
    msg = bodies(
        body("wand", (1.0, -2.0, 0.5), q, id_=3),
        body("cart", (0.1, 0.2, 0.3), (0.0, 0.0, 0.0, 2.0), valid=False, id_=4),  # not unit
    )
    (record,) = records.records("/sim/rigid_bodies", convert.RIGID_BODIES, msg)
    assert record.topic == "/foxglove/sim/rigid_bodies"
    assert record.schema.name == "foxglove.SceneUpdate" and record.schema.encoding == "protobuf"
    assert record.log_time == 100_000_000_005  # the header stamp, not the time of conversion
    scene = decode(record)
    wand, cart = scene["entities"]
    assert wand["id"] == "sim/bodies/wand" and wand["frameId"] == "world"
    assert stamp_ns(wand["timestamp"]) == 100_000_000_005
    axes = wand["lines"][0]
    assert axes["type"] == "LINE_LIST" and len(axes["points"]) == 6
    assert axes["pose"]["position"] == {"x": 1.0, "y": -2.0, "z": 0.5}
    assert axes["pose"]["orientation"] == pytest.approx({"x": 0.0, "y": 0.0, "z": q[2], "w": q[3]}, abs=1e-15)
    assert [c["r"] for c in axes["colors"]] == pytest.approx([0.9, 0.9, 0.1, 0.1, 0.1, 0.1])
    assert wand["texts"][0]["text"] == "wand"
    assert wand["metadata"] == [{"key": "tracking_valid", "value": "true"}]
    # an untracked body: grey, named so; its quaternion normalised as every tool does
    assert cart["texts"][0]["text"] == "cart (not tracked)"
    assert cart["lines"][0]["pose"]["orientation"]["w"] == pytest.approx(1.0)
    assert [c["r"] for c in cart["lines"][0]["colors"]] == pytest.approx([0.55] * 6)


@pytest.mark.parametrize(
    "bad",
    [
        ((math.nan, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
        ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)),
        ((0.0, math.inf, 0.0), (0.0, 0.0, 0.0, 1.0)),
        ((0.0, 0.0, 0.0), (math.nan, 0.0, 0.0, 1.0)),
    ],
)
def test_a_body_without_a_usable_pose_is_left_out(bad):
    msg = bodies(body("bad", *bad), body("good", (1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0)))
    (record,) = records.records("/sim/rigid_bodies", convert.RIGID_BODIES, msg)
    assert [e["id"] for e in decode(record)["entities"]] == ["sim/bodies/good"]
    # the SDK objects' definition leaves it out alike
    assert len(convert.bodies_scene(msg, "sim").encode()) > 0
    (good,) = [b for b in msg.rigid_bodies if b.name == "good"]
    assert convert.bodies_scene(msg, "sim").encode() == convert.bodies_scene(bodies(good), "sim").encode()


def test_markers_by_kind_and_non_finite_left_out():
    def marker(id_, name, p, occluded=False):
        return NS(id=id_, name=name, position=NS(x=p[0], y=p[1], z=p[2]), occluded=occluded, residual=0.0)

    msg = NS(
        header=header(),
        frame_number=9,
        markers=[
            marker(1, "wand:1", (1.0, 0.0, 0.0)),
            marker(-1, "", (2.0, 0.0, 0.0)),
            marker(-1, "", (math.nan, 0.0, 0.0)),
            marker(2, "wand:2", (3.0, 0.0, 0.0), occluded=True),
        ],
    )
    (record,) = records.records("sim/markers", convert.MARKERS, msg)
    assert record.topic == "/foxglove/sim/markers"
    by_id = {e["id"]: e for e in decode(record)["entities"]}
    xs = {k: [s["pose"]["position"]["x"] for s in e["spheres"]] for k, e in by_id.items()}
    assert xs == {"sim/markers/labeled": [1.0], "sim/markers/unlabeled": [2.0], "sim/markers/occluded": [3.0]}
    assert by_id["sim/markers/labeled"]["metadata"] == [{"key": "frame_number", "value": "9"}]


def test_skeleton_lines_join_each_segment_to_its_parent():
    def segment(id_, parent, p, valid=True):
        return NS(id=id_, parent_id=parent, name=f"s{id_}", tracking_valid=valid, pose=pose(p, (0, 0, 0, 1)))

    skeleton = NS(
        id=1,
        name="walker",
        tracking_valid=True,
        segments=[
            segment(1, 0, (0.0, 0.0, 1.0)),
            segment(2, 1, (0.0, 0.0, 1.5)),
            segment(3, 2, (0.0, 0.5, 1.5)),
        ],
    )
    msg = NS(header=header(), frame_number=1, skeletons=[skeleton])
    (record,) = records.records("/sim/skeletons", convert.SKELETONS, msg)
    (entity,) = decode(record)["entities"]
    assert entity["id"] == "sim/skeletons/walker" and len(entity["spheres"]) == 3
    points = [(p["y"], p["z"]) for p in entity["lines"][0]["points"]]
    assert points == [(0.0, 1.0), (0.0, 1.5), (0.0, 1.5), (0.5, 1.5)]


def test_tf_becomes_frame_transforms_with_each_stamp():
    def transform(child, sec, p):
        return NS(
            header=header(sec, 1),
            child_frame_id=child,
            transform=NS(translation=NS(x=p[0], y=p[1], z=p[2]), rotation=NS(x=0.0, y=0.0, z=0.0, w=1.0)),
        )

    msg = NS(
        transforms=[transform("sim/wand", 50, (1.0, 2.0, 3.0)), transform("sim/bad", 50, (math.nan, 0, 0))]
    )
    (record,) = records.records("/tf", convert.TF, msg)
    assert record.topic == "/foxglove/tf" and record.schema.name == "foxglove.FrameTransforms"
    (t,) = decode(record)["transforms"]
    assert t["parentFrameId"] == "world" and t["childFrameId"] == "sim/wand"
    assert t["translation"] == {"x": 1.0, "y": 2.0, "z": 3.0} and stamp_ns(t["timestamp"]) == 50_000_000_001
    assert records.records("/tf", convert.TF, NS(transforms=[])) == []


def test_diagnostics_give_logs_and_plottable_figures():
    def kv(k, v):
        return NS(key=k, value=v)

    system = NS(
        level=b"\x01",
        name="sim: simulated_system",
        hardware_id="/sim/simulated_system",
        message="1 dropped frames",
        values=[
            kv("rate_hz", "99.50"),
            kv("nominal_rate_hz", "100.00"),
            kv("latency_mean_ms", "nan"),
            kv("latency_max_ms", "2.5"),
            kv("dropped_frames", "1"),
            kv("dropped_frames_total", "4"),
            kv("tracking_ratio/wand", "1.000"),
            kv("tracking_ratio/cart", "0.500"),
        ],
    )
    tool = NS(level=0, name="recorder", hardware_id="recorder", message="idle", values=[])
    msg = NS(header=header(200, 0), status=[system, tool])
    out = records.records("/diagnostics", convert.DIAGNOSTICS, msg)
    assert [r.topic for r in out] == ["/foxglove/diagnostics"] * 2 + ["/foxglove/stats/sim/simulated_system"]
    assert all(r.log_time == 200_000_000_000 for r in out)
    log = decode(out[0])
    assert log["level"] == "WARNING" and log["name"] == "sim: simulated_system"
    assert log["message"].startswith("1 dropped frames (rate_hz=99.50")
    assert decode(out[1])["level"] == "INFO"
    figures = decode(out[2])
    assert out[2].schema.encoding == "jsonschema" and out[2].schema.message_encoding == "json"
    assert figures["rate_hz"] == 99.5 and figures["latency_mean_ms"] is None  # NaN is no JSON number
    assert figures["dropped_frames_total"] == 4.0 and figures["level"] == 1
    assert figures["tracking_ratio"] == {"wand": 1.0, "cart": 0.5}
    assert figures["tracking_ratio_min"] == 0.5 and figures["tracking_ratio_mean"] == 0.75
    assert figures["timestamp"] == {"sec": 200, "nsec": 0}


def test_stamps_outside_foxglove_time_are_clamped_not_raised():
    assert convert.stamp_ns(stamp(-5, 0)) == 0
    assert convert.stamp_ns(stamp(1 << 40, 0)) == (1 << 32) * 1_000_000_000 - 1
    msg = bodies(body("wand", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)))
    msg.header.stamp = stamp(-1, 0)
    (record,) = records.records("/sim/rigid_bodies", convert.RIGID_BODIES, msg)
    assert record.log_time == 0


def test_other_types_give_nothing_and_malformed_messages_raise():
    assert records.records("/x", "std_msgs/msg/String", NS(data="x")) == []
    with pytest.raises((AttributeError, TypeError)):
        records.records("/sim/rigid_bodies", convert.RIGID_BODIES, NS(header=header(), rigid_bodies=[NS()]))


# ---------------------------------------------------------------------- the feed
def test_the_feed_keeps_the_latest_scene_and_counts_what_it_replaced():
    feed = Feed(max_rate=0.0, queue_size=4)
    for i in range(5):
        feed.put("/sim/rigid_bodies", convert.RIGID_BODIES, bytes([i]), conflate=True)
    (item,) = feed.take(0.0)
    assert item.data == bytes([4])
    assert feed.counters.received == 5 and feed.counters.coalesced == 4


def test_the_feed_queue_is_bounded_and_drops_the_oldest():
    feed = Feed(max_rate=0.0, queue_size=3)
    for i in range(5):
        feed.put("/diagnostics", convert.DIAGNOSTICS, bytes([i]), conflate=False)
    assert [p.data for p in feed.take(0.0)] == [bytes([2]), bytes([3]), bytes([4])]
    assert feed.counters.dropped == 2


def test_the_feed_sends_a_scene_at_most_max_rate_times_a_second():
    feed = Feed(max_rate=20.0, queue_size=4)
    sent = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        feed.put("/a", convert.MARKERS, b"x", conflate=True)
        sent += feed.take(0.001)
    assert 10 <= len(sent) <= 21, len(sent)
    assert feed.counters.coalesced > 100


def test_put_never_waits_for_the_sender():
    """The publisher side waits for nobody: put() from another thread while take() is
    blocked in its wait returns at once."""
    feed = Feed(max_rate=0.0, queue_size=2)
    taken = []
    thread = threading.Thread(target=lambda: taken.extend(feed.take(5.0)))
    thread.start()
    t0 = time.perf_counter()
    for _ in range(1000):
        feed.put("/diagnostics", convert.DIAGNOSTICS, b"x", conflate=False)
    assert time.perf_counter() - t0 < 1.0
    thread.join(5.0)
    assert feed.counters.received == 1000 and feed.counters.dropped >= 998 - len(taken)


class Clock:
    """A clock the test moves by hand (the feed's schedule, checked without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_frame_is_sent_as_soon_as_its_period_allows_not_at_a_tick():
    clock = Clock()
    feed = Feed(max_rate=60.0, queue_size=4, clock=clock)
    period = 1.0 / 60.0
    feed.put("/a", convert.MARKERS, b"0", conflate=True)
    assert [p.data for p in feed.take(0.0)] == [b"0"]  # nothing sent before: at once
    sent_at = clock.now
    # a frame 5 ms later waits for the end of the period, and the newest is what goes
    clock.now += 0.005
    feed.put("/a", convert.MARKERS, b"1", conflate=True)
    clock.now += 0.005
    feed.put("/a", convert.MARKERS, b"2", conflate=True)
    assert feed.take(0.0) == [] and feed.next_due() == sent_at + period
    clock.now = sent_at + period
    assert [p.data for p in feed.take(0.0)] == [b"2"] and feed.next_due() is None
    assert feed.counters.coalesced == 1
    # a source slower than max_rate: every frame goes the moment it comes
    for i in range(3, 8):
        clock.now += 0.05
        feed.put("/a", convert.MARKERS, bytes([i]), conflate=True)
        assert [p.data for p in feed.take(0.0)] == [bytes([i])]
    # each topic keeps its own period
    feed.put("/b", convert.RIGID_BODIES, b"b", conflate=True)
    feed.put("/a", convert.MARKERS, b"a", conflate=True)
    assert [p.data for p in feed.take(0.0)] == [b"b"] and feed.next_due() == clock.now + period


def test_a_waiting_take_returns_the_frame_at_its_moment_not_at_its_timeout():
    """The sender waits in take(); a frame not due yet ends that wait at its moment (the
    put of a frame into an empty slot wakes the sender to learn it)."""
    feed = Feed(max_rate=20.0, queue_size=4)  # 50 ms
    feed.put("/a", convert.MARKERS, b"0", conflate=True)
    assert feed.take(0.0)
    got: list[list] = []
    thread = threading.Thread(target=lambda: got.append(feed.take(30.0)))
    thread.start()
    time.sleep(0.01)
    feed.put("/a", convert.MARKERS, b"1", conflate=True)
    feed.put("/a", convert.MARKERS, b"2", conflate=True)
    thread.join(20.0)  # far below the 30 s timeout: it ended at the period's end
    assert not thread.is_alive() and [p.data for p in got[0]] == [b"2"]
    # and a queued message (/tf, /diagnostics) is never held for a scene's period
    feed.put("/a", convert.MARKERS, b"3", conflate=True)
    thread = threading.Thread(target=lambda: got.append(feed.take(30.0)))
    thread.start()
    feed.put("/diagnostics", convert.DIAGNOSTICS, b"d", conflate=False)
    thread.join(20.0)
    assert not thread.is_alive() and b"d" in [p.data for p in got[1]]


def test_wake_ends_a_waiting_take_at_once():
    feed = Feed(max_rate=0.0, queue_size=4)
    got: list[list] = []
    thread = threading.Thread(target=lambda: got.append(feed.take(30.0)))
    thread.start()
    time.sleep(0.01)
    feed.wake()
    thread.join(20.0)
    assert not thread.is_alive() and got == [[]]
