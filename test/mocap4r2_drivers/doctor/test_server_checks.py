"""The doctor's server probes against the stand-ins on loopback: a healthy NatNet server
(multicast and unicast), a wrong port, a server that does not answer, a multicast group
nobody sends to; QTM's banner and version; VRPN's handshake both ways, its reports and a
server that sends none; a Vicon-like TCP
port open and closed."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from optitrack_stand_in import StandIn  # test/fixtures
from qtm_stand_in import start_qtm  # test/fixtures
from vrpn_stand_in import start_vrpn  # test/fixtures

from mocap4r2_drivers.doctor.report import Status
from mocap4r2_drivers.doctor.server_checks import probe_natnet, probe_qtm, probe_tcp, probe_vrpn
from mocap4r2_drivers.optitrack.transport import ClientConfig

SCENE = {
    "seed": 3,
    "rate": 100.0,
    "rigid_bodies": [{"name": "drone1", "id": 1, "trajectory": {"type": "circle", "radius": 1.0}}],
}
# a probe answers within its steps (server info, then frames), 2 s each; what may come on
# top under a loaded machine is generous, the point is that it returns
BOUND = 2 * 2.0 + 10.0


def statuses(checks) -> dict[str, Status]:
    return {c.title: c.status for c in checks}


def unused_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mode", ["multicast", "unicast"])
def test_healthy_natnet_server_passes(procs, tmp_path, mode):
    stand_in = StandIn(procs, tmp_path, f"--{mode}", scene=SCENE)
    config = ClientConfig(
        connection_type=mode, command_port=stand_in.command_port, data_port=stand_in.data_port
    )
    probe = probe_natnet(config)
    assert [c for c in probe.checks if c.status is not Status.PASS] == [], probe.checks
    assert probe.server_info is not None and probe.server_info.bitstream == (4, 1)
    assert probe.frames >= 1 and probe.frame_bytes > 100
    assert any(c.title == "NatNet frames" for c in probe.checks)


@pytest.mark.parametrize(
    ("args", "bitstream", "expected"),
    [
        (("--natnet-version", "4.5"), (4, 5), Status.PASS),
        (("--future-motive",), (4, 6), Status.WARN),
    ],
)
def test_a_bitstream_the_driver_reads_is_no_failure(procs, tmp_path, args, bitstream, expected):
    """Every Motive since 2024 streams 4.2 or later, and the driver reads a bitstream newer
    than it knows with the newest layout: the doctor passes a known one and warns about a
    newer one (the driver reads it, skipping what it does not know), never fails it."""
    stand_in = StandIn(procs, tmp_path, "--multicast", *args, scene=SCENE)
    config = ClientConfig(command_port=stand_in.command_port, data_port=stand_in.data_port)
    probe = probe_natnet(config)
    assert probe.server_info is not None and probe.server_info.bitstream == bitstream
    (version,) = [c for c in probe.checks if c.title == "NatNet version"]
    assert version.status is expected, version
    assert str(probe.server_info.bitstream) in version.evidence
    assert probe.frames >= 1


def test_wrong_command_port_is_named_with_its_fix():
    config = ClientConfig(command_port=unused_udp_port())
    started = time.monotonic()
    probe = probe_natnet(config)
    assert time.monotonic() - started < BOUND
    [check] = [c for c in probe.checks if c.title.startswith("NatNet server")]
    assert check.status is Status.FAIL
    assert "nothing listens" in check.evidence and "port unreachable" in check.evidence
    assert "command_port" in check.fix


def test_server_that_does_not_answer_fails_in_bounded_time():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # holds the port, never answers
        silent.bind(("127.0.0.1", 0))
        config = ClientConfig(command_port=silent.getsockname()[1])
        started = time.monotonic()
        probe = probe_natnet(config, timeout=1.0)
        elapsed = time.monotonic() - started
        request = silent.recv(65536)
    assert elapsed < BOUND
    assert request[:2] == b"\x00\x00"  # NAT_CONNECT reached the silent server
    [check] = probe.checks
    assert check.status is Status.FAIL and "no NAT_SERVERINFO within 1 s" in check.evidence
    assert "Broadcast Frame Data" in check.fix and probe.frames == 0


def test_multicast_group_nobody_sends_to(procs, tmp_path):
    stand_in = StandIn(procs, tmp_path, "--multicast", scene=SCENE)
    config = ClientConfig(
        multicast_address="239.255.42.98", command_port=stand_in.command_port, data_port=stand_in.data_port
    )
    probe = probe_natnet(config)
    found = statuses(probe.checks)
    assert found[f"NatNet server at 127.0.0.1:{stand_in.command_port}"] is Status.PASS
    assert found["NatNet frames"] is Status.FAIL
    assert found["multicast_address against the server"] is Status.WARN
    frames = next(c for c in probe.checks if c.title == "NatNet frames")
    assert "239.255.42.98" in frames.evidence
    assert frames.fix == "set multicast_address: 239.255.42.99"


def test_qtm_banner_and_version(procs, tmp_path):
    _proc, base_port, _scene = start_qtm(procs, tmp_path, SCENE)
    checks = probe_qtm("127.0.0.1", base_port, "1.25")
    assert [c.status for c in checks] == [Status.PASS] * 3, checks
    assert "QTM RT Interface connected" in checks[0].evidence
    assert (
        checks[2].evidence.startswith(f"{SCENE['rate']:g} Hz, up axis +Z")
        and "1 6DOF bodies" in checks[2].evidence
    )
    refused = probe_qtm("127.0.0.1", base_port, "1.99")
    assert refused[1].status is Status.FAIL and "1.99" in refused[1].evidence


def test_tcp_port_open_and_closed():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert probe_tcp("Vicon", "127.0.0.1", port, "fix").status is Status.PASS
    closed = probe_tcp("Vicon", "127.0.0.1", port, "start the DataStream server")
    assert closed.status is Status.FAIL and "refused" in closed.evidence
    assert closed.fix == "start the DataStream server"


@pytest.mark.parametrize("connection", ["udp", "tcp"])
def test_vrpn_handshake_and_reports(procs, tmp_path, connection):
    """The driver's handshake (cookies, descriptions) names the stand-in's trackers, and
    their poses arrive, both ways of connecting."""
    _proc, port, _scene, _origin = start_vrpn(procs, tmp_path, SCENE)
    handshake, reports = probe_vrpn("127.0.0.1", port, connection, timeout=10.0)
    assert handshake.status is Status.PASS, handshake
    assert handshake.evidence.startswith("VRPN 07.") and "trackers announced: drone1" in handshake.evidence
    assert reports.status is Status.PASS and "drone1 (" in reports.evidence, reports


def serve_once(listener: socket.socket, answer) -> threading.Thread:
    """A thread accepting one TCP connection on ``listener`` and handing it to ``answer``."""

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            answer(conn)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    return server


def listening() -> tuple[socket.socket, int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    return listener, listener.getsockname()[1]


def test_vrpn_server_that_sends_no_reports_fails_the_reports_check():
    """A VRPN server that completes the handshake but streams nothing: the handshake
    passes, the reports check fails with what to do."""
    from mocap4r2_drivers.vrpn import protocol as vp

    def quiet(conn: socket.socket) -> None:
        conn.sendall(vp.cookie())
        conn.recv(vp.COOKIE_SIZE)
        time.sleep(3.0)  # connected, silent

    listener, port = listening()
    with listener:
        server = serve_once(listener, quiet)
        checks = probe_vrpn("127.0.0.1", port, "tcp", timeout=1.0)
        server.join(5)
    assert [c.status for c in checks] == [Status.PASS, Status.FAIL], checks
    assert "no tracker pose within 1 s" in checks[1].evidence and "firewall" in checks[1].fix


def test_vrpn_probe_names_a_server_that_is_not_vrpn():
    listener, port = listening()
    with listener:
        server = serve_once(
            listener, lambda conn: conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n".ljust(24, b" "))
        )
        (check,) = probe_vrpn("127.0.0.1", port, "tcp")
        server.join(5)
    assert check.status is Status.FAIL and "not a VRPN" in check.evidence
    (closed,) = probe_vrpn("127.0.0.1", port, "tcp")
    assert closed.status is Status.FAIL and "refused" in closed.evidence
