"""Fuzzing the NatNet decoders with mutated real packets (hypothesis).

Real packets: what the stand-in streams for the test scene, in every bitstream version,
plus assets, force plates and devices. Mutations: bit flips, byte overwrites, extreme
int32 counts, truncation, insertion. Whatever the bytes, a decoder returns or raises
NatNetProtocolError, allocates memory bounded by the packet size, and what it returns
converts to a consistent MocapFrame; the client and the stand-in never raise.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import time
import tracemalloc

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import CROSS_PROCESS_TIMEOUT as WAIT

from mocap4r2_drivers.optitrack import protocol as nn
from mocap4r2_drivers.optitrack.client import ClientConfig, NatNetClient
from mocap4r2_drivers.optitrack.convert import FrameConverter, ModelIndex
from mocap4r2_drivers.optitrack.simulator import NatNetSimulator, SceneStream, ServerOptions
from mocap4r2_drivers.simulated.scene import Scene

VERSIONS = [nn.Version(3, 0), nn.Version(3, 1), nn.Version(4, 0), nn.Version(4, 1)]
SCENE = {
    "seed": 5,
    "rate": 100.0,
    "noise": 0.0003,
    "occlusion": 0.2,
    "unlabeled_markers": 4,
    "rigid_bodies": [
        {"name": "drone1", "id": 1, "trajectory": {"type": "circle", "period": 4.0}},
        {
            "name": "robot1",
            "id": 2,
            "trajectory": {"type": "static"},
            "tracking_loss": {"every": 0.2, "duration": 0.1},
        },
    ],
    "skeletons": [{"name": "walker", "id": 4}],
}
_STREAM = SceneStream(Scene(dict(SCENE)))


def _frame_payload(version: nn.Version, k: int) -> bytes:
    frame = _STREAM.frame_of_data(k)
    frame.assets = [nn.AssetData(9, frame.rigid_bodies[:1].copy(), frame.labeled_markers[:2].copy())]
    frame.force_plates = [nn.AnalogData(1, [np.arange(3, dtype=np.float32)] * 3)]
    frame.devices = [nn.AnalogData(2, [np.ones(2, np.float32)])]
    frame.stamp_transmit, frame.stamp_camera_mid_exposure, frame.stamp_data_received = 5000, 4000, 4500
    return nn.encode_frame_payload(frame, version)


def _model_payload(version: nn.Version) -> bytes:
    defs = _STREAM.model_definitions()
    defs.cameras.append(nn.CameraDescription("cam"))
    defs.devices.append(nn.DeviceDescription(3, "emg", "S", 1, 1, ("a", "b")))
    defs.force_plates.append(nn.ForcePlateDescription(4, "FP", channel_names=("Fz",)))
    if version.assets:
        defs.assets.append(
            nn.AssetDescription("asset", 1, 9, defs.rigid_bodies[:1], [nn.MarkerDescription("m", 1)])
        )
    return nn.unpack(nn.encode_model_definitions(defs, version))[1]


CORPUS = {("frame", v, k): _frame_payload(v, k) for v in VERSIONS for k in (0, 13)}
CORPUS.update({("models", v, 0): _model_payload(v) for v in VERSIONS})
KEYS = sorted(CORPUS, key=str)
_EXTREME = [0, 1, -1, 2**31 - 1, -(2**31), 0x10000, 0xFFFF, 12, 38, 26]


@st.composite
def mutated(draw):
    key = draw(st.sampled_from(KEYS))
    data = bytearray(CORPUS[key])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "int32", "truncate", "insert", "delete"]))
        if not data:
            break
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "int32" and pos + 4 <= len(data):
            struct.pack_into(
                "<i", data, pos, draw(st.sampled_from(_EXTREME) | st.integers(-(2**31), 2**31 - 1))
            )
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
    return key, bytes(data)


def _converter(version: nn.Version) -> FrameConverter:
    converter = FrameConverter("y", "local")  # local: exercises the bone hierarchy too
    converter.set_models(
        ModelIndex.build(nn.decode_model_definitions(CORPUS[("models", version, 0)], version))
    )
    converter.clock_frequency = 10_000_000
    return converter


CONVERTERS = {v: _converter(v) for v in VERSIONS}


@pytest.mark.filterwarnings("error::RuntimeWarning")  # garbage floats must not print numpy warnings
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_packets_decode_or_raise_protocol_errors(case):
    (kind, version, _), data = case
    tracemalloc.start()
    try:
        try:
            if kind == "frame":
                decoded = nn.decode_frame(data, version)
            else:
                decoded = nn.decode_model_definitions(data, version)
        except nn.NatNetProtocolError as exc:
            assert str(exc)  # says what is wrong
            decoded = None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # bounded: no allocation driven by a garbage count, whatever the bytes say
    assert peak < 64 * len(data) + 512 * 1024, f"{peak} bytes allocated for a {len(data)}-byte packet"
    if kind == "frame" and decoded is not None:
        frame = CONVERTERS[version].convert(decoded)
        frame.check()
    elif decoded is not None:
        ModelIndex.build(decoded).asset_names()


@settings(max_examples=200, deadline=None)
@given(mutated(), st.sampled_from(list(nn.MessageId)))
def test_the_client_never_raises_on_mutated_packets(case, message_id):
    (kind, version, _), data = case
    client = NatNetClient(ClientConfig())
    client.dialog.version = version
    client.converter = CONVERTERS[version]
    packet = nn.pack(message_id, data[: nn.MAX_PAYLOAD])
    for candidate in (packet, packet[: len(packet) // 2], data):
        frame = client._handle(candidate)
        if frame is not None:
            client.converter.convert(frame).check()
    assert client.stats.decode_errors >= 0


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(nn.MessageId)) | st.integers(0, 0xFFFF), st.binary(max_size=300))
def test_the_stand_in_never_raises_on_garbage_commands(message_id, payload):
    server = NatNetSimulator(ServerOptions(command_port=0, data_port=0, scene="", rate=10.0))
    server.open()
    try:
        server.handle(nn.pack(message_id, payload), ("127.0.0.1", 9))
        server.handle(payload, ("127.0.0.1", 9))
    finally:
        server.close()


def test_the_stand_in_process_survives_a_garbage_flood(procs, tmp_path):
    scene_path = tmp_path / "scene.yaml"
    scene_path.write_text(yaml.safe_dump(SCENE))
    proc = procs.start(
        "mocap4r2_drivers",
        "natnet_simulator",
        ros=False,
        name="natnet_simulator",
        args=["--scene", str(scene_path), "--command-port", "0", "--data-port", "0", "--unicast"],
    )
    assert proc.wait_log("natnet_simulator ready", 30), proc.log()
    port = int(re.search(r"command=[\d.]+:(\d+)", proc.log()).group(1))
    rng = np.random.default_rng(1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5.0)
        for i in range(2000):
            size = int(rng.integers(0, 400))
            junk = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            if i % 3 == 0 and size >= 4:  # valid headers with garbage payloads reach the handlers
                junk = nn.pack(int(rng.integers(0, 15)), junk[4:])
            s.sendto(junk, ("127.0.0.1", port))
        # the flood may still fill the simulator's socket buffer, where a datagram is lost:
        # ask again every second until it answers (and streams) or the deadline passes
        s.settimeout(1.0)
        deadline = time.monotonic() + WAIT
        got = set()
        while {nn.MessageId.SERVERINFO, nn.MessageId.FRAMEOFDATA} - got and time.monotonic() < deadline:
            if nn.MessageId.SERVERINFO not in got:
                s.sendto(nn.encode_connect(), ("127.0.0.1", port))
            with contextlib.suppress(socket.timeout):
                got.add(nn.unpack(s.recvfrom(65536)[0])[0])
    assert proc.alive(), proc.log()
    assert {nn.MessageId.SERVERINFO, nn.MessageId.FRAMEOFDATA} <= got, (
        "it answers and streams after the flood"
    )
    assert "ignored a malformed command packet" in proc.log()
