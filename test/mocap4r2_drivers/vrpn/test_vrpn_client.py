"""The VRPN client against the stand-in (both ways of connecting) and against hostile
servers written here from the protocol: a bad cookie, an impossible length, unknown
types and ids, a flood, a silent server. Each gets a clear error or is counted, and
nothing blocks longer than the timeouts given."""

from __future__ import annotations

import re
import socket
import struct
import threading
import time

import numpy as np
import pytest
from vrpn_stand_in import start_vrpn  # test/fixtures

from mocap4r2_drivers.vrpn import protocol as vp
from mocap4r2_drivers.vrpn.client import Delivered, PoseBlock, VrpnClient, VrpnConnectionError

SCENE = {
    "seed": 3,
    "rate": 200.0,
    "latency": 0.0,
    "noise": 0.0,
    "rigid_bodies": [
        {"name": "drone", "id": 1, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0}},
        {"name": "cart", "id": 2, "trajectory": {"type": "figure_eight", "period": 6.0}},
    ],
}


def collect(client: VrpnClient, seconds: float) -> list:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out += client.read(0.05)
    return out


@pytest.mark.parametrize("tcp_only", [False, True], ids=["udp-request", "tcp"])
def test_client_reads_the_stand_in(procs, tmp_path, tcp_only):
    proc, port, scene, origin = start_vrpn(procs, tmp_path, SCENE)
    client = VrpnClient("127.0.0.1", port, tcp_only=tcp_only, timeout=10.0)
    assert client.connect() == ["drone", "cart"]
    assert client.server_version == "07.38" and vp.POS_QUAT in client.types.names()
    got = collect(client, 1.0)
    client.close()
    reports = [d for d in got if d.type == vp.POS_QUAT]
    assert len(reports) > 100, proc.log()
    names = [b.name for b in scene.description.bodies]
    for d in reports:
        r = vp.unpack_pos_quat(d.message.payload)
        k = round((d.message.time - origin) * scene.rate)
        bodies = scene.frame(k).bodies
        row = names.index(d.sender)
        # float64 end to end: exactly the scene's numbers
        assert r.position == tuple(bodies.positions[row]) and r.orientation == tuple(bodies.orientations[row])


def test_datagrams_of_reports_come_as_blocks_with_the_scenes_numbers(procs, tmp_path):
    proc, port, scene, origin = start_vrpn(procs, tmp_path, SCENE)
    client = VrpnClient("127.0.0.1", port, timeout=10.0, pose_blocks=True)
    client.connect()
    # read until 150 instants came (0.75 s at 200 Hz), however slow a loaded machine is:
    # the figure asserted is what they came as, not how soon
    got: list = []
    deadline = time.monotonic() + 30.0
    while sum(isinstance(item, PoseBlock) for item in got) < 150 and time.monotonic() < deadline:
        got += client.read(0.05)
    client.close()
    blocks = [item for item in got if isinstance(item, PoseBlock)]
    # the stand-in sends each instant's reports in one datagram: blocks, nothing else (a
    # read that found several instants waiting gives them as one block)
    assert len(blocks) >= 150 and len(blocks) >= len(got) - 5, proc.log()
    names = [b.name for b in scene.description.bodies]
    for block in blocks:
        times = block.records["seconds"].astype(np.int64) * 1_000_000 + block.records["microseconds"]
        for instant in np.unique(times):
            assert sorted(np.asarray(block.trackers)[times == instant].tolist()) == sorted(names)
        for tracker, r in zip(block.trackers, block.records, strict=True):
            k = round((int(r["seconds"]) + int(r["microseconds"]) * 1e-6 - origin) * scene.rate)
            bodies = scene.frame(k).bodies
            row = names.index(tracker)
            assert r["position"].tolist() == bodies.positions[row].tolist()
            assert r["orientation"].tolist() == bodies.orientations[row].tolist()


def test_a_read_of_several_instants_comes_as_one_block_with_the_scenes_numbers(procs, tmp_path):
    """The datagrams one read finds (a reader kept from running finds several instants')
    are decoded together: one block, its records in the order they came, each the
    scene's numbers at its instant."""
    proc, port, scene, origin = start_vrpn(procs, tmp_path, SCENE)
    client = VrpnClient("127.0.0.1", port, timeout=10.0, pose_blocks=True)
    client.connect()
    collect(client, 0.2)  # the server's port is known from its first datagram on
    blocks = []
    deadline = time.monotonic() + 20.0
    while len(blocks) < 5 and time.monotonic() < deadline:
        time.sleep(0.03)  # about 6 instants at 200 Hz wait in the socket
        got = client.read(0.0)
        assert all(isinstance(item, PoseBlock) for item in got)
        blocks += [b for b in got if len(np.unique(b.records["microseconds"])) > 1]
    client.close()
    assert len(blocks) >= 5, proc.log()
    names = [b.name for b in scene.description.bodies]
    for block in blocks:
        times = block.records["seconds"] + block.records["microseconds"] * 1e-6
        assert (np.diff(times) >= 0).all()  # instants in the order sent
        for tracker, r in zip(block.trackers, block.records, strict=True):
            k = round((int(r["seconds"]) + int(r["microseconds"]) * 1e-6 - origin) * scene.rate)
            row = names.index(tracker)
            assert r["position"].tolist() == scene.frame(k).bodies.positions[row].tolist()


def test_a_read_with_a_datagram_that_is_not_only_reports_takes_each_datagram_alone():
    """A datagram of the record size holding something else (here an undescribed type)
    among report datagrams: the reports before and after it still come as blocks, in
    order, and it is refused and counted as it would be alone."""
    client = VrpnClient("127.0.0.1", 1, timeout=1.0, pose_blocks=True)  # never connected
    client.names.dispatch(vp.split_datagram(describe()), [])
    transport = client.transport
    transport.restart("127.0.0.1")
    transport._server_udp_port = 4000  # as learned from the server's first datagram
    pos_quat = client.types.id(vp.POS_QUAT)
    odd = vp.pack_message(1, 77, vp.pack_pos_quat(0, (9.0, 0.0, 0.0), (0, 0, 0, 1.0)), 5, 0)
    assert len(odd) == len(report())
    out: list = []
    first, last = report(x=1.0, type_id=pos_quat), report(x=2.0, type_id=pos_quat)
    transport._take_run([first, odd, last], pos_quat, out)
    assert [type(item) for item in out] == [PoseBlock, PoseBlock]
    assert [b.records["position"][0][0] for b in out] == [1.0, 2.0]
    assert client.stats.rejected == {"unknown_type": 1}
    out = []
    transport._take_run([first, last], pos_quat, out)
    assert len(out) == 1 and out[0].records["position"][:, 0].tolist() == [1.0, 2.0]
    assert out[0].trackers == ("drone", "drone")


def test_the_stand_in_says_how_late_it_sent_its_frames(procs, tmp_path):
    # what a benchmark measuring from the message time needs to tell the stand-in's part
    send_times = tmp_path / "send_times.npy"
    proc, port, scene, origin = start_vrpn(procs, tmp_path, SCENE, extra=["--send-times", str(send_times)])
    client = VrpnClient("127.0.0.1", port, timeout=10.0)
    client.connect()
    got = collect(client, 0.5)
    client.close()
    proc.stop()
    match = re.search(
        r"frames sent after their instant: p50 (\S+) ms, p99 (\S+) ms, max (\S+) ms", proc.log()
    )
    assert match, proc.log()
    p50, p99, top = (float(v) for v in match.groups())
    assert 0.0 <= p50 <= p99 <= top  # sent at or after the instant, never before it
    # frame by frame: every instant the client read was sent, and is in the file
    rows = np.load(send_times)
    frames, lateness = rows[:, 0].astype(int), rows[:, 1]
    assert (np.diff(frames) > 0).all() and (lateness >= -1e-6).all()
    read = {round((d.message.time - origin) * scene.rate) for d in got if d.type == vp.POS_QUAT}
    assert read and read <= set(frames.tolist())
    assert np.max(lateness) * 1e3 == pytest.approx(top, abs=1e-3)


class HostileServer:
    """A TCP server that answers one connection with ``script(conn)``."""

    def __init__(self, script):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.script = script
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(20)
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            try:
                conn.recv(vp.COOKIE_SIZE)
                self.script(conn)
            except OSError:
                pass

    def close(self):
        self.sock.close()


def describe(sender_names=("VRPN Control", "drone"), type_names=(vp.PING, vp.PONG, vp.POS_QUAT)) -> bytes:
    out = [
        vp.pack_message(i, vp.SENDER_DESCRIPTION, vp.pack_description(n), 0, 0)
        for i, n in enumerate(sender_names)
    ]
    out += [
        vp.pack_message(i, vp.TYPE_DESCRIPTION, vp.pack_description(n), 0, 0)
        for i, n in enumerate(type_names)
    ]
    return b"".join(out)


def report(sensor=0, x=1.0, sender=1, type_id=2) -> bytes:
    return vp.pack_message(sender, type_id, vp.pack_pos_quat(sensor, (x, 0.0, 0.0), (0, 0, 0, 1.0)), 5, 0)


def client_for(server: HostileServer, **kw) -> VrpnClient:
    return VrpnClient("127.0.0.1", server.port, tcp_only=True, timeout=3.0, **kw)


def test_bad_cookie_is_refused_with_the_reason():
    server = HostileServer(lambda conn: (conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\0\0\0"), time.sleep(1)))
    start = time.monotonic()
    with pytest.raises(VrpnConnectionError, match="not a VRPN 07.xx peer"):
        client_for(server).connect()
    assert time.monotonic() - start < 3
    server.close()


def test_an_old_major_version_is_refused():
    server = HostileServer(lambda conn: (conn.sendall(b"vrpn: ver. 06.05  0" + b"\0" * 5), time.sleep(1)))
    with pytest.raises(VrpnConnectionError, match="06.05"):
        client_for(server).connect()
    server.close()


def test_a_server_that_never_sends_its_cookie_times_out():
    server = HostileServer(lambda conn: time.sleep(5))
    start = time.monotonic()
    with pytest.raises(VrpnConnectionError):
        client_for(server).connect()
    assert time.monotonic() - start < 4.5
    server.close()


def test_an_impossible_length_drops_the_connection_with_the_reason():
    def script(conn):
        conn.sendall(vp.cookie() + describe() + report())
        time.sleep(0.5)
        conn.sendall(vp.HEADER.pack(0x7FFFFFF0, 0, 0, 1, 2) + b"\0" * 4 + b"x" * 1000)
        time.sleep(2)

    server = HostileServer(script)
    client = client_for(server)
    client.connect()
    got = []
    with pytest.raises(VrpnConnectionError, match="framing"):
        end = time.monotonic() + 5
        while time.monotonic() < end:
            got += client.read(0.1)
    assert [d.sender for d in got] == ["drone"]
    assert client.stats.rejected == {"broken_framing": 1} and not client.connected
    server.close()


def test_unknown_types_ids_and_bad_descriptions_are_counted_and_the_reports_still_flow():
    def script(conn):
        junk = [
            vp.pack_message(1, 77, b"x" * 8, 0, 0),  # an undescribed type
            vp.pack_message(99, 2, b"x" * 64, 0, 0),  # an undescribed sender
            vp.pack_message(5, vp.SENDER_DESCRIPTION, b"\0\0\0\x50abc", 0, 0),  # a lying length
            vp.pack_message(5000, vp.SENDER_DESCRIPTION, vp.pack_description("x"), 0, 0),  # an id beyond 2000
            vp.pack_message(0, -99, b"", 0, 0),  # an unknown system type
        ]
        conn.sendall(vp.cookie() + describe() + b"".join(junk * 200) + report(x=2.0))
        time.sleep(2)

    server = HostileServer(script)
    client = client_for(server)
    client.connect()
    got = collect(client, 0.5)
    assert [(d.sender, d.type) for d in got] == [("drone", vp.POS_QUAT)]
    assert client.stats.rejected == {
        "unknown_type": 200,
        "unknown_sender": 200,
        "bad_description": 400,
        "unknown_system_type": 200,
    }
    client.close()
    server.close()


def test_a_flood_is_taken_in_bounded_reads():
    flood = report() * 20000  # 1.76 MB of reports at once

    def script(conn):
        conn.sendall(vp.cookie() + describe() + flood)
        time.sleep(3)

    server = HostileServer(script)
    client = client_for(server, max_read_bytes=256 * 1024)
    client.connect()
    sizes = []
    end = time.monotonic() + 5
    while sum(sizes) < 20000 and time.monotonic() < end:
        sizes.append(len(client.read(0.2)))
    assert sum(sizes) == 20000
    # a read returns after at most max_read_bytes (+ one recv) of the stream
    assert max(sizes) <= (256 + 256) * 1024 // 88 + 1
    client.close()
    server.close()


def test_a_silent_server_is_given_up_after_the_silence_timeout():
    server = HostileServer(lambda conn: (conn.sendall(vp.cookie() + describe()), time.sleep(5)))
    client = client_for(server, silence_timeout=0.5, ping_period=0.1)
    start = time.monotonic()
    client.connect()
    with pytest.raises(VrpnConnectionError, match="nothing from the server"):
        while time.monotonic() - start < 4:
            client.read(0.05)
    # given up after the silence, not before; the upper bound only says it does not hang
    assert 0.5 < time.monotonic() - start < 3.0
    server.close()


def test_pings_are_answered_by_the_stand_in_so_a_quiet_connection_stays(procs, tmp_path):
    # a scene whose only body is never tracked: no report at all, only pongs
    quiet = dict(
        SCENE,
        rigid_bodies=[dict(SCENE["rigid_bodies"][0], tracking_loss={"every": 1000.0, "duration": 999.99})],
    )
    proc, port, _, _ = start_vrpn(procs, tmp_path, quiet)
    client = VrpnClient("127.0.0.1", port, timeout=10.0, silence_timeout=0.6, ping_period=0.2)
    client.connect()
    got = collect(client, 2.0)  # over three silence timeouts
    assert client.connected
    assert {(d.sender, d.type) for d in got} == {("drone", vp.PONG)} and len(got) >= 5
    client.close()


def test_nothing_listening_is_a_clear_error_within_the_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(VrpnConnectionError, match="cannot connect"):
        VrpnClient("127.0.0.1", port, tcp_only=True, timeout=1.0).connect()
    with pytest.raises(VrpnConnectionError, match="no call back"):
        VrpnClient("127.0.0.1", port, timeout=1.0).connect()
    assert time.monotonic() - start < 6  # two 1 s timeouts: nothing hangs


def positions_read(got: list) -> list[tuple[float, ...]]:
    out = [
        vp.unpack_pos_quat(d.message.payload).position
        for d in got
        if isinstance(d, Delivered) and d.type == vp.POS_QUAT
    ]
    return out + [tuple(p) for b in got if isinstance(b, PoseBlock) for p in b.records["position"].tolist()]


@pytest.mark.parametrize("pose_blocks", [False, True], ids=["messages", "blocks"])
def test_datagrams_from_anyone_but_the_server_are_refused(procs, tmp_path, pose_blocks):
    proc, port, scene, origin = start_vrpn(procs, tmp_path, SCENE)
    client = VrpnClient("127.0.0.1", port, timeout=10.0, pose_blocks=pose_blocks)
    client.connect()
    assert positions_read(collect(client, 0.5))
    # a report that would pass for the server's (described ids, right size), from another port
    drone = client.senders.id("drone")
    pos_quat = client.types.id(vp.POS_QUAT)
    spoof = vp.pack_message(drone, pos_quat, vp.pack_pos_quat(0, (99.0, 99.0, 99.0), (0, 0, 0, 1.0)), 1, 0)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as intruder:
        for _ in range(50):
            intruder.sendto(spoof, client._udp.getsockname())
        got = collect(client, 0.5)
    client.close()
    positions = positions_read(got)
    assert positions and (99.0, 99.0, 99.0) not in positions
    assert client.stats.rejected["foreign_datagram"] == 50


def test_activating_after_a_pause_drops_old_reports_and_keeps_the_connection(procs, tmp_path):
    from mocap4r2_drivers.vrpn.vrpn_system import VrpnAdapter

    proc, port, scene, origin = start_vrpn(procs, tmp_path, SCENE)
    adapter = VrpnAdapter(host="127.0.0.1", port=port, connect_timeout=10.0, silence_timeout=0.5)
    adapter.connect()
    adapter.start_streaming()
    frames = [adapter.read_frame(0.1) for _ in range(20)]
    assert any(f is not None for f in frames)
    time.sleep(1.0)  # inactive on purpose: nothing is read, reports pile up in the socket
    adapter.start_streaming()
    first = None
    while first is None:
        first = adapter.read_frame(0.1)
    # a current instant, not one from the pause; no reconnection for the pause's silence
    assert time.time() - first.system_time < 0.2
    assert adapter.client.stats.connects == 1 and adapter.reconnects == 0
    status = adapter.status()
    assert status["server_version"] == "07.38" and status["connected"] == "True"
    assert status["trackers_announced"] == "2" and "last_error" not in status
    adapter.disconnect()


def _pose(sender: int, x: float, usec: int) -> bytes:
    return vp.pack_pos_quat_message(
        sender, 2, 0, position=(x, 0.0, 0.0), orientation=(0.0, 0.0, 0.0, 1.0), seconds=5, microseconds=usec
    )


def _cut_instant_server(rest_sent: threading.Event | None):
    """A server (tcp://) with trackers drone and cart: one whole instant, then an instant
    whose last report is cut in two; the rest follows when ``rest_sent`` is set (never
    when None)."""
    go = threading.Event()
    cart_report = _pose(2, 2.5, 10_000)

    def script(conn):
        first = _pose(1, 1.0, 0) + _pose(2, 2.0, 0)
        conn.sendall(vp.cookie() + describe(("VRPN Control", "drone", "cart")) + first)
        go.wait(10)
        conn.sendall(_pose(1, 1.5, 10_000) + cart_report[:40])
        if rest_sent is not None:
            rest_sent.wait(10)
            conn.sendall(cart_report[40:])
        time.sleep(3)

    return HostileServer(script), go


def _frames_until(adapter, stop, seconds: float = 5.0) -> list:
    frames = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop(frames):
        frame = adapter.read_frame(0.05)
        if frame is not None:
            frames.append(frame)
    return frames


def test_a_frame_whose_rest_is_on_its_way_waits_for_it():
    from mocap4r2_drivers.vrpn.vrpn_system import VrpnAdapter

    rest = threading.Event()
    server, go = _cut_instant_server(rest)
    adapter = VrpnAdapter(
        host="127.0.0.1", port=server.port, connection="tcp", connect_timeout=3.0, continuation_wait=30.0
    )
    adapter.connect()
    first = _frames_until(adapter, lambda f: f and f[-1].bodies.names == ("drone", "cart"))
    assert first and first[-1].system_time == 5.0
    split_before = adapter.converter.frames_split
    go.set()
    # drone's report and half of cart's are in: no frame, however often it is asked
    assert _frames_until(adapter, lambda f: bool(f), seconds=0.5) == []
    rest.set()
    (frame,) = _frames_until(adapter, lambda f: bool(f))
    assert frame.system_time == 5.01 and frame.bodies.positions[:, 0].tolist() == [1.5, 2.5]
    assert adapter.converter.frames_split == split_before
    adapter.disconnect()
    server.close()


def test_a_frame_whose_rest_never_comes_is_published_after_the_wait():
    from mocap4r2_drivers.vrpn.vrpn_system import VrpnAdapter

    server, go = _cut_instant_server(None)
    adapter = VrpnAdapter(
        host="127.0.0.1", port=server.port, connection="tcp", connect_timeout=3.0, continuation_wait=0.3
    )
    adapter.connect()
    assert _frames_until(adapter, lambda f: f and f[-1].bodies.names == ("drone", "cart"))
    go.set()
    frames = _frames_until(adapter, lambda f: bool(f))
    assert len(frames) == 1, "the frame is not held for ever"
    # drone's new pose; cart keeps its last one (and is still tracked: 10 ms old)
    assert frames[0].system_time == 5.01 and frames[0].bodies.positions[:, 0].tolist() == [1.5, 2.0]
    assert frames[0].bodies.valid.all()
    adapter.disconnect()
    server.close()


def test_an_instant_whose_datagram_ends_it_is_published_without_waiting(procs, tmp_path):
    """The stand-in sends each instant in one datagram with room to spare, so the server
    had finished that instant: its frame is published at once, even with bodies missing
    (occluded), never held for the continuation wait (30 s here) nor until the next
    instant's reports come."""
    from mocap4r2_drivers.vrpn.vrpn_system import VrpnAdapter

    proc, port, scene, origin = start_vrpn(procs, tmp_path, {**SCENE, "occlusion": 0.4})
    adapter = VrpnAdapter(host="127.0.0.1", port=port, connect_timeout=10.0, continuation_wait=30.0)
    adapter.connect()
    frames, held, incomplete = 0, 0, 0
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        frame = adapter.read_frame(0.05)
        if frame is None:
            continue
        frames += 1
        k = round((frame.system_time - origin) * scene.rate)
        incomplete += int(not scene.frame(k).bodies.valid.all())  # a body did not report
        # a frame handed over while another instant's reports wait behind it was held
        held += int(adapter.converter.pending or adapter._held_until is not None)
    adapter.disconnect()
    assert frames > 100, proc.log()
    assert incomplete > 10, "the scene should occlude some body in some instants"
    assert held <= 2, f"{held} of {frames} frames were handed over with an instant held back"


def test_a_handshake_that_fails_after_the_udp_socket_opened_leaves_no_socket_open():
    """A server asked by UDP calls back, exchanges cookies, and resets the connection
    (SO_LINGER 0) while the client opens the UDP socket its reports would come to: the
    client's description of that socket then cannot be sent. The UDP socket is closed
    with the connection (it was left open, bound, before). Real sockets; the test holds
    the client's open_udp until the reset has arrived, since otherwise the reset lands
    before or after that moment as the scheduler pleases."""
    lob = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lob.bind(("127.0.0.1", 0))
    reset = threading.Event()

    def serve():
        data, _ = lob.recvfrom(200)
        conn = socket.create_connection(vp.parse_connect_request(data))
        conn.recv(vp.COOKIE_SIZE)
        conn.sendall(vp.cookie())
        time.sleep(0.2)  # the client has read the cookie and opens its UDP socket
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset, not a goodbye
        reset.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client = VrpnClient("127.0.0.1", lob.getsockname()[1], timeout=3.0)
    opened = []
    open_udp = client.transport.open_udp

    def open_udp_while_reset(own_ip):
        port = open_udp(own_ip)
        opened.append(client.transport.udp)
        assert reset.wait(5)
        time.sleep(0.1)  # the reset reaches the client's socket
        return port

    client.transport.open_udp = open_udp_while_reset
    with pytest.raises(VrpnConnectionError, match="reset|Broken pipe"):
        client.connect()
    server.join(5)
    lob.close()
    assert len(opened) == 1 and opened[0] is not None
    assert opened[0].fileno() == -1, "the UDP socket of the failed handshake is still open"
    assert client.transport.udp is None and not client.connected
