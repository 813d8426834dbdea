"""replay_system: the adapter paces, pauses, loops and stamps as its parameters say, stops
with the reason when the file changes under it, refuses bad configurations at configure,
and the node publishes a recorded session's messages again over DDS."""

from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from session_fixture import record_session  # noqa: E402
from shared_data import require_shared  # noqa: E402  (test/fixtures)

from mocap4r2_control.adapter import AdapterError, ConfigurationError  # noqa: E402
from mocap4r2_control.timebase import split_seconds  # noqa: E402
from mocap4r2_drivers.replay.playback import QUIET_AFTER, QUIET_BEFORE, End, Pacer, ReadAhead  # noqa: E402
from mocap4r2_drivers.replay.readers import open_source  # noqa: E402
from mocap4r2_drivers.replay.replay_system import ReplayAdapter  # noqa: E402


@pytest.fixture
def c3d_dir() -> Path:
    """The vendor C3D files of ../shared/data/c3d (skips in a clone without them; fails under CI)."""
    return require_shared("data", "c3d", checks="replaying the vendor C3D files as a system")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return record_session(tmp_path_factory.mktemp("sessions"), frames=120)


def adapter(**values) -> ReplayAdapter:
    defaults = {spec.name: spec.default for spec in ReplayAdapter.parameters}
    return ReplayAdapter.from_parameters({**defaults, **values})


def read_all(a: ReplayAdapter, limit: int = 100_000) -> list:
    frames = []
    while len(frames) < limit:
        frame = a.read_frame(0.2)
        if frame is None:
            if a.finished:
                break
            continue
        frames.append(frame)
    return frames


def test_as_fast_as_it_goes_with_the_original_stamps(session):
    directory, written, _ = session
    a = adapter(file=str(directory), rate_factor=0.0, stamps="original")
    names = a.connect()
    assert names.rigid_bodies == ("drone1", "robot1", "wand", "table")
    a.start_streaming()
    frames = read_all(a)
    a.disconnect()
    assert [f.frame_number for f in frames] == list(range(120))
    assert a.finished == "end of file"
    # the stamp the node will give is the recorded one, to the nanosecond
    for f, data in zip(frames, written["markers"]):
        assert split_seconds(f.capture_time) == (
            int.from_bytes(data[4:8], "little"),
            int.from_bytes(data[8:12], "little"),
        )


def test_real_time_paces_frames_at_the_file_rate_and_rebases_stamps(session):
    directory, _, _ = session
    a = adapter(file=str(directory), rate_factor=2.0, end=0.5)
    a.connect()
    a.start_streaming()
    started = time.time()
    frames = read_all(a)
    elapsed = time.time() - started
    a.disconnect()
    assert len(frames) == 61  # 0 .. 0.5 s at 120 Hz
    assert 0.2 < elapsed < 0.6  # 0.5 s of file at 2x
    stamps = np.array([f.capture_time for f in frames])
    np.testing.assert_allclose(np.diff(stamps), 1 / 240.0, atol=1e-6)
    assert abs(stamps[0] - started) < 0.1


def test_stop_pauses_and_start_resumes_where_it_paused(session):
    directory, _, _ = session
    a = adapter(file=str(directory), rate_factor=1.0)
    a.connect()
    a.start_streaming()
    first = [a.read_frame(0.5) for _ in range(5)]
    a.stop_streaming()
    assert a.status()["state"] == "paused"
    time.sleep(0.3)
    a.start_streaming()
    started = time.monotonic()
    nxt = a.read_frame(0.5)
    assert time.monotonic() - started < 0.05  # no catching up on the paused time
    left = int(a.status()["frames_left"])
    a.disconnect()
    assert left == 120 - 6
    assert [f.frame_number for f in first] == [0, 1, 2, 3, 4]
    assert nxt is not None and nxt.frame_number == 5


def test_loop_starts_again_at_start(session):
    directory, _, _ = session
    a = adapter(file=str(directory), rate_factor=0.0, loop=True, start=0.5, end=0.6)
    a.connect()
    a.start_streaming()
    frames = read_all(a, limit=40)
    status = a.status()
    a.disconnect()
    numbers = [f.frame_number for f in frames]
    assert numbers[:13] == list(range(60, 73))
    assert numbers[13:26] == list(range(60, 73))
    assert int(status["loops"]) >= 2
    assert int(status["read_ahead_depth"]) >= 0 and "position_s" in status


def test_a_file_that_changes_during_replay_stops_it_with_the_reason(session, tmp_path):
    directory, _, _ = session
    copy = tmp_path / "s1.mcap"
    copy.write_bytes((directory / "s1_0.mcap").read_bytes())
    a = adapter(file=str(copy), rate_factor=1.0, read_ahead=4)
    a.connect()
    a.start_streaming()
    assert a.read_frame(0.5) is not None
    with open(copy, "ab") as handle:
        handle.write(b"more")
    with pytest.raises(AdapterError, match="changed during replay"):
        for _ in range(400):
            a.read_frame(0.1)
    assert "changed during replay" in a.status()["state"]
    a.disconnect()


def test_c3d_with_bodies_plays_as_a_system(c3d_dir):
    a = adapter(
        file=str(c3d_dir / "Qualisys.c3d"), rate_factor=0.0, bodies="{pelvis: [L_IAS, R_IAS, L_IPS, R_IPS]}"
    )
    names = a.connect()
    assert names.rigid_bodies == ("pelvis",) and len(names.markers) == 55
    assert a.nominal_rate == 200.0
    a.start_streaming()
    frames = read_all(a)
    status = a.status()
    a.disconnect()
    assert [f.frame_number for f in frames] == list(range(705, 1045))
    assert all(f.bodies.valid[0] for f in frames)
    assert status["analog_channels_ignored"] == "69" and status["y_screen"] == "-Z"


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"file": ""}, "the parameter 'file' is not set"),
        ({"file": "/nonexistent/x.mcap"}, "does not exist"),
        ({"file": "BTS.c3d", "up_axis": "w"}, "up_axis"),
        ({"file": "BTS.c3d", "bodies": "{a: [c7, NOPE, sacrum]}"}, "NOPE"),
    ],
)
def test_bad_configurations_fail_at_configure_with_the_reason(values, words, request):
    if values["file"].endswith(".c3d"):  # a vendor file of ../shared/data/c3d
        values = {**values, "file": str(request.getfixturevalue("c3d_dir") / values["file"])}
    a = adapter(**values)
    with pytest.raises(ConfigurationError, match=words):
        a.connect()


def test_bad_parameter_values_are_refused():
    assert ReplayAdapter.parameters[-2].validate("[not a mapping") is not None
    with pytest.raises(ConfigurationError, match="end"):
        adapter(file="x.c3d", start=2.0, end=1.0)


def test_the_node_publishes_the_recorded_session_again_over_dds(ros, procs, session):
    """replay_system as installed, over DDS: every frame of the session, in order, each
    topic's message (markers, rigid bodies, skeletons) equal to the recorded one (stamps
    included), published from the recorded bytes, and /diagnostics with the replay's
    position."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.serialization import deserialize_message
    from support import CROSS_PROCESS_TIMEOUT as WAIT
    from support import wait_for

    from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

    directory, written, _ = session
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    markers = ros.subscribe("/rp/markers", Markers, qos)
    bodies = ros.subscribe("/rp/rigid_bodies", RigidBodies, qos)
    skeletons = ros.subscribe("/rp/skeletons", Skeletons, qos)
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray)
    node = procs.start(
        "mocap4r2_drivers",
        "replay_system",
        name="replay_system",
        namespace="/rp",
        params={
            "file": str(directory),
            "stamps": "original",
            "rate_factor": 0.5,
            "qos_depth": 1000,
            "diagnostics_period": 0.2,
        },
    )
    # configure, wait until our subscriptions see the publishers, then play: no frame is
    # published before anyone listens
    assert ros.change_state("/rp/replay_system", "configure")
    markers.wait_matched()
    bodies.wait_matched()
    skeletons.wait_matched()
    assert ros.change_state("/rp/replay_system", "activate")
    wait_for(
        lambda: min(len(bodies.snapshot()), len(skeletons.snapshot())) >= 120,
        3 * WAIT,
        lambda: node.log()[-2000:],
        what="frames",
    )
    got = {"markers": markers, "rigid_bodies": bodies, "skeletons": skeletons}
    types = {"markers": Markers, "rigid_bodies": RigidBodies, "skeletons": Skeletons}
    for topic, subscription in got.items():
        messages = subscription.snapshot()
        assert [m.frame_number for m in messages] == list(range(120)), topic
        # equal field for field: the floats compare exactly, so the bytes are the recorded ones
        for msg, data in zip(messages, written[topic]):
            assert msg == deserialize_message(data, types[topic]), topic

    def replay_status():
        for array in diagnostics.snapshot():
            for status in array.status:
                if status.hardware_id == "/rp/replay_system":
                    values = {kv.key: kv.value for kv in status.values}
                    if values.get("state") == "end of file":
                        return values
        return None

    wait_for(lambda: replay_status() is not None, WAIT, lambda: node.log()[-2000:], what="diagnostics")
    values = replay_status()
    assert values is not None
    assert values["frames_played"] == "120" and values["frames_left"] == "0"
    # published as recorded (the node's parameters are those of the recording), not
    # encoded again: the encoder only compared (the first frame, new structures)
    assert values["recorded_messages"] == "republished"
    assert values["frames_republished"] == "120" and values["republish_stopped"] == "no"
    assert float(values["position_s"]) == pytest.approx(119 / 120, abs=1e-3)


def test_the_node_refuses_a_damaged_session_at_configure_with_the_reason(ros, procs, session, tmp_path):
    directory, _, _ = session
    cut = tmp_path / "cut.mcap"
    data = (directory / "s1_0.mcap").read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    node = procs.start(
        "mocap4r2_drivers",
        "replay_system",
        name="replay_system",
        namespace="/rp_bad",
        params={"file": str(cut)},
    )
    assert not ros.change_state("/rp_bad/replay_system", "configure")
    assert node.wait_log("mocap4r2 recover")
    assert "configure failed" in node.log()
    assert "Traceback" not in node.log()
    assert node.alive()


def test_a_configure_after_cleanup_plays_the_file_again(session):
    directory, _, _ = session
    a = adapter(file=str(directory), rate_factor=0.0, end=0.1)
    for _ in range(2):
        a.connect()
        a.start_streaming()
        frames = read_all(a)
        a.stop_streaming()
        a.disconnect()
        assert [f.frame_number for f in frames] == list(range(13))


def test_the_pacer_never_hands_a_frame_over_before_it_is_due():
    """The wait sleeps most of the way and polls the clock for the last part: it may be
    late (the machine decides), never early, and a pause ends it without the frame."""
    pacer = Pacer(1.0)
    paused = threading.Event()
    for k in range(20):
        due = time.monotonic() + 0.0005 * (k % 4)
        assert pacer.wait_until(due, 1.0, paused)
        assert time.monotonic() >= due
    paused.set()
    assert not pacer.wait_until(time.monotonic() + 10.0, 1.0, paused)


def test_the_read_ahead_keeps_off_the_interpreter_when_a_frame_is_due():
    """hold_off asks the read-ahead thread to wait from QUIET_BEFORE before the frame the
    reader waits for until QUIET_AFTER after it, and only then."""
    pacer = Pacer(1.0)
    assert pacer.hold_off() == 0.0  # nothing awaited yet
    now = time.monotonic()
    pacer.next_due = now + 10.0
    assert pacer.hold_off() == 0.0
    pacer.next_due = now + QUIET_BEFORE / 2
    assert 0.0 < pacer.hold_off() <= QUIET_BEFORE / 2 + QUIET_AFTER
    pacer.next_due = now - 10.0
    assert pacer.hold_off() == 0.0


def test_a_read_ahead_asked_to_hold_off_still_gives_every_frame(session):
    """The read-ahead thread waits whenever hold_off says so, and frames are not lost."""
    directory, _, _ = session
    asked = []

    def hold_off() -> float:
        asked.append(1)
        return 0.0005 if len(asked) % 3 == 0 else 0.0

    source = open_source(directory, "/sim")
    reading = ReadAhead(
        source, None, start=0.0, end=math.inf, loop=False, depth=64, paced=True, hold_off=hold_off
    )
    reading.begin()
    numbers = []
    while True:
        got = reading.take(2.0)
        assert got is not None, "the read-ahead stalled"
        if isinstance(got, End):
            assert got.reason == ""
            break
        numbers.append(got[0].frame.frame_number)
    reading.close()
    expected = [timed.frame.frame_number for timed in source.frames()]
    source.close()
    assert len(expected) == 120 and numbers == expected
    assert len(asked) >= len(numbers)  # asked before every frame
