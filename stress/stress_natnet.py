"""NatNet under fuzzing, floods and server restarts (OptiTrack: natnet_simulator and
optitrack_system as processes, the decoder in this process).

1. Mutated NAT_FRAMEOFDATA packets (every bitstream version, 3.0 to 4.5 and a "future
   Motive" 4.6 with an unknown section; 4.1+ with an asset, 4.5 with IMU and GPIO
   sections) through the reading path: unpack, strict decode, conversion to a
   MocapFrame, the frame's consistency check; and mutated NAT_MODELDEF packets (4.1 to
   4.6: quaternions, an asset, anchor markers, an unknown description type) through
   decode and the model index.
2. Garbage and spoofed datagrams at a live optitrack_system reading a 4.5 stand-in
   (well-formed and mutated 4.5 frames among them): every rigid-body message it
   publishes meanwhile is compared with the scene the stand-in served (frame number
   advancing, poses equal); the driver must stay alive and its log bounded.
3. natnet_simulator killed (SIGKILL) and restarted under a live driver: time to the
   first published frame, driver threads and memory before/after.

Sizes: STRESS_NATNET_PACKETS (1 000 000), STRESS_FUZZ_SECONDS (time budget per fuzzing
path, 150), STRESS_FLOOD_DATAGRAMS (100 000), STRESS_RESTARTS (20)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script from stress/: import it as the package it is
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

from stress import _driver_live as live_parts
from stress._fuzz import run_fuzz

SCENE = {
    "seed": 8,
    "rate": 100.0,
    "latency": 0.003,
    "latency_jitter": 0.0,
    "noise": 0.0003,
    "occlusion": 0.05,
    "unlabeled_markers": 3,
    "dropped_frames": 0.0,
    "rigid_bodies": [
        {
            "name": "drone1",
            "id": 1,
            "trajectory": {"type": "circle", "radius": 1.0, "period": 4.0, "tilt": 0.1},
        },
        {"name": "robot1", "id": 2, "trajectory": {"type": "figure_eight", "period": 6.0}},
    ],
    "skeletons": [
        {"name": "walker", "id": 3, "trajectory": {"type": "circle", "radius": 1.5, "period": 9.0}}
    ],
}


def _scene(tmp: Path):
    return live_parts.scene_file(tmp, "natnet_scene.yaml", SCENE)


# ---------------------------------------------------------------------- 1. fuzzing
def natnet_path():
    """(bases, step) of the NatNet reading path, built in each fuzzing worker: frames of
    every bitstream version at three moments of the scene (different occlusions and
    marker counts), and a step that unpacks, decodes, converts and checks."""
    import tempfile
    import zlib

    from mocap4r2_drivers.optitrack import protocol as nn
    from mocap4r2_drivers.optitrack.convert import FrameConverter, ModelIndex
    from mocap4r2_drivers.optitrack.server_commands import MotiveCommands
    from mocap4r2_drivers.optitrack.simulator import FUTURE_VERSION, SceneStream

    _, scene = _scene(Path(tempfile.mkdtemp(prefix="mocap4r2-stress-")))
    # what a Motive 3.2+ streams: an asset, rotational offsets, IMU/GPIO from 4.5 on
    stream = SceneStream(scene, assets=True, rotational_offsets=True)
    future = SceneStream(scene, assets=True, rotational_offsets=True, future=True)
    versions = [nn.Version.parse(v) for v in ("3.0", "3.1", "4.0", "4.1", "4.2", "4.3", "4.4", "4.5")]
    bases, base_version = [], []
    for version in [*versions, FUTURE_VERSION]:
        source = future if version == FUTURE_VERSION else stream
        for k in (0, 37, 81):
            bases.append(nn.encode_frame(source.frame_of_data(k), version))
            base_version.append(version)
    frames = len(bases)
    for version in [*versions[3:], FUTURE_VERSION]:  # model definitions, 4.1 on
        is_future = version == FUTURE_VERSION
        bases.append(
            MotiveCommands(future if is_future else stream, version, 100.0, is_future).models_packet()
        )
        base_version.append(version)
    converter = FrameConverter("y", "global")
    converter.set_models(ModelIndex.build(stream.model_definitions(), 1))
    reference = [nn.decode_frame(nn.unpack(b)[1], v) for b, v in zip(bases[:frames], base_version)]

    def structure(frame):
        return (
            frame.rigid_bodies["id"].tobytes(),
            frame.labeled_markers["id"].tobytes(),
            tuple((s.id, s.bones["id"].tobytes()) for s in frame.skeletons),
            len(frame.marker_sets),
        )

    shapes = [structure(f) for f in reference]
    frame_id = nn.MessageId.FRAMEOFDATA
    models_id = nn.MessageId.MODELDEF
    error = nn.NatNetProtocolError

    def step(base: int, packet: bytes) -> str:
        try:
            message_id, payload = nn.unpack(packet)
            if base >= frames:  # model definitions: decoded and indexed as the client does
                if message_id != models_id:
                    return "rejected"
                defs = nn.decode_model_definitions(payload, base_version[base])
                ModelIndex.build(defs).asset_names()
                return "accepted"
            if message_id != frame_id:
                return "rejected"
            frame = nn.decode_frame(payload, base_version[base])
        except error:
            return "rejected"
        # the conversion costs most: run it on every frame whose structure (ids, counts)
        # the mutation changed, and on one in 50 of those where only values changed
        # (chosen by the packet's CRC, so a run is the same every time)
        if structure(frame) == shapes[base] and zlib.crc32(packet) % 50:
            return "accepted"
        try:
            mocap = converter.convert(frame)
        except (ValueError, IndexError):  # the adapter drops such a frame (counted)
            return "rejected"
        try:
            mocap.check()
        except ValueError:
            return "inconsistent"
        return "converted"

    return bases, step


def fuzz(total: int, budget: float) -> list[tuple]:
    result = run_fuzz("NatNet decoder", "stress.stress_natnet:natnet_path", total, budget, seed=1)
    return result.rows(total)


# ---------------------------------------------------------------------- live
def _start_stand_in(live: live_parts.Live, scene_path, command_port: int, data_port: int, *extra: str):
    import re

    args = ["--scene", str(scene_path), "--command-port", str(command_port), "--data-port", str(data_port)]
    proc, ready = live_parts.start_stand_in(live, "natnet_simulator", [*args, *extra])
    match = re.search(r"command=([\d.]+):(\d+) .*data_port=(\d+)", proc.log())
    return proc, int(match.group(2)), int(match.group(3)), ready


def _streaming_driver(live: live_parts.Live, scene_path, ns: str, reconnect_after: float, *extra: str):
    """A multicast stand-in and an optitrack_system in ``ns`` streaming its two bodies:
    (stand_in, command_port, data_port, rigid_bodies collector, driver)."""
    from mocap4r2_interfaces.msg import RigidBodies

    stand_in, command_port, data_port, _ = _start_stand_in(live, scene_path, 0, 0, "--multicast", *extra)
    bodies = live.ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    driver = live.procs.start(
        "mocap4r2_drivers",
        "optitrack_system",
        name="optitrack",
        namespace=ns,
        params={
            "autostart": True,
            "command_port": command_port,
            "data_port": data_port,
            "connection_type": "multicast",
            "reconnect_after": reconnect_after,
        },
    )
    bodies.wait_for(lambda m: len(m.rigid_bodies) == 2, timeout=60)
    return stand_in, command_port, data_port, bodies, driver


def flood(live: live_parts.Live, datagrams: int) -> list[tuple]:
    from mocap4r2_drivers.optitrack import protocol as nn
    from mocap4r2_drivers.optitrack.simulator import SceneStream

    scene_path, scene = _scene(live.tmp)
    stand_in, command_port, data_port, bodies, driver = _streaming_driver(
        live, scene_path, "/stress_natnet_flood", 1.0, "--natnet-version", "4.5"
    )
    log_before = len(driver.log())
    stream = SceneStream(scene)
    version = nn.Version.parse("4.5")  # IMU and GPIO sections in every frame
    good = bytearray(nn.encode_frame(stream.frame_of_data(5), version))
    models = stream.model_definitions()
    models.rigid_bodies[0].name = "hijacked"
    spoofed_models = nn.encode_model_definitions(models, version)
    own = live_parts.driver_udp_port(driver.pid, {data_port})  # its command socket
    rng = np.random.default_rng(3)
    local = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    local.bind(("127.0.0.1", 0))
    local.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.2", 0))
    stranger.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    group = (nn.DEFAULT_MULTICAST_ADDRESS, data_port)
    bodies.clear()
    start = time.monotonic()
    for i in range(datagrams):
        kind = i % 6
        if kind == 0:
            packet = rng.integers(0, 256, int(rng.integers(0, 600)), dtype=np.uint8).tobytes()
        elif kind == 1:  # a well-formed frame with a random number
            good[4:8] = int(rng.integers(0, 2**31)).to_bytes(4, "little")
            packet = bytes(good)
        elif kind == 2:  # flipped bytes
            mutant = bytearray(good)
            for at in rng.integers(4, len(mutant), 4):
                mutant[int(at)] = int(rng.integers(0, 256))
            packet = bytes(mutant)
        elif kind == 3:  # from a stranger: models renaming a body, frames
            stranger.sendto(spoofed_models, group)
            if own:
                stranger.sendto(spoofed_models, ("127.0.0.1", own))
            continue
        elif kind == 4 and own:  # unsolicited responses and server info at the command socket
            local.sendto(nn.encode_response("x" * 100), ("127.0.0.1", own))
            continue
        else:
            packet = nn.pack(nn.MessageId.FRAMEOFDATA, rng.integers(0, 256, 300, dtype=np.uint8).tobytes())
        with contextlib.suppress(OSError):
            local.sendto(packet, group)
        if i % 2000 == 0:
            time.sleep(0.001)  # let the receivers breathe: a flood, not a benchmark of the kernel buffer
    flood_seconds = time.monotonic() - start
    local.close()
    stranger.close()
    messages = live_parts.frames_after_flood(bodies)
    wrong = 0
    last = -1
    for msg in messages:
        truth = scene.frame(msg.frame_number).bodies
        # against the last right frame: one wrong frame counts once, not again for those after
        ok = msg.frame_number > last and [b.name for b in msg.rigid_bodies] == ["drone1", "robot1"]
        for body, valid, position in zip(msg.rigid_bodies, truth.valid, truth.positions):
            if body.tracking_valid and valid:
                p = body.pose.position
                ok &= bool(np.allclose([p.x, p.y, p.z], position, atol=1e-5))
            elif body.tracking_valid != bool(valid):
                ok = False
        wrong += not ok
        if ok:
            last = msg.frame_number
    return live_parts.flood_rows(
        "NatNet",
        "optitrack_system",
        driver,
        stand_in,
        log_before,
        (datagrams, datagrams, flood_seconds),
        len(messages),
        wrong,
    )


def restarts(live: live_parts.Live, cycles: int) -> list[tuple]:
    scene_path, _ = _scene(live.tmp)
    stand_in, command_port, data_port, bodies, driver = _streaming_driver(
        live, scene_path, "/stress_natnet_restart", reconnect_after=0.5
    )

    def restart():
        server, _, _, ready = _start_stand_in(live, scene_path, command_port, data_port, "--multicast")
        return server, ready

    return live_parts.restart_cycles("NatNet", bodies, driver, stand_in, restart, cycles)


def run() -> list[tuple]:
    return live_parts.run_section(
        lambda: fuzz(
            live_parts.env_int("STRESS_NATNET_PACKETS", 1_000_000),
            live_parts.env_float("STRESS_FUZZ_SECONDS", 150.0),
        ),
        lambda live: flood(live, live_parts.env_int("STRESS_FLOOD_DATAGRAMS", 100_000)),
        lambda live: restarts(live, live_parts.env_int("STRESS_RESTARTS", 20)),
    )


if __name__ == "__main__":
    live_parts.print_rows(run())
