"""NatNet protocol module: byte layouts per bitstream version, bounds, the scene's NatNet
view, the frame converter, and the pure-Python client against an in-process stand-in."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time

import numpy as np
import pytest
from optitrack_stand_in import in_process_stand_ins  # test/fixtures
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_control.frame import NO_PARENT, UNKNOWN_ID
from mocap4r2_drivers.optitrack import protocol as nn
from mocap4r2_drivers.optitrack.client import (
    ClientConfig,
    FrameConverter,
    ModelIndex,
    NatNetClient,
    NatNetConnectionError,
)
from mocap4r2_drivers.optitrack.simulator import NatNetSimulator, SceneStream, ServerOptions
from mocap4r2_drivers.simulated.scene import Scene

VERSIONS = list(nn.SUPPORTED_VERSIONS)  # 3.0 to 4.5

SCENE = {
    "seed": 3,
    "rate": 200.0,
    "latency": 0.004,
    "latency_jitter": 0.0,
    "noise": 0.0003,
    "occlusion": 0.05,
    "unlabeled_markers": 3,
    "rigid_bodies": [
        {
            "name": "drone1",
            "id": 1,
            "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0, "tilt": 0.2},
        },
        {
            "name": "robot1",
            "id": 2,
            "trajectory": {"type": "figure_eight", "period": 6.0},
            "tracking_loss": {"every": 0.5, "duration": 0.2},
        },
    ],
    "skeletons": [
        {"name": "walker", "id": 7, "trajectory": {"type": "circle", "radius": 1.5, "period": 9.0}}
    ],
}


def scene() -> Scene:
    return Scene(dict(SCENE))


def sample_frame() -> nn.FrameOfData:
    rb = nn.empty_rigid_bodies(2)
    rb["id"] = [1, 2]
    rb["position"] = [[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]]
    rb["orientation"] = [[0, 0, 0, 1], [0.5, 0.5, 0.5, 0.5]]
    rb["mean_error"] = [0.0005, 0.0]
    rb["params"] = [1, 0]
    lm = nn.empty_markers(2)
    lm["id"] = nn.marker_id([1, 0], [3, 50001])
    lm["position"] = [[1, 2, 3], [4, 5, 6]]
    lm["size"] = 0.014
    lm["params"] = [nn.MARKER_HAS_MODEL, nn.MARKER_UNLABELED]
    lm["residual"] = [0.0002, -1.0]
    return nn.FrameOfData(
        frame_number=1234,
        marker_sets=[nn.MarkerSetData("drone1", np.ones((2, 3), np.float32))],
        other_markers=np.full((1, 3), 7.0, np.float32),
        rigid_bodies=rb,
        skeletons=[nn.SkeletonData(7, rb.copy())],
        assets=[nn.AssetData(9, rb[:1].copy(), lm[:1].copy())],
        labeled_markers=lm,
        force_plates=[nn.AnalogData(1, [np.array([1.5, 2.5], np.float32)])],
        devices=[nn.AnalogData(2, [np.array([3.0], np.float32), np.zeros(0, np.float32)])],
        timecode=11,
        timecode_subframe=12,
        timestamp=12.5,
        stamp_camera_mid_exposure=100,
        stamp_data_received=150,
        stamp_transmit=200,
        precision_timestamp_secs=3,
        precision_timestamp_frac_secs=4,
        params=nn.FRAME_MODELS_CHANGED,
    )


# ---------------------------------------------------------------------------- layouts
def test_header_and_bounds():
    packet = nn.pack(nn.MessageId.KEEPALIVE, b"abc")
    assert packet == struct.pack("<HH", 10, 3) + b"abc"
    assert nn.unpack(packet + b"\0") == (10, b"abc")  # trailing bytes (a NUL some clients add) ignored
    with pytest.raises(nn.NatNetProtocolError, match="shorter than a NatNet header"):
        nn.unpack(b"\x07\x00")
    with pytest.raises(nn.NatNetProtocolError, match="announces 3 payload bytes but only 2"):
        nn.unpack(packet[:-1])
    with pytest.raises(nn.NatNetProtocolError, match="does not fit one datagram"):
        nn.pack(nn.MessageId.FRAMEOFDATA, bytes(70000))


def test_connect_and_server_info_layouts():
    connect = nn.encode_connect(nn.ConnectRequest(client_name="tester", requested_bitstream=(4, 0, 0, 0)))
    message_id, payload = nn.unpack(connect)
    assert (
        message_id == 0
        and len(payload) == 269
        and payload[:6] == b"tester"
        and payload[265:269] == b"\4\0\0\0"
    )
    assert nn.decode_connect(payload).requested_bitstream == (4, 0, 0, 0)
    ping = nn.decode_connect(b"Ping\0")  # the short form other clients send
    assert ping.client_name == "Ping" and ping.requested_bitstream is None

    info = nn.ServerInfo("Motive", (3, 1, 2, 0), (4, 1, 0, 0), 10_000_000, 1511, True, "239.255.42.99")
    message_id, payload = nn.unpack(nn.encode_server_info(info))
    # sSender_Server: name[256], version[4], natnet version[4], uint64 clock, uint16 port, bool, address[4]
    assert message_id == 1 and len(payload) == 256 + 8 + 8 + 2 + 1 + 4
    assert struct.unpack_from("<QHB4B", payload, 264) == (10_000_000, 1511, 1, 239, 255, 42, 99)
    assert nn.decode_server_info(payload) == info
    legacy = nn.decode_server_info(payload[:264])  # before NatNet 3: no connection info
    assert legacy.bitstream == nn.Version(4, 1) and legacy.data_port is None and legacy.clock_frequency == 0
    with pytest.raises(nn.NatNetProtocolError):
        nn.decode_server_info(payload[:100])


IMU_BYTES = bytes(range(24))
GPIO_BYTES = b"\x01\x00\x00\x00\xff"


def _hand_built_frame(version: nn.Version) -> bytes:
    """One rigid body, one labeled marker, one marker set, nothing else: built with
    struct from the published layout, independently of the encoder."""
    counts = version >= (4, 1)

    def dataset(count: int, body: bytes) -> bytes:
        return struct.pack("<i", count) + (struct.pack("<i", len(body)) if counts else b"") + body

    out = struct.pack("<i", 77)
    out += dataset(1, b"rb\0" + struct.pack("<i3f", 1, 1.0, 2.0, 3.0))
    out += dataset(0, b"")  # other markers
    out += dataset(1, struct.pack("<i3f4ffh", 5, 0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 1.0, 0.001, 1))
    out += dataset(0, b"")  # skeletons
    if version >= (4, 1):
        out += dataset(0, b"")  # assets
    out += dataset(1, struct.pack("<i3ffhf", 5 << 16 | 2, 4.0, 5.0, 6.0, 0.014, 0x08, 0.0003))
    out += dataset(0, b"") + dataset(0, b"")  # force plates, devices
    if version >= (4, 5):  # IMU and GPIO sections: their items are not public, opaque here
        out += dataset(2, IMU_BYTES) + dataset(1, GPIO_BYTES)
    out += struct.pack("<IIdQQQ", 1, 2, 0.5, 10, 20, 30)
    if version >= (4, 1):
        out += struct.pack("<II", 40, 50)
    out += struct.pack("<H", 0x02) + struct.pack("<i", 0)
    return out


@pytest.mark.parametrize("version", VERSIONS, ids=str)
def test_frame_layout_matches_the_published_layout(version):
    payload = _hand_built_frame(version)
    frame = nn.decode_frame(payload, version)
    assert frame.frame_number == 77
    assert frame.marker_sets[0].name == "rb" and frame.marker_sets[0].positions.tolist() == [[1.0, 2.0, 3.0]]
    body = frame.rigid_bodies[0]
    assert body["id"] == 5 and body["params"] == 1
    np.testing.assert_allclose(body["position"], [0.1, 0.2, 0.3], rtol=1e-6)
    marker = frame.labeled_markers[0]
    assert nn.split_marker_id(marker["id"]) == (5, 2)
    assert np.isclose(marker["residual"], 0.0003)
    assert (frame.timecode, frame.timecode_subframe, frame.timestamp) == (1, 2, 0.5)
    assert (frame.stamp_camera_mid_exposure, frame.stamp_data_received, frame.stamp_transmit) == (10, 20, 30)
    assert (frame.precision_timestamp_secs, frame.precision_timestamp_frac_secs) == (
        (40, 50) if version >= (4, 1) else (0, 0)
    )
    assert frame.tracked_models_changed and not frame.is_recording
    if version >= (4, 5):  # read past by their size, and said so
        assert frame.skipped == (nn.Skipped("imu", 2, 24, True), nn.Skipped("gpio", 1, 5, True))
        frame.imu, frame.gpio = nn.Opaque(0, 2, IMU_BYTES), nn.Opaque(0, 1, GPIO_BYTES)
    else:
        assert frame.skipped == ()
    # and the encoder writes exactly these bytes back
    assert nn.encode_frame_payload(frame, version) == payload


@pytest.mark.parametrize("version", VERSIONS, ids=str)
def test_frame_round_trip(version):
    frame = sample_frame()
    message_id, payload = nn.unpack(nn.encode_frame(frame, version))
    assert message_id == nn.MessageId.FRAMEOFDATA
    back = nn.decode_frame(payload, version)
    assert back.frame_number == 1234
    assert np.array_equal(back.rigid_bodies, frame.rigid_bodies)
    assert np.array_equal(back.labeled_markers, frame.labeled_markers)
    assert np.array_equal(back.other_markers, frame.other_markers)
    assert back.skeletons[0].id == 7 and np.array_equal(back.skeletons[0].bones, frame.rigid_bodies)
    assert [d.channels[0].tolist() for d in back.devices] == [[3.0]] and back.devices[0].channels[1].size == 0
    assert back.force_plates[0].channels[0].tolist() == [1.5, 2.5]
    if version >= (4, 1):
        assert back.assets[0].id == 9 and np.array_equal(back.assets[0].markers, frame.labeled_markers[:1])
        assert back.precision_timestamp_secs == 3
    else:  # assets and precision timestamps do not exist before 4.1: not sent
        assert back.assets == [] and back.precision_timestamp_secs == 0
    assert back.params == nn.FRAME_MODELS_CHANGED


def test_byte_counts_only_in_41_and_checked():
    frame = sample_frame()
    sizes = {v: len(nn.encode_frame_payload(frame, v)) for v in VERSIONS}
    assert sizes[nn.Version(3, 0)] == sizes[nn.Version(3, 1)] == sizes[nn.Version(4, 0)]
    asset_bytes = 4 + 4 + 4 + 38 + 4 + 26  # count, id, body count, body, marker count, marker
    assert sizes[nn.Version(4, 1)] == sizes[nn.Version(4, 0)] + 8 * 4 + asset_bytes + 8
    payload = bytearray(nn.encode_frame_payload(frame, nn.Version(4, 1)))
    # the rigid body byte count (after frame number, marker sets, other markers) made wrong
    offset = 4 + 8 + (len(b"drone1\0") + 4 + 24) + 8 + 12 + 4
    assert struct.unpack_from("<i", payload, offset) == (2 * 38,)
    struct.pack_into("<i", payload, offset, 2 * 38 + 2)
    with pytest.raises(nn.NatNetProtocolError, match="byte count says"):
        nn.decode_frame(bytes(payload), nn.Version(4, 1))
    # a 4.1 packet read as 4.0 fails cleanly instead of returning garbage silently
    with pytest.raises(nn.NatNetProtocolError):
        nn.decode_frame(nn.encode_frame_payload(frame, nn.Version(4, 1)), nn.Version(4, 0))


@pytest.mark.parametrize("version", VERSIONS, ids=str)
def test_every_truncation_is_a_protocol_error(version):
    payload = nn.encode_frame_payload(sample_frame(), version)
    end_of_params = len(payload) - 4  # the end-of-data tag is optional
    for cut in range(end_of_params):
        with pytest.raises(nn.NatNetProtocolError):
            nn.decode_frame(payload[:cut], version)
    assert nn.decode_frame(payload[:end_of_params], version).params == nn.FRAME_MODELS_CHANGED
    models = nn.unpack(nn.encode_model_definitions(SceneStream(scene()).model_definitions(), version))[1]
    for cut in range(0, len(models), 7):
        with pytest.raises(nn.NatNetProtocolError):
            nn.decode_model_definitions(models[:cut], version)


def test_huge_counts_are_refused_before_allocating():
    payload = bytearray(nn.encode_frame_payload(sample_frame(), nn.Version(3, 0)))
    struct.pack_into("<i", payload, 4, 0x7FFFFFFF)  # marker set count
    with pytest.raises(nn.NatNetProtocolError, match="marker set count 2147483647 does not fit"):
        nn.decode_frame(bytes(payload), nn.Version(3, 0))
    struct.pack_into("<i", payload, 4, -1)
    with pytest.raises(nn.NatNetProtocolError, match="count -1"):
        nn.decode_frame(bytes(payload), nn.Version(3, 0))


def test_unsupported_versions_are_refused_clearly():
    expected = "NatNet bitstream 2.10 is not supported: this driver reads 3.0 to 4.5"
    with pytest.raises(nn.NatNetProtocolError, match=expected):
        nn.decode_frame(b"", nn.Version(2, 10))
    with pytest.raises(nn.NatNetProtocolError, match="not a NatNet version"):
        nn.Version.parse("four")
    assert nn.Version.parse("4.1.0.0") == (4, 1)


# ---------------------------------------------------------------------------- model definitions
@pytest.mark.parametrize("version", VERSIONS, ids=str)
def test_model_definitions_round_trip(version):
    defs = SceneStream(scene()).model_definitions()
    defs.cameras.append(nn.CameraDescription("cam1", np.array([1, 2, 3], np.float32)))
    defs.devices.append(nn.DeviceDescription(3, "emg", "SN1", 1, 2, ("ch1", "ch2")))
    defs.force_plates.append(nn.ForcePlateDescription(4, "FP1", 0.4, 0.6, channel_names=("Fx", "Fy")))
    if version >= (4, 1):
        defs.assets.append(
            nn.AssetDescription(
                "trained",
                1,
                11,
                [defs.rigid_bodies[0]],
                [nn.MarkerDescription("m1", 1, np.ones(3, np.float32), 0.01, 2)],
            )
        )
    back = nn.decode_model_definitions(nn.unpack(nn.encode_model_definitions(defs, version))[1], version)
    assert [b.name for b in back.rigid_bodies] == ["drone1", "robot1"]
    assert [b.id for b in back.rigid_bodies] == [1, 2]
    body = back.rigid_bodies[0]
    np.testing.assert_allclose(body.marker_positions, defs.rigid_bodies[0].marker_positions)
    if version >= (4, 0):
        assert body.marker_names == ("marker1", "marker2", "marker3", "marker4")
    else:  # rigid body marker names exist from NatNet 4.0 on
        assert body.marker_names == ("",) * 4
    assert back.marker_sets[1].marker_names == ("marker1", "marker2", "marker3", "marker4")
    skeleton = back.skeletons[0]
    assert skeleton.name == "walker" and skeleton.id == 7 and len(skeleton.bones) == 19
    assert skeleton.bones[0].parent_id == -1 and skeleton.bones[1].parent_id == skeleton.bones[0].id
    assert back.cameras[0].name == "cam1" and back.devices[0].channel_names == ("ch1", "ch2")
    assert back.force_plates[0].channel_names == ("Fx", "Fy") and back.force_plates[0].corners.shape == (4, 3)
    assert (len(back.assets) == 1) == (version >= (4, 1))


def test_unknown_dataset_types_skipped_in_41_refused_before():
    def packet(version, counts):
        body = b"future\0"
        return (
            struct.pack("<i", 1)
            + struct.pack("<i", 42)
            + (struct.pack("<i", len(body)) if counts else b"")
            + body
        )

    skipped = nn.decode_model_definitions(packet(nn.Version(4, 1), True), nn.Version(4, 1))
    assert skipped == nn.ModelDefinitions(skipped=[nn.Skipped("description type 42", 1, 7, False)])
    with pytest.raises(nn.NatNetProtocolError, match="unknown dataset type 42"):
        nn.decode_model_definitions(packet(nn.Version(4, 0), False), nn.Version(4, 0))


# ---------------------------------------------------------------------------- scene view + converter
def _converter(stream: SceneStream, up_axis="y", coordinates="global") -> FrameConverter:
    converter = FrameConverter(up_axis, coordinates)
    converter.set_models(ModelIndex.build(stream.model_definitions()))
    converter.clock_frequency = 10_000_000
    return converter


@pytest.mark.parametrize("up_axis,coordinates", [("y", "global"), ("z", "global"), ("y", "local")])
def test_scene_survives_the_natnet_round_trip(up_axis, coordinates):
    sc = scene()
    stream = SceneStream(sc, up_axis=up_axis, skeleton_coordinates=coordinates)
    converter = _converter(stream, up_axis, coordinates)
    lost_seen = False
    for k in (0, 57, 80, 95, 140, 333):
        truth = sc.frame(k)
        wire = stream.frame_of_data(k, truth)
        version = nn.Version(4, 1)
        got = converter.convert(nn.decode_frame(nn.encode_frame_payload(wire, version), version))
        got.check()
        assert got.frame_number == k
        b, t = got.bodies, truth.bodies
        assert b.names == ("drone1", "robot1") and b.ids.tolist() == [1, 2]
        assert b.valid.tolist() == t.valid.tolist()
        v = t.valid
        lost_seen |= not v.all()
        np.testing.assert_allclose(b.positions[v], t.positions[v], atol=1e-6)
        np.testing.assert_allclose(b.orientations[v], t.orientations[v], atol=1e-6)
        if not v.all():  # Motive sends a lost body as a zero pose: marked invalid, never trusted
            assert np.all(b.positions[~v] == 0)
        # body markers: grouped by body, named from the model definitions, NatNet ids
        assert b.marker_offsets.tolist() == [0, 4, 8]
        assert b.markers.names[:2] == ("drone1:marker1", "drone1:marker2")
        assert b.markers.ids.tolist() == [1 << 16 | m for m in range(1, 5)] + [
            2 << 16 | m for m in range(1, 5)
        ]
        assert b.markers.occluded.tolist() == t.markers.occluded.tolist()
        seen = ~t.markers.occluded
        np.testing.assert_allclose(b.markers.positions[seen], t.markers.positions[seen], atol=1e-6)
        # every marker: labeled then unlabeled ones (UNKNOWN_ID, no name)
        m = got.markers
        assert len(m) == 8 + 3 and m.ids[8:].tolist() == [UNKNOWN_ID] * 3 and m.names[8:] == ("",) * 3
        np.testing.assert_allclose(m.positions[8:], truth.markers.positions[8:], atol=1e-6)
        np.testing.assert_allclose(m.residuals[:8][seen], t.markers.residuals[seen], atol=1e-7)
        # skeleton: names and parents from the model definitions, world poses
        s, ts = got.skeletons, truth.skeletons
        assert s.names == ("walker",) and s.ids.tolist() == [7]
        assert s.segments.names == ts.segments.names
        assert s.segments.ids.tolist() == ts.segments.ids.tolist()
        assert s.segments.parent_ids.tolist() == ts.segments.parent_ids.tolist()
        assert s.segments.parent_ids[0] == NO_PARENT
        np.testing.assert_allclose(s.segments.positions, ts.segments.positions, atol=2e-6)
        np.testing.assert_allclose(s.segments.orientations, ts.segments.orientations, atol=2e-6)
        assert got.latency == pytest.approx(0.0)  # no server stamps in this frame
    assert lost_seen, "the test scene must show a body losing tracking"


def test_stream_is_y_up_like_motive():
    sc = scene()
    stream = SceneStream(sc, up_axis="y")
    truth = sc.frame(0)
    wire = stream.frame_of_data(0, truth)
    zup = truth.bodies.positions[0]
    # Motive Y-up: x right, y up, z towards the viewer: (x, y, z)_zup -> (x, z, -y)_yup
    np.testing.assert_allclose(wire.rigid_bodies["position"][0], [zup[0], zup[2], -zup[1]], rtol=1e-6)


def test_converter_names_unknown_ids_and_latency():
    stream = SceneStream(scene())
    converter = _converter(stream)
    wire = stream.frame_of_data(3)
    wire.rigid_bodies = wire.rigid_bodies.copy()
    wire.rigid_bodies["id"][1] = 99
    wire.stamp_camera_mid_exposure, wire.stamp_data_received, wire.stamp_transmit = (
        1_000_000,
        1_010_000,
        1_050_000,
    )
    got = converter.convert(wire)
    assert got.bodies.names == ("drone1", "rigid_body_99") and converter.unknown_ids == {99}
    assert got.latency == pytest.approx(0.005)
    wire.stamp_camera_mid_exposure = 0  # no mid-exposure stamp: software latency only
    assert converter.convert(wire).latency == pytest.approx(0.004)


# ---------------------------------------------------------------------------- client <-> in-process stand-in
@pytest.fixture
def server_factory():
    with in_process_stand_ins() as make:
        yield make


def _frames(client: NatNetClient, n: int, timeout: float = 10.0):
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        frame = client.read_mocap_frame(0.2)
        if frame is not None:
            out.append(frame)
    assert len(out) == n, f"{len(out)} of {n} frames within {timeout} s"
    return out


@pytest.mark.parametrize("mode", ["multicast", "unicast"])
def test_client_streams_from_the_stand_in(server_factory, mode):
    srv = server_factory(multicast=mode == "multicast", natnet_version="4.1")
    client = srv.client(mode)
    try:
        models = client.connect(5.0)
        assert [b.name for b in models.rigid_bodies] == ["drone1", "robot1", "wand", "table"]
        assert client.frame_rate == pytest.approx(120.0)
        info = client.server_info
        assert info.clock_frequency == 10_000_000 and info.multicast == (mode == "multicast")
        frames = _frames(client, 30)
        numbers = [f.frame_number for f in frames]
        assert numbers == sorted(numbers) and len(set(numbers)) == 30
        assert frames[-1].latency == pytest.approx(
            0.004, abs=1e-6
        )  # the demo scene's latency, via clock ticks
        if mode == "unicast":
            assert len(srv.server.clients) == 1
    finally:
        client.close()
    if mode == "unicast":  # NAT_DISCONNECT stops the unicast stream to this client
        wait_for(
            lambda: not srv.server.clients,
            WAIT,
            lambda: srv.server.clients,
            interval=0.02,
            what="the server forgetting the disconnected client",
        )
        assert not srv.server.clients


def test_unicast_needs_keepalives(server_factory):
    srv = server_factory(multicast=False, client_timeout=0.5)
    client = srv.client("unicast", keepalive_period=0.2)
    try:
        client.connect(5.0)
        # not reading: no keep-alives, the server drops the client after its client_timeout
        wait_for(
            lambda: not srv.server.clients,
            WAIT,
            lambda: srv.server.clients,
            interval=0.02,
            what="the server dropping the silent client",
        )
        assert not srv.server.clients
        # reading again (through the frames still buffered) notices the silence and reconnects
        deadline = time.monotonic() + WAIT
        while not srv.server.clients and time.monotonic() < deadline:
            client.read(0.2)
        assert len(srv.server.clients) == 1 and client.stats.reconnects == 1
        _frames(client, 5)
    finally:
        client.close()


def test_models_are_read_again_when_the_server_says_they_changed(server_factory):
    srv = server_factory(multicast=True)
    client = srv.client("multicast")
    try:
        client.connect(5.0)
        assert _frames(client, 1)[0].bodies.names[0] == "drone1"
        assert client.request("RenameRigidBody,1,quadrotor", 2.0) == 0
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            frame = client.read_mocap_frame(0.2)
            if frame is not None and frame.bodies.names[0] == "quadrotor":
                break
        else:
            pytest.fail("the new name never arrived")
        assert client.stats.model_updates >= 2
        assert frame.bodies.markers.names[0] == "quadrotor:marker1"
        assert client.request("Bitstream", 1.0) == "Bitstream,4.1"
        assert client.request("NoSuchCommand", 1.0) is None
        # a server that does not answer "FrameRate": the rate comes from the frame timestamps
        client.frame_rate = 0.0
        _frames(client, 15)
        assert client.frame_rate == pytest.approx(120.0, rel=1e-6)
    finally:
        client.close()


def test_client_follows_a_bitstream_change_made_by_another_client(server_factory):
    """natnetsdk (and Motive's UI) can switch the bitstream while we stream: the client
    notices the undecodable frames, asks the server again and decodes the new layout."""
    srv = server_factory(multicast=True, natnet_version="4.1")
    client = srv.client("multicast")
    try:
        client.connect(5.0)
        _frames(client, 3)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
            other.settimeout(3)
            other.sendto(nn.encode_request("Bitstream,3.0"), ("127.0.0.1", srv.port))
            assert nn.unpack(other.recvfrom(4096)[0])[1] == struct.pack("<i", 0)
        deadline = time.monotonic() + WAIT
        while client.version != (3, 0) and time.monotonic() < deadline:
            client.read(0.1)
        assert client.version == (3, 0)
        frame = _frames(client, 3)[-1]
        assert frame.bodies.names == ("drone1", "robot1", "wand", "table")
    finally:
        client.close()


def test_client_follows_the_servers_mode_and_port(server_factory, caplog):
    srv = server_factory(multicast=True)
    client = NatNetClient(ClientConfig(command_port=srv.port, data_port=1, connection_type="unicast"))
    caplog.set_level(logging.WARNING, logger="mocap4r2.natnet")
    try:
        client.connect(5.0)
        _frames(client, 5)
        assert client.multicast and client.data_port == srv.server.data_port
        text = caplog.text
        assert "connection_type is unicast but the server streams multicast" in text
        assert f"set data_port: {srv.server.data_port}" in text
    finally:
        client.close()


@pytest.mark.parametrize(
    "mode,expected",
    [
        (
            "multicast",
            "the server answers but no frames reach multicast 239.255.42.99:{port} on interface 127.0.0.1",
        ),
        ("unicast", "the server answers but sends no unicast frames"),
    ],
)
def test_why_no_frames_arrive_is_logged_once(server_factory, caplog, mode, expected):
    srv = server_factory(multicast=mode == "multicast", rate=0.2)  # answers, but a frame every 5 s
    client = srv.client(mode, reconnect_after=0.3, retry_period=0.1)
    caplog.set_level(logging.INFO, logger="mocap4r2.natnet")
    try:
        client.connect(5.0)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            client.read(0.1)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and warnings[0].startswith(expected.format(port=srv.server.data_port))
        assert sum("connected to" in r.getMessage() for r in caplog.records) == 1, "said once, not per retry"
        assert client.stats.reconnects == 1 and client.stats.last_error.startswith("the server answers")
    finally:
        client.close()


def test_no_server_is_a_clear_error():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = NatNetClient(ClientConfig(command_port=port, connection_type="unicast"))
    try:
        expected = r"no answer \(NAT_SERVERINFO\) from 127.0.0.1:\d+ within 0.6 s"
        with pytest.raises(NatNetConnectionError, match=expected):
            client.connect(0.6)
    finally:
        client.close()


def test_unsupported_server_version_is_a_clear_error():
    """A Motive streaming NatNet 2.10 (Motive 1.x settings) is refused, saying what to change."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as fake:
        fake.bind(("127.0.0.1", 0))
        fake.settimeout(5)
        client = NatNetClient(ClientConfig(command_port=fake.getsockname()[1], connection_type="unicast"))

        def answer():
            with contextlib.suppress(OSError):
                _, source = fake.recvfrom(4096)
                fake.sendto(nn.encode_server_info(nn.ServerInfo(natnet_version=(2, 10, 0, 0))), source)

        thread = threading.Thread(target=answer)
        thread.start()
        try:
            expected = (
                r"Motive streams NatNet 2.10 \(read from its NAT_SERVERINFO\); this driver reads 3.0 to"
            )
            with pytest.raises(NatNetConnectionError, match=expected):
                client.connect(3.0)
        finally:
            thread.join()
            client.close()


def test_bad_local_address_is_a_clear_error():
    client = NatNetClient(ClientConfig(local_address="10.254.254.254"))
    with pytest.raises(
        NatNetConnectionError, match="local_address 10.254.254.254 is not an address of this machine"
    ):
        client.connect(0.5)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("connection_type", "broadcast", "connection_type must be one of"),
        ("up_axis", "x", "up_axis must be one of"),
        ("server_address", "motive.local", "server_address must be an IPv4 address"),
        ("multicast_address", "10.0.0.1", "is not a multicast group"),
        ("data_port", 70000, "data_port must be in 1..65535"),
    ],
)
def test_config_is_validated(field, value, message):
    with pytest.raises(ValueError, match=message):
        NatNetClient(ClientConfig(**{field: value}))


def test_client_reconnects_after_a_server_restart(server_factory):
    srv = server_factory(multicast=False)
    port = srv.port
    client = srv.client("unicast", reconnect_after=0.3, retry_period=0.1)
    try:
        client.connect(5.0)
        _frames(client, 5)
        srv.close()
        while client.read(0.5) is not None:  # frames already in the socket buffer
            pass
        restarted = NatNetSimulator(ServerOptions(command_port=port, multicast=False))
        restarted.open()
        stop = threading.Event()
        thread = threading.Thread(target=restarted.serve, args=(stop,), daemon=True)
        thread.start()
        try:
            t0 = time.monotonic()
            _frames(client, 3, timeout=5.0)
            assert time.monotonic() - t0 < 2.0
            assert client.stats.reconnects >= 1
        finally:
            stop.set()
            thread.join(5)
            restarted.close()
    finally:
        client.close()


def test_server_survives_garbage_commands(server_factory):
    srv = server_factory(multicast=False)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2.0)
        for junk in (
            b"",
            b"\x01",
            b"\x00\x00\xff\xff",
            nn.pack(nn.MessageId.REQUEST, b"\xff\xfe"),
            bytes(300),
            nn.pack(77, b"?"),
        ):
            s.sendto(junk, ("127.0.0.1", srv.port))
        s.sendto(nn.encode_connect(), ("127.0.0.1", srv.port))
        while True:
            message_id, payload = nn.unpack(s.recvfrom(65536)[0])
            if message_id == nn.MessageId.SERVERINFO:
                break
    assert nn.decode_server_info(payload).app_name == "Motive"
    assert srv.thread.is_alive() and srv.server.bad_packets >= 2
