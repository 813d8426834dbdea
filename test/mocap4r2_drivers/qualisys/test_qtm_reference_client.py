"""Proof of the QTM stand-in: Qualisys' own SDK (qtm-rt, unmodified) talks to the
``qtm_simulator`` process over real TCP, reads its parameters and streams frames whose
values are those of the simulated scene.

Everything the SDK decodes is compared with ``Scene.frame(k)`` computed here, and the
parameter XML is read with ElementTree directly (not with the driver's parser).
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import struct
import subprocess
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import qtm_rt
import yaml
from qtm_rt.packet import QRTEvent
from scenes import cart_on_a_figure_eight, circling_drone, circling_walker  # test/fixtures
from scipy.spatial.transform import Rotation

from mocap4r2_drivers.simulated.scene import Scene

PASSWORD = "s3cret"
SCENE = {
    "seed": 11,
    "rate": 100.0,
    "latency": 0.002,
    "noise": 0.0003,
    "occlusion": 0.05,
    "dropped_frames": 0.05,
    "unlabeled_markers": 3,
    "rigid_bodies": [
        circling_drone(),
        cart_on_a_figure_eight(every=2.0, duration=0.5),
    ],
    "skeletons": [circling_walker(every=3.0, duration=0.6)],
}


class Simulator:
    def __init__(self, proc, port: int, scene: Scene):
        self.proc = proc
        self.port = port  # the little-endian RT port qtm-rt connects to
        self.scene = scene


def start_simulator(procs, tmp_path, extra=()) -> Simulator:
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(SCENE))
    proc = procs.start(
        "mocap4r2_drivers", "qtm_simulator", ros=False, args=["--scene", str(path), "--port", "0", *extra]
    )
    assert proc.wait_log("qtm_simulator ready", timeout=30), proc.log()
    port = int(re.search(r"RT port 127\.0\.0\.1:(\d+)", proc.log()).group(1))
    return Simulator(proc, port, Scene.from_file(path))


@pytest.fixture
def sim(procs, tmp_path) -> Simulator:
    return start_simulator(procs, tmp_path, ["--password", PASSWORD])


def run(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def connect(sim: Simulator, **kwargs):
    connection = await qtm_rt.connect("127.0.0.1", port=sim.port, version="1.25", timeout=10, **kwargs)
    assert connection is not None, sim.proc.log()
    return connection


def test_sdk_connects_and_gets_version_byte_order_and_state(sim):
    async def body():
        c = await connect(sim)
        version = await c.qtm_version()
        order = await c.byte_order()
        state = await c.get_state()
        c.disconnect()
        return version, order, state

    version, order, state = run(body())
    assert version.startswith(b"QTM Version is")
    assert order == b"Byte order is little endian"
    assert state == QRTEvent.EventConnected


def test_unsupported_protocol_version_is_refused(sim):
    async def body():
        return await qtm_rt.connect("127.0.0.1", port=sim.port, version="1.99", timeout=5)

    assert run(body()) is None


def test_sdk_reads_parameters_that_describe_the_scene(sim):
    async def body():
        c = await connect(sim)
        xml = await c.get_parameters(["all"])
        only_6d = await c.get_parameters(["6d"])
        c.disconnect()
        return xml, only_6d

    xml, only_6d = run(body())
    root = ET.fromstring(xml)
    assert root.tag == "QTM_Parameters_Ver_1.25"
    d = sim.scene.description
    assert float(root.findtext("General/Frequency")) == 100.0
    assert root.findtext("The_3D/AxisUpwards") == "+Z"
    labels = [e.text for e in root.findall("The_3D/Label/Name")]
    assert labels == [n for b in d.bodies for n in b.marker_names]
    assert int(root.findtext("The_3D/Labels")) == len(labels)
    bodies = root.findall("The_6D/Body")
    assert [b.findtext("Name") for b in bodies] == ["drone", "cart"]
    points = bodies[0].findall("Points/Point")
    np.testing.assert_allclose(
        [[float(p.get(a)) for a in "XYZ"] for p in points], d.bodies[0].marker_layout * 1000.0, atol=1e-5
    )
    assert [p.get("Name") for p in points] == list(d.bodies[0].marker_names)
    segments = root.findall("Skeletons/Skeleton/Segments//Segment")
    assert [int(s.get("ID")) for s in segments] == d.skeletons[0].segment_ids.tolist()
    small = ET.fromstring(only_6d)
    assert small.find("The_6D") is not None and small.find("The_3D") is None


def _check_against_scene(scene: Scene, packet) -> dict[str, int]:
    """Compare one SDK-decoded packet with the scene; returns what was seen."""
    k = packet.framenumber
    expected = scene.frame(k)
    assert packet.timestamp == round(k * 1e6 / scene.rate)
    seen = {"invalid_bodies": 0, "occluded": 0, "skeletons_unseen": 0}

    _, bodies = packet.get_6d_residual()
    eb = expected.bodies
    for row, (position, rotation, residual) in enumerate(bodies):
        if not eb.valid[row]:
            assert np.isnan(position.x) and np.isnan(rotation.matrix[0]) and np.isnan(residual.residual)
            seen["invalid_bodies"] += 1
            continue
        np.testing.assert_allclose(tuple(position), eb.positions[row] * 1000.0, atol=2e-3)
        # QTM's 9 floats are column-major: reshape, then transpose into a row-major matrix
        matrix = np.asarray(rotation.matrix).reshape(3, 3).T
        np.testing.assert_allclose(matrix, Rotation.from_quat(eb.orientations[row]).as_matrix(), atol=1e-6)
        assert residual.residual == pytest.approx(eb.mean_errors[row] * 1000.0, abs=1e-3)

    _, labeled = packet.get_3d_markers_residual()
    em = eb.markers
    assert len(labeled) == len(em)
    for row, marker in enumerate(labeled):
        if em.occluded[row]:
            assert np.isnan(marker.x)
            seen["occluded"] += 1
        else:
            np.testing.assert_allclose((marker.x, marker.y, marker.z), em.positions[row] * 1000.0, atol=2e-3)
            assert marker.residual == pytest.approx(em.residuals[row] * 1000.0, abs=1e-3)

    _, unlabeled = packet.get_3d_markers_no_label_residual()
    strays = expected.markers.positions[expected.markers.ids == -1]
    np.testing.assert_allclose([(m.x, m.y, m.z) for m in unlabeled], strays * 1000.0, atol=2e-3)

    _, skeletons = packet.get_skeletons()
    es = expected.skeletons
    for i, segments in enumerate(skeletons):
        if not es.valid[i]:
            assert segments == []
            seen["skeletons_unseen"] += 1
            continue
        a = int(es.segment_offsets[i])
        assert [s[0] for s in segments] == es.segments.ids[a : a + len(segments)].tolist()
        for j, (_, position, rotation) in enumerate(segments):
            np.testing.assert_allclose(tuple(position), es.segments.positions[a + j] * 1000.0, atol=2e-3)
            np.testing.assert_allclose(tuple(rotation), es.segments.orientations[a + j], atol=1e-6)
    return seen


def test_streamed_frames_are_the_scene_frames(sim):
    packets = []

    async def body():
        c = await connect(sim)
        await c.stream_frames(
            frames="allframes",
            components=["6dres", "3dres", "3dnolabelsres", "skeleton:global"],
            on_packet=packets.append,
        )
        # 3 s at 100 Hz covers a tracking loss of the cart and of the walker
        while len(packets) < 300:
            await asyncio.sleep(0.05)
        await c.stream_frames_stop()
        c.disconnect()

    run(body(), timeout=120)
    numbers = [p.framenumber for p in packets]
    assert all(b > a for a, b in zip(numbers, numbers[1:])), "frame numbers must increase"
    assert not any(sim.scene.is_dropped(k) for k in numbers), "a frame the scene drops was sent"
    assert any(sim.scene.is_dropped(k) for k in range(numbers[0], numbers[-1])), "drops show as gaps"
    totals: dict[str, int] = {}
    for packet in packets:
        for key, value in _check_against_scene(sim.scene, packet).items():
            totals[key] = totals.get(key, 0) + value
    # the scene's occlusions, tracking losses and unseen skeletons went over the wire
    assert totals["invalid_bodies"] > 0 and totals["occluded"] > 0 and totals["skeletons_unseen"] > 0


def test_frequency_divisor_current_frame_and_stop(sim):
    packets = []

    async def body():
        c = await connect(sim)
        current = await c.get_current_frame(["6d", "3d"])
        await c.stream_frames(frames="frequencydivisor:4", components=["6d"], on_packet=packets.append)
        while len(packets) < 20:
            await asyncio.sleep(0.05)
        await c.stream_frames_stop()
        await asyncio.sleep(0.3)
        count = len(packets)
        await asyncio.sleep(0.5)
        after = len(packets)
        c.disconnect()
        return current, count, after

    current, count, after = run(body())
    _, bodies = current.get_6d()
    expected = sim.scene.frame(current.framenumber).bodies
    for row, (position, _) in enumerate(bodies):
        if expected.valid[row]:
            np.testing.assert_allclose(tuple(position), expected.positions[row] * 1000.0, atol=2e-3)
    assert current.get_3d_markers()[0].marker_count == len(expected.markers)
    assert all(p.framenumber % 4 == 0 for p in packets)
    assert after == count, "frames kept coming after StreamFrames Stop"


def test_take_control_needs_the_password_and_one_master_at_a_time(sim):
    async def body():
        first = await connect(sim)
        second = await connect(sim)
        with pytest.raises(qtm_rt.QRTCommandException, match="Wrong or missing password"):
            await first.take_control("wrong")
        assert await first.take_control(PASSWORD) == b"You are now master"
        with pytest.raises(qtm_rt.QRTCommandException, match="is already master"):
            await second.take_control(PASSWORD)
        assert await first.release_control() == b"You are now a regular client"
        assert await second.take_control(PASSWORD) == b"You are now master"
        with pytest.raises(qtm_rt.QRTCommandException, match="not supported"):
            await second.new()
        first.disconnect()
        second.disconnect()

    run(body())


def test_bad_requests_get_errors_and_the_server_goes_on(sim):
    async def body():
        c = await connect(sim)
        with pytest.raises(qtm_rt.QRTCommandException, match="Parse Error"):
            await asyncio.wait_for(c._protocol.send_command("frobnicate now"), 5)
        with pytest.raises(qtm_rt.QRTCommandException, match="not supported"):
            await c.get_current_frame(["analog"])
        # a broken stream (size field smaller than a header) closes only that client
        reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
        writer.write(struct.pack("<II", 4, 1))
        await writer.drain()
        replies = await asyncio.wait_for(reader.read(), 5)  # until the server closes
        writer.close()
        assert b"Parse Error" in replies
        assert (await c.byte_order()) == b"Byte order is little endian"
        c.disconnect()

    run(body())


def test_at_most_ten_clients(sim):
    socks = []
    try:
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", sim.port), timeout=5)
            assert b"QTM RT Interface connected" in s.recv(100)
            socks.append(s)
        extra = socket.create_connection(("127.0.0.1", sim.port), timeout=5)
        refused = extra.recv(200)
        extra.close()
        assert b"Max number of clients reached" in refused
    finally:
        for s in socks:
            s.close()


def test_clients_hear_qtm_shutting_down(sim):
    events = []

    async def body():
        gone = asyncio.Event()
        c = await connect(sim, on_event=events.append, on_disconnect=lambda exc: gone.set())
        await c.stream_frames(components=["6d"], on_packet=lambda p: None)
        sim.proc.popen.send_signal(signal.SIGINT)
        await asyncio.wait_for(gone.wait(), 10)

    run(body())
    assert QRTEvent.EventQTMShuttingDown in events
    assert sim.proc.popen.wait(10) == 0


def test_a_server_behind_real_time_still_serves_and_stops(procs, tmp_path):
    """At a rate the machine cannot keep up with, the frame clock is always late; it must
    still give the event loop its turn, or commands go unanswered and SIGTERM is never
    handled (the process had to be killed)."""
    sim = start_simulator(procs, tmp_path, ["--rate", "10000"])

    async def body():
        c = await connect(sim)
        packets = []
        await c.stream_frames(components=["3d"], on_packet=packets.append)
        while len(packets) < 20:
            await asyncio.sleep(0.05)
        # a command in the middle of the stream is answered
        assert await asyncio.wait_for(c.qtm_version(), 10)
        c.disconnect()

    run(body(), timeout=60)
    start = time.monotonic()
    sim.proc.popen.send_signal(signal.SIGTERM)
    try:
        code = sim.proc.popen.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail("qtm_simulator did not stop within 10 s of SIGTERM while behind real time")
    assert code == 0 and time.monotonic() - start < 5, sim.proc.log()
