"""When qtm_simulator sends a frame: at the instant it is due (capture + the server's
latency + the network's drawn delay), as a real QTM server on its own machine does, not
when an event loop gets to it.

The stand-in runs as a process; a plain TCP reader in this process asks for frames with
real protocol bytes and takes each packet's arrival from the kernel (the receive time of
the segment, ``SO_TIMESTAMPNS``), and the stand-in's truth log gives each frame's true
capture instant. The bounds are loose, for a loaded machine: they separate sending on
time from sending on a 1 ms grid, and `python -m bench timing` gives the figures."""

from __future__ import annotations

import asyncio
import math
import random
import socket
import threading
import time

import numpy as np
import pytest
import yaml
from qtm_stand_in import start_qtm  # test/fixtures

from mocap4r2_drivers.impairment import TimeImpairment, read_truth_log
from mocap4r2_drivers.qualisys import client as qtm_client
from mocap4r2_drivers.qualisys import protocol as qp
from mocap4r2_drivers.qualisys.client import StampedSocket
from mocap4r2_drivers.qualisys.simulator import QtmSimulator, StreamSession
from mocap4r2_drivers.simulated.scene import Scene

SCENE = {
    "seed": 3,
    "rate": 250.0,
    "latency": 0.0,  # due at capture: QTM reports no latency
    "latency_jitter": 0.0,
    "noise": 0.0,
    "occlusion": 0.0,
    "dropped_frames": 0.0,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        {"name": "drone", "id": 1, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0}},
        {"name": "robot", "id": 2, "trajectory": {"type": "figure_eight", "period": 6.0}},
    ],
}


def _stream(port: int, seconds: float) -> list[tuple[int, float]]:
    """(frame number, kernel receive time) of every data packet read for ``seconds``."""
    out: list[tuple[int, float]] = []
    with StampedSocket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if qtm_client.SO_TIMESTAMPNS is not None:
            sock.setsockopt(socket.SOL_SOCKET, qtm_client.SO_TIMESTAMPNS, 1)
        sock.settimeout(5.0)
        sock.connect(("127.0.0.1", port))
        # the kernel switches receive stamps on a moment after the first socket asks
        time.sleep(0.1)
        sock.sendall(qp.pack_text(qp.PacketType.COMMAND, "Version 1.25"))
        sock.sendall(qp.pack_text(qp.PacketType.COMMAND, "StreamFrames AllFrames 6D 3D"))
        reader = qp.PacketReader()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            data = sock.recv(65536)
            assert data, "the stand-in closed the connection"
            for packet_type, payload in reader.feed(data):
                if packet_type == qp.PacketType.DATA:
                    assert sock.received_at is not None
                    out.append((qp.decode_frame(payload).frame_number, sock.received_at))
    return out


def _delays(procs, tmp_path, extra: list[str]) -> np.ndarray:
    """Arrival - true capture of each frame after the first second, s."""
    truth_path = tmp_path / "truth.csv"
    proc, base, _ = start_qtm(procs, tmp_path, SCENE, extra=[*extra, "--truth-log", str(truth_path)])
    received = _stream(base + 1, 4.0)
    proc.stop()
    truth = dict(read_truth_log(truth_path))
    first = received[0][1]
    delays = np.array([arrival - truth[k] for k, arrival in received if arrival > first + 1.0 and k in truth])
    assert delays.size > 500, f"{delays.size} frames with a truth line"
    return delays


def test_frames_leave_when_due_not_on_a_loop_grid(procs, tmp_path):
    """No impairment, no latency: each frame is due at its capture. Sent from asyncio's
    loop, whose sleeps end on epoll's 1 ms steps, after encoding the frame, the median
    frame arrived 0.9 ms after its capture; sent when due, tens of microseconds."""
    delays = _delays(procs, tmp_path, [])
    assert np.min(delays) > -0.2e-3, f"a frame arrived {-np.min(delays) * 1e3:.3f} ms before its capture"
    assert np.median(delays) < 0.3e-3, (
        f"median {np.median(delays) * 1e3:.3f} ms, p90 {np.percentile(delays, 90) * 1e3:.3f} ms after capture"
    )


def test_a_burst_leaves_when_its_last_frame_is_due(procs, tmp_path):
    """Frames held back 4 at a time (no jitter): a burst leaves when its last frame is
    due, so that frame arrives on time (the median burst's arrived 1.7 ms late when the
    loop released bursts from the time their last frame was queued after encoding)."""
    burst = 4
    delays = _delays(procs, tmp_path, ["--burst", str(burst)])
    assert np.max(delays) > (burst - 1) / SCENE["rate"] * 0.9, "frames were not held back"
    # any 4 consecutive frames hold exactly one burst's last frame: the least held of them
    last = np.array([np.min(delays[i : i + burst]) for i in range(0, delays.size - burst + 1, burst)])
    assert np.min(last) > -0.2e-3, f"a burst arrived {-np.min(last) * 1e3:.3f} ms before it was due"
    assert np.median(last) < 0.3e-3, (
        f"median burst {np.median(last) * 1e3:.3f} ms after its last frame's capture"
    )


@pytest.fixture
def in_process(tmp_path):
    """A QtmSimulator of ``impairment`` on a loop thread of this process: (simulator, port)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    made: list[QtmSimulator] = []

    def start(impairment: TimeImpairment, **scene: object) -> tuple[QtmSimulator, int]:
        path = tmp_path / f"scene{len(made)}.yaml"
        path.write_text(yaml.safe_dump({**SCENE, "latency": 0.003, "latency_jitter": 0.001, **scene}))
        simulator = QtmSimulator(Scene.from_file(path), impairment=impairment)
        made.append(simulator)
        port = asyncio.run_coroutine_threadsafe(simulator.start("127.0.0.1", 0), loop).result(10)
        return simulator, port

    yield start
    try:
        for simulator in made:
            asyncio.run_coroutine_threadsafe(simulator.stop(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


@pytest.mark.parametrize(
    "impairment",
    [TimeImpairment(), TimeImpairment(jitter_ms=2.0, burst=4, seed=7)],
    ids=["unimpaired", "bursts_and_jitter"],
)
def test_each_frame_is_held_from_its_due_time_and_never_sent_before_it(in_process, monkeypatch, impairment):
    """The mechanism, whatever the machine's load: the network gets each frame at its
    due time (capture + its latency), not at the time the server computed it or got
    around to queueing it, so a burst is released at its last frame's due time plus the
    delay drawn for it (the draws of ``Delivery``'s generator, in order); and no write
    leaves before the time of the frames in it (the stand-in is never friendlier than
    the network it plays)."""
    writes: list[tuple[float, list[int]]] = []
    send_frames = StreamSession.send_frames

    def recording_send_frames(self: StreamSession, data: bytes, frames: int) -> bool:
        numbers = [qp.decode_frame(payload).frame_number for _, payload in qp.PacketReader().feed(data)]
        writes.append((time.monotonic(), numbers))
        return send_frames(self, data, frames)

    monkeypatch.setattr(StreamSession, "send_frames", recording_send_frames)
    simulator, port = in_process(impairment)
    handed: list[tuple[int, float]] = []
    put = simulator.delivery.put

    def recording_put(item: list[tuple[StreamSession, bytes]], now: float) -> None:
        for _, packet in item[:1]:
            handed.append((qp.decode_frame(packet[qp.HEADER.size :]).frame_number, now))
        put(item, now)

    simulator.delivery.put = recording_put  # type: ignore[method-assign]
    _stream(port, 1.5)
    simulator._streaming.clear()  # the frame clock stops; what it sent is recorded
    time.sleep(0.1)
    scene = simulator.scene
    start = simulator.start_time
    newest = max([n for _, numbers in writes for n in numbers] + [k for k, _ in handed])
    due = {k: start + k / scene.rate + scene.frame(k).latency for k in range(newest + 1)}
    assert len(writes) > 50, f"{len(writes)} writes"
    if not impairment.delays:
        assert all(len(numbers) == 1 for _, numbers in writes)
        early = [(k, due[k] - at) for at, numbers in writes for k in numbers if at < due[k]]
        assert not early, f"frames written before they were due (frame, s early): {early[:5]}"
        return
    assert len(handed) > 50
    # handed to the network at the due time, to the last bit
    off = [(k, now - due[k]) for k, now in handed if now != due[k]]
    assert not off, f"frames handed to the network other than at their due time (frame, s): {off[:5]}"
    # the releases the network draws from those due times, as Delivery draws them
    draws = random.Random(impairment.seed)
    release: dict[int, float] = {}
    last = -math.inf
    for i in range(impairment.burst - 1, len(handed), impairment.burst):
        at = max(handed[i][1] + draws.expovariate(1.0 / (impairment.jitter_ms * 1e-3)), last)
        last = at
        for k, _ in handed[i - impairment.burst + 1 : i + 1]:
            release[k] = at
    released = [(at, numbers) for at, numbers in writes if all(k in release for k in numbers)]
    assert len(released) > 10
    for at, numbers in released:
        assert len(numbers) == impairment.burst, f"a burst of {numbers} in one write"
        assert len({release[k] for k in numbers}) == 1, f"frames of different bursts in one write: {numbers}"
        assert at >= release[numbers[0]], f"burst {numbers} written {release[numbers[0]] - at:.6f} s early"


def test_a_client_that_stops_reading_loses_whole_frames_in_order(in_process, monkeypatch):
    """A client that stops reading (its socket and then the server's send buffer fill):
    the frame thread hands its frames to the loop behind what the loop holds, and beyond
    the send budget drops them whole; the command answers written meanwhile stay in their
    place. Another client keeps getting every frame, and when the slow one reads again,
    every packet is whole and in order."""
    from mocap4r2_drivers.qualisys import simulator as simulator_module

    monkeypatch.setattr(simulator_module, "MAX_SEND_BUFFER", 64 * 1024)  # reached in a second
    simulator, port = in_process(TimeImpairment())
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(5.0)
    try:
        slow.connect(("127.0.0.1", port))
        deadline = time.monotonic() + 5.0
        while not simulator.sessions and time.monotonic() < deadline:
            time.sleep(0.01)
        (session,) = simulator.sessions
        # the server's kernel buffer small too, so that the transport holds bytes soon
        session.writer.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
        )
        slow.sendall(qp.pack_text(qp.PacketType.COMMAND, "Version 1.25"))
        slow.sendall(qp.pack_text(qp.PacketType.COMMAND, "StreamFrames AllFrames 3D 6D 3DNoLabels"))
        questions = 20
        for _ in range(questions // 2):
            slow.sendall(qp.pack_text(qp.PacketType.COMMAND, "QTMVersion"))
        fast = _stream(port, 2.0)  # meanwhile the slow client reads nothing
        for _ in range(questions - questions // 2):
            slow.sendall(qp.pack_text(qp.PacketType.COMMAND, "QTMVersion"))
        assert session.frames_skipped > 0, "the slow client's backlog never reached the budget"
        assert len(fast) > 0.5 * 2.0 * SCENE["rate"], f"the other client got {len(fast)} frames in 2 s"
        numbers = [k for k, _ in fast]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "the other client lost frames"

        reader = qp.PacketReader()
        answers: list[str] = []
        frames: list[int] = []
        after_answers = 0  # frames read after the last answer: those sent once it reads again
        deadline = time.monotonic() + 10.0
        while (len(answers) < questions or after_answers < 20) and time.monotonic() < deadline:
            data = slow.recv(65536)
            assert data, "the stand-in closed the slow client's connection"
            for packet_type, payload in reader.feed(data):  # raises on a torn packet
                if packet_type == qp.PacketType.DATA:
                    frames.append(qp.decode_frame(payload).frame_number)
                    after_answers += len(answers) == questions
                elif packet_type == qp.PacketType.COMMAND:
                    text = qp.unpack_text(payload)
                    if text.startswith("QTM Version"):
                        answers.append(text)
    finally:
        slow.close()
    assert len(answers) == questions, f"{len(answers)} of {questions} answers"
    assert len(frames) > 10
    assert all(b > a for a, b in zip(frames, frames[1:])), "frames out of order"
    assert any(b - a > 1 for a, b in zip(frames, frames[1:])), "no frame was dropped for the slow client"


def test_a_scene_that_drops_every_frame_leaves_the_server_answering(in_process):
    """Every frame dropped: the frame thread finds none to send (it looks through a
    bounded run of frames, then waits for their time), and the server goes on answering
    commands; nothing comes but the answers."""
    simulator, port = in_process(TimeImpairment(), dropped_frames=1.0)
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        sock.sendall(qp.pack_text(qp.PacketType.COMMAND, "StreamFrames AllFrames 6D"))
        time.sleep(0.5)
        sock.sendall(qp.pack_text(qp.PacketType.COMMAND, "QTMVersion"))
        reader = qp.PacketReader()
        packets: list[tuple[int, bytes]] = []
        while not any(t == qp.PacketType.COMMAND and b"QTM Version" in p for t, p in packets):
            data = sock.recv(65536)
            assert data, "the stand-in closed the connection"
            packets += reader.feed(data)
    assert not [p for t, p in packets if t == qp.PacketType.DATA], "a dropped frame was sent"
    assert simulator.pacer.skipped == 0
