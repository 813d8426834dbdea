"""Proof against code we did not write.

1. OptiTrack's own Python client (PyPI ``natnetsdk``, NatNetClient.py of the NatNet SDK)
   and the maintained ``natnet`` client connect to our Motive stand-in (a real process,
   real UDP) and decode the server info, model definitions and frames it sends.
2. Our decoder and theirs give the same values on the same bytes: property-based
   (hypothesis) over random frames and model definitions, for every bitstream version
   (4.2 and 4.5 with natnet, which reads the 4.2 quaternion), and live on the datagrams
   natnet received from a 4.2 stand-in with an asset.
3. natnetsdk (up to 4.1) is served the 4.1 it asks for by a 4.2/4.5 stand-in over unicast;
   libmotioncapture (up to 4.1, multicast only) reads a 4.1 stream and fails on 4.2.

Known limits of the reference clients, stated where they bite (never silently):
  * natnetsdk 4.1.1 reads two precision-timestamp words in every 4.x frame
    (``if major >= 4``) but NatNet 4.0 frames have none (the SDK's own PacketClient.cpp
    reads them from 4.1 on); on a 4.0 frame it runs past the frame suffix. See
    test_natnetsdk_reads_precision_timestamps_in_40_frames.
  * natnetsdk binds its multicast data socket to the local interface address (Windows
    semantics); Linux only delivers multicast datagrams to sockets bound to the group or
    to INADDR_ANY, so on Linux natnetsdk receives no multicast frames. Its command
    channel works in multicast mode and is checked there; its frames are checked unicast.
  * natnet 0.3.0 never reads the 4.1 precision timestamps, so in 4.1 frames the 16 bits
    it returns as frame parameters are the low bits of the precision seconds; and it
    reads force plate corners as 3x3 floats instead of 4x3. Those fields are excluded
    from the comparison with natnet (and checked with natnetsdk).
  * natnetsdk advances over rigid body marker names by their character count, not
    their UTF-8 byte count; generated names are ASCII.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import struct
import subprocess
import sys

import natnet
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from natnetsdk.NatNetClient import NatNetClient as SdkClient
from optitrack_stand_in import StandIn  # test/fixtures
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import wait_for

from mocap4r2_drivers.optitrack import protocol as nn
from mocap4r2_drivers.optitrack.simulator import CLOCK_FREQUENCY, SceneStream
from mocap4r2_drivers.simulated.scene import Scene

VERSIONS = ["3.0", "3.1", "4.0", "4.1"]
# natnet 0.3.0 reads the 4.2 rotational offset; natnetsdk 4.1.1 and libmotioncapture know
# only up to 4.1 (over unicast the stand-in serves them the version they ask for)
NEWER = ["4.2", "4.5"]
TEST_SCENE = {
    "seed": 11,
    "rate": 100.0,
    "latency": 0.003,
    "latency_jitter": 0.0,
    "noise": 0.0003,
    "occlusion": 0.1,
    "unlabeled_markers": 3,
    "dropped_frames": 0.0,
    "rigid_bodies": [
        {
            "name": "drone1",
            "id": 1,
            "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0, "tilt": 0.1},
        },
        {
            "name": "robot1",
            "id": 2,
            "trajectory": {"type": "figure_eight", "period": 6.0},
            "tracking_loss": {"every": 0.3, "duration": 0.1},
        },
        {"name": "wand", "id": 5, "trajectory": {"type": "random_walk", "period": 5.0}},
    ],
    "skeletons": [
        {"name": "walker", "id": 3, "trajectory": {"type": "circle", "radius": 1.5, "period": 9.0}}
    ],
}


def _wait(predicate, timeout: float, what: str) -> None:
    wait_for(predicate, timeout, what=what, interval=0.02)


# ---------------------------------------------------------------------------- comparisons
def _f32(values) -> list:
    return np.asarray(values, dtype=np.float32).reshape(-1).tolist()


def _same(a, b, what: str) -> None:
    a, b = _f32(a), _f32(b)
    assert len(a) == len(b) and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), (
        f"{what}: {a} != {b}"
    )


def compare_sdk_frame(
    sdk, ours: nn.FrameOfData, version: nn.Version, suffix: bool = True, stamps: bool = True
) -> None:
    """natnetsdk's MoCapData against our FrameOfData, field by field."""
    assert sdk.prefix_data.frame_number == ours.frame_number
    sets = sdk.marker_set_data.marker_data_list
    assert [s.model_name.decode() for s in sets] == [m.name for m in ours.marker_sets]
    for s, m in zip(sets, ours.marker_sets):
        _same(s.marker_pos_list, m.positions, f"marker set {m.name}")
    _same(sdk.legacy_other_markers.marker_pos_list, ours.other_markers, "other markers")
    bodies = sdk.rigid_body_data.rigid_body_list
    assert [b.id_num for b in bodies] == ours.rigid_bodies["id"].tolist()
    for b, r in zip(bodies, ours.rigid_bodies):
        _same(b.pos, r["position"], "rigid body position")
        _same(b.rot, r["orientation"], "rigid body orientation")
        _same([b.error], [r["mean_error"]], "rigid body mean error")
        assert b.tracking_valid == bool(r["params"] & 1)
    skeletons = sdk.skeleton_data.skeleton_list
    assert [s.id_num for s in skeletons] == [s.id for s in ours.skeletons]
    for s, o in zip(skeletons, ours.skeletons):
        assert [b.id_num for b in s.rigid_body_list] == o.bones["id"].tolist()
        for b, r in zip(s.rigid_body_list, o.bones):
            _same(b.pos, r["position"], "bone position")
            _same(b.rot, r["orientation"], "bone orientation")
            assert b.tracking_valid == bool(r["params"] & 1)
    if version.assets:
        assets = sdk.asset_data.asset_list
        assert [a.asset_id for a in assets] == [a.id for a in ours.assets]
        for a, o in zip(assets, ours.assets):
            assert [b.id_num for b in a.rigid_body_list] == o.rigid_bodies["id"].tolist()
            for b, r in zip(a.rigid_body_list, o.rigid_bodies):
                _same(b.pos, r["position"], "asset body position")
                _same([b.mean_error], [r["mean_error"]], "asset body error")
                assert b.param == r["params"]
            assert [m.marker_id for m in a.marker_list] == o.markers["id"].tolist()
            for m, r in zip(a.marker_list, o.markers):
                _same(m.pos, r["position"], "asset marker position")
                _same([m.residual], [r["residual"]], "asset marker residual")
    markers = sdk.labeled_marker_data.labeled_marker_list
    assert [m.id_num for m in markers] == ours.labeled_markers["id"].tolist()
    for m, r in zip(markers, ours.labeled_markers):
        _same(m.pos, r["position"], "labeled marker position")
        _same([m.size], [r["size"]], "labeled marker size")
        assert m.param == r["params"]
        # natnetsdk reports the residual in millimetres (x1000): the wire carries metres
        assert m.residual == pytest.approx(float(r["residual"]) * 1000.0, rel=1e-6, abs=1e-9, nan_ok=True)
    for sdk_items, our_items in (
        (sdk.force_plate_data.force_plate_list, ours.force_plates),
        (sdk.device_data.device_list, ours.devices),
    ):
        assert [i.id_num for i in sdk_items] == [i.id for i in our_items]
        for i, o in zip(sdk_items, our_items):
            assert len(i.channel_data_list) == len(o.channels)
            for c, v in zip(i.channel_data_list, o.channels):
                _same([x[0] for x in c.frame_list], v, "analog channel")
    sfx = sdk.suffix_data
    if stamps:
        assert (sfx.timecode, sfx.timecode_sub) == (ours.timecode, ours.timecode_subframe)
        assert sfx.timestamp == ours.timestamp
        assert (sfx.stamp_camera_mid_exposure, sfx.stamp_data_received, sfx.stamp_transmit) == (
            ours.stamp_camera_mid_exposure,
            ours.stamp_data_received,
            ours.stamp_transmit,
        )
    if suffix:
        if version.precision_timestamps:
            assert (sfx.prec_timestamp_secs, sfx.prec_timestamp_frac_secs) == (
                ours.precision_timestamp_secs,
                ours.precision_timestamp_frac_secs,
            )
        assert sfx.param == ours.params


def compare_natnet_frame(frame, ours: nn.FrameOfData, version: nn.Version, stamps: bool = True) -> None:
    """natnet's DataFrame against our FrameOfData (ids compared as the uint32 it reads)."""

    def u32(values):
        return (np.asarray(values, dtype=np.int64) & 0xFFFFFFFF).tolist()

    assert frame.prefix.frame_number == ours.frame_number
    assert [m.model_name for m in frame.marker_sets] == [m.name for m in ours.marker_sets]
    for a, b in zip(frame.marker_sets, ours.marker_sets):
        _same(a.marker_pos_list, b.positions, "marker set")
    _same(frame.unlabeled_marker_pos, ours.other_markers, "other markers")
    assert [b.id_num for b in frame.rigid_bodies] == u32(ours.rigid_bodies["id"])
    for b, r in zip(frame.rigid_bodies, ours.rigid_bodies):
        _same(
            b.pos + b.rot + (b.marker_error,),
            [*r["position"], *r["orientation"], r["mean_error"]],
            "rigid body",
        )
        assert b.tracking_valid == bool(r["params"] & 1)
    assert [s.id_num for s in frame.skeletons] == u32([s.id for s in ours.skeletons])
    for s, o in zip(frame.skeletons, ours.skeletons):
        assert [b.id_num for b in s.rigid_bodies] == u32(o.bones["id"])
        for b, r in zip(s.rigid_bodies, o.bones):
            _same(b.pos + b.rot, [*r["position"], *r["orientation"]], "bone")
    if version.assets:
        assert [a.asset_id for a in frame.assets] == u32([a.id for a in ours.assets])
        for a, o in zip(frame.assets, ours.assets):
            assert [b.id_num for b in a.rigid_bodies] == u32(o.rigid_bodies["id"])
            assert [m.marker_id for m in a.markers] == u32(o.markers["id"])
            for m, r in zip(a.markers, o.markers):
                _same(
                    m.pos + (m.marker_size, m.residual),
                    [*r["position"], r["size"], r["residual"]],
                    "asset marker",
                )
    assert [m.id_num for m in frame.labeled_markers] == u32(ours.labeled_markers["id"])
    for m, r in zip(frame.labeled_markers, ours.labeled_markers):
        _same(m.pos + (m.size, m.residual), [*r["position"], r["size"], r["residual"]], "labeled marker")
        assert m.param == r["params"]
    for theirs, mine in ((frame.force_plates, ours.force_plates), (frame.devices, ours.devices)):
        assert [i.id_num for i in theirs] == u32([i.id for i in mine])
        for i, o in zip(theirs, mine):
            assert len(i.channel_arrays) == len(o.channels)
            for c, v in zip(i.channel_arrays, o.channels):
                _same(c, v, "analog channel")
    s = frame.suffix
    if stamps:
        assert (s.timecode, s.timecode_sub, s.timestamp) == (
            ours.timecode,
            ours.timecode_subframe,
            ours.timestamp,
        )
        assert (s.stamp_camera_mid_exposure, s.stamp_data_received, s.stamp_transmit) == (
            ours.stamp_camera_mid_exposure,
            ours.stamp_data_received,
            ours.stamp_transmit,
        )
    if not version.precision_timestamps:  # natnet 0.3.0 skips none of the 4.1 precision words
        assert s.param == ours.params


def compare_sdk_models(sdk, ours: nn.ModelDefinitions, version: nn.Version) -> None:
    assert [m.marker_set_name.decode() for m in sdk.marker_set_list] == [m.name for m in ours.marker_sets]
    for a, b in zip(sdk.marker_set_list, ours.marker_sets):
        assert [n.decode() for n in a.marker_names_list] == list(b.marker_names)

    def bodies(theirs, mine):
        assert [b.sz_name.decode() for b in theirs] == [b.name for b in mine]
        for a, b in zip(theirs, mine):
            assert (a.id_num, a.parent_id) == (b.id, b.parent_id)
            _same(a.pos, b.offset, "offset")
            assert len(a.rb_marker_list) == len(b.marker_positions)
            for m, p, label, name in zip(
                a.rb_marker_list, b.marker_positions, b.marker_labels, b.marker_names
            ):
                _same(m.pos, p, "marker offset")
                assert m.active_label == label
                assert m.marker_name == (name if version.rigid_body_marker_names else "")

    bodies(sdk.rigid_body_list, ours.rigid_bodies)
    assert [(s.name.decode(), s.id_num) for s in sdk.skeleton_list] == [
        (s.name, s.id) for s in ours.skeletons
    ]
    for a, b in zip(sdk.skeleton_list, ours.skeletons):
        bodies(a.rigid_body_description_list, b.bones)
    assert [(c.name.decode(), *_f32(c.position), *_f32(c.orientation)) for c in sdk.camera_list] == [
        (c.name, *_f32(c.position), *_f32(c.orientation)) for c in ours.cameras
    ]
    assert [
        (
            d.id_num,
            d.name.decode(),
            d.serial_number.decode(),
            d.device_type,
            d.channel_data_type,
            [n.decode() for n in d.channel_list],
        )
        for d in sdk.device_list
    ] == [
        (d.id, d.name, d.serial, d.device_type, d.channel_data_type, list(d.channel_names))
        for d in ours.devices
    ]
    for a, b in zip(sdk.force_plate_list, ours.force_plates):
        assert (a.id_num, a.serial_number.decode(), a.plate_type, a.channel_data_type) == (
            b.id,
            b.serial,
            b.plate_type,
            b.channel_data_type,
        )
        _same([a.width, a.length, *a.position], [b.width, b.length, *b.origin], "force plate geometry")
        _same(a.cal_matrix, b.calibration, "calibration")
        _same(a.corners, b.corners, "corners")
        assert [n.decode() for n in a.channel_list] == list(b.channel_names)
    assert len(sdk.force_plate_list) == len(ours.force_plates)
    assert [(a.name.decode(), a.assetType, a.assetID) for a in sdk.asset_list] == [
        (a.name, a.asset_type, a.id) for a in ours.assets
    ]
    for a, b in zip(sdk.asset_list, ours.assets):
        bodies(a.rigidbodyArray, b.rigid_bodies)
        assert [(m.name.decode(), m.marker_id, m.marker_params) for m in a.markerArray] == [
            (m.name, m.id, m.params) for m in b.markers
        ]
        for m, o in zip(a.markerArray, b.markers):
            _same([*m.position, m.marker_size[0]], [*o.position, o.size], "asset marker")


def compare_natnet_models(theirs, ours: nn.ModelDefinitions, version: nn.Version) -> None:

    def u32(v):
        return int(v) & 0xFFFFFFFF

    assert [(m.name, m.marker_names) for m in theirs.marker_sets] == [
        (m.name, m.marker_names) for m in ours.marker_sets
    ]

    def bodies(a_list, b_list):
        assert [(a.name, a.id_num, a.parent_id) for a in a_list] == [
            (b.name, u32(b.id), u32(b.parent_id)) for b in b_list
        ]
        for a, b in zip(a_list, b_list):
            _same(a.pos, b.offset, "offset")
            if version.description_orientation:  # natnet reads the 4.2 quaternion
                _same(a.quat, b.orientation, "rotational offset")
            else:
                assert a.quat is None
            _same([m.pos for m in a.markers], b.marker_positions, "marker offsets")
            assert [m.active_label for m in a.markers] == [u32(v) for v in b.marker_labels]
            if version.rigid_body_marker_names:
                assert tuple(m.name for m in a.markers) == tuple(b.marker_names)

    bodies(theirs.rigid_bodies, ours.rigid_bodies)
    assert [(s.name, s.id_num) for s in theirs.skeletons] == [(s.name, u32(s.id)) for s in ours.skeletons]
    for a, b in zip(theirs.skeletons, ours.skeletons):
        bodies(a.rigid_body_descriptions, b.bones)
    assert [(c.name, *_f32(c.position)) for c in theirs.cameras] == [
        (c.name, *_f32(c.position)) for c in ours.cameras
    ]
    assert [(d.name, d.serial_number, d.channel_names) for d in theirs.devices] == [
        (d.name, d.serial, d.channel_names) for d in ours.devices
    ]
    assert [(a.name, a.asset_type, a.asset_id) for a in theirs.assets] == [
        (a.name, u32(a.asset_type), u32(a.id)) for a in ours.assets
    ]
    for a, b in zip(theirs.assets, ours.assets):
        bodies(a.rigid_body_descriptions, b.rigid_bodies)
        assert [(m.name, m.marker_id, m.marker_params) for m in a.marker_descriptions] == [
            (m.name, u32(m.id), m.params & 0xFFFF) for m in b.markers
        ]
        _same([m.position for m in a.marker_descriptions], [m.position for m in b.markers], "asset markers")


# ---------------------------------------------------------------------------- natnetsdk, live
class SdkRecorder:
    """natnetsdk's NatNetClient, driven as its sample does, with its decoded objects
    recorded (wrapping its unpack methods: their decoding is untouched)."""

    def __init__(self, stand_in: StandIn, multicast: bool):
        self.client = client = SdkClient()
        client.set_server_address("127.0.0.1")
        client.set_client_address("127.0.0.1")
        client.set_use_multicast(multicast)
        client.command_port = stand_in.command_port
        client.data_port = stand_in.data_port
        client.set_print_level(0)
        self.frames: list = []
        self.models: list = []
        self.errors: list = []
        unpack_frame = client._NatNetClient__unpack_mocap_data
        unpack_models = client._NatNetClient__unpack_data_descriptions

        def record_frame(*args):
            try:
                offset, data = unpack_frame(*args)
            except Exception as exc:
                self.errors.append(exc)
                raise
            self.frames.append(data)
            return offset, data

        def record_models(*args):
            offset, data = unpack_models(*args)
            self.models.append(data)
            return offset, data

        client._NatNetClient__unpack_mocap_data = record_frame
        client._NatNetClient__unpack_data_descriptions = record_models
        self._quiet = contextlib.redirect_stdout(io.StringIO())  # the sample prints every frame

    def __enter__(self):
        self._quiet.__enter__()
        assert self.client.run()
        return self

    def request_models(self):
        c = self.client
        c.send_request(c.command_socket, c.NAT_REQUEST_MODELDEF, "", (c.server_ip_address, c.command_port))

    def __exit__(self, *exc):
        c = self.client
        # its threads block in recvfrom() without timeout, and on Linux closing a socket
        # does not wake them: stop them, then wake each socket with one datagram
        c.stop_threads = True
        for sock in (c.data_socket, c.command_socket):
            try:
                host, port = sock.getsockname()
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as waker:
                    waker.sendto(b"", ("127.0.0.1" if host in ("0.0.0.0", "") else host, port))
            except OSError:
                pass
        for thread in (c.command_thread, c.data_thread):
            thread.join(5)  # before shutdown() closes the sockets they may still be using
        c.shutdown()
        self._quiet.__exit__(*exc)


def _check_sdk_session(sdk: SdkRecorder, stand_in: StandIn, version: nn.Version, frames: bool) -> None:
    c = sdk.client
    _wait(c.connected, WAIT, "natnetsdk got no NAT_SERVERINFO")
    assert c.get_application_name() == "Motive"
    assert c.get_server_version() == [3, 1, 0, 0]
    assert c.get_nat_net_version_server() == [version.major, version.minor, 0, 0]
    sdk.request_models()
    _wait(lambda: sdk.models, WAIT, "natnetsdk decoded no NAT_MODELDEF")
    compare_sdk_models(sdk.models[-1], stand_in.stream.model_definitions(), version)
    if not frames:
        return
    _wait(lambda: len(sdk.frames) >= 40, WAIT, "natnetsdk decoded fewer than 40 frames")
    latency_ticks = int(stand_in.stream.scene.latency * CLOCK_FREQUENCY)
    lost = 0
    for data in list(sdk.frames):
        k = data.prefix_data.frame_number
        expected = stand_in.expected(k)
        compare_sdk_frame(data, expected, version, stamps=False)
        sfx = data.suffix_data
        assert sfx.timestamp == pytest.approx(k / stand_in.stream.scene.rate)
        assert sfx.stamp_transmit - sfx.stamp_camera_mid_exposure == latency_ticks
        assert sfx.stamp_camera_mid_exposure < sfx.stamp_data_received < sfx.stamp_transmit
        lost += sum(not b.tracking_valid for b in data.rigid_body_data.rigid_body_list)
    assert lost, "a body losing tracking must be among the frames compared"
    assert not sdk.errors


@pytest.mark.parametrize("version", ["3.0", "3.1", "4.1"])
def test_natnetsdk_decodes_the_stand_in_unicast(procs, tmp_path, version):
    # 4.0 frames: see test_natnetsdk_reads_precision_timestamps_in_40_frames (its bug)
    stand_in = StandIn(
        procs, tmp_path, "--natnet-version", version, "--unicast", "--rate", "100", scene=TEST_SCENE
    )
    with SdkRecorder(stand_in, multicast=False) as sdk:
        _check_sdk_session(sdk, stand_in, nn.Version.parse(version), frames=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_natnetsdk_command_channel_multicast(procs, tmp_path, version):
    # multicast frames cannot reach natnetsdk on Linux (see the module docstring)
    stand_in = StandIn(procs, tmp_path, "--natnet-version", version, "--multicast", scene=TEST_SCENE)
    with SdkRecorder(stand_in, multicast=True) as sdk:
        _check_sdk_session(sdk, stand_in, nn.Version.parse(version), frames=False)


def test_natnetsdk_reads_precision_timestamps_in_40_frames():
    """natnetsdk 4.1.1 reads precision timestamps when ``major >= 4``; NatNet 4.0 has
    none. On a real 4.0 frame its suffix decoding therefore fails; given 8 more bytes it
    decodes everything but the suffix words, identically to us."""
    version = nn.Version(4, 0)
    frame = SceneStream(Scene(dict(TEST_SCENE))).frame_of_data(5)
    frame.params = nn.FRAME_MODELS_CHANGED
    payload = nn.encode_frame_payload(frame, version)
    client = SdkClient()
    with pytest.raises(struct.error):
        client._NatNetClient__unpack_mocap_data(payload, len(payload), 4, 0)
    _, data = client._NatNetClient__unpack_mocap_data(payload + bytes(8), len(payload) + 8, 4, 0)
    compare_sdk_frame(data, nn.decode_frame(payload, version), version, suffix=False)
    assert data.suffix_data.param != nn.FRAME_MODELS_CHANGED  # read from the wrong place


# ---------------------------------------------------------------------------- natnet, live
def _natnet_client(stand_in: StandIn, mode: str) -> natnet.NatNetClient:
    """natnet's client of the stand-in process, on loopback."""
    return natnet.NatNetClient(
        server_ip_address="127.0.0.1",
        local_ip_address="127.0.0.1",
        command_port=stand_in.command_port,
        data_port=stand_in.data_port,
        use_multicast=mode == "multicast",
    )


@pytest.mark.parametrize("mode", ["unicast", "multicast"])
@pytest.mark.parametrize("version", VERSIONS)
def test_natnet_client_decodes_the_stand_in(procs, tmp_path, version, mode):
    stand_in = StandIn(
        procs, tmp_path, "--natnet-version", version, f"--{mode}", "--rate", "100", scene=TEST_SCENE
    )
    v = nn.Version.parse(version)
    frames, models = [], []
    client = _natnet_client(stand_in, mode)
    client.on_data_frame_received_event.handlers.append(frames.append)
    client.on_data_description_received_event.handlers.append(models.append)
    with contextlib.redirect_stdout(io.StringIO()):
        client.connect(10.0)
        try:
            info = client.server_info
            assert info.application_name == "Motive"
            assert info.nat_net_protocol_version == natnet.Version(v.major, v.minor, 0, 0)
            client.run_async()
            client.request_modeldef()
            _wait(lambda: models and len(frames) >= 40, WAIT, "natnet: no model definitions or < 40 frames")
        finally:
            client.shutdown()
    compare_natnet_models(models[-1], stand_in.stream.model_definitions(), v)
    latency_ticks = int(stand_in.stream.scene.latency * CLOCK_FREQUENCY)
    for frame in frames:
        k = frame.prefix.frame_number
        compare_natnet_frame(frame, stand_in.expected(k), v, stamps=False)
        assert frame.suffix.stamp_transmit - frame.suffix.stamp_camera_mid_exposure == latency_ticks
        assert frame.suffix.timestamp == pytest.approx(k / 100.0)


# ---------------------------------------------------------------------------- same bytes, same values
_name = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
_f = st.floats(width=32, allow_nan=False, allow_infinity=False)
_i32 = st.integers(-(2**31), 2**31 - 1)
_id = st.integers(0, 2**31 - 1)
_params = st.integers(0, 0x7FFF)


def _vec(n: int, width: int):
    return st.lists(_f, min_size=n * width, max_size=n * width).map(
        lambda v: np.asarray(v, np.float32).reshape(n, width)
    )


def _records(dtype, max_size: int):
    fields = {"id": _i32, "mean_error": _f, "size": _f, "residual": _f, "params": _params}

    @st.composite
    def make(draw):
        n = draw(st.integers(0, max_size))
        out = np.zeros(n, dtype=dtype)
        for name in dtype.names:
            shape = dtype.fields[name][0].shape
            if shape:
                out[name] = draw(_vec(n, shape[0]))
            else:
                out[name] = draw(st.lists(fields[name], min_size=n, max_size=n))
        return out

    return make()


def _analog():
    return st.builds(
        nn.AnalogData,
        _i32,
        st.lists(st.integers(0, 3).flatmap(lambda n: _vec(n, 1).map(lambda a: a.reshape(-1))), max_size=3),
    )


@st.composite
def frames(draw, version: nn.Version):
    return nn.FrameOfData(
        frame_number=draw(_id),
        marker_sets=draw(
            st.lists(
                st.builds(nn.MarkerSetData, _name, st.integers(0, 4).flatmap(lambda n: _vec(n, 3))),
                max_size=3,
            )
        ),
        other_markers=draw(st.integers(0, 4).flatmap(lambda n: _vec(n, 3))),
        rigid_bodies=draw(_records(nn.RIGID_BODY_DTYPE, 5)),
        skeletons=draw(
            st.lists(st.builds(nn.SkeletonData, _i32, _records(nn.RIGID_BODY_DTYPE, 4)), max_size=2)
        ),
        assets=draw(
            st.lists(
                st.builds(nn.AssetData, _i32, _records(nn.RIGID_BODY_DTYPE, 3), _records(nn.MARKER_DTYPE, 3)),
                max_size=2,
            )
        )
        if version.assets
        else [],
        labeled_markers=draw(_records(nn.MARKER_DTYPE, 6)),
        force_plates=draw(st.lists(_analog(), max_size=2)),
        devices=draw(st.lists(_analog(), max_size=2)),
        timecode=draw(_id),
        timecode_subframe=draw(_id),
        timestamp=draw(st.floats(allow_nan=False, allow_infinity=False)),
        stamp_camera_mid_exposure=draw(st.integers(0, 2**63 - 1)),
        stamp_data_received=draw(st.integers(0, 2**63 - 1)),
        stamp_transmit=draw(st.integers(0, 2**63 - 1)),
        precision_timestamp_secs=draw(_id) if version.precision_timestamps else 0,
        precision_timestamp_frac_secs=draw(_id) if version.precision_timestamps else 0,
        params=draw(_params),
    )


def _body_description():
    return st.integers(0, 4).flatmap(
        lambda n: st.builds(
            nn.RigidBodyDescription,
            _name,
            _i32,
            _i32,
            _vec(1, 3).map(lambda a: a[0]),
            _vec(1, 4).map(lambda a: a[0]),  # the 4.2 rotational offset (not sent before 4.2)
            _vec(n, 3),
            st.lists(_i32, min_size=n, max_size=n).map(lambda v: np.asarray(v, np.int32)),
            st.lists(_name, min_size=n, max_size=n).map(tuple),
        )
    )


@st.composite
def model_definitions(draw, version: nn.Version):
    return nn.ModelDefinitions(
        marker_sets=draw(
            st.lists(
                st.builds(nn.MarkerSetDescription, _name, st.lists(_name, max_size=4).map(tuple)), max_size=3
            )
        ),
        rigid_bodies=draw(st.lists(_body_description(), max_size=3)),
        skeletons=draw(
            st.lists(
                st.builds(nn.SkeletonDescription, _name, _i32, st.lists(_body_description(), max_size=3)),
                max_size=2,
            )
        ),
        force_plates=draw(
            st.lists(
                st.builds(
                    nn.ForcePlateDescription,
                    _i32,
                    _name,
                    _f,
                    _f,
                    _vec(1, 3).map(lambda a: a[0]),
                    _vec(12, 12),
                    _vec(4, 3),
                    _i32,
                    _i32,
                    st.lists(_name, max_size=3).map(tuple),
                ),
                max_size=1,
            )
        ),
        devices=draw(
            st.lists(
                st.builds(
                    nn.DeviceDescription,
                    _i32,
                    _name,
                    _name,
                    _i32,
                    _i32,
                    st.lists(_name, max_size=3).map(tuple),
                ),
                max_size=2,
            )
        ),
        cameras=draw(
            st.lists(
                st.builds(
                    nn.CameraDescription,
                    _name,
                    _vec(1, 3).map(lambda a: a[0]),
                    _vec(1, 4).map(lambda a: a[0]),
                ),
                max_size=2,
            )
        ),
        assets=draw(
            st.lists(
                st.builds(
                    nn.AssetDescription,
                    _name,
                    _i32,
                    _i32,
                    st.lists(_body_description(), max_size=2),
                    st.lists(
                        st.builds(
                            nn.MarkerDescription, _name, _i32, _vec(1, 3).map(lambda a: a[0]), _f, _params
                        ),
                        max_size=2,
                    ),
                ),
                max_size=2,
            )
        )
        if version.assets
        else [],
    )


_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("version", VERSIONS + NEWER)
def test_same_frame_values_as_the_reference_decoders(version):
    v = nn.Version.parse(version)
    sdk = SdkClient()

    @_SETTINGS
    @given(frames(v))
    def check(frame):
        payload = nn.encode_frame_payload(frame, v)
        ours = nn.decode_frame(payload, v)
        if v == (4, 0):  # natnetsdk reads 8 bytes of precision timestamps 4.0 does not have (see above)
            _, theirs = sdk._NatNetClient__unpack_mocap_data(payload + bytes(8), len(payload) + 8, 4, 0)
            compare_sdk_frame(theirs, ours, v, suffix=False)
        elif v.imu_gpio:  # neither knows 4.5's IMU and GPIO sections: they read them as the suffix
            _, theirs = sdk._NatNetClient__unpack_mocap_data(payload, len(payload), v.major, v.minor)
            compare_sdk_frame(theirs, ours, v, suffix=False, stamps=False)
        else:
            _, theirs = sdk._NatNetClient__unpack_mocap_data(payload, len(payload), v.major, v.minor)
            compare_sdk_frame(theirs, ours, v)
        compare_natnet_frame(
            natnet.DataFrame.read_from_buffer(
                natnet.packet_buffer.PacketBuffer(payload), natnet.Version(v.major, v.minor)
            ),
            ours,
            v,
            stamps=not v.imu_gpio,
        )
        # and what we decoded is what was encoded
        assert np.array_equal(ours.rigid_bodies, frame.rigid_bodies.astype(nn.RIGID_BODY_DTYPE))
        assert nn.encode_frame_payload(ours, v) == payload

    with contextlib.redirect_stdout(io.StringIO()):
        check()


@pytest.mark.parametrize("version", VERSIONS + NEWER)
def test_same_model_values_as_the_reference_decoders(version):
    v = nn.Version.parse(version)
    sdk = SdkClient()

    @_SETTINGS
    @given(model_definitions(v))
    def check(defs):
        payload = nn.unpack(nn.encode_model_definitions(defs, v))[1]
        ours = nn.decode_model_definitions(payload, v)
        if v.known and not v.description_orientation:  # natnetsdk 4.1.1 skips no 4.2 quaternion
            _, theirs = sdk._NatNetClient__unpack_data_descriptions(payload, len(payload), v.major, v.minor)
            compare_sdk_models(theirs, ours, v)
        # natnet 0.3.0 reads force plate corners as 9 floats instead of 12: without plates for it
        without_plates = nn.ModelDefinitions(
            defs.marker_sets, defs.rigid_bodies, defs.skeletons, [], defs.devices, defs.cameras, defs.assets
        )
        plain = nn.unpack(nn.encode_model_definitions(without_plates, v))[1]
        compare_natnet_models(
            natnet.DataDescriptions.read_from_buffer(
                natnet.packet_buffer.PacketBuffer(plain), natnet.Version(v.major, v.minor)
            ),
            nn.decode_model_definitions(plain, v),
            v,
        )
        assert nn.unpack(nn.encode_model_definitions(ours, v))[1] == payload

    with contextlib.redirect_stdout(io.StringIO()):
        check()


def test_server_info_as_the_reference_decoders_read_it():
    info = nn.ServerInfo("Motive", (3, 1, 2, 7), (4, 1, 0, 0), 10_000_000, 1511, True, "239.255.42.99")
    payload = nn.unpack(nn.encode_server_info(info))[1]
    theirs = natnet.ServerInfo.read_from_buffer(natnet.packet_buffer.PacketBuffer(payload), None)
    assert theirs.application_name == "Motive"
    assert theirs.server_version == natnet.Version(3, 1, 2, 7)
    assert theirs.nat_net_protocol_version == natnet.Version(4, 1, 0, 0)
    sdk = SdkClient()
    with contextlib.redirect_stdout(io.StringIO()):
        sdk._NatNetClient__unpack_server_info(payload, len(payload), 0, 0)
    assert sdk.get_application_name() == "Motive" and sdk.get_server_version() == [3, 1, 2, 7]
    assert sdk.get_nat_net_version_server() == [4, 1, 0, 0]


def test_connect_requests_of_the_reference_clients_are_understood():
    # what natnetsdk and natnet put on the wire for NAT_CONNECT, captured on a socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(5)
        port = server.getsockname()[1]
        sdk = SdkClient()
        sdk.set_use_multicast(False)
        with contextlib.redirect_stdout(io.StringIO()), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            sdk.send_request(s, sdk.NAT_CONNECT, "", ("127.0.0.1", port))
            message_id, payload = nn.unpack(server.recvfrom(4096)[0])
        assert message_id == nn.MessageId.CONNECT
        request = nn.decode_connect(payload)
        assert request.client_name == "Ping" and request.requested_bitstream == (4, 1, 0, 0)
        nclient = natnet.NatNetClient(command_port=port, use_multicast=False)
        nclient._NatNetClient__command_socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            nclient.send_request(nclient.NAT_CONNECT)
            message_id, payload = nn.unpack(server.recvfrom(4096)[0])
        finally:
            nclient._NatNetClient__command_socket.close()
        assert message_id == nn.MessageId.CONNECT and nn.decode_connect(payload).client_name == "Ping"


# ---------------------------------------------------------------------------- 4.2 and later, live
@pytest.mark.parametrize("mode", ["unicast", "multicast"])
def test_natnet_client_decodes_the_42_stand_in_with_assets(procs, tmp_path, mode):
    """natnet 0.3.0 (which reads the 4.2 rotational offset) against a Motive 3.2 stand-in
    streaming 4.2 with an asset: on the very bytes it received, our decoder and it agree
    on every body, bone, asset, marker and name.

    natnet 0.3.0 reads no 4.1+ precision timestamp, so the 16 bits it takes as the frame
    params are the low bits of the precision seconds: params are not compared (the other
    suffix fields sit before them and are)."""
    stand_in = StandIn(
        procs, tmp_path, "--natnet-version", "4.2", f"--{mode}", "--assets", "--rate", "100", scene=TEST_SCENE
    )
    v = nn.Version(4, 2)
    frames: list = []
    models: list = []
    raw: dict[int, list[bytes]] = {nn.MessageId.FRAMEOFDATA: [], nn.MessageId.MODELDEF: []}
    client = _natnet_client(stand_in, mode)
    process = client._NatNetClient__process_message

    def recording(buffer):  # the bytes it decodes, untouched, then its own decoding
        message_id = int.from_bytes(bytes(buffer.data[:2]), "little")
        if message_id in raw:
            raw[message_id].append(bytes(buffer.data))
        return process(buffer)

    client._NatNetClient__process_message = recording
    client.on_data_frame_received_event.handlers.append(frames.append)
    client.on_data_description_received_event.handlers.append(models.append)
    with contextlib.redirect_stdout(io.StringIO()):
        client.connect(10.0)
        try:
            assert client.server_info.nat_net_protocol_version == natnet.Version(4, 2, 0, 0)
            client.run_async()
            client.request_modeldef()
            _wait(lambda: models and len(frames) >= 40, WAIT, "natnet: no model definitions or < 40 frames")
        finally:
            client.shutdown()
    # same bytes, same values: models (with the quaternions, the asset) and every frame
    ours_models = nn.decode_model_definitions(nn.unpack(raw[nn.MessageId.MODELDEF][-1])[1], v)
    compare_natnet_models(models[-1], ours_models, v)
    assert [a.name for a in models[-1].assets] == ["drone1_markerset"]
    assert [b.name for b in models[-1].rigid_bodies] == ["drone1", "robot1", "wand"]
    assert len(frames) == len(raw[nn.MessageId.FRAMEOFDATA])
    for theirs, packet in zip(frames, raw[nn.MessageId.FRAMEOFDATA]):
        ours = nn.decode_frame(nn.unpack(packet)[1], v)
        compare_natnet_frame(theirs, ours, v)
        assert len(theirs.assets) == 1 and len(theirs.assets[0].markers) == 4
        # and those bytes are the scene's frame
        expected = stand_in.expected(ours.frame_number)
        assert np.array_equal(ours.rigid_bodies, expected.rigid_bodies)


@pytest.mark.parametrize("version", ["4.2", "4.5"])
def test_natnetsdk_is_served_the_41_it_asks_for_by_a_newer_stand_in(procs, tmp_path, version):
    """natnetsdk 4.1.1 knows up to 4.1 and asks for it in its NAT_CONNECT: a Motive 3.2+
    stand-in serves it 4.1 over unicast (NAT_SERVERINFO, models, frames), which it decodes
    exactly."""
    stand_in = StandIn(
        procs, tmp_path, "--natnet-version", version, "--unicast", "--rate", "100", scene=TEST_SCENE
    )
    with SdkRecorder(stand_in, multicast=False) as sdk:
        _check_sdk_session(sdk, stand_in, nn.Version(4, 1), frames=True)


# ---------------------------------------------------------------------------- libmotioncapture, live
_LIBMOTIONCAPTURE_READER = """
import json, sys
import motioncapture
mc = motioncapture.connect(
    "optitrack", {"hostname": "127.0.0.1", "port_command": sys.argv[1], "interface_ip": "127.0.0.1"}
)
seen = {}
for _ in range(20):
    mc.waitForNextFrame()
    seen = {name: body.position.tolist() for name, body in mc.rigidBodies.items()}
    if len(seen) == 4:
        break
print(json.dumps(seen))
"""
TEST_SCENE_WITH_STATIC = {
    **TEST_SCENE,
    "rigid_bodies": [
        *TEST_SCENE["rigid_bodies"],
        {"name": "table", "id": 9, "trajectory": {"type": "static", "position": [1.5, -1.0, 0.75]}},
    ],
}


def _libmotioncapture_session(procs, tmp_path, version: str):
    """natnet_simulator multicasting ``version`` to the default group and port (where
    libmotioncapture's OptiTrack client listens), and libmotioncapture reading it in a
    child process: (stand-in, the child's CompletedProcess)."""
    stand_in = StandIn(
        procs,
        tmp_path,
        "--natnet-version",
        version,
        "--multicast",
        "--rate",
        "100",
        scene=TEST_SCENE_WITH_STATIC,
        data_port=nn.DEFAULT_DATA_PORT,
    )
    # in a child process: libmotioncapture 1.1's OptiTrack client crashed (SIGSEGV) when a
    # second one was created in the same process after the first was dropped
    result = subprocess.run(
        [sys.executable, "-c", _LIBMOTIONCAPTURE_READER, str(stand_in.command_port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return stand_in, result


def test_libmotioncapture_reads_the_41_stand_in_multicast(procs, tmp_path):
    """libmotioncapture (PyPI ``motioncapture``, the Crazyswarm / motion_capture_tracking
    backend) knows up to 4.1 and asks for no bitstream (it takes what Motive multicasts;
    its OptiTrack client has no unicast): names, and the pose of the static body, as served."""
    stand_in, result = _libmotioncapture_session(procs, tmp_path, "4.1")
    assert result.returncode == 0, result.stderr
    seen = {name: np.asarray(p, np.float32) for name, p in json.loads(result.stdout).items()}
    assert set(seen) == {"drone1", "robot1", "wand", "table"}
    expected = stand_in.expected(0)
    table = int(np.flatnonzero(expected.rigid_bodies["id"] == 9)[0])
    np.testing.assert_array_equal(seen["table"], expected.rigid_bodies["position"][table])


def test_libmotioncapture_fails_on_a_42_multicast_stream(procs, tmp_path):
    """Issue 37's "the anchors break here too": libmotioncapture 1.1 does not skip the 4.2
    rigid-body quaternion of the model definitions (here in the skeleton's bones), and a
    Motive 3.2+ multicasts 4.2 whatever a client can read: it crashes (SIGSEGV) or
    misreads. Asserted, so that a libmotioncapture that learns 4.2 shows up here."""
    _, result = _libmotioncapture_session(procs, tmp_path, "4.2")
    if result.returncode == 0:
        seen = json.loads(result.stdout)
        assert set(seen) != {"drone1", "robot1", "wand", "table"}, "libmotioncapture now reads 4.2"
    else:
        assert result.returncode < 0, result.stderr  # killed by a signal, not a Python error
