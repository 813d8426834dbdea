"""The NatNet client against hostile and odd inputs, in one process with real UDP: the
stand-in server (``NatNetSimulator``) runs in a thread, our ``NatNetClient`` reads in the
test thread, and other sockets play strangers, garbage senders and servers that deliver
unicast frames to a different socket.

Every frame the client hands out is compared with the scene the stand-in served: a
frame that is not the server's (garbage, a spoofed or repeated frame) shows as a wrong
pose or a frame number that does not advance."""

from __future__ import annotations

import logging
import socket
import threading
import time

import numpy as np
import pytest
import yaml

from mocap4r2_drivers.optitrack import protocol as nn
from mocap4r2_drivers.optitrack.client import ClientConfig, NatNetClient
from mocap4r2_drivers.optitrack.simulator import NatNetSimulator, ServerOptions

SCENE = {
    "seed": 3,
    "rate": 100.0,
    "latency": 0.003,
    "latency_jitter": 0.0,
    "noise": 0.0,
    "occlusion": 0.0,
    "unlabeled_markers": 2,
    "dropped_frames": 0.0,
    "rigid_bodies": [
        {"name": "drone1", "id": 1, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0}},
        {"name": "robot1", "id": 2, "trajectory": {"type": "figure_eight", "period": 6.0}},
    ],
}


class Server:
    """The stand-in in a thread; restartable on the same ports."""

    def __init__(
        self,
        tmp_path,
        multicast: bool,
        unicast_to: str = "both",
        command_port: int = 0,
        data_port: int = 0,
        rate: float = 0.0,
    ):
        path = tmp_path / "scene.yaml"
        path.write_text(yaml.safe_dump(SCENE))
        self.options = ServerOptions(
            scene=str(path),
            multicast=multicast,
            unicast_to=unicast_to,
            command_port=command_port,
            data_port=data_port,
            rate=rate,
        )
        self.start()

    def start(self) -> None:
        self.sim = NatNetSimulator(self.options)
        self.sim.open()
        self.options.command_port = self.sim.command_address[1]
        self.options.data_port = self.sim.data_port
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.sim.serve, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(5)
        self.sim.close()

    def truth(self, frame_number: int) -> np.ndarray:
        """The rigid body positions the server sent in that frame (stream axes)."""
        return self.sim.stream.frame_of_data(frame_number).rigid_bodies["position"]


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(r.getMessage() for r in self.records)


@pytest.fixture
def logs():
    capture = Capture()
    logger = logging.getLogger(f"test.natnet.{id(capture)}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(capture)
    capture.logger = logger
    return capture


@pytest.fixture
def servers():
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


def make_client(server: Server, mode: str, log: logging.Logger, **kwargs) -> NatNetClient:
    config = ClientConfig(
        server_address="127.0.0.1",
        connection_type=mode,
        command_port=server.options.command_port,
        data_port=server.options.data_port,
        reconnect_after=0.5,
        **kwargs,
    )
    client = NatNetClient(config, log)
    client.connect(10.0)
    return client


def read_frames(client: NatNetClient, count: int, timeout: float = 20.0, until=None) -> list:
    frames = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = client.read(0.1)
        if frame is not None:
            frames.append(frame)
        if len(frames) >= count and (until is None or until()):
            return frames
    raise AssertionError(
        f"{len(frames)} of {count} frames within {timeout} s "
        f"(stats {client.stats}, until: {until() if until else '-'})"
    )


def assert_server_frames(server: Server, frames) -> None:
    numbers = [f.frame_number for f in frames]
    assert all(b > a for a, b in zip(numbers, numbers[1:])), f"frame numbers must advance: {numbers}"
    for f in frames:
        np.testing.assert_allclose(
            f.rigid_bodies["position"],
            server.truth(f.frame_number),
            atol=1e-6,
            err_msg=f"frame {f.frame_number} is not what the server sent",
        )


def sender(address: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((address, 0))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(address))
    return s


# ---------------------------------------------------------------------- unicast targets
@pytest.mark.parametrize("unicast_to", ["command-socket", "data-port", "both"])
def test_unicast_frames_arrive_wherever_the_server_sends_them_once(tmp_path, servers, logs, unicast_to):
    server = Server(tmp_path, multicast=False, unicast_to=unicast_to)
    servers.append(server)
    client = make_client(server, "unicast", logs.logger)
    try:
        frames = read_frames(client, 60)
    finally:
        client.close()
    assert_server_frames(server, frames)
    # 100 Hz for 60 frames: a repeated frame would have shown as a number not advancing
    assert len({f.frame_number for f in frames}) == len(frames)


@pytest.mark.parametrize("rate", [5.0, 3.0])
def test_no_false_unicast_warning_on_reconnect(tmp_path, servers, logs, rate):
    # 5 Hz: the first frame after the server's answer takes up to 0.2 s, as with a
    # loaded machine or a slow Motive, time enough for a hasty conclusion. 3 Hz: the
    # frames a client holds back to take up the restarted numbering (RESYNC_FRAMES of
    # them, 1.3 s) outlast the wait after the answer; they are arriving all the same
    server = Server(tmp_path, multicast=False, rate=rate)
    servers.append(server)
    client = make_client(server, "unicast", logs.logger)
    try:
        read_frames(client, 3)
        for cycle in range(3):
            server.stop()
            read_frames(client, 0, until=lambda: "no answer from" in logs.text(), timeout=20)
            logs.records.clear()
            server.start()
            start = client.stats.frames
            read_frames(client, 0, until=lambda start=start: client.stats.frames > start + 3, timeout=20)
            text = logs.text()
            assert "sends no unicast frames" not in text, f"restart {cycle + 1}: {text}"
            assert "frames arriving again" in text, text
    finally:
        client.close()


def test_a_late_reader_takes_the_waiting_frames_without_reconnecting(tmp_path, servers, logs):
    # the reader thread comes back after more than reconnect_after (a loaded machine, a
    # busy interpreter): the frames the server sent meanwhile wait in the socket, so the
    # server was never silent; they are handed out in order, none held back for a new
    # numbering, and the client neither reconnects nor warns
    server = Server(tmp_path, multicast=False, rate=20.0)
    servers.append(server)
    client = make_client(server, "unicast", logs.logger)
    try:
        before = read_frames(client, 5)
        reconnects = client.stats.reconnects
        time.sleep(2 * client.config.reconnect_after)
        after = read_frames(client, 10)
    finally:
        client.close()
    numbers = [f.frame_number for f in before + after]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    assert client.stats.reconnects == reconnects, logs.text()
    assert "no answer from" not in logs.text() and "sends no unicast frames" not in logs.text(), logs.text()
    assert_server_frames(server, before + after)


# ---------------------------------------------------------------------- strangers
def test_packets_from_strangers_are_refused_on_every_socket(tmp_path, servers, logs):
    server = Server(tmp_path, multicast=True)
    servers.append(server)
    client = make_client(server, "multicast", logs.logger)
    try:
        read_frames(client, 5)
        # a model definition that renames body 1, and a frame, from another host
        models = server.sim.stream.model_definitions()
        models.rigid_bodies[0].name = "hijacked"
        spoofed_models = nn.encode_model_definitions(models, server.sim.version)
        info = server.sim.server_info()
        spoofed_info = nn.encode_server_info(info)
        frame = nn.encode_frame(server.sim.stream.frame_of_data(10**6), server.sim.version)
        stranger = sender("127.0.0.2")
        group = (nn.DEFAULT_MULTICAST_ADDRESS, server.options.data_port)
        command = client.transport.command.getsockname()
        for _ in range(20):
            for packet in (spoofed_models, spoofed_info, frame):
                stranger.sendto(packet, group)
                stranger.sendto(packet, command)
        stranger.close()
        frames = read_frames(client, 20, until=lambda: client.stats.foreign_packets >= 120)
    finally:
        client.close()
    assert [b.name for b in client.models.rigid_bodies] == ["drone1", "robot1"]
    assert client.converter.convert(frames[-1]).bodies.names == ("drone1", "robot1")
    assert_server_frames(server, frames)


# ---------------------------------------------------------------------- garbage
def test_garbage_from_the_servers_address_is_never_a_frame(tmp_path, servers, logs):
    server = Server(tmp_path, multicast=True)
    servers.append(server)
    client = make_client(server, "multicast", logs.logger)
    rng = np.random.default_rng(5)
    try:
        first = read_frames(client, 5)
        good = bytearray(
            nn.encode_frame(server.sim.stream.frame_of_data(first[-1].frame_number), server.sim.version)
        )
        s = sender("127.0.0.1")
        group = (nn.DEFAULT_MULTICAST_ADDRESS, server.options.data_port)
        frames = []
        for _burst in range(20):
            for i in range(100):
                kind = i % 4
                if kind == 0:  # a well-formed frame with a frame number far away, either way
                    packet = bytearray(good)
                    packet[4:8] = int(rng.integers(-(2**31), 2**31)).to_bytes(4, "little", signed=True)
                elif kind == 1:  # a frame from the past
                    packet = bytearray(good)
                    number = max(first[0].frame_number - int(rng.integers(1, 50)), 0)
                    packet[4:8] = number.to_bytes(4, "little")
                elif kind == 2:  # flipped bytes
                    packet = bytearray(good)
                    at = rng.integers(4, len(packet), 8)
                    packet[at[0]] ^= 0xFF
                    for a in at[1:]:
                        packet[int(a)] = int(rng.integers(0, 256))
                else:  # noise, some with a frame header
                    packet = bytearray(
                        rng.integers(0, 256, int(rng.integers(0, 400)), dtype=np.uint8).tobytes()
                    )
                    if i % 8 == 3:
                        packet = bytearray(nn.pack(nn.MessageId.FRAMEOFDATA, bytes(packet)))
                s.sendto(bytes(packet), group)
            frames += read_frames(client, 1)
        frames += read_frames(client, 20)
        s.close()
    finally:
        client.close()
    # a flipped byte inside a pose can decode; only frames whose structure is intact and
    # whose number advances are handed out, so compare against the scene only where the
    # frame number says the server sent it
    numbers = [f.frame_number for f in frames]
    assert all(b > a for a, b in zip(numbers, numbers[1:])), f"frame numbers must advance: {numbers}"
    assert numbers[-1] - numbers[0] < 100 * 120, "no frame number far ahead of the server's"
    rejected = client.stats.decode_errors + sum(client.stats.rejected.values())
    assert rejected > 0, client.stats
    # the log: each kind of bad input once, then counted
    errors = [r for r in logs.records if r.levelno >= logging.WARNING]
    assert len(errors) <= 8, logs.text()


def test_unsolicited_responses_are_not_kept(tmp_path, servers, logs):
    server = Server(tmp_path, multicast=True)
    servers.append(server)
    client = make_client(server, "multicast", logs.logger)
    try:
        s = sender("127.0.0.1")
        command = client.transport.command.getsockname()
        sent = 0
        for _ in range(20):
            for _ in range(250):
                s.sendto(nn.encode_response("x" * 200), command)
                sent += 1
            read_frames(client, 1)
        s.close()
        read_frames(
            client, 0, until=lambda: client.stats.rejected.get("unsolicited_response", 0) >= sent // 2
        )
        assert len(client.dialog._responses) <= 1
        # a request still gets its own answer
        assert client.request("FrameRate", timeout=5.0) == pytest.approx(100.0)
    finally:
        client.close()
