"""vicon_system against a TEST DOUBLE of the Vicon DataStream SDK.

STATED AS SUCH: the official Python binding (``vicon_dssdk.ViconDataStream``) and a
Vicon server cannot run here. The classes below (``Result``, ``DataStreamException``,
``Client`` with ``Client.StreamMode`` and ``Client.AxisMapping``) are a test double with
the SDK's class and method names, argument order, return shapes (``((x, y, z),
occluded)``, ``[(marker, parent segment)]``, ``[((x, y, z), trajectory id)]``) and its
Result codes, as documented by Vicon. They are not the SDK and prove only that the
adapter uses that API as documented; behaviour of the real SDK (threading, timing)
is not reproduced beyond what is written here.

The double serves either frames a test hands to a :class:`FakeServer`, or (for the
process end-to-end tests) a simulated :class:`~mocap4r2_drivers.simulated.scene.Scene` in real
time; the node process imports it through a two-line ``vicon_dssdk`` shim package
written into the test's temporary directory.
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import yaml

from mocap4r2_control.adapter import AdapterError
from mocap4r2_drivers.simulated.scene import Scene
from mocap4r2_drivers.vicon.vicon_system import ViconAdapter
from support import CROSS_PROCESS_TIMEOUT as WAIT, wait_for


# ====================================================================== the test double
class Result:
    """The DataStream SDK's result codes."""

    Unknown = 0
    NotImplemented = 1
    Success = 2
    InvalidHostName = 3
    InvalidMulticastIP = 4
    ClientAlreadyConnected = 5
    ClientConnectionFailed = 6
    ServerAlreadyTransmittingMulticast = 7
    ServerNotTransmittingMulticast = 8
    NotConnected = 9
    NoFrame = 10
    InvalidIndex = 11
    InvalidCameraName = 12
    InvalidSubjectName = 13
    InvalidSegmentName = 14
    InvalidMarkerName = 15
    InvalidDeviceName = 16
    InvalidDeviceOutputName = 17
    InvalidLatencySampleName = 18
    CoLinearAxes = 19
    LeftHandedAxes = 20
    HapticAlreadySet = 21
    EarlyDataRequested = 22
    LateDataRequested = 23
    InvalidOperation = 24
    NotSupported = 25
    ConfigurationFailed = 26
    NotPresent = 27


class DataStreamException(Exception):
    """What the SDK raises when a call does not return Result.Success."""

    def __init__(self, result: int, message: str):
        super().__init__(message)
        self.result = result
        self.message = message


@dataclass
class FakeSegment:
    name: str
    parent: str = ""                      # "" for the root
    translation: tuple = (0.0, 0.0, 0.0)  # mm
    rotation: tuple = (0.0, 0.0, 0.0, 1.0)
    occluded: bool = False


@dataclass
class FakeSubject:
    name: str
    segments: list[FakeSegment]
    markers: list[tuple[str, str, tuple, bool]] = field(default_factory=list)  # name, segment, mm, occluded


@dataclass
class FakeFrame:
    number: int
    subjects: list[FakeSubject]
    unlabeled: list[tuple] = field(default_factory=list)  # mm
    latency: float = 0.0


class FakeServer:
    """A DataStream server as the double's clients see it: frames handed over by a test."""

    rate = 100.0

    def __init__(self):
        self.up = True
        self.latest: FakeFrame | None = None
        self.cond = threading.Condition()
        self.calls: list[tuple] = []

    def publish(self, frame: FakeFrame) -> None:
        with self.cond:
            self.latest = frame
            self.cond.notify_all()

    def set_up(self, up: bool) -> None:
        with self.cond:
            self.up = up
            self.cond.notify_all()

    def is_up(self) -> bool:
        return self.up

    def next_frame(self, after: int | None, push: bool, timeout: float = 0.5) -> FakeFrame | None:
        """The newest frame; in push mode wait (a while) for one newer than ``after``."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while push and self.up and (self.latest is None or self.latest.number == after):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.cond.wait(remaining)
            if not self.up:
                raise DataStreamException(Result.NotConnected, "NotConnected")
            return self.latest


class Client:
    """Test double of ViconDataStream.Client (method names and results as the SDK's)."""

    class StreamMode:
        EClientPull = 0
        EClientPullPreFetch = 1
        EServerPush = 2

    class AxisMapping:
        EUp = 0
        EDown = 1
        ELeft = 2
        ERight = 3
        EForward = 4
        EBackward = 5

    server: FakeServer | None = None      # set by the test (or the shim)
    instances: list["Client"] = []

    def __init__(self):
        self.server = type(self).server
        self.connected = False
        self.mode = Client.StreamMode.EClientPull
        self.axes = (Client.AxisMapping.EForward, Client.AxisMapping.ELeft, Client.AxisMapping.EUp)
        self.frame: FakeFrame | None = None
        self.enabled: set[str] = set()
        self.buffer_size = 0
        Client.instances.append(self)

    def _log(self, *call) -> None:
        self.server.calls.append(call)

    def _need_frame(self) -> FakeFrame:
        if not self.connected:
            raise DataStreamException(Result.NotConnected, "NotConnected")
        if self.frame is None:
            raise DataStreamException(Result.NoFrame, "NoFrame")
        return self.frame

    def _subject(self, name: str) -> FakeSubject:
        for subject in self._need_frame().subjects:
            if subject.name == name:
                return subject
        raise DataStreamException(Result.InvalidSubjectName, "InvalidSubjectName")

    def _segment(self, subject: str, segment: str) -> FakeSegment:
        for s in self._subject(subject).segments:
            if s.name == segment:
                return s
        raise DataStreamException(Result.InvalidSegmentName, "InvalidSegmentName")

    # --------------------------------------------------------------- connection
    def Connect(self, host: str) -> None:
        self._log("Connect", host)
        if self.connected:
            raise DataStreamException(Result.ClientAlreadyConnected, "ClientAlreadyConnected")
        if ":" not in host:
            raise DataStreamException(Result.InvalidHostName, "InvalidHostName")
        if not self.server.is_up():
            raise DataStreamException(Result.ClientConnectionFailed, "ClientConnectionFailed")
        self.connected = True
        self.frame = None

    def IsConnected(self) -> bool:
        return self.connected and self.server.is_up()

    def Disconnect(self) -> None:
        self._log("Disconnect")
        if not self.connected:
            raise DataStreamException(Result.NotConnected, "NotConnected")
        self.connected = False

    def EnableSegmentData(self) -> None:
        self.enabled.add("segments")

    def EnableMarkerData(self) -> None:
        self.enabled.add("markers")

    def EnableUnlabeledMarkerData(self) -> None:
        self.enabled.add("unlabeled")

    def SetBufferSize(self, size: int) -> None:
        self.buffer_size = size

    def SetStreamMode(self, mode: int) -> None:
        self._log("SetStreamMode", mode)
        self.mode = mode

    def SetAxisMapping(self, x: int, y: int, z: int) -> None:
        self._log("SetAxisMapping", x, y, z)
        self.axes = (x, y, z)

    def GetAxisMapping(self):
        return self.axes

    # --------------------------------------------------------------- frames
    def GetFrame(self) -> bool:
        if not self.connected:
            raise DataStreamException(Result.NotConnected, "NotConnected")
        after = self.frame.number if self.frame is not None else None
        frame = self.server.next_frame(after, push=self.mode == Client.StreamMode.EServerPush)
        if frame is None:
            raise DataStreamException(Result.NoFrame, "NoFrame")
        self.frame = frame
        return True

    def GetFrameNumber(self) -> int:
        return self._need_frame().number

    def GetFrameRate(self) -> float:
        return self.server.rate

    def GetLatencyTotal(self) -> float:
        return self._need_frame().latency

    def GetSubjectNames(self) -> list[str]:
        return [s.name for s in self._need_frame().subjects]

    def GetSubjectRootSegmentName(self, subject: str) -> str:
        return next(s.name for s in self._subject(subject).segments if not s.parent)

    def GetSegmentNames(self, subject: str) -> list[str]:
        return [s.name for s in self._subject(subject).segments]

    def GetSegmentParentName(self, subject: str, segment: str) -> str:
        return self._segment(subject, segment).parent

    def GetSegmentGlobalTranslation(self, subject: str, segment: str):
        s = self._segment(subject, segment)
        return ((0.0, 0.0, 0.0), True) if s.occluded else (tuple(s.translation), False)

    def GetSegmentGlobalRotationQuaternion(self, subject: str, segment: str):
        s = self._segment(subject, segment)
        return ((0.0, 0.0, 0.0, 1.0), True) if s.occluded else (tuple(s.rotation), False)

    def GetMarkerNames(self, subject: str) -> list[tuple[str, str]]:
        return [(m[0], m[1]) for m in self._subject(subject).markers]

    def GetMarkerGlobalTranslation(self, subject: str, marker: str):
        for name, _, position, occluded in self._subject(subject).markers:
            if name == marker:
                return ((0.0, 0.0, 0.0), True) if occluded else (tuple(position), False)
        raise DataStreamException(Result.InvalidMarkerName, "InvalidMarkerName")

    def GetUnlabeledMarkers(self) -> list[tuple[tuple, int]]:
        return [(tuple(p), i) for i, p in enumerate(self._need_frame().unlabeled)]


class SceneServer(FakeServer):
    """Serves a Scene in real time (frame k due at start + k / rate); up or down as a
    control file says (``down`` in the file: the server is unreachable)."""

    def __init__(self, scene: Scene, control: Path | None = None):
        super().__init__()
        self.scene = scene
        self.rate = scene.rate
        self.control = control
        self.start = time.monotonic()

    def is_up(self) -> bool:
        return not (self.control is not None and self.control.exists() and "down" in self.control.read_text())

    def next_frame(self, after: int | None, push: bool, timeout: float = 0.5) -> FakeFrame | None:
        if not self.is_up():
            time.sleep(0.05)
            raise DataStreamException(Result.NotConnected, "NotConnected")
        due = int((time.monotonic() - self.start) * self.rate)
        k = due if after is None or not push else max(after + 1, due)
        while self.scene.is_dropped(k):
            k += 1
        wait = self.start + k / self.rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return scene_frame(self.scene, k)


def scene_frame(scene: Scene, k: int) -> FakeFrame:
    """Frame k of a scene as a Vicon server would stream it: one single-segment subject
    per rigid body, one multi-segment subject per skeleton; mm."""
    frame = scene.frame(k)
    b = frame.bodies
    subjects = []
    for i, spec in enumerate(scene.description.bodies):
        a, z = int(b.marker_offsets[i]), int(b.marker_offsets[i + 1])
        markers = [(name.split(":", 1)[1], spec.name, tuple(b.markers.positions[j] * 1000.0), bool(b.markers.occluded[j]))
                   for j, name in zip(range(a, z), spec.marker_names)]
        segment = FakeSegment(spec.name, "", tuple(b.positions[i] * 1000.0), tuple(b.orientations[i]),
                              occluded=not b.valid[i])
        subjects.append(FakeSubject(spec.name, [segment], markers))
    sk = frame.skeletons
    for i, spec in enumerate(scene.description.skeletons):
        a = int(sk.segment_offsets[i])
        names = dict(zip(spec.segment_ids.tolist(), spec.segment_names))
        segments = [FakeSegment(name, names.get(int(parent), ""), tuple(sk.segments.positions[a + j] * 1000.0),
                                tuple(sk.segments.orientations[a + j]), occluded=not sk.segments.valid[a + j])
                    for j, (name, parent) in enumerate(zip(spec.segment_names, spec.parent_ids.tolist()))]
        subjects.append(FakeSubject(spec.name, segments))
    strays = frame.markers.positions[frame.markers.ids == -1] * 1000.0
    return FakeFrame(k, subjects, [tuple(p) for p in strays], latency=frame.latency)


def install_scene_server_from_environment() -> None:
    """Called by the shim in a node process: serve the scene named by the environment."""
    scene = Scene.from_file(os.environ["VICON_DOUBLE_SCENE"])
    control = os.environ.get("VICON_DOUBLE_CONTROL")
    Client.server = SceneServer(scene, Path(control) if control else None)


# ====================================================================== helpers
@pytest.fixture
def sdk(monkeypatch):
    """The double installed as ``vicon_dssdk.ViconDataStream`` for this test."""
    import types

    server = FakeServer()
    Client.server = server
    Client.instances = []
    module = types.ModuleType("vicon_dssdk.ViconDataStream")
    module.Result = Result
    module.DataStreamException = DataStreamException
    module.Client = Client
    package = types.ModuleType("vicon_dssdk")
    package.ViconDataStream = module
    monkeypatch.setitem(sys.modules, "vicon_dssdk", package)
    monkeypatch.setitem(sys.modules, "vicon_dssdk.ViconDataStream", module)
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
    return FakeSubject("drone", [FakeSegment("drone", "", (x, 2000.0, 1500.0), (0.0, 0.0, 0.6, 0.8), occluded)],
                       [("front", "drone", (x + 100.0, 2000.0, 1500.0), marker_occluded),
                        ("back", "drone", (x - 100.0, 2000.0, 1500.0), False)])


def arm(occluded_forearm=False) -> FakeSubject:
    return FakeSubject("arm", [FakeSegment("upper", "", (0.0, 0.0, 1000.0)),
                               FakeSegment("fore", "upper", (300.0, 0.0, 1000.0), occluded=occluded_forearm),
                               FakeSegment("hand", "fore", (550.0, 0.0, 1000.0))],
                       [("elbow", "upper", (300.0, 0.0, 1010.0), False), ("wrist", "fore", (550.0, 0.0, 1010.0), False)])


def read(adapter, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = adapter.read_frame(0.1)
        if frame is not None:
            return frame
    raise AssertionError("no frame")


def publish_and_read(server, adapter, frame: FakeFrame):
    server.publish(frame)
    got = read(adapter)
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
    monkeypatch.setitem(sys.modules, "vicon_dssdk", None)   # "import vicon_dssdk" raises ImportError
    adapter = make_adapter()
    with pytest.raises(AdapterError) as info:
        adapter.connect()
    message = str(info.value)
    assert "vicon_dssdk" in message and "pip install" in message and "DataStream SDK" in message
    adapter.disconnect()     # nothing to release, nothing crashes


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
    frame = publish_and_read(server, adapter, FakeFrame(2, [drone(2), arm()], [(10.0, 20.0, 30.0)], latency=0.004))
    b = frame.bodies
    assert b.names == ("drone", "arm/upper", "arm/fore", "arm/hand")
    assert b.ids.tolist() == [stable_id(n) for n in b.names]
    np.testing.assert_allclose(b.positions[0], [1.0, 2.0, 1.5])         # mm -> m
    np.testing.assert_allclose(b.orientations[0], [0.0, 0.0, 0.6, 0.8])
    assert b.valid.all() and frame.latency == pytest.approx(0.004)
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
    frame = publish_and_read(server, adapter, FakeFrame(2, [drone(2, occluded=True, marker_occluded=True),
                                                            arm(occluded_forearm=True)]))
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
    broken = FakeSubject("broken", [FakeSegment("broken", "", (1.0, 2.0))])   # a 2-vector translation
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
    time.sleep(0.3)                 # the client pulls frame 7 again and again
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
    adapter.stop_streaming()       # GetFrame is waiting for a frame that never comes
    assert time.monotonic() - started < 5.0


# ====================================================================== end to end
SCENE = {
    "seed": 3, "rate": 100.0, "latency": 0.004, "latency_jitter": 0.0, "noise": 0.0002,
    "occlusion": 0.05, "dropped_frames": 0.02, "unlabeled_markers": 2,
    "rigid_bodies": [
        {"name": "drone", "id": 1, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0, "tilt": 0.1}},
        {"name": "cart", "id": 2, "trajectory": {"type": "figure_eight", "period": 6.0},
         "tracking_loss": {"every": 1.0, "duration": 0.3}},
    ],
    "skeletons": [{"name": "walker", "trajectory": {"type": "circle", "radius": 1.5, "period": 20.0}}],
}


@pytest.fixture
def shim(tmp_path):
    """A vicon_dssdk package that is the double (for the node process)."""
    import yaml

    package = tmp_path / "shim" / "vicon_dssdk"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ViconDataStream.py").write_text(
        "# the TEST DOUBLE of test_vicon_system.py, not Vicon's SDK\n"
        "from test_vicon_system import Client, DataStreamException, Result, install_scene_server_from_environment\n"
        "install_scene_server_from_environment()\n")
    scene_path = tmp_path / "scene.yaml"
    scene_path.write_text(yaml.safe_dump(SCENE))
    control = tmp_path / "server_state"
    here = Path(__file__).resolve().parent
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "shim"), str(here), str(here.parents[1] / "fixtures"),
                                          os.environ.get("PYTHONPATH", "")]),
           "VICON_DOUBLE_SCENE": str(scene_path), "VICON_DOUBLE_CONTROL": str(control)}
    return env, Scene.from_file(scene_path), control


def test_node_publishes_the_served_subjects(ros, procs, shim):
    from mocap4r2_interfaces.msg import MocapSystemInfo, RigidBodies, Skeletons

    from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS, SYSTEMS_TOPIC

    env, scene, _ = shim
    systems = ros.subscribe(SYSTEMS_TOPIC, MocapSystemInfo, SYSTEMS_LISTENER_QOS)
    bodies = ros.subscribe("/vi1/rigid_bodies", RigidBodies)
    skeletons = ros.subscribe("/vi1/skeletons", Skeletons)
    proc = procs.start("mocap4r2_drivers", "vicon_system", name="vicon", namespace="/vi1",
                       params={"autostart": True}, env=env)
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
    proc = procs.start("mocap4r2_drivers", "vicon_system", name="vicon", namespace="/vi2",
                       params={"autostart": True, "reconnect_period": 0.2}, env=env)
    bodies.wait_for(timeout=30)
    control.write_text("down")
    # frames read before the server went down may still be in flight: wait until none arrived for 1 s
    wait_for(lambda: bodies.quiet(1.0), WAIT, lambda: f"{len(bodies.times)} frames, still arriving",
             what="the stream to go quiet")
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


# ====================================================================== config and launch
ROOT = Path(__file__).resolve().parents[3]


def test_config_file_sets_declared_valid_parameters():
    from mocap4r2_control.system_node import BASE_PARAMETERS

    specs = {s.name: s for s in (*BASE_PARAMETERS, *ViconAdapter.parameters)}
    params = yaml.safe_load((ROOT / "config" / "vicon.yaml").read_text())["/**"]["ros__parameters"]
    for name, value in params.items():
        assert name in specs, f"config/vicon.yaml sets an undeclared parameter {name}"
        assert specs[name].validate(value) is None, specs[name].validate(value)
    adapter_values = {s.name: params.get(s.name, s.default) for s in ViconAdapter.parameters}
    ViconAdapter.from_parameters(adapter_values)
    compile((ROOT / "launch" / "vicon.launch.py").read_text(), "vicon.launch.py", "exec")


def test_launch_file_describes_a_lifecycle_node():
    pytest.importorskip("launch_ros", reason="launch_ros is not installable on a wheels-only machine")
    import importlib.util

    spec = importlib.util.spec_from_file_location("launch_file", ROOT / "launch" / "vicon.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.generate_launch_description().entities
