"""NatNet bitstreams 4.2 to 4.5 and newer (issue 37): what every Motive since 2024 streams.

The first test talks to a hand-made "Motive 3.2" whose packets are packed here byte by
byte from NaturalPoint's published layout (not by our encoder), multicast as Motive
streams by default. The others check the decoder's layouts, its skipping of what it does
not read, its refusals, and the client's bitstream requests against the stand-in.
"""

from __future__ import annotations

import copy
import logging
import socket
import struct
import threading
import time

import numpy as np
import pytest
from optitrack_stand_in import in_process_stand_ins  # test/fixtures
from support import CROSS_PROCESS_TIMEOUT as WAIT

from mocap4r2_drivers.optitrack import protocol as nn
from mocap4r2_drivers.optitrack.client import ClientConfig, FrameConverter, ModelIndex, NatNetClient
from mocap4r2_drivers.optitrack.scene_stream import SceneStream
from mocap4r2_drivers.optitrack.simulator import FUTURE_VERSION
from mocap4r2_drivers.simulated.scene import Scene

GROUP = "239.255.42.99"


def _name(text: str, size: int = 256) -> bytes:
    return text.encode() + b"\0" * (size - len(text))


def motive_32_server_info(data_port: int) -> bytes:
    """NAT_SERVERINFO of a Motive 3.2 streaming bitstream 4.2 to a multicast group."""
    payload = (
        _name("Motive")
        + bytes([3, 2, 0, 0])  # app version
        + bytes([4, 2, 0, 0])  # NatNet bitstream
        + struct.pack("<QHB", 10_000_000, data_port, 1)
        + socket.inet_aton(GROUP)
    )
    return struct.pack("<HH", 1, len(payload)) + payload


def rigid_body_description_42(name: str, body_id: int, quat, markers) -> bytes:
    """sRigidBodyDescription of bitstream 4.2: name, id, parent, offset, the new
    quaternion (x, y, z, w), then markers (positions, active labels, names)."""
    out = name.encode() + b"\0" + struct.pack("<ii3f4f", body_id, -1, 0.0, 0.0, 0.0, *quat)
    out += struct.pack("<i", len(markers))
    out += b"".join(struct.pack("<3f", *p) for p, _ in markers)
    out += b"".join(struct.pack("<i", 0) for _ in markers)
    out += b"".join(n.encode() + b"\0" for _, n in markers)
    return out


def motive_32_models() -> bytes:
    body = rigid_body_description_42(
        "drone1", 1, (0.0, 0.0, 0.7071068, 0.7071068), [((0.1, 0.0, 0.0), "m1"), ((0.0, 0.1, 0.0), "m2")]
    )
    payload = struct.pack("<i", 1) + struct.pack("<ii", 1, len(body)) + body
    return struct.pack("<HH", 5, len(payload)) + payload


def motive_32_frame(number: int) -> bytes:
    """A 4.2 frame (same layout as 4.1): sized sections, precision timestamp, params."""

    def section(count: int, data: bytes) -> bytes:
        return struct.pack("<ii", count, len(data)) + data

    body = struct.pack("<i3f4ffh", 1, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 1.0, 0.0005, 1)
    marker = struct.pack("<i3ffhf", 1 << 16 | 1, 1.1, 2.0, 3.0, 0.014, 0, 0.0002)
    payload = (
        struct.pack("<i", number)
        + section(0, b"")  # marker sets
        + section(0, b"")  # other markers
        + section(1, body)
        + section(0, b"")  # skeletons
        + section(0, b"")  # assets
        + section(1, marker)
        + section(0, b"")  # force plates
        + section(0, b"")  # devices
        + struct.pack("<IIdQQQ", 0, 0, number / 120.0, 1000 + number, 1000 + number, 1000 + number)
        + struct.pack("<II", 0, 0)  # precision timestamp
        + struct.pack("<h", 0)
        + struct.pack("<i", 0)
    )
    return struct.pack("<HH", 7, len(payload)) + payload


class Motive32:
    """Answers NAT_CONNECT and NAT_REQUEST_MODELDEF; multicasts 4.2 frames on loopback."""

    def __init__(self) -> None:
        self.command = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.command.bind(("127.0.0.1", 0))
        self.command.settimeout(0.05)
        self.data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.data.bind(("127.0.0.1", 0))
        # multicast on loopback: the interface is chosen explicitly
        self.data.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        self.data.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        self.data_port = self.data.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.command.getsockname()[1]

    def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            try:
                packet, source = self.command.recvfrom(65536)
                message_id = struct.unpack_from("<H", packet)[0]
                if message_id == 0:
                    self.command.sendto(motive_32_server_info(self.data_port), source)
                elif message_id == 4:
                    self.command.sendto(motive_32_models(), source)
                elif message_id == 2:
                    self.command.sendto(struct.pack("<HHf", 3, 4, 120.0), source)
            except TimeoutError:
                pass
            number += 1
            self.data.sendto(motive_32_frame(number), (GROUP, self.data_port))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.command.close()
        self.data.close()


def test_client_reads_motive_32_multicast_42():
    """Issue 37's bug: a Motive streaming 4.2 multicast was refused at configure (before
    the fix: NatNetConnectionError "Motive streams NatNet 4.2; supported: 3.0, 3.1, 4.0, 4.1")."""
    motive = Motive32()
    client = NatNetClient(
        ClientConfig(command_port=motive.port, data_port=motive.data_port, connection_type="multicast")
    )
    try:
        models = client.connect(5.0)
        assert client.version == (4, 2)
        body = models.rigid_bodies[0]
        assert (body.name, body.id, body.marker_names) == ("drone1", 1, ("m1", "m2"))
        np.testing.assert_allclose(body.orientation, [0, 0, 0.7071068, 0.7071068], rtol=1e-6)
        np.testing.assert_allclose(body.marker_positions, [[0.1, 0, 0], [0, 0.1, 0]], rtol=1e-6)
        frames = []
        for _ in range(200):
            frame = client.read_mocap_frame(0.1)
            if frame is not None:
                frames.append(frame)
            if len(frames) >= 3:
                break
        assert len(frames) >= 3, client.stats.last_error
        assert frames[-1].bodies.names == ("drone1",) and frames[-1].markers.names == ("drone1:m1",)
    finally:
        client.close()
        motive.close()


# ---------------------------------------------------------------------------- layouts
def test_42_description_quaternion_matches_the_published_layout():
    """Our encoder writes the hand-packed 4.2 bytes; 4.1 has no quaternion (16 bytes less)."""
    payload = nn.unpack(motive_32_models())[1]
    defs = nn.decode_model_definitions(payload, nn.Version(4, 2))
    assert nn.unpack(nn.encode_model_definitions(defs, nn.Version(4, 2)))[1] == payload
    older = nn.unpack(nn.encode_model_definitions(defs, nn.Version(4, 1)))[1]
    assert len(older) == len(payload) - 16
    back = nn.decode_model_definitions(older, nn.Version(4, 1))
    assert back.rigid_bodies[0].orientation.tolist() == [0, 0, 0, 1]  # identity before 4.2
    # read with the wrong version, the sizes disagree with the content: refused
    with pytest.raises(nn.NatNetProtocolError, match="byte count says"):
        nn.decode_model_definitions(payload, nn.Version(4, 1))


def _defs_with_everything() -> nn.ModelDefinitions:
    quat = np.array([0.0, 0.3826834, 0.0, 0.9238795], np.float32)
    bone = nn.RigidBodyDescription("hip", 1, -1, np.zeros(3, np.float32), quat)
    child = nn.RigidBodyDescription("spine", 2, 1, np.array([0, 0.1, 0], np.float32), quat)
    return nn.ModelDefinitions(
        rigid_bodies=[nn.RigidBodyDescription("drone1", 1, orientation=quat)],
        skeletons=[nn.SkeletonDescription("walker", 3, [bone, child])],
        assets=[
            nn.AssetDescription(
                "trained",
                1,
                11,
                [nn.RigidBodyDescription("part", 5, orientation=quat)],
                [nn.MarkerDescription("m1", 1, np.ones(3, np.float32), 0.01, 2)],
            )
        ],
    )


@pytest.mark.parametrize("version", ["4.2", "4.3", "4.4", "4.5"])
def test_quaternion_in_bodies_bones_and_asset_bodies(version):
    version = nn.Version.parse(version)
    defs = _defs_with_everything()
    back = nn.decode_model_definitions(nn.unpack(nn.encode_model_definitions(defs, version))[1], version)
    for ours, theirs in (
        (back.rigid_bodies[0], defs.rigid_bodies[0]),
        (back.skeletons[0].bones[1], defs.skeletons[0].bones[1]),
        (back.assets[0].rigid_bodies[0], defs.assets[0].rigid_bodies[0]),
    ):
        assert ours.name == theirs.name and ours.parent_id == theirs.parent_id
        assert ours.orientation.tolist() == theirs.orientation.tolist()
        assert ours.offset.tolist() == theirs.offset.tolist()
    assert back.assets[0].markers[0].name == "m1" and back.skipped == []


def test_45_anchor_markers_and_unknown_descriptions_are_skipped_by_size():
    defs = _defs_with_everything()
    defs.opaque = [
        nn.Opaque(nn.ANCHOR_MARKER_DESCRIPTION, 1, b"anchor\0" + bytes(20)),
        nn.Opaque(99, 1, b"x" * 9),
    ]
    payload = nn.unpack(nn.encode_model_definitions(defs, nn.Version(4, 5)))[1]
    back = nn.decode_model_definitions(payload, nn.Version(4, 5))
    assert back.skipped == [
        nn.Skipped("anchor_marker", 1, 27, True),
        nn.Skipped("description type 99", 1, 9, False),
    ]
    assert [b.name for b in back.rigid_bodies] == ["drone1"] and back.skeletons[0].name == "walker"
    # before 4.5 type 7 is nothing known: skipped as unknown
    assert nn.decode_model_definitions(payload, nn.Version(4, 4)).skipped[0].known is False
    # a size past the packet's end: refused
    bad = bytearray(payload)
    at = len(payload) - 9 - 4
    assert struct.unpack_from("<i", bad, at) == (9,)
    struct.pack_into("<i", bad, at, 10)
    with pytest.raises(nn.NatNetProtocolError, match="byte count 10 does not fit"):
        nn.decode_model_definitions(bytes(bad), nn.Version(4, 5))
    struct.pack_into("<i", bad, at, -1)
    with pytest.raises(nn.NatNetProtocolError, match="byte count -1"):
        nn.decode_model_definitions(bytes(bad), nn.Version(4, 5))


def _frame() -> nn.FrameOfData:
    rb = nn.empty_rigid_bodies(2)
    rb["id"] = [1, 2]
    rb["orientation"] = [0, 0, 0, 1]
    rb["params"] = 1
    lm = nn.empty_markers(1)
    lm["id"] = nn.marker_id(1, 1)
    return nn.FrameOfData(
        frame_number=5,
        rigid_bodies=rb,
        labeled_markers=lm,
        assets=[nn.AssetData(11, rb[:1].copy(), lm.copy())],
        precision_timestamp_secs=7,
        params=nn.FRAME_RECORDING,
    )


def test_42_to_44_frames_are_41_frames_and_45_adds_two_sized_sections():
    frame = _frame()
    v41 = nn.encode_frame_payload(frame, nn.Version(4, 1))
    for minor in (2, 3, 4):
        assert nn.encode_frame_payload(frame, nn.Version(4, minor)) == v41
    frame.imu, frame.gpio = nn.Opaque(0, 3, bytes(30)), nn.Opaque(0, 2, bytes(6))
    v45 = nn.encode_frame_payload(frame, nn.Version(4, 5))
    assert len(v45) == len(v41) + 8 + 30 + 8 + 6
    back = nn.decode_frame(v45, nn.Version(4, 5))
    assert back.skipped == (nn.Skipped("imu", 3, 30, True), nn.Skipped("gpio", 2, 6, True))
    assert back.params == nn.FRAME_RECORDING and back.precision_timestamp_secs == 7
    assert np.array_equal(back.rigid_bodies, frame.rigid_bodies) and back.assets[0].id == 11
    # every truncation of a 4.5 frame is refused (the two sections are always there)
    for cut in range(len(v45) - 4):
        with pytest.raises(nn.NatNetProtocolError):
            nn.decode_frame(v45[:cut], nn.Version(4, 5))


@pytest.mark.parametrize("version", ["4.1", "4.5", "4.6", "5.0"])
def test_an_unknown_sized_frame_section_is_skipped_and_named(version):
    """A future Motive's section before the suffix: read past by its size, named by its
    place; the rest of the frame is read as it is."""
    version = nn.Version.parse(version)
    frame = _frame()
    frame.extra_sections = [nn.Opaque(0, 4, bytes(range(40))), nn.Opaque(0, 0, b"")]
    back = nn.decode_frame(nn.encode_frame_payload(frame, version), version)
    first = 11 if version >= (4, 5) else 9
    assert [s for s in back.skipped if not s.known] == [
        nn.Skipped(f"frame section {first}", 4, 40, False),
        nn.Skipped(f"frame section {first + 1}", 0, 0, False),
    ]
    assert back.params == nn.FRAME_RECORDING and back.precision_timestamp_secs == 7
    assert back.labeled_markers["id"].tolist() == [1 << 16 | 1]


def test_a_section_size_that_eats_the_suffix_is_refused():
    frame = _frame()
    frame.extra_sections = [nn.Opaque(0, 1, bytes(10))]
    payload = bytearray(nn.encode_frame_payload(frame, nn.Version(4, 5)))
    at = len(payload) - 4 - 50 - 10 - 4  # the extra section's byte count
    assert struct.unpack_from("<i", payload, at) == (10,)
    struct.pack_into("<i", payload, at, 20)
    with pytest.raises(nn.NatNetProtocolError, match="no room for the frame suffix"):
        nn.decode_frame(bytes(payload), nn.Version(4, 5))


def test_versions_older_than_30_are_refused_naming_what_was_read_newer_are_read():
    with pytest.raises(nn.NatNetProtocolError, match=r"NatNet bitstream 2\.10 is not supported"):
        nn.decode_frame(b"", nn.Version(2, 10))
    for text in ("4.6", "5.0", "9.9"):
        version = nn.Version.parse(text)
        assert version.supported and version.newer_than_known and not version.known
        assert nn.require_supported(version) == version
    assert all(v.known and not v.newer_than_known for v in nn.SUPPORTED_VERSIONS)


# ---------------------------------------------------------------------------- client <-> stand-in
@pytest.fixture
def serve():
    with in_process_stand_ins() as make:
        yield make


def _read(client: NatNetClient, n: int, timeout: float = WAIT) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        frame = client.read(0.1)
        if frame is not None:
            out.append(frame)
    assert len(out) == n, f"{len(out)} of {n} frames ({client.stats.last_error})"
    return out


def test_unicast_asks_for_the_bitstream_it_is_told(serve):
    srv = serve(natnet_version="4.5", multicast=False)
    client = srv.client("unicast", bitstream_version="4.1")
    try:
        models = client.connect(5.0)
        assert client.version == (4, 1) and client.dialog.granted
        assert [c.version for c in srv.server.clients.values()] == [nn.Version(4, 1)]
        assert all(b.orientation.tolist() == [0, 0, 0, 1] for b in models.rigid_bodies)  # no 4.2 offset
        frames = _read(client, 10)
        assert all(f.skipped == () for f in frames)  # 4.1 frames: no IMU/GPIO sections
        assert not client.housekeeping.skipped_parts
    finally:
        client.close()


def test_unicast_default_is_the_servers_own_bitstream_with_45_sections_skipped(serve):
    srv = serve(natnet_version="4.5", multicast=False)
    client = srv.client("unicast")
    try:
        client.connect(5.0)
        assert client.version == (4, 5)
        _read(client, 10)
        parts = client.housekeeping.skipped_parts
        assert set(parts) == {"imu", "gpio", "anchor_marker"}
        assert parts["imu"].times >= 10 and parts["imu"].last_size == 28 and parts["gpio"].last_size == 2
        assert all(p.known for p in parts.values())
    finally:
        client.close()


def test_a_refused_bitstream_request_keeps_the_servers_own(serve, caplog):
    """Asking a 4.2 server for 4.5 (newer than it knows): its NAT_SERVERINFO says 4.2,
    the client asks ``Bitstream,4.5``, the server refuses, the client reads 4.2."""
    srv = serve(natnet_version="4.2", multicast=False)
    client = srv.client("unicast", bitstream_version="4.5")
    caplog.set_level(logging.INFO, logger="mocap4r2.natnet")
    try:
        client.connect(5.0)
        assert client.version == (4, 2) and not client.dialog.granted
        assert (
            "the server refused bitstream_version 4.5 (answer -1): reading its own NatNet 4.2" in caplog.text
        )
        _read(client, 5)
    finally:
        client.close()


def test_multicast_says_motive_decides(serve, caplog):
    srv = serve(natnet_version="4.4", multicast=True)
    client = srv.client("multicast", bitstream_version="4.1")
    caplog.set_level(logging.WARNING, logger="mocap4r2.natnet")
    try:
        client.connect(5.0)
        assert client.version == (4, 4)
        assert "not asked for over multicast: Motive streams its own bitstream" in caplog.text
        _read(client, 5)
    finally:
        client.close()


def test_a_future_motive_is_read_with_the_newest_layout_and_warned_about(serve, caplog):
    srv = serve(future_motive=True, multicast=True)
    client = srv.client("multicast")
    caplog.set_level(logging.INFO, logger="mocap4r2.natnet")
    try:
        models = client.connect(5.0)
        assert client.version == FUTURE_VERSION == (4, 6)
        assert [b.name for b in models.rigid_bodies] == ["drone1", "robot1", "wand", "table"]
        frames = _read(client, 10)
        assert client.converter.convert(frames[-1]).bodies.names == ("drone1", "robot1", "wand", "table")
        parts = client.housekeeping.skipped_parts
        assert {"imu", "gpio", "anchor_marker", "frame section 11", "description type 99"} == set(parts)
        assert not parts["frame section 11"].known and not parts["description type 99"].known
        text = caplog.text
        assert "newer than the newest this driver knows (4.5): reading it with the 4.5 layout" in text
        # one warning per unknown kind, whatever the number of frames
        assert text.count("skipping frame section 11 of the frames") == 1
        assert text.count("skipping description type 99 of the model definitions") == 1
    finally:
        client.close()


def test_bitstream_changed_bit_has_the_models_read_again(serve, caplog):
    """4.1 to 4.4 frames look alike, their models do not: Motive's "bitstream changed"
    bit is what tells. Another client switches a 4.4 multicast server to 4.1."""
    srv = serve(natnet_version="4.4", multicast=True)
    client = srv.client("multicast")
    caplog.set_level(logging.INFO, logger="mocap4r2.natnet")
    try:
        client.connect(5.0)
        _read(client, 3)
        updates = client.stats.model_updates
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
            other.settimeout(3)
            other.sendto(nn.encode_request("Bitstream,4.1"), ("127.0.0.1", srv.port))
            assert nn.unpack(other.recvfrom(4096)[0])[1] == struct.pack("<i", 0)
        deadline = time.monotonic() + WAIT
        while (
            client.version != (4, 1) or client.stats.model_updates == updates
        ) and time.monotonic() < deadline:
            client.read(0.1)
        assert client.version == (4, 1) and client.stats.model_updates > updates
        assert list(client.dialog.changes) == ["4.4 -> 4.1"]
        assert "the server says its bitstream changed" in caplog.text
        assert client.stats.decode_errors == 0  # nothing was misread on the way
        _read(client, 3)
    finally:
        client.close()


def test_stand_in_unicast_serves_each_client_its_version(serve):
    """Two raw clients of one 4.5 server: one asks 4.1 in NAT_CONNECT, one asks nothing
    and later ``Bitstream,4.2``; each gets NAT_SERVERINFO and NAT_MODELDEF in its version."""
    srv = serve(natnet_version="4.5", multicast=False)
    target = ("127.0.0.1", srv.port)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b,
    ):
        for s in (a, b):
            s.bind(("127.0.0.1", 0))
            s.settimeout(3)

        def answer(s, packet, wanted):
            s.sendto(packet, target)
            while True:
                message_id, payload = nn.unpack(s.recvfrom(65536)[0])
                if message_id == wanted:
                    return payload

        info = nn.decode_server_info(
            answer(a, nn.encode_connect(nn.ConnectRequest(requested_bitstream=(4, 1, 0, 0))), 1)
        )
        assert info.bitstream == (4, 1)
        assert nn.decode_server_info(
            answer(b, nn.encode_connect(nn.ConnectRequest(requested_bitstream=None)), 1)
        ).bitstream == (4, 5)
        models_b = nn.decode_model_definitions(
            answer(b, nn.encode_empty(nn.MessageId.REQUEST_MODELDEF), 5), nn.Version(4, 5)
        )
        assert [s.name for s in models_b.skipped] == ["anchor_marker"]
        assert answer(b, nn.encode_request("Bitstream,4.2"), 3) == struct.pack("<i", 0)
        assert nn.decode_string(answer(b, nn.encode_request("Bitstream"), 3)) == "Bitstream,4.2"
        models_b = nn.decode_model_definitions(
            answer(b, nn.encode_empty(nn.MessageId.REQUEST_MODELDEF), 5), nn.Version(4, 2)
        )
        assert models_b.skipped == [] and len(models_b.rigid_bodies) == 4
        frame_a = nn.decode_frame(answer(a, nn.encode_empty(nn.MessageId.KEEPALIVE), 7), nn.Version(4, 1))
        assert frame_a.skipped == () and len(frame_a.rigid_bodies) == 4
        assert srv.server.version == (4, 5)  # the server's own (multicast) version is untouched


# ---------------------------------------------------------------------------- the rotational offset
SKELETON_SCENE = {
    "seed": 5,
    "rate": 100.0,
    "rigid_bodies": [
        {"name": "drone1", "id": 1, "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0}}
    ],
    "skeletons": [
        {"name": "walker", "id": 7, "trajectory": {"type": "circle", "radius": 1.5, "period": 9.0}}
    ],
}


@pytest.mark.parametrize("up_axis", ["y", "z"])
def test_local_bones_compose_with_the_rotational_offset(up_axis):
    """Motive 3.2+ (4.2) streams a local bone's rotation relative to its rest orientation
    in its parent, which the description's quaternion gives: world = parent * offset *
    local. The stand-in streams so; the converter gets the scene's world poses back, and
    without the offset (read as identity) it would not."""
    sc = Scene(dict(SKELETON_SCENE))
    stream = SceneStream(sc, up_axis=up_axis, skeleton_coordinates="local", rotational_offsets=True)
    version = nn.Version(4, 2)
    defs = nn.decode_model_definitions(
        nn.unpack(nn.encode_model_definitions(stream.model_definitions(), version))[1], version
    )
    bones = defs.skeletons[0].bones
    assert not all(b.orientation.tolist() == [0, 0, 0, 1] for b in bones)
    converter = FrameConverter(up_axis, "local")
    converter.set_models(ModelIndex.build(defs))
    no_offset = copy.deepcopy(defs)
    for b in no_offset.skeletons[0].bones:
        b.orientation = np.array([0, 0, 0, 1], np.float32)
    naive = FrameConverter(up_axis, "local")
    naive.set_models(ModelIndex.build(no_offset))
    for k in (0, 31, 250):
        truth = sc.frame(k).skeletons.segments
        payload = nn.encode_frame_payload(stream.frame_of_data(k), version)
        got = converter.convert(nn.decode_frame(payload, version)).skeletons.segments
        np.testing.assert_allclose(got.positions, truth.positions, atol=2e-6)
        np.testing.assert_allclose(got.orientations, truth.orientations, atol=2e-6)
        wrong = naive.convert(nn.decode_frame(payload, version)).skeletons.segments
        assert np.max(np.abs(wrong.orientations - truth.orientations)) > 0.05
    # world (global) bones need no offset: the same models, global stream, same poses
    world = SceneStream(sc, up_axis=up_axis, skeleton_coordinates="global", rotational_offsets=True)
    converter = FrameConverter(up_axis, "global")
    converter.set_models(ModelIndex.build(defs))
    got = converter.convert(
        nn.decode_frame(nn.encode_frame_payload(world.frame_of_data(9), version), version)
    )
    np.testing.assert_allclose(
        got.skeletons.segments.orientations, sc.frame(9).skeletons.segments.orientations, atol=2e-6
    )


# ---------------------------------------------------------------------------- assets
@pytest.mark.parametrize("version", ["4.1", "4.2", "4.5"])
def test_asset_bodies_and_markers_are_published_and_nothing_else_is_lost(version):
    """A trained markerset (asset): its rigid body is published as a body named
    ``<asset>:<body>`` (id asset << 16 | body), its markers the labeled list lacks as
    markers ``<asset>:<marker>``; every rigid body, marker and bone of the frame stays."""
    version = nn.Version.parse(version)
    sc = Scene(dict(SKELETON_SCENE))
    stream = SceneStream(sc, up_axis="y", assets=True)
    defs = nn.decode_model_definitions(
        nn.unpack(nn.encode_model_definitions(stream.model_definitions(), version))[1], version
    )
    assert [(a.name, a.id, [b.name for b in a.rigid_bodies]) for a in defs.assets] == [
        ("drone1_markerset", 9, ["drone1"])
    ]
    converter = FrameConverter("y")
    converter.set_models(ModelIndex.build(defs))
    plain = FrameConverter("y")
    plain.set_models(ModelIndex.build(SceneStream(sc, up_axis="y").model_definitions()))
    for k in (3, 77):
        wire = stream.frame_of_data(k)
        got = converter.convert(nn.decode_frame(nn.encode_frame_payload(wire, version), version))
        got.check()
        without = plain.convert(SceneStream(sc, up_axis="y").frame_of_data(k))
        b = got.bodies
        assert b.names == ("drone1", "drone1_markerset:drone1") and b.ids.tolist() == [1, 9 << 16 | 1]
        np.testing.assert_array_equal(b.positions[1], b.positions[0])
        np.testing.assert_array_equal(b.orientations[1], b.orientations[0])
        n = len(without.markers)
        assert got.markers.names[:n] == without.markers.names
        np.testing.assert_array_equal(got.markers.positions[:n], without.markers.positions)
        assert got.markers.names[n:] == tuple(f"drone1_markerset:marker{i}" for i in range(1, 5))
        assert got.skeletons.names == without.skeletons.names == ("walker",)
        np.testing.assert_array_equal(got.skeletons.segments.positions, without.skeletons.segments.positions)
    assert not converter.unknown_ids
