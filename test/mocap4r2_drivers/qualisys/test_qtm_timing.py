"""The arrival time the QTM client hands over with each packet: the instant its bytes
reached this host, not the instant qtm-rt's callback chain got to it.

qtm-rt runs on the client's own asyncio loop; that loop may be busy (parsing the
packets of a burst one after the other, a parameter refresh, waiting for the GIL while
the node converts) when a packet comes in. Whatever it was doing, the arrival handed
over must not carry that time: the node's clock model takes the lowest
``arrival - latency`` as the transport's floor, and a floor that includes the reader's
own busy time is that much late in every stamp.

The QTM stand-in (``QtmSimulator``) runs on a loop thread of this process so that the
test can stop its frame clock and slip in one packet of its own at a known instant.
Real sockets, real protocol bytes, qtm-rt unmodified."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import yaml

from mocap4r2_drivers.qualisys import client as qtm_client
from mocap4r2_drivers.qualisys import protocol as qp
from mocap4r2_drivers.qualisys.client import DISCONNECTED, QtmClient, StampedSocket
from mocap4r2_drivers.qualisys.simulator import QtmSimulator
from mocap4r2_drivers.simulated.scene import Scene

SCENE = {
    "seed": 4,
    "rate": 100.0,
    "latency": 0.0,
    "noise": 0.0,
    "occlusion": 0.0,
    "dropped_frames": 0.0,
    "unlabeled_markers": 0,
    "rigid_bodies": [{"name": "drone", "id": 1, "trajectory": {"type": "circle", "radius": 1.0}}],
}
MARKER = 987_654  # the frame number of the test's own packet


@pytest.fixture
def stand_in(tmp_path):
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(SCENE))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    simulator = QtmSimulator(Scene.from_file(path))

    def call(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(10)

    port = call(simulator.start("127.0.0.1", 0))
    yield simulator, port, call
    try:
        call(simulator.stop())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_arrival_is_when_the_bytes_came_not_when_the_busy_loop_read_them(stand_in):
    simulator, port, call = stand_in
    client = QtmClient("127.0.0.1", port, "1.25", ["6d"], timeout=5.0, reconnect_period=0.0)
    try:
        client.connect()
        client.start_streaming()
        assert client.get(5.0) not in (None, DISCONNECTED), "no frame from the stand-in"

        async def pause():
            simulator._streaming.clear()  # the frame clock stops; the connection stays

        call(pause())
        time.sleep(0.1)
        while client.get(0.05) is not None:  # frames already on their way
            pass

        # the client's loop is busy for 0.4 s (what a burst's parsing or a stall of the
        # GIL does, only longer); a packet comes in meanwhile
        busy = threading.Event()

        def hold_the_loop() -> None:
            busy.set()
            time.sleep(0.4)

        client._loop.call_soon_threadsafe(hold_the_loop)
        assert busy.wait(5.0)
        packet = qp.encode_frame(1_000_000, MARKER, [])

        async def send() -> float:
            sent = time.time()
            for session in simulator.sessions:
                session.send(packet)
            return sent

        sent = call(send())
        item = client.get(5.0)
        assert item not in (None, DISCONNECTED), item
        received, arrival = item
        assert received.framenumber == MARKER
        handed_over = time.time()
        # the kernel's receive time of the bytes, not the time the busy loop got to them
        assert arrival >= sent - 1e-3, (arrival, sent)
        assert arrival - sent < 0.1, f"arrival {arrival - sent:.3f} s after sending"
        assert handed_over - sent > 0.3, "the loop was not held: the test proves nothing"
    finally:
        client.close()


def _read_after_a_wait(sock: StampedSocket) -> tuple[float, float]:
    """Bytes sent to ``sock`` by a loopback peer, read 0.2 s later: (sent, read) times."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sock.connect(server.getsockname())
        peer, _ = server.accept()
        with peer:
            # the kernel switches receive stamps on for the machine a moment after the
            # first socket asks (a deferred switch): bytes before that carry none
            time.sleep(0.1)
            sent = time.time()
            peer.sendall(b"qtm")
            time.sleep(0.2)
            read = time.time()
            assert sock.recv(100) == b"qtm"
    return sent, read


def test_the_socket_gives_the_kernel_receive_time_of_what_it_read():
    with StampedSocket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, qtm_client.SO_TIMESTAMPNS, 1)
        sent, read = _read_after_a_wait(sock)
        assert sock.received_at is not None
        assert sent - 1e-3 <= sock.received_at < read - 0.1, (sock.received_at - sent, read - sent)


def test_without_kernel_stamps_the_time_of_the_read_stands_in(monkeypatch):
    monkeypatch.setattr(qtm_client, "TIMESTAMP_SPACE", 0)
    with StampedSocket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        _, read = _read_after_a_wait(sock)
        assert sock.received_at is not None
        assert sock.received_at >= read
