"""qualisys_system end to end: the qtm_simulator process serves a scene over the QTM RT
protocol, the qualisys_system process (qtm-rt inside) publishes it over DDS, and what
arrives here is compared with the scene, frame by frame."""

from __future__ import annotations

import asyncio
import math
import socket
import time

import numpy as np
import pytest
import qtm_rt
from qtm_stand_in import start_qtm  # test/fixtures
from rclpy.qos import QoSProfile
from scenes import cart_on_a_figure_eight, circling_drone, circling_walker  # test/fixtures
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

DRIVER = ("mocap4r2_drivers", "qualisys_system")
SCENE = {
    "seed": 5,
    "rate": 100.0,
    "latency": 0.003,
    "noise": 0.0003,
    "occlusion": 0.03,
    "dropped_frames": 0.03,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        circling_drone(),
        cart_on_a_figure_eight(every=1.0, duration=0.3),
        {
            "name": "table",
            "id": 3,
            "trajectory": {"type": "static", "position": [1.5, -1.0, 0.75], "yaw": 0.3},
        },
    ],
    "skeletons": [circling_walker(every=1.5, duration=0.4)],
}


def free_port_pair() -> int:
    """A base port whose little-endian port (base + 1) is free."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1] - 1


def subscribe(ros, namespace):
    # a deep history: this process deserializes three topics in Python and may fall
    # behind for a moment on a loaded machine
    deep = QoSProfile(depth=1000)
    return {
        "markers": ros.subscribe(f"{namespace}/markers", Markers, deep),
        "bodies": ros.subscribe(f"{namespace}/rigid_bodies", RigidBodies, deep),
        "skeletons": ros.subscribe(f"{namespace}/skeletons", Skeletons, deep),
    }


def values(pose) -> tuple[float, ...]:
    p, q = pose.position, pose.orientation
    return (p.x, p.y, p.z, q.x, q.y, q.z, q.w)


def stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def test_driver_publishes_exactly_what_the_stand_in_served(ros, procs, tmp_path):
    from mocap4r2_control.control_plane import SYSTEMS_LISTENER_QOS, SYSTEMS_TOPIC
    from mocap4r2_interfaces.msg import MocapSystemInfo

    qtm, base, scene = start_qtm(procs, tmp_path, SCENE)
    systems = ros.subscribe(SYSTEMS_TOPIC, MocapSystemInfo, SYSTEMS_LISTENER_QOS)
    topics = subscribe(ros, "/qs1")
    driver = procs.start(
        *DRIVER,
        name="qualisys",
        namespace="/qs1",
        params={"port": base, "autostart": True, "qos_depth": 1000},
    )
    topics["bodies"].wait_for(timeout=30)
    # about 3 s of stream, counted in frames (a stalled machine streams fewer per second)
    wait_for(
        lambda: len(topics["bodies"].snapshot()) >= 250,
        2 * WAIT,
        topics["bodies"]._describe,
        what="250 frames",
    )
    driver.stop()
    rec = {k: v.snapshot() for k, v in topics.items()}
    assert len(rec["bodies"]) > 100, driver.log()

    # frame numbers are QTM's: increasing, never a frame the scene dropped, and the
    # gaps are the scene's drops (but for rare frames the stand-in skips when a shared machine stalls)
    numbers = [m.frame_number for m in rec["bodies"]]
    assert all(b > a for a, b in zip(numbers, numbers[1:]))
    assert not any(scene.is_dropped(k) for k in numbers)
    expected_numbers = [k for k in range(numbers[0], numbers[-1] + 1) if not scene.is_dropped(k)]
    assert len(numbers) >= 0.95 * len(expected_numbers)

    # one stamp per frame across the topics; stamps follow QTM's timestamps
    by_frame: dict[int, set] = {}
    for key in rec:
        for msg in rec[key]:
            by_frame.setdefault(msg.frame_number, set()).add((msg.header.stamp.sec, msg.header.stamp.nanosec))
    assert all(len(s) == 1 for s in by_frame.values())
    stamps = np.array([stamp(m) for m in rec["bodies"]])
    # stamp = QTM's timestamp (k / rate) mapped to the host clock by the clock model (by
    # the smallest delay seen so far during its first 0.3 s): once the model stamps, the
    # offset moves by microseconds (the fitted drift, the envelope lowered by a faster
    # frame; tens of microseconds on a loaded machine), never by the milliseconds a
    # stamp on arrival jitters
    offsets = stamps - np.asarray(numbers) / scene.rate
    modelled = np.diff(offsets)[np.asarray(numbers[1:]) >= numbers[0] + int(0.5 * scene.rate)]
    assert modelled.size > 100
    assert np.all(np.abs(modelled) < 0.25e-3), np.max(np.abs(modelled))
    assert abs(offsets[0] - offsets[-1]) < 0.05
    assert abs(np.median(np.diff(stamps) / np.diff(numbers)) - 0.01) < 1e-6
    assert abs(stamps[-1] - time.time()) < 30

    names = [b.name for b in scene.description.bodies]
    last_good: dict[int, tuple] = {}
    saw_invalid = False
    seen_markers: dict[int, set] = {}
    for msg in rec["bodies"]:
        frame = scene.frame(msg.frame_number)
        assert [b.name for b in msg.rigid_bodies] == names
        assert [b.id for b in msg.rigid_bodies] == [1, 2, 3]
        for row, body in enumerate(msg.rigid_bodies):
            v = values(body.pose)
            assert all(math.isfinite(x) for x in v)
            assert body.tracking_valid == bool(frame.bodies.valid[row])
            if body.tracking_valid:
                np.testing.assert_allclose(v[:3], frame.bodies.positions[row], atol=2e-6)
                assert abs(abs(np.dot(v[3:], frame.bodies.orientations[row])) - 1) < 1e-6
                assert body.mean_error == pytest.approx(frame.bodies.mean_errors[row], abs=1e-6)
                last_good[body.id] = v
            else:
                saw_invalid = True
                if body.id in last_good:
                    assert v == last_good[body.id], "an untracked body must keep its last pose"
            # a body's markers in the scene's order; one never measured since the driver
            # started has no position to hold and is left out (README, validity rule),
            # which happens when the driver starts during the cart's tracking loss
            published = [m.name for m in body.markers]
            expected = list(scene.description.bodies[row].marker_names)
            assert published == [n for n in expected if n in published]
            for name in seen_markers.get(body.id, ()):
                assert name in published, "a marker once measured must stay in the message"
            seen_markers.setdefault(body.id, set()).update(m.name for m in body.markers if not m.occluded)
    assert saw_invalid, "the cart's tracking losses should have shown"

    labels = [n for b in scene.description.bodies for n in b.marker_names]
    saw_occluded = False
    for msg in rec["markers"]:
        frame = scene.frame(msg.frame_number)
        labeled = [m for m in msg.markers if m.id != -1]
        published = [m.name for m in labeled]
        # in QTM's label order; a label never measured since the start is left out
        assert published == [n for n in labels if n in published]
        em = frame.bodies.markers
        for marker in labeled:
            row = labels.index(marker.name)
            assert marker.occluded == bool(em.occluded[row])
            if not marker.occluded:
                p = marker.position
                np.testing.assert_allclose((p.x, p.y, p.z), em.positions[row], atol=2e-6)
            else:
                saw_occluded = True
        strays = frame.markers.positions[frame.markers.ids == -1]
        unlabeled = [(m.position.x, m.position.y, m.position.z) for m in msg.markers if m.id == -1]
        np.testing.assert_allclose(unlabeled, strays, atol=2e-6)
    assert saw_occluded

    spec = scene.description.skeletons[0]
    saw_lost = False
    for msg in rec["skeletons"]:
        frame = scene.frame(msg.frame_number)
        (skeleton,) = msg.skeletons
        assert skeleton.name == "walker" and skeleton.tracking_valid == bool(frame.skeletons.valid[0])
        assert [s.id for s in skeleton.segments] == spec.segment_ids.tolist()
        assert [s.parent_id for s in skeleton.segments] == spec.parent_ids.tolist()
        if skeleton.tracking_valid:
            got = np.array([values(s.pose)[:3] for s in skeleton.segments])
            np.testing.assert_allclose(got, frame.skeletons.segments.positions, atol=2e-6)
        else:
            saw_lost = True
            assert not any(s.tracking_valid for s in skeleton.segments)
    assert saw_lost
    # announced on the control plane with QTM's frequency as the nominal rate
    active = systems.wait_for(
        lambda m: m.system == "/qs1/qualisys" and m.state.label == "active", timeout=WAIT
    )
    assert active.type == "qualisys" and active.frame_rate == 100.0


def test_reconnects_when_qtm_goes_away_and_comes_back(ros, procs, tmp_path):
    base = free_port_pair()
    qtm, _, _ = start_qtm(procs, tmp_path, SCENE, base)
    bodies = ros.subscribe("/qs2/rigid_bodies", RigidBodies)
    driver = procs.start(
        *DRIVER,
        name="qualisys",
        namespace="/qs2",
        params={"port": base, "autostart": True, "reconnect_period": 0.3},
    )
    bodies.wait_for(timeout=30)
    qtm.stop()  # QTM says it shuts down and closes
    # frames sent before the shutdown may still be in flight: wait until none arrived for 1 s
    wait_for(
        lambda: bodies.quiet(1.0),
        WAIT,
        lambda: f"{len(bodies.times)} frames, still arriving",
        what="the stream to go quiet",
    )
    bodies.clear()
    time.sleep(0.5)  # deliberately lets time pass: no frame may arrive while QTM is away
    assert not bodies.snapshot(), "frames while QTM is away?"
    assert driver.alive()
    ros.wait_state("/qs2/qualisys", "active", timeout=WAIT)

    start_qtm(procs, tmp_path, SCENE, base)  # QTM is back, its measurement starts anew
    back = bodies.wait_for(timeout=30)
    assert back.frame_number < 1000, "frame numbers of the new measurement"
    assert driver.wait_log("went away", timeout=WAIT)
    driver.stop()


def test_configure_fails_clearly_when_qtm_is_not_there(ros, procs):
    driver = procs.start(
        *DRIVER, name="qualisys", namespace="/qs3", params={"port": free_port_pair(), "connect_timeout": 2.0}
    )
    ros.wait_state("/qs3/qualisys", "unconfigured", timeout=WAIT)
    assert not ros.change_state("/qs3/qualisys", "configure")
    assert driver.wait_log("cannot connect to QTM at 127.0.0.1", timeout=WAIT), driver.log()
    assert driver.alive()
    assert ros.get_state("/qs3/qualisys") == "unconfigured"


def test_takes_control_only_when_asked_and_with_the_password(ros, procs, tmp_path):
    _, base, _ = start_qtm(procs, tmp_path, SCENE, extra=["--password", "pw"])
    node = "/qs4/qualisys"
    driver = procs.start(
        *DRIVER,
        name="qualisys",
        namespace="/qs4",
        params={"port": base, "take_control": True, "password": "nope"},
    )
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert not ros.change_state(node, "configure")
    assert driver.wait_log("Wrong or missing password", timeout=WAIT), driver.log()
    driver.stop()

    async def other_client_takes_control() -> bytes | str:
        c = await qtm_rt.connect("127.0.0.1", port=base + 1, version="1.25", timeout=10)
        try:
            return await c.take_control("pw")
        except qtm_rt.QRTCommandException as exc:
            return str(exc)
        finally:
            c.disconnect()

    master = procs.start(
        *DRIVER,
        name="qualisys",
        namespace="/qs4",
        params={"port": base, "take_control": True, "password": "pw"},
    )
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert ros.change_state(node, "configure")
    assert "is already master" in asyncio.run(other_client_takes_control())
    master.stop()

    procs.start(*DRIVER, name="qualisys", namespace="/qs4", params={"port": base})
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert ros.change_state(node, "configure")
    assert asyncio.run(other_client_takes_control()) == b"You are now master"


def test_deactivate_stops_the_stream_and_activate_resumes_it(ros, procs, tmp_path):
    _, base, _ = start_qtm(procs, tmp_path, SCENE)
    node = "/qs5/qualisys"
    bodies = ros.subscribe("/qs5/rigid_bodies", RigidBodies)
    procs.start(*DRIVER, name="qualisys", namespace="/qs5", params={"port": base, "components": ["6d"]})
    ros.wait_state(node, "unconfigured", timeout=WAIT)
    assert ros.change_state(node, "configure") and ros.change_state(node, "activate")
    first = bodies.wait_for(timeout=WAIT)
    assert [b.name for b in first.rigid_bodies] == ["drone", "cart", "table"]
    assert all(b.mean_error < 0 for b in first.rigid_bodies), "6d has no residuals: unknown"
    assert ros.change_state(node, "deactivate")
    wait_for(
        lambda: bodies.quiet(0.5),
        WAIT,
        lambda: f"{len(bodies.times)} frames, still arriving",
        what="the stream to go quiet",
    )
    last_before = bodies.snapshot()[-1].frame_number
    bodies.clear()
    time.sleep(1.0)  # deliberately lets time pass: no frame may arrive while inactive
    assert not bodies.snapshot()
    assert ros.change_state(node, "activate")
    later = bodies.wait_for(timeout=WAIT)
    # the stream resumes with current frames, not with frames left from before
    assert later.frame_number > last_before + 100
