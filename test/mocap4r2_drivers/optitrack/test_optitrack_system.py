"""optitrack_system end to end, through real processes: natnet_simulator (the Motive
stand-in) -> UDP -> optitrack_system -> DDS -> a subscriber here, for every bitstream
version, unicast and multicast, compared with the scene the stand-in served."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from optitrack_stand_in import DRIVER, StandIn, fresh_namespace, start_driver  # test/fixtures
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_drivers.optitrack import protocol as nn
from mocap4r2_drivers.simulated.scene import Scene
from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

VERSIONS = ["3.0", "3.1", "4.0", "4.1", "4.5"]  # 4.2: test_motive_32_streaming_42_multicast_is_read
SCENE = {
    "seed": 21,
    "rate": 100.0,
    "latency": 0.003,
    "latency_jitter": 0.0,
    "noise": 0.0003,
    "occlusion": 0.05,
    "unlabeled_markers": 3,
    "dropped_frames": 0.0,
    "rigid_bodies": [
        {
            "name": "drone1",
            "id": 1,
            "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0, "tilt": 0.1},
        },
        {
            "name": "robot1",
            "id": 2,
            "trajectory": {"type": "figure_eight", "period": 6.0},
            "tracking_loss": {"every": 0.8, "duration": 0.3},
        },
    ],
    "skeletons": [
        {"name": "walker", "id": 3, "trajectory": {"type": "circle", "radius": 1.5, "period": 9.0}}
    ],
}


def subscribe(ros, ns: str):
    return (
        ros.subscribe(f"{ns}/rigid_bodies", RigidBodies),
        ros.subscribe(f"{ns}/markers", Markers),
        ros.subscribe(f"{ns}/skeletons", Skeletons),
    )


def _pos(p) -> list[float]:
    return [p.x, p.y, p.z]


def _quat(q) -> list[float]:
    return [q.x, q.y, q.z, q.w]


def _stamp(header) -> float:
    return header.stamp.sec + 1e-9 * header.stamp.nanosec


def proc_started_before(proc) -> float:
    """Wall-clock time shortly before the process started (its log file's creation)."""
    return proc.log_path.stat().st_ctime - 1.0


def check_stream(scene: Scene, bodies, markers, skeletons, proc, timeout: float = 30.0) -> None:
    """Names, ids, poses (Z-up), validity, markers, skeletons, frame numbers and stamps."""
    # wait until a body lost tracking after having been tracked: the validity rule shows
    tracked = []

    def lost_after_tracked(m) -> bool:
        if len(m.rigid_bodies) != 2:
            return False
        if m.rigid_bodies[1].tracking_valid:
            tracked.append(m.frame_number)
            return False
        return bool(tracked) and m.frame_number > tracked[-1]

    lost = bodies.wait_for(lost_after_tracked, timeout=timeout)
    # wall-clock time at which this subscriber got it (the collector keeps monotonic times)
    received_at = time.time() - (time.monotonic() - bodies.times[bodies.messages.index(lost)])
    messages = bodies.snapshot()
    assert messages, proc.log()
    for msg in messages[-60:]:
        assert msg.header.frame_id == "mocap"
        assert [b.name for b in msg.rigid_bodies] == ["drone1", "robot1"]
        assert [b.id for b in msg.rigid_bodies] == [1, 2]
        truth = scene.frame(msg.frame_number).bodies
        for body, valid, position, orientation in zip(
            msg.rigid_bodies, truth.valid, truth.positions, truth.orientations
        ):
            assert body.tracking_valid == bool(valid)
            if valid:
                np.testing.assert_allclose(_pos(body.pose.position), position, atol=2e-6)
                np.testing.assert_allclose(_quat(body.pose.orientation), orientation, atol=2e-6)
            # the body's markers (those ever seen), by member: NatNet ids, names from the models
            members = [m.id - (body.id << 16) for m in body.markers]
            assert members == sorted(members) and set(members) <= {1, 2, 3, 4}
            assert [m.name for m in body.markers] == [f"{body.name}:marker{k}" for k in members]
    # a lost body keeps its last good pose (never Motive's zeros)
    before = [m for m in messages if m.frame_number < lost.frame_number and m.rigid_bodies[1].tracking_valid]
    assert before, "robot1 must have been tracked before it was lost"
    assert _pos(lost.rigid_bodies[1].pose.position) == _pos(before[-1].rigid_bodies[1].pose.position)
    assert _pos(lost.rigid_bodies[1].pose.position) != [0.0, 0.0, 0.0]
    numbers = [m.frame_number for m in messages]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    # stamps: capture times on the ROS clock (arrival at the driver - the latency Motive
    # reports, see test_announced_rate_and_latency), never after the subscriber got them
    assert proc_started_before(proc) < _stamp(lost.header) <= received_at

    # each topic has its own reader, matched and served on its own: under load the markers
    # and skeletons of these frames may still be on their way (CI saw skeletons none yet)
    # (if a reader matched late, its first frames come after those above: the bodies
    # received by now are compared, not only those seen when the loss showed)
    def shared_with(collector) -> tuple[list[int], dict] | None:
        by_number = {m.frame_number: m for m in collector.snapshot()}
        common = [m.frame_number for m in bodies.snapshot()[-60:] if m.frame_number in by_number]
        return (common, by_number) if common else None

    common, by_number = wait_for(
        lambda: shared_with(markers), timeout, what="markers sharing frame numbers with rigid bodies"
    )
    for n in common[-20:]:
        msg = by_number[n]
        assert _stamp(msg.header) == _stamp(next(m for m in bodies.snapshot() if m.frame_number == n).header)
        truth = scene.frame(n).markers
        expected = {
            int(i): (name, pos, occ)
            for i, name, pos, occ in zip(
                nn.marker_id([1] * 4 + [2] * 4, [1, 2, 3, 4] * 2).tolist(),
                truth.names,
                truth.positions,
                truth.occluded,
            )
        }
        labeled = [m for m in msg.markers if m.id != -1]
        unlabeled = [m for m in msg.markers if m.id == -1]
        assert {m.id for m in labeled} <= set(expected)
        for m in labeled:
            name, pos, occ = expected[m.id]
            assert m.name == name and m.occluded == bool(occ)
            if not occ:
                np.testing.assert_allclose(_pos(m.position), pos, atol=2e-6)
        assert len(unlabeled) == 3 and all(m.name == "" for m in unlabeled)
        np.testing.assert_allclose([_pos(m.position) for m in unlabeled], truth.positions[8:], atol=2e-6)

    common, by_number = wait_for(
        lambda: shared_with(skeletons), timeout, what="skeletons sharing frame numbers with rigid bodies"
    )
    msg = by_number[common[-1]]
    truth = scene.frame(msg.frame_number).skeletons
    assert [s.name for s in msg.skeletons] == ["walker"] and msg.skeletons[0].id == 3
    segments = msg.skeletons[0].segments
    assert [s.name for s in segments] == list(truth.segments.names)
    assert [s.parent_id for s in segments] == truth.segments.parent_ids.tolist()
    assert segments[0].parent_id == -1
    np.testing.assert_allclose([_pos(s.pose.position) for s in segments], truth.segments.positions, atol=5e-6)
    np.testing.assert_allclose(
        [_quat(s.pose.orientation) for s in segments], truth.segments.orientations, atol=5e-6
    )


@pytest.mark.parametrize("mode", ["multicast", "unicast"])
@pytest.mark.parametrize("version", VERSIONS)
def test_stream_end_to_end(ros, procs, tmp_path, version, mode):
    stand_in = StandIn(procs, tmp_path, "--natnet-version", version, f"--{mode}", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, mode)
    bodies, markers, skeletons = subscribe(ros, ns)
    check_stream(stand_in.scene, bodies, markers, skeletons, driver)
    log = driver.log()
    assert f"NatNet {version}" in log and "model definitions: 2 rigid bodies (drone1, robot1)" in log
    assert "configured: 2 rigid bodies" in log


@pytest.mark.parametrize("version", ["4.1", "4.2"])
def test_z_up_stream_and_local_skeletons(ros, procs, tmp_path, version):
    """Local bones composed to world poses; as a Motive 3.2+ (4.2) the stand-in streams
    them relative to the bones' rotational offsets, which the driver applies."""
    stand_in = StandIn(
        procs,
        tmp_path,
        "--natnet-version",
        version,
        "--up-axis",
        "z",
        "--skeleton-coordinates",
        "local",
        scene=SCENE,
    )
    driver, ns = start_driver(procs, stand_in, "multicast", up_axis="z", skeleton_coordinates="local")
    check_stream(stand_in.scene, *subscribe(ros, ns), driver)


def test_wrong_up_axis_setting_shows(ros, procs, tmp_path):
    """The axis parameter really acts: a Y-up stream read as Z-up is not the scene."""
    stand_in = StandIn(procs, tmp_path, scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "multicast", up_axis="z")
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    msg = bodies.wait_for(lambda m: m.rigid_bodies and m.rigid_bodies[0].tracking_valid, timeout=30)
    truth = stand_in.scene.frame(msg.frame_number).bodies.positions[0]
    got = _pos(msg.rigid_bodies[0].pose.position)
    np.testing.assert_allclose(got, [truth[0], truth[2], -truth[1]], atol=2e-6)  # Motive's Y-up, untouched


def settled_threads(proc, steady: float = 1.0) -> list[str]:
    """The process's thread names once they have not changed for ``steady`` s."""
    last = {"names": None, "since": time.monotonic()}

    def steady_names():
        names = sorted(proc.threads())
        if names != last["names"]:
            last.update(names=names, since=time.monotonic())
        return names if time.monotonic() - last["since"] >= steady else None

    return wait_for(steady_names, WAIT, lambda: last["names"], what="a steady set of threads")


@pytest.mark.parametrize("mode", ["unicast", "multicast"])
def test_server_restart_mid_stream(ros, procs, tmp_path, mode):
    stand_in = StandIn(procs, tmp_path, f"--{mode}", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, mode)
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    bodies.wait_for(lambda m: m.frame_number > 20, timeout=30)
    threads_before = settled_threads(driver)

    stand_in.proc.stop()
    # the driver notices the silence and says why
    assert driver.wait_log("no answer from 127.0.0.1", WAIT), driver.log()
    stand_in.start(stand_in.command_port, stand_in.data_port)
    bodies.clear()
    first = bodies.wait_for(timeout=WAIT)
    delay = bodies.times[0] - stand_in.ready_monotonic
    assert delay < 2.0, f"frames again {delay:.2f} s after the restart"
    assert [b.name for b in first.rigid_bodies] == ["drone1", "robot1"]
    assert driver.wait_log("frames arriving again", WAIT), driver.log()
    # threads of the old connection end shortly after the new one streams
    wait_for(
        lambda: sorted(driver.threads()) == threads_before,
        WAIT,
        lambda: sorted(driver.threads()),
        what=f"the threads before the restart {threads_before}",
    )
    assert sorted(driver.threads()) == threads_before, "the reconnection must not leak threads"
    assert driver.alive()


def test_names_follow_motive_model_changes(ros, procs, tmp_path):
    stand_in = StandIn(procs, tmp_path, "--unicast", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "unicast")
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    bodies.wait_for(lambda m: m.rigid_bodies and m.rigid_bodies[0].name == "drone1", timeout=30)
    stand_in.command("RenameRigidBody,1,quadrotor")
    msg = bodies.wait_for(lambda m: m.rigid_bodies and m.rigid_bodies[0].name == "quadrotor", timeout=WAIT)
    assert msg.rigid_bodies[0].id == 1 and msg.rigid_bodies[1].name == "robot1"
    assert driver.wait_log("models changed: requesting model definitions", WAIT)


def test_announced_rate_and_latency(ros, procs, tmp_path):
    from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS, SYSTEMS_TOPIC
    from mocap4r2_interfaces.msg import MocapSystemInfo

    stand_in = StandIn(procs, tmp_path, "--rate", "150", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "multicast", diagnostics_period=0.3)
    systems = ros.subscribe(SYSTEMS_TOPIC, MocapSystemInfo, qos=SYSTEMS_LISTENER_QOS)
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray)
    info = systems.wait_for(lambda m: m.system == f"{ns}/optitrack" and m.state.label == "active", timeout=30)
    assert info.type == "optitrack" and info.frame_id == "mocap"
    assert info.frame_rate == pytest.approx(150.0)  # Motive's answer to "FrameRate"

    def report(msg):
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if status.hardware_id == f"{ns}/optitrack" and int(values.get("frames", "0")) > 0:
                return values
        return None

    values = report(diagnostics.wait_for(report, timeout=WAIT))
    # arrival - stamp: Motive's mid-exposure -> transmit (3 ms in the scene), then the
    # datagram's way to the hand-over (loopback, decoding; milliseconds on a loaded machine)
    assert 3.0 <= float(values["latency_mean_ms"]) < 50.0, values["latency_mean_ms"]
    assert values["natnet_version"] == "4.1" and values["server_application"] == "Motive 3.1.0.0"
    assert values["connection"].startswith("multicast 239.255.42.99:")


def test_mode_mismatch_is_followed_with_a_warning(ros, procs, tmp_path):
    stand_in = StandIn(procs, tmp_path, "--multicast", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "unicast")
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    bodies.wait_for(lambda m: len(m.rigid_bodies) == 2, timeout=30)
    assert "connection_type is unicast but the server streams multicast" in driver.log()


def test_configure_without_server_fails_clearly_then_succeeds(ros, procs, tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ns = fresh_namespace()
    node = f"{ns}/optitrack"
    driver = procs.start(
        *DRIVER,
        name="optitrack",
        namespace=ns,
        params={"command_port": port, "connection_type": "unicast", "connect_timeout": 1.0},
    )
    ros.wait_state(node, "unconfigured", timeout=30)
    assert not ros.change_state(node, "configure")
    assert driver.wait_log("no answer (NAT_SERVERINFO) from 127.0.0.1", WAIT), driver.log()
    assert ros.get_state(node) == "unconfigured"
    StandIn(procs, tmp_path, "--unicast", command_port=port, scene=SCENE)
    assert ros.change_state(node, "configure")
    assert ros.change_state(node, "activate")
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    assert bodies.wait_for(lambda m: len(m.rigid_bodies) == 2, timeout=WAIT)


def test_bad_parameters_are_refused_with_a_reason(ros, procs):
    ns = fresh_namespace()
    driver = procs.start(
        *DRIVER,
        name="optitrack",
        namespace=ns,
        params={"server_address": "motive-pc", "connection_type": "broadcast"},
    )
    ros.wait_state(f"{ns}/optitrack", "unconfigured", timeout=30)
    log = driver.log()
    assert "server_address must be an IPv4 address like 192.168.1.10" in log
    assert "connection_type must be one of ['multicast', 'unicast']" in log
    assert driver.alive()


def test_garbage_on_the_data_port_is_counted_not_fatal(ros, procs, tmp_path):
    stand_in = StandIn(procs, tmp_path, "--multicast", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "multicast", diagnostics_period=0.2)
    bodies = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray)
    bodies.wait_for(timeout=30)
    rng = np.random.default_rng(7)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        for i in range(300):
            junk = rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
            if i % 2:
                junk = nn.pack(nn.MessageId.FRAMEOFDATA, junk)  # a frame header with garbage after it
            s.sendto(junk, (nn.DEFAULT_MULTICAST_ADDRESS, stand_in.data_port))
    bodies.clear()
    assert bodies.wait_for(lambda m: len(m.rigid_bodies) == 2, timeout=WAIT), "still streaming"
    fqn = f"{ns}/optitrack"

    def counted(msg) -> bool:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if status.hardware_id == fqn and int(values.get("decode_errors", "0")) > 0:
                return True
        return False

    diagnostics.wait_for(counted, timeout=WAIT)
    assert driver.log().count("dropped an undecodable NatNet frame packet") == 1, "logged once, then counted"
    assert driver.alive()


def test_motive_32_streaming_42_multicast_is_read(ros, procs, tmp_path):
    """Issue 37: every Motive since 2024 streams bitstream 4.2 or later, and multicast (the
    default) streams the installed Motive's own bitstream. The driver refused 4.2 at
    configure; it must read it."""
    stand_in = StandIn(procs, tmp_path, "--natnet-version", "4.2", "--multicast", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "multicast")
    bodies, markers, skeletons = subscribe(ros, ns)
    check_stream(stand_in.scene, bodies, markers, skeletons, driver)
    log = driver.log()
    assert "NatNet 4.2" in log and "not supported" not in log


def _diagnostic_values(diagnostics, fqn: str, predicate) -> dict[str, str]:
    found: dict[str, str] = {}

    def match(msg) -> bool:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if status.hardware_id == fqn and predicate(values):
                found.update(values)
                return True
        return False

    diagnostics.wait_for(match, timeout=WAIT)
    return found


def test_a_future_motive_multicast_is_read_and_its_extras_counted(ros, procs, tmp_path):
    """A Motive newer than any known (4.6: an unknown frame section and description type on
    top of 4.5's IMU/GPIO sections and anchor markers) multicast: read with the 4.5 layout,
    each skipped part counted in /diagnostics, each unknown one warned about once."""
    stand_in = StandIn(procs, tmp_path, "--future-motive", "--multicast", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "multicast", diagnostics_period=0.2, bitstream_version="'4.1'")
    bodies, markers, skeletons = subscribe(ros, ns)
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray)
    check_stream(stand_in.scene, bodies, markers, skeletons, driver)
    values = _diagnostic_values(
        diagnostics, f"{ns}/optitrack", lambda v: int(v.get("skipped_imu", "0").split()[0]) > 10
    )
    assert values["natnet_version"] == "4.6"
    assert values["bitstream_requested"] == "4.1 (multicast: Motive decides)"
    for key in (
        "skipped_gpio",
        "skipped_anchor_marker",
        "skipped_frame_section_11",
        "skipped_description_type_99",
    ):
        assert key in values, values
    log = driver.log()
    assert "not asked for over multicast: Motive streams its own bitstream" in log
    assert log.count("skipping frame section 11 of the frames") == 1
    assert log.count("skipping description type 99 of the model definitions") == 1


def test_unicast_bitstream_version_is_asked_for(ros, procs, tmp_path):
    """bitstream_version over unicast: a 4.5 stand-in serves the driver 4.1."""
    stand_in = StandIn(procs, tmp_path, "--natnet-version", "4.5", "--unicast", scene=SCENE)
    driver, ns = start_driver(procs, stand_in, "unicast", diagnostics_period=0.2, bitstream_version="'4.1'")
    bodies, markers, skeletons = subscribe(ros, ns)
    diagnostics = ros.subscribe("/diagnostics", DiagnosticArray)
    check_stream(stand_in.scene, bodies, markers, skeletons, driver)
    values = _diagnostic_values(diagnostics, f"{ns}/optitrack", lambda v: v.get("natnet_version") == "4.1")
    assert values["bitstream_requested"] == "4.1"
    assert not any(key.startswith("skipped_") for key in values), values  # 4.1: no IMU/GPIO sections
    assert "NatNet 4.1" in stand_in.proc.log()  # the stand-in says what the client gets
