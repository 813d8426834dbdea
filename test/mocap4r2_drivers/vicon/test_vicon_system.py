"""vicon_system against a TEST DOUBLE of the Vicon DataStream SDK's Python binding.

The official binding and a Vicon server cannot run here. The double
(test/fixtures/vicon_datastream_double.py) is written from the behaviour of Vicon's
wrapper ``vicon_dssdk/ViconDataStream.py`` and says there what it mirrors: exceptions
named by ``.message``, GetFrame returning False on NoFrame, Enum members for the
setters, NoFrame before the first frame, port 801 by default, the connection timeout.
It proves the adapter uses that API as the wrapper behaves, not the SDK's timing.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for
from vicon_datastream_double import (
    Client,
    DataStreamException,
    FakeFrame,
    FakeSegment,
    FakeServer,
    FakeSubject,
    _Native,
    module,
    write_shim,
)

from mocap4r2_control.adapter import AdapterError
from mocap4r2_drivers.simulated.scene import Scene


# ====================================================================== helpers
@pytest.fixture
def sdk(monkeypatch):
    """The double installed as ``vicon_dssdk.ViconDataStream`` for this test."""
    import types

    server = FakeServer()
    Client.server = server
    Client.instances = []
    double = module()
    package = types.ModuleType("vicon_dssdk")
    package.ViconDataStream = double
    monkeypatch.setitem(sys.modules, "vicon_dssdk", package)
    monkeypatch.setitem(sys.modules, "vicon_dssdk.ViconDataStream", double)
    return server


def adapter_values(**changes):
    from mocap4r2_drivers.vicon.vicon_system import ViconAdapter

    values = {spec.name: spec.default for spec in ViconAdapter.parameters}
    values.update(connect_timeout=2.0, reconnect_period=0.1)
    values.update(changes)
    return values


def make_adapter(**changes):
    from mocap4r2_drivers.vicon.vicon_system import ViconAdapter

    return ViconAdapter.from_parameters(adapter_values(**changes))


def drone(number: int, x: float = 1000.0, occluded=False, marker_occluded=False) -> FakeSubject:
    return FakeSubject(
        "drone",
        [FakeSegment("drone", "", (x, 2000.0, 1500.0), (0.0, 0.0, 0.6, 0.8), occluded)],
        [
            ("front", "drone", (x + 100.0, 2000.0, 1500.0), marker_occluded),
            ("back", "drone", (x - 100.0, 2000.0, 1500.0), False),
        ],
    )


def arm(occluded_forearm=False) -> FakeSubject:
    return FakeSubject(
        "arm",
        [
            FakeSegment("upper", "", (0.0, 0.0, 1000.0)),
            FakeSegment("fore", "upper", (300.0, 0.0, 1000.0), occluded=occluded_forearm),
            FakeSegment("hand", "fore", (550.0, 0.0, 1000.0)),
        ],
        [("elbow", "upper", (300.0, 0.0, 1010.0), False), ("wrist", "fore", (550.0, 0.0, 1010.0), False)],
    )


def read(adapter, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = adapter.read_frame(0.1)
        if frame is not None:
            return frame
    raise AssertionError("no frame")


def publish_and_read(server, adapter, frame: FakeFrame, timeout: float = 5.0):
    server.publish(frame)
    got = read(adapter, timeout)
    assert got.frame_number == frame.number
    got.check()
    return got


@pytest.fixture
def streaming(sdk):
    sdk.publish(FakeFrame(1, [drone(1), arm()], [(10.0, 20.0, 30.0)], latency=0.004))
    adapter = make_adapter()
    names = adapter.connect()
    adapter.start_streaming()
    yield sdk, adapter, names
    adapter.disconnect()


# ====================================================================== unit tests
def test_missing_sdk_fails_configure_with_install_instructions(monkeypatch):
    monkeypatch.setitem(sys.modules, "vicon_dssdk", None)  # "import vicon_dssdk" raises ImportError
    adapter = make_adapter()
    with pytest.raises(AdapterError) as info:
        adapter.connect()
    message = str(info.value)
    # the installer puts the package folder vicon_dssdk under Win64/Python: that folder is what pip installs
    assert "pip install" in message and "Win64/Python/vicon_dssdk" in message, message
    assert "Linux64/Python" not in message, "no Linux build of the binding is published"
    assert "Windows" in message
    adapter.disconnect()  # nothing to release, nothing crashes


# ====================================================================== the double is the wrapper
def test_the_double_behaves_as_the_wrapper(sdk):
    """What the adapter relies on, as Vicon's wrapper does it (not as the old double did)."""
    client = Client()
    with pytest.raises(DataStreamException) as info:
        client.GetFrame()
    assert info.value.message == "NotConnected" and not hasattr(info.value, "result")
    assert str(DataStreamException(_Native.NoFrame, "more")) == "NoFrame more"
    client.Connect("127.0.0.1")  # no port: 801
    assert client.port == 801 and client.IsConnected()
    assert client.GetFrame() is False  # no frame yet: False, not NoFrame raised
    with pytest.raises(DataStreamException, match="NoFrame"):
        client.GetFrameRate()  # nothing before the first frame
    with pytest.raises(KeyError):
        client.SetStreamMode(2)  # an int is not a StreamMode member
    with pytest.raises(KeyError):
        client.SetAxisMapping(4, 2, 0)
    client.SetStreamMode(Client.StreamMode.EServerPush)
    sdk.publish(FakeFrame(5, [drone(5)]))
    assert client.GetFrame() is True and client.GetFrameRate() == 100.0
    translation, occluded = client.GetSegmentGlobalTranslation("drone", "drone")
    assert not occluded and translation == (1000.0, 2000.0, 1500.0)
    import vicon_dssdk.ViconDataStream as wrapper

    assert not hasattr(wrapper, "Result"), "the wrapper has no Result class"


def test_error_names_come_from_the_exception_message(sdk):
    from mocap4r2_drivers.vicon.client import describe, error_name

    exc = DataStreamException(_Native.ClientConnectionFailed, "10.0.0.9:801")
    assert error_name(exc) == "ClientConnectionFailed"
    assert describe(exc) == "ClientConnectionFailed (10.0.0.9:801)"


def test_connect_timeout_is_handed_to_the_sdk(sdk):
    """Connect blocks for the SDK's own timeout (5 s by default): connect_timeout must set it."""
    sdk.set_up(False)
    adapter = make_adapter(connect_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(AdapterError, match="ClientConnectionFailed"):
        adapter.connect()
    took = time.monotonic() - started
    adapter.disconnect()
    calls = [c for c in sdk.calls if c[0] in ("SetConnectionTimeout", "Connect")]
    assert calls[0] == ("SetConnectionTimeout", 500), calls
    assert took < 4.0, f"configure took {took:.1f} s: the SDK's 5 s default was used"


def test_setters_get_the_sdk_enum_members(sdk):
    sdk.publish(FakeFrame(1, [drone(1)]))
    adapter = make_adapter(stream_mode="client_pull_prefetch", axis_mapping=["left", "up", "forward"])
    adapter.connect()
    client = Client.instances[-1]
    assert client.mode is Client.StreamMode.EClientPullPreFetch
    assert client.axes == (Client.AxisMapping.ELeft, Client.AxisMapping.EUp, Client.AxisMapping.EForward)
    assert all(isinstance(a, Client.AxisMapping) for a in client.axes)
    adapter.disconnect()


def test_a_server_without_frames_is_no_frame_not_an_error(sdk):
    """GetFrame says False until the server streams: configure waits, then says why."""
    adapter = make_adapter(connect_timeout=0.5)
    with pytest.raises(AdapterError, match="no frame"):
        adapter.connect()
    adapter.disconnect()


def test_lost_connection_is_named_and_reconnected(streaming):
    server, adapter, _ = streaming
    publish_and_read(server, adapter, FakeFrame(2, [drone(2)]))
    server.set_up(False)
    deadline = time.monotonic() + 20
    while "lost_connection" not in adapter.status() and time.monotonic() < deadline:
        adapter.read_frame(0.05)
    status = adapter.status()
    # named from DataStreamException.message, not the bare numeric code ("10")
    assert status.get("lost_connection") == "NotConnected", status
    server.set_up(True)
    frame = publish_and_read(server, adapter, FakeFrame(3, [drone(3)]), timeout=20)
    assert frame.bodies.names == ("drone",) and adapter.counts["reconnects"] >= 1


def test_unreachable_server_is_a_clear_error(sdk):
    sdk.set_up(False)
    adapter = make_adapter(connect_timeout=0.5)
    with pytest.raises(AdapterError, match="ClientConnectionFailed"):
        adapter.connect()
    adapter.disconnect()


def test_setup_uses_server_push_the_axis_mapping_and_the_data_types(sdk):
    sdk.publish(FakeFrame(1, [drone(1)]))
    adapter = make_adapter(port=802, axis_mapping=["left", "up", "forward"])
    adapter.connect()
    client = Client.instances[-1]
    assert ("Connect", "127.0.0.1:802") in sdk.calls
    assert client.mode == Client.StreamMode.EServerPush
    assert client.axes == (Client.AxisMapping.ELeft, Client.AxisMapping.EUp, Client.AxisMapping.EForward)
    assert client.enabled == {"segments", "markers", "unlabeled"}
    adapter.disconnect()
    assert ("Disconnect",) in sdk.calls


def test_axis_mapping_and_stream_mode_are_validated():
    from mocap4r2_drivers.vicon.vicon_system import ViconAdapter

    specs = {s.name: s for s in ViconAdapter.parameters}
    assert "right angles" in specs["axis_mapping"].validate(["forward", "backward", "up"])
    assert "right handed" in specs["axis_mapping"].validate(["forward", "right", "up"])
    assert specs["axis_mapping"].validate(["forward", "left"]) is not None
    assert specs["stream_mode"].validate("client_pull") is None
    assert specs["stream_mode"].validate("udp") is not None
    with pytest.raises(AdapterError, match="right handed"):
        ViconAdapter.from_parameters(adapter_values(axis_mapping=["forward", "right", "up"]))


def test_subjects_and_segments_become_bodies_markers_and_skeletons(streaming):
    server, adapter, names = streaming
    from mocap4r2_drivers.common import stable_id

    assert names.rigid_bodies == ("drone", "arm/upper", "arm/fore", "arm/hand")
    assert names.skeletons == ("arm",)
    frame = publish_and_read(
        server, adapter, FakeFrame(2, [drone(2), arm()], [(10.0, 20.0, 30.0)], latency=0.004)
    )
    b = frame.bodies
    assert b.names == ("drone", "arm/upper", "arm/fore", "arm/hand")
    assert b.ids.tolist() == [stable_id(n) for n in b.names]
    np.testing.assert_allclose(b.positions[0], [1.0, 2.0, 1.5])  # mm -> m
    np.testing.assert_allclose(b.orientations[0], [0.0, 0.0, 0.6, 0.8])
    assert b.valid.all()
    # the SDK's latency plus the time the frame spent in the adapter (conversion, queue)
    assert 0.004 <= frame.latency < 0.004 + 0.5
    # a body's markers are those whose parent segment it is
    assert b.markers.names == ("drone:front", "drone:back", "arm:elbow", "arm:wrist")
    np.testing.assert_array_equal(b.marker_offsets, [0, 2, 3, 4, 4])
    m = frame.markers
    assert m.names == ("drone:front", "drone:back", "arm:elbow", "arm:wrist", "")
    assert m.ids[-1] == -1 and m.ids[0] == stable_id("drone:front")
    np.testing.assert_allclose(m.positions[-1], [0.01, 0.02, 0.03])
    s = frame.skeletons
    assert s.names == ("arm",) and s.segments.names == ("upper", "fore", "hand")
    assert s.segments.parent_ids.tolist() == [-1, 1, 2] and s.segments.ids.tolist() == [1, 2, 3]
    np.testing.assert_allclose(s.segments.positions[2], [0.55, 0.0, 1.0])


def test_occluded_segments_and_markers_are_invalid_not_zeros(streaming):
    server, adapter, _ = streaming
    frame = publish_and_read(
        server,
        adapter,
        FakeFrame(2, [drone(2, occluded=True, marker_occluded=True), arm(occluded_forearm=True)]),
    )
    b = frame.bodies
    assert b.valid.tolist() == [False, True, False, True]
    assert np.isnan(b.positions[0]).all() and np.isnan(b.orientations[2]).all()
    assert frame.markers.occluded.tolist()[:2] == [True, False]
    assert np.isnan(frame.markers.positions[0]).all()
    assert frame.skeletons.segments.valid.tolist() == [True, False, True]
    assert frame.skeletons.valid.tolist() == [True]


def test_subjects_appearing_and_disappearing(streaming):
    server, adapter, _ = streaming
    both = publish_and_read(server, adapter, FakeFrame(2, [drone(2), arm()]))
    only_arm = publish_and_read(server, adapter, FakeFrame(3, [arm()]))
    assert only_arm.bodies.names == ("arm/upper", "arm/fore", "arm/hand")
    assert only_arm.markers.names == ("arm:elbow", "arm:wrist")
    newcomer = FakeSubject("cart", [FakeSegment("cart", "", (5.0, 5.0, 0.0))])
    again = publish_and_read(server, adapter, FakeFrame(4, [newcomer, drone(4), arm()]))
    assert again.bodies.names == ("cart", "drone", "arm/upper", "arm/fore", "arm/hand")
    # the same name keeps its id whatever the order of the subjects
    assert again.bodies.ids[1] == both.bodies.ids[0]
    nobody = publish_and_read(server, adapter, FakeFrame(5, []))
    assert len(nobody.bodies) == 0 and len(nobody.skeletons) == 0


def test_values_the_adapter_cannot_convert_drop_that_frame_only(streaming):
    server, adapter, _ = streaming
    broken = FakeSubject("broken", [FakeSegment("broken", "", (1.0, 2.0))])  # a 2-vector translation
    server.publish(FakeFrame(2, [broken]))
    time.sleep(0.3)
    assert adapter.read_frame(0.1) is None
    assert adapter.counts["bad_frames"] == 1 and "bad frame" in adapter.status()["last_error"]
    assert publish_and_read(server, adapter, FakeFrame(3, [drone(3)])).bodies.names == ("drone",)


def test_a_frame_is_published_once_in_client_pull(sdk):
    sdk.publish(FakeFrame(7, [drone(7)]))
    adapter = make_adapter(stream_mode="client_pull")
    adapter.connect()
    assert Client.instances[-1].mode == Client.StreamMode.EClientPull
    adapter.start_streaming()
    time.sleep(0.3)  # the client pulls frame 7 again and again
    sdk.publish(FakeFrame(8, [drone(8)]))
    time.sleep(0.3)
    frames = []
    while (f := adapter.read_frame(0.05)) is not None:
        frames.append(f)
    adapter.disconnect()
    assert [f.frame_number for f in frames] == [8], "frame 7 was read at configure; no frame twice"
    assert adapter.counts["duplicates"] > 10


def test_reconnects_after_the_server_goes_away(streaming):
    server, adapter, _ = streaming
    publish_and_read(server, adapter, FakeFrame(2, [drone(2)]))
    server.set_up(False)
    time.sleep(0.5)
    assert adapter.read_frame(0.2) is None
    assert adapter.status()["connected"] == "False"
    server.set_up(True)
    frame = publish_and_read(server, adapter, FakeFrame(3, [drone(3)]))
    assert frame.bodies.names == ("drone",)
    assert adapter.counts["reconnects"] == 1
    assert sum(1 for c in server.calls if c[0] == "Connect") >= 2


def test_without_reconnection_a_lost_server_fails_reading_for_good(sdk):
    sdk.publish(FakeFrame(1, [drone(1)]))
    adapter = make_adapter(reconnect_period=0.0)
    adapter.connect()
    adapter.start_streaming()
    sdk.set_up(False)
    deadline = time.monotonic() + 5
    with pytest.raises(AdapterError, match="went away"):
        while time.monotonic() < deadline:
            adapter.read_frame(0.1)
    with pytest.raises(AdapterError):
        adapter.read_frame(0.1)
    adapter.disconnect()


def test_stop_streaming_returns_while_the_server_sends_nothing(streaming):
    server, adapter, _ = streaming
    started = time.monotonic()
    adapter.stop_streaming()  # GetFrame is waiting for a frame that never comes
    assert time.monotonic() - started < 5.0


# ====================================================================== end to end
SCENE = {
    "seed": 3,
    "rate": 100.0,
    "latency": 0.004,
    "latency_jitter": 0.0,
    "noise": 0.0002,
    "occlusion": 0.05,
    "dropped_frames": 0.02,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        {
            "name": "drone",
            "id": 1,
            "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0, "tilt": 0.1},
        },
        {
            "name": "cart",
            "id": 2,
            "trajectory": {"type": "figure_eight", "period": 6.0},
            "tracking_loss": {"every": 1.0, "duration": 0.3},
        },
    ],
    "skeletons": [{"name": "walker", "trajectory": {"type": "circle", "radius": 1.5, "period": 20.0}}],
}


@pytest.fixture
def shim(tmp_path):
    """A vicon_dssdk package that is the double (for the node process)."""
    import yaml

    write_shim(tmp_path / "shim")
    scene_path = tmp_path / "scene.yaml"
    scene_path.write_text(yaml.safe_dump(SCENE))
    control = tmp_path / "server_state"
    here = Path(__file__).resolve().parent
    env = {
        "PYTHONPATH": os.pathsep.join(
            [
                str(tmp_path / "shim"),
                str(here),
                str(here.parents[1] / "fixtures"),
                os.environ.get("PYTHONPATH", ""),
            ]
        ),
        "VICON_DOUBLE_SCENE": str(scene_path),
        "VICON_DOUBLE_CONTROL": str(control),
    }
    return env, Scene.from_file(scene_path), control


def test_node_publishes_the_served_subjects(ros, procs, shim):
    from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS, SYSTEMS_TOPIC
    from mocap4r2_interfaces.msg import MocapSystemInfo, RigidBodies, Skeletons

    env, scene, _ = shim
    systems = ros.subscribe(SYSTEMS_TOPIC, MocapSystemInfo, SYSTEMS_LISTENER_QOS)
    bodies = ros.subscribe("/vi1/rigid_bodies", RigidBodies)
    skeletons = ros.subscribe("/vi1/skeletons", Skeletons)
    proc = procs.start(
        "mocap4r2_drivers",
        "vicon_system",
        name="vicon",
        namespace="/vi1",
        params={"autostart": True},
        env=env,
    )
    bodies.wait_for(timeout=30)
    time.sleep(2.0)  # deliberately records for a fixed span: the frame count is measured over it
    proc.stop()
    received = bodies.snapshot()
    assert len(received) > 50, proc.log()
    numbers = [m.frame_number for m in received]
    assert all(b > a for a, b in zip(numbers, numbers[1:])), "a frame published twice or out of order"
    assert not any(scene.is_dropped(k) for k in numbers)
    seg_names = [f"walker/{n}" for n in scene.description.skeletons[0].segment_names]
    last_good = {}
    for msg in received:
        frame = scene.frame(msg.frame_number)
        assert [b.name for b in msg.rigid_bodies] == ["drone", "cart", *seg_names]
        for row in range(2):
            body = msg.rigid_bodies[row]
            p, q = body.pose.position, body.pose.orientation
            v = (p.x, p.y, p.z, q.x, q.y, q.z, q.w)
            assert all(math.isfinite(x) for x in v)
            assert body.tracking_valid == bool(frame.bodies.valid[row])
            if body.tracking_valid:
                np.testing.assert_allclose(v[:3], frame.bodies.positions[row], atol=1e-9)
                last_good[row] = v
            elif row in last_good:
                assert v == last_good[row], "occluded: the last pose, not zeros"
            # in the subject's order; a marker never measured since the start is left out
            published = [m.name for m in body.markers]
            assert published == [n for n in scene.description.bodies[row].marker_names if n in published]
    assert any(not m.rigid_bodies[1].tracking_valid for m in received)
    (skeleton,) = skeletons.snapshot()[-1].skeletons
    assert skeleton.name == "walker" and len(skeleton.segments) == 19
    # the system announces itself on the control plane, with the server's frame rate
    active = systems.wait_for(lambda m: m.system == "/vi1/vicon" and m.state.label == "active", timeout=WAIT)
    assert active.type == "vicon" and active.frame_rate == 100.0


def test_node_survives_the_server_going_away(ros, procs, shim):
    from mocap4r2_interfaces.msg import RigidBodies

    env, _, control = shim
    bodies = ros.subscribe("/vi2/rigid_bodies", RigidBodies)
    proc = procs.start(
        "mocap4r2_drivers",
        "vicon_system",
        name="vicon",
        namespace="/vi2",
        params={"autostart": True, "reconnect_period": 0.2},
        env=env,
    )
    bodies.wait_for(timeout=30)
    control.write_text("down")
    # frames read before the server went down may still be in flight: wait until none arrived for 1 s
    wait_for(
        lambda: bodies.quiet(1.0),
        WAIT,
        lambda: f"{len(bodies.times)} frames, still arriving",
        what="the stream to go quiet",
    )
    bodies.clear()
    time.sleep(0.5)  # deliberately lets time pass: no frame may arrive while the server is down
    assert not bodies.snapshot()
    control.write_text("up")
    bodies.wait_for(timeout=WAIT)
    assert proc.alive() and proc.wait_log("went away", timeout=WAIT)


def test_node_without_the_sdk_stays_up_and_says_how_to_install_it(ros, procs):
    proc = procs.start("mocap4r2_drivers", "vicon_system", name="vicon", namespace="/vi3")
    ros.wait_state("/vi3/vicon", "unconfigured", timeout=WAIT)
    assert not ros.change_state("/vi3/vicon", "configure")
    assert proc.wait_log("pip install", timeout=WAIT), proc.log()
    assert proc.alive() and ros.get_state("/vi3/vicon") == "unconfigured"
