"""VRPN under fuzzing, floods and server restarts (vrpn_simulator and vrpn_system as
processes, the reading path in this process), with NatNet's targets.

1. Mutated VRPN streams and datagrams (descriptions, reports of several trackers and
   instants, pings) through the reading path: stream framing or datagram splitting,
   id translation, report decoding, frame assembly and the frame's consistency check.
2. Garbage and spoofed datagrams at a live vrpn_system's UDP port (from the server's
   address on other ports and from another address): every rigid-body message it
   publishes meanwhile is compared with the scene the stand-in served (frames
   advancing, positions equal bit for bit); the driver must stay alive and its log
   bounded.
3. vrpn_simulator killed (SIGKILL) and restarted under a live driver: time to the
   first published frame, driver threads and memory before/after.

Sizes: STRESS_VRPN_PACKETS (1 000 000), STRESS_FUZZ_SECONDS (time budget of the
fuzzing, 150), STRESS_FLOOD_DATAGRAMS (100 000), STRESS_RESTARTS (20)."""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script from stress/: import it as the package it is
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stress import _driver_live as live_parts
from stress._fuzz import run_fuzz

SCENE = {
    "seed": 9,
    "rate": 100.0,
    "latency": 0.002,
    "latency_jitter": 0.0,
    "noise": 0.0003,
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
            "tracking_loss": {"every": 2.0, "duration": 0.3},
        },
    ],
}


def _scene(tmp: Path):
    return live_parts.scene_file(tmp, "vrpn_scene.yaml", SCENE)


# ---------------------------------------------------------------------- 1. fuzzing
def vrpn_path():
    """(bases, step) of the VRPN reading path, built in each fuzzing worker: a TCP stream
    (cookie-less: descriptions, then reports of three instants) and UDP datagrams of
    reports, from the stand-in's own encoder; a step that frames, translates, decodes,
    assembles and checks."""
    import tempfile
    import zlib

    from mocap4r2_drivers.vrpn import protocol as vp
    from mocap4r2_drivers.vrpn.convert import FrameAssembler
    from mocap4r2_drivers.vrpn.simulator import VrpnSimulator
    from mocap4r2_drivers.vrpn.simulator_sender import datagrams

    _, scene = _scene(Path(tempfile.mkdtemp(prefix="mocap4r2-stress-")))
    server = VrpnSimulator(scene)
    multi = VrpnSimulator(scene, multi_sensor="rig")
    descriptions = server._descriptions()
    bases: list[bytes] = []
    kinds: list[str] = []
    for k in (0, 41, 170):  # robot1 tracked, tracked, lost
        reports = server.frame_messages(k) + server.frame_messages(k + 1)
        bases.append(descriptions + b"".join(reports) + vp.pack_message(1, 5, b"", 0, 0))
        kinds.append("stream")
        bases.append(multi._descriptions() + b"".join(multi.frame_messages(k)))
        kinds.append("stream-multi")
        bases += datagrams(reports)
        kinds += ["datagram"] * len(datagrams(reports))
    table = vp.NameTable("sender")
    types = vp.NameTable("type")
    for m in vp.MessageReader().feed(descriptions):
        names = table if m.type == vp.SENDER_DESCRIPTION else types
        names.describe(m.sender, vp.parse_description(m.payload))
    error = vp.VrpnProtocolError

    def structure(messages) -> tuple:
        return tuple((m.sender, m.type, len(m.payload)) for m in messages)

    shapes = [
        structure(vp.split_datagram(b) if kind == "datagram" else vp.MessageReader().feed(b))
        for b, kind in zip(bases, kinds)
    ]

    pos_quat = types.id(vp.POS_QUAT)
    assert pos_quat is not None

    def records_check(packet: bytes, messages) -> str | None:
        """The array reading of a datagram of reports (vrpn_system's): the same reports as
        the messages, and frames as consistent as theirs; None when it is not taken."""
        records = vp.pos_quat_records(packet, pos_quat)
        if records is None:
            return None
        if messages is None or len(messages) != len(records):
            return "inconsistent"  # records only come from a well-framed datagram of reports
        for r, m in zip(records, messages, strict=True):
            report = vp.unpack_pos_quat(m.payload)
            if (int(r["sender"]), int(r["sensor"])) != (m.sender, report.sensor) or not (
                np.array_equal(r["position"].astype(float), report.position, equal_nan=True)
                and np.array_equal(r["orientation"].astype(float), report.orientation, equal_nan=True)
            ):
                return "inconsistent"
        trackers = [table.name(i) for i in records["sender"].tolist()]
        if None in trackers:
            return None  # the client hands these to the message path
        assembler = FrameAssembler()
        assembler.announce([n for n in table.names() if n != vp.CONTROL_SENDER])
        frames = assembler.add_records([t for t in trackers if t is not None], records)
        frames += [f for f in [assembler.flush()] if f is not None]
        try:
            for frame in frames:
                frame.check()
        except ValueError:
            return "inconsistent"
        if [f.frame_number for f in frames] != list(range(len(frames))):
            return "inconsistent"
        return None

    def step(base: int, packet: bytes) -> str:
        kind = kinds[base]
        senders, type_names = vp.NameTable("sender"), vp.NameTable("type")
        if kind == "datagram":
            senders, type_names = table, types  # what the TCP stream described before
        try:
            if kind == "datagram":
                try:
                    messages = vp.split_datagram(packet)
                except error:
                    if records_check(packet, None) is not None:
                        return "inconsistent"
                    raise
                if records_check(packet, messages) is not None:
                    return "inconsistent"
            else:
                reader = vp.MessageReader()
                messages = reader.feed(packet)
                if reader.pending > vp.HEADER_SIZE + vp.MAX_PAYLOAD:
                    return "inconsistent"
        except error:
            return "rejected"
        # the assembly costs most: run it on every packet whose structure (ids, types,
        # lengths) the mutation changed, and on one in 50 of those where only values
        # changed (chosen by the packet's CRC, so a run is the same every time)
        if structure(messages) == shapes[base] and zlib.crc32(packet) % 50:
            return "accepted"
        assembler = FrameAssembler(multi_sensor=kind == "stream-multi")
        frames = []
        bad = False
        for m in messages:
            try:
                if m.type == vp.SENDER_DESCRIPTION and kind != "datagram":
                    senders.describe(m.sender, vp.parse_description(m.payload))
                    assembler.announce([n for n in senders.names() if n != vp.CONTROL_SENDER])
                elif m.type == vp.TYPE_DESCRIPTION and kind != "datagram":
                    type_names.describe(m.sender, vp.parse_description(m.payload))
                elif m.type >= 0 and type_names.name(m.type) == vp.POS_QUAT:
                    sender = senders.name(m.sender)
                    if kind == "datagram":
                        assembler.announce([n for n in senders.names() if n != vp.CONTROL_SENDER])
                    if sender is None:
                        bad = True
                        continue
                    done = assembler.add(sender, vp.unpack_pos_quat(m.payload), m.time)
                    frames += [f for f in (done, assembler.complete()) if f is not None]
            except error:
                bad = True
        last = assembler.flush()
        if last is not None:
            frames.append(last)
        try:
            for frame in frames:
                frame.check()
        except ValueError:
            return "inconsistent"
        numbers = [f.frame_number for f in frames]
        if numbers != list(range(len(numbers))):
            return "inconsistent"
        if bad:
            return "rejected"
        return "converted" if frames else "accepted"

    return bases, step


def fuzz(total: int, budget: float) -> list[tuple]:
    result = run_fuzz("VRPN reader", "stress.stress_vrpn:vrpn_path", total, budget, seed=3)
    return result.rows(total)


# ---------------------------------------------------------------------- live
def _start_stand_in(live: live_parts.Live, scene_path, port: int):
    import re

    proc, ready = live_parts.start_stand_in(
        live, "vrpn_simulator", ["--scene", str(scene_path), "--port", str(port)]
    )
    match = re.search(r"ready: [\d.]+:(\d+) .*time origin (\d+)", proc.log())
    return proc, int(match.group(1)), float(match.group(2)), ready


def _streaming_driver(live: live_parts.Live, scene_path, ns: str):
    from mocap4r2_interfaces.msg import RigidBodies

    stand_in, port, origin, _ = _start_stand_in(live, scene_path, 0)
    bodies = live.ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    driver = live.procs.start(
        "mocap4r2_drivers",
        "vrpn_system",
        name="vrpn",
        namespace=ns,
        params={"autostart": True, "port": port, "silence_timeout": 1.0, "reconnect_period": 0.25},
    )
    bodies.wait_for(lambda m: len(m.rigid_bodies) == 2, timeout=60)
    return stand_in, port, origin, bodies, driver


def flood(live: live_parts.Live, datagrams: int) -> list[tuple]:
    from mocap4r2_drivers.vrpn import protocol as vp
    from mocap4r2_drivers.vrpn.simulator import VrpnSimulator

    scene_path, scene = _scene(live.tmp)
    stand_in, port, origin, bodies, driver = _streaming_driver(live, scene_path, "/stress_vrpn_flood")
    target = live_parts.driver_udp_port(driver.pid, {port})
    log_before = len(driver.log())
    good = b"".join(VrpnSimulator(scene).frame_messages(5))
    rng = np.random.default_rng(5)
    local = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    local.bind(("127.0.0.1", 0))
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.2", 0))
    bodies.clear()
    start = time.monotonic()
    for i in range(datagrams if target else 0):
        kind = i % 5
        if kind == 0:
            packet = rng.integers(0, 256, int(rng.integers(0, 600)), dtype=np.uint8).tobytes()
        elif kind == 1:  # the server's own reports, moved: spoofed from another port
            mutant = bytearray(good)
            mutant[40:48] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
            packet = bytes(mutant)
        elif kind == 2:  # flipped bytes in headers and lengths
            mutant = bytearray(good)
            for at in rng.integers(0, 24, 3):
                mutant[int(at)] = int(rng.integers(0, 256))
            packet = bytes(mutant)
        elif kind == 3:  # from another address
            stranger.sendto(good, ("127.0.0.1", target))
            continue
        else:  # a header announcing a huge payload
            packet = vp.HEADER.pack(0x7FFFFFF0, 0, 0, 1, 7) + b"\0" * 4 + good[:64]
        with contextlib.suppress(OSError):  # a full socket buffer: a flood, after all
            local.sendto(packet, ("127.0.0.1", target))
        if i % 2000 == 0:
            time.sleep(0.001)  # a flood, not a benchmark of the kernel buffer
    flood_seconds = time.monotonic() - start
    local.close()
    stranger.close()
    messages = live_parts.frames_after_flood(bodies)
    wrong = _wrong_frames(messages, scene, origin)
    return live_parts.flood_rows(
        "VRPN",
        "vrpn_system",
        driver,
        stand_in,
        log_before,
        (datagrams, datagrams if target else 0, flood_seconds),
        len(messages),
        wrong,
    )


def _wrong_frames(messages, scene, origin: float) -> int:
    """Messages whose drone1 is not at a scene position of an instant near its stamp
    (looked up exactly: VRPN carries float64), or whose frame number does not advance."""
    names = [b.name for b in scene.description.bodies]
    instant_of: dict[tuple[float, float, float], int] = {}
    if messages:
        stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in messages]
        first = max(int((min(stamps) - origin - 5.0) * scene.rate), 0)
        last = int((max(stamps) - origin + 1.0) * scene.rate)
        for k0 in range(first, last, 64):
            for k, frame in enumerate(scene.frames(k0, 64), start=k0):
                instant_of[tuple(frame.bodies.positions[0].tolist())] = k
    wrong, last_number = 0, -1
    for msg in messages:
        ok = msg.frame_number > last_number and [b.name for b in msg.rigid_bodies] == names
        if ok:
            p = msg.rigid_bodies[0].pose.position
            ok = (p.x, p.y, p.z) in instant_of
        wrong += not ok
        if ok:
            last_number = msg.frame_number
    return wrong


def restarts(live: live_parts.Live, cycles: int) -> list[tuple]:
    scene_path, _ = _scene(live.tmp)
    stand_in, port, _, bodies, driver = _streaming_driver(live, scene_path, "/stress_vrpn_restart")

    def restart():
        server, _, _, ready = _start_stand_in(live, scene_path, port)
        return server, ready

    return live_parts.restart_cycles("VRPN", bodies, driver, stand_in, restart, cycles)


def run() -> list[tuple]:
    return live_parts.run_section(
        lambda: fuzz(
            live_parts.env_int("STRESS_VRPN_PACKETS", 1_000_000),
            live_parts.env_float("STRESS_FUZZ_SECONDS", 150.0),
        ),
        lambda live: flood(live, live_parts.env_int("STRESS_FLOOD_DATAGRAMS", 100_000)),
        lambda live: restarts(live, live_parts.env_int("STRESS_RESTARTS", 20)),
    )


if __name__ == "__main__":
    live_parts.print_rows(run())
