"""The QTM reading path (qtm-rt behind the driver's guard) against a server that sends
broken or hostile bytes, and the converter's names under changing marker counts.

The QTM stand-in (``QtmSimulator``) runs in a thread of this process, so that a test can
slip raw bytes into the TCP stream of the connected client between two real frames, or
pause its clock; the driver's adapter (``QualisysAdapter``: qtm-rt inside) reads in the
test thread. Real sockets, real protocol bytes, qtm-rt unmodified."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import yaml

from mocap4r2_drivers.qualisys import protocol as qp
from mocap4r2_drivers.qualisys.client import BodySetup, QtmParameters
from mocap4r2_drivers.qualisys.convert import FrameConverter
from mocap4r2_drivers.qualisys.qualisys_system import QualisysAdapter
from mocap4r2_drivers.qualisys.simulator import QtmSimulator
from mocap4r2_drivers.simulated.scene import Scene

SCENE = {
    "seed": 4,
    "rate": 100.0,
    "latency": 0.002,
    "noise": 0.0,
    "occlusion": 0.0,
    "dropped_frames": 0.0,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        {
            "name": "drone",
            "id": 1,
            "trajectory": {"type": "circle", "center": [0, 0, 1.5], "radius": 1.0, "period": 4.0},
        },
    ],
}


class Server:
    """QtmSimulator on its own event loop thread."""

    def __init__(self, tmp_path):
        path = tmp_path / "scene.yaml"
        path.write_text(yaml.safe_dump(SCENE))
        self.scene = Scene.from_file(path)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sim = QtmSimulator(self.scene)
        self.port = self.call(self.sim.start("127.0.0.1", 0))

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def inject(self, data: bytes) -> None:
        """Raw bytes to every connected client, between two frames."""

        async def send():
            for session in self.sim.sessions:
                session.send(data)

        self.call(send())

    def pause(self) -> None:
        """The clock stops sending frames; the connection stays open."""

        async def pause():
            self.sim._streaming.clear()

        self.call(pause())

    def close(self) -> None:
        try:
            self.call(self.sim.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.close()


@pytest.fixture
def adapter(server):
    a = QualisysAdapter(
        host="127.0.0.1",
        port=server.port - 1,
        protocol_version="1.25",
        components=["6d", "3d", "3dnolabels"],
        connect_timeout=5.0,
        reconnect_period=0.2,
        reconnect_after=0.5,
    )
    a.connect()
    a.start_streaming()
    yield a
    a.disconnect()


def frames_within(adapter, count: int, timeout: float = 20.0, until=lambda: True) -> list:
    frames = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = adapter.read_frame(0.1)
        if frame is not None:
            frame.check()
            frames.append(frame)
        if len(frames) >= count and until():
            return frames
    raise AssertionError(
        f"{len(frames)} of {count} frames in {timeout} s, until={until()}; status {adapter.status()}"
    )


def test_size_zero_header_drops_the_connection_and_reconnects(server, adapter):
    frames_within(adapter, 5)
    server.inject(qp.HEADER.pack(0, qp.PacketType.DATA))
    # the stream resumes on a new connection, and diagnostics say why it was dropped
    frames_within(adapter, 20, until=lambda: adapter.client.stats.connects >= 2)
    status = adapter.status()
    assert "broken packet header" in status["last_error"] or int(status["decode_errors"]) >= 1, status
    assert adapter.client.stats.rejected.get("broken_framing") == 1


def test_announced_size_beyond_the_limit_is_not_buffered(server, adapter):
    frames_within(adapter, 5)
    server.inject(qp.HEADER.pack(0x7FFFFFF0, qp.PacketType.DATA) + bytes(1000))
    frames_within(adapter, 20, until=lambda: adapter.client.stats.connects >= 2)
    assert adapter.client.stats.rejected.get("broken_framing") == 1
    assert len(adapter.client._guard.reader._buffer) < qp.MAX_PACKET_SIZE


def test_endless_component_table_is_dropped_without_a_reconnect(server, adapter):
    frames_within(adapter, 5)
    # 0xFFFFFFFF components announced, the first of size 0: qtm-rt would loop forever
    payload = qp.DATA_HEADER.pack(0, 1, 0xFFFFFFFF) + qp.COMPONENT_HEADER.pack(0, 1)
    server.inject(qp.pack(qp.PacketType.DATA, payload))
    before = adapter.client.stats.frames
    frames_within(adapter, 20, until=lambda: adapter.client.stats.frames > before + 20)
    assert adapter.client.stats.connects == 1, "a malformed packet is dropped, never a reconnect"
    assert int(adapter.status()["decode_errors"]) >= 1


def test_unknown_component_and_event_are_dropped_and_counted(server, adapter):
    frames_within(adapter, 5)
    unknown_component = qp.encode_frame(0, 2, [qp.pack_component(99, b"\0" * 8)])
    unknown_event = qp.pack(qp.PacketType.EVENT, bytes((200,)))
    for _ in range(50):
        server.inject(unknown_component + unknown_event)
    before = adapter.client.stats.frames
    frames_within(adapter, 20, until=lambda: adapter.client.stats.frames > before + 20)
    assert adapter.client.stats.connects == 1, "a malformed packet is dropped, never a reconnect"
    assert adapter.client.stats.rejected.get("malformed_packet") == 100
    assert int(adapter.status()["decode_errors"]) >= 100


def test_silent_server_is_reconnected_by_the_watchdog(server, adapter):
    frames_within(adapter, 5)
    server.pause()
    # nothing for reconnect_after (0.5 s): dropped and reconnected; the new session
    # restarts the stand-in's clock
    frames_within(adapter, 10, until=lambda: adapter.client.stats.connects >= 2)
    assert adapter.client.watchdog_reconnects >= 1
    assert "no data from QTM" in adapter.client.stats.last_error or adapter.client.watchdog_reconnects >= 1
    assert adapter.status()["watchdog_reconnects"] != "0"


# ---------------------------------------------------------------------- names
def _parameters(labels: int) -> QtmParameters:
    names = tuple(f"m{i}" for i in range(labels))
    body = BodySetup(name="body", point_names=names[:4], points_mm=np.zeros((4, 3)))
    return QtmParameters(frequency=100.0, labels=names, bodies=(body,))


def _packet(k: int, labeled: int, unlabeled: int) -> bytes:
    rng = np.random.default_rng(k)
    comps = [
        qp.pack_markers(qp.ComponentType.MARKERS_3D, rng.normal(size=(labeled, 3)) * 1000),
        qp.pack_markers(qp.ComponentType.MARKERS_3D_NO_LABELS, rng.normal(size=(unlabeled, 3)) * 1000),
        qp.pack_bodies(qp.ComponentType.BODIES_6D, np.zeros((1, 3)), np.eye(3).reshape(1, 9)),
    ]
    return qp.encode_frame(k * 10000, k, comps)[qp.HEADER.size :]


def test_marker_names_follow_every_count_change():
    """QTM may stream one labeled marker more (or less) than its parameters list, until
    the new parameters arrive: every frame still has one name per marker."""
    converter = FrameConverter(_parameters(20))
    for k, (labeled, unlabeled) in enumerate(
        [(20, 3), (21, 3), (20, 3), (19, 3), (20, 3), (20, 4), (21, 4), (20, 4)]
    ):
        frame = converter.convert(_packet(k, labeled, unlabeled))
        frame.check()
        assert len(frame.markers.names) == labeled + unlabeled
        assert frame.markers.names[: min(labeled, 20)] == tuple(f"m{i}" for i in range(min(labeled, 20)))
