"""QTM under fuzzing and server restarts (Qualisys: qtm_simulator and qualisys_system as
processes, the readers in this process).

1. Mutated QTM RT data packets, as a TCP byte stream, through both reading paths the
   driver has: the project's (bounded framing, packet check, conversion to a MocapFrame,
   the frame's consistency check) and qtm-rt's behind the driver's guard (qtm-rt's
   receiver and packet parser, with every component read through qtm-rt's getters).
2. qtm_simulator killed (SIGKILL) and restarted under a live qualisys_system: time to
   the first published frame, driver threads and memory before/after.

Sizes: STRESS_QTM_PACKETS (1 000 000), STRESS_FUZZ_SECONDS (time budget per fuzzing path,
150), STRESS_RESTARTS (20)."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script from stress/: import it as the package it is
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stress import _driver_live as live_parts
from stress._fuzz import run_fuzz

SCENE = {
    "seed": 9,
    "rate": 100.0,
    "latency": 0.003,
    "noise": 0.0003,
    "occlusion": 0.03,
    "dropped_frames": 0.0,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        {
            "name": "drone",
            "id": 1,
            "trajectory": {"type": "circle", "center": [0, 0, 1.5], "radius": 1.0, "period": 4.0},
        },
        {
            "name": "cart",
            "id": 2,
            "trajectory": {"type": "figure_eight", "center": [0.5, 0.5, 0.2], "period": 7.0},
        },
    ],
    "skeletons": [{"name": "walker", "trajectory": {"type": "circle", "radius": 1.5, "period": 20.0}}],
}
COMPONENTS = ["6dres", "3dres", "3dnolabelsres", "skeleton:global"]


def _scene(tmp: Path):
    return live_parts.scene_file(tmp, "qtm_scene.yaml", SCENE)


def _qtm_setup():
    from mocap4r2_drivers.qualisys.client import parse_parameters
    from mocap4r2_drivers.qualisys.simulator import SceneStream, parameters_xml

    _, scene = _scene(Path(tempfile.mkdtemp(prefix="mocap4r2-stress-")))
    stream = SceneStream(scene)
    # three moments with every component the driver asks for, two with the plain ones
    bases = [stream.packet(k, COMPONENTS) for k in (0, 40, 90)] + [
        stream.packet(k, ["6d", "3d", "3dnolabels"]) for k in (5, 50)
    ]
    parameters = parse_parameters(parameters_xml(scene, ["general", "3d", "6d", "skeleton:global"], "1.25"))
    return bases, parameters


def project_path():
    """(bases, step) of the project's own QTM reading path, built in each fuzzing worker:
    bounded framing of the byte stream, the packet check, the component records, then
    conversion to a MocapFrame and the frame's consistency check."""
    import zlib

    from mocap4r2_drivers.qualisys import protocol as qp
    from mocap4r2_drivers.qualisys.convert import FrameConverter

    bases, parameters = _qtm_setup()
    converter = FrameConverter(parameters)
    data = qp.PacketType.DATA
    errors = (qp.QtmProtocolError, ValueError)
    skeleton = int(qp.ComponentType.SKELETON)

    def structure(payload) -> tuple:
        """What the conversion's shape depends on: component types and sizes, each
        component's leading count, the skeletons' segment counts and ids; reading them
        runs every component's bounded record parser."""
        comps = qp.decode_frame(payload).components
        out = [(t, len(v), bytes(v[:4])) for t, v in comps.items()]
        try:
            for t, v in comps.items():
                if t in qp.MARKER_DTYPES:
                    qp.unpack_markers(t, v)
                elif t in qp.BODY_DTYPES:
                    qp.unpack_bodies(t, v)
                elif t == skeleton:
                    out += [r["id"].tobytes() for r in qp.unpack_skeletons(v)]
        except qp.QtmProtocolError:
            return None  # the conversion decides (it may not read that component)
        return tuple(out)

    shapes = [structure(qp.PacketReader().split(b)[0][0][1]) for b in bases]

    def step(base: int, packet: bytes) -> str:
        framed, problem = qp.PacketReader().split(packet)
        if problem is not None or len(framed) != 1:
            return "rejected"
        packet_type, payload = framed[0]
        try:
            qp.check_packet(packet_type, payload)
            if packet_type != data:
                return "rejected"
            # the conversion costs most: run it on every packet whose structure the
            # mutation changed, and on one in 10 of those where only values changed
            # (chosen by the packet's CRC, so a run is the same every time)
            if structure(payload) == shapes[base] and zlib.crc32(packet) % 10:
                return "accepted"
            frame = converter.convert(payload)
        except errors:  # the adapter drops and counts these
            return "rejected"
        try:
            frame.check()
        except ValueError:
            return "inconsistent"
        return "converted"

    return bases, step


def sdk_path():
    """(bases, step) of qtm-rt's reading path behind the driver's guard: the same
    framing and packet check, then qtm-rt's packet parser with every component read
    through qtm-rt's getters. Where the project's reader also reads a 3D or 6D component
    of the packet, both must give the same records ("converted": compared and equal;
    "inconsistent": a count or a position differs; a NaN equals any NaN, since qtm-rt's
    floats pass through Python's double, which sets a signalling NaN's quiet bit)."""
    from qtm_rt.packet import QRTPacket

    from mocap4r2_drivers.qualisys import protocol as qp

    bases, _ = _qtm_setup()
    getters = (
        "get_6d_residual",
        "get_6d",
        "get_3d_markers_residual",
        "get_3d_markers",
        "get_3d_markers_no_label_residual",
        "get_3d_markers_no_label",
        "get_skeletons",
    )
    # qtm-rt getter -> the component the project's reader reads, and what its records hold
    compared = {
        "get_3d_markers": (qp.ComponentType.MARKERS_3D, qp.unpack_markers, False),
        "get_3d_markers_residual": (qp.ComponentType.MARKERS_3D_RESIDUALS, qp.unpack_markers, False),
        "get_6d": (qp.ComponentType.BODIES_6D, qp.unpack_bodies, True),
        "get_6d_residual": (qp.ComponentType.BODIES_6D_RESIDUALS, qp.unpack_bodies, True),
    }
    data = qp.PacketType.DATA

    def positions(items, bodies: bool) -> np.ndarray:
        points = [item[0] if bodies else item for item in items]
        return np.array([(p.x, p.y, p.z) for p in points], dtype=np.float32).reshape(-1, 3)

    def step(base: int, packet: bytes) -> str:
        framed, problem = qp.PacketReader().split(packet)
        if problem is not None or len(framed) != 1:
            return "rejected"
        packet_type, payload = framed[0]
        try:
            qp.check_packet(packet_type, payload)  # the guard in front of qtm-rt
        except qp.QtmProtocolError:
            return "rejected"
        if packet_type != data:
            return "rejected"
        parsed = QRTPacket(payload)
        results = {}
        try:
            for name in getters:
                results[name] = getattr(parsed, name)()
        except Exception:  # noqa: BLE001 - qtm-rt reading a component past its end: its own bound
            return "rejected"
        try:
            components = qp.decode_frame(payload).components
        except qp.QtmProtocolError:
            return "accepted"  # stricter than qtm-rt: the driver drops this packet
        outcome = "accepted"
        for name, (component, unpack, bodies) in compared.items():
            theirs = results.get(name)
            if theirs is None or component not in components:
                continue
            try:
                ours = unpack(component, components[component])
            except qp.QtmProtocolError:
                continue  # the driver drops it; qtm-rt's reading is not compared
            mine = np.asarray(ours["position"], dtype=np.float32).reshape(-1, 3)
            if not np.array_equal(mine, positions(theirs[1], bodies), equal_nan=True):
                return "inconsistent"
            outcome = "converted"
        return outcome

    return bases, step


def fuzz(total: int, budget: float) -> list[tuple]:
    rows = []
    for name, spec in (
        ("QTM project reader", "stress.stress_qtm:project_path"),
        ("QTM qtm-rt behind the guard, vs ours", "stress.stress_qtm:sdk_path"),
    ):
        rows += run_fuzz(name, spec, total, budget, seed=4).rows(total)
    return rows


def _start_qtm(live: live_parts.Live, scene_path, base_port: int):
    proc, ready = live_parts.start_stand_in(
        live, "qtm_simulator", ["--scene", str(scene_path), "--port", str(base_port)]
    )
    rt_port = int(re.search(r"RT port 127\.0\.0\.1:(\d+)", proc.log()).group(1))
    return proc, rt_port - 1, ready


def restarts(live: live_parts.Live, cycles: int) -> list[tuple]:
    from mocap4r2_interfaces.msg import RigidBodies

    scene_path, _ = _scene(live.tmp)
    qtm, base, _ = _start_qtm(live, scene_path, 0)
    ns = "/stress_qtm_restart"
    bodies = live.ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    driver = live.procs.start(
        "mocap4r2_drivers",
        "qualisys_system",
        name="qualisys",
        namespace=ns,
        params={"autostart": True, "port": base, "reconnect_period": 0.2},
    )
    bodies.wait_for(timeout=60)

    def restart():
        server, _, ready = _start_qtm(live, scene_path, base)
        return server, ready

    return live_parts.restart_cycles("QTM", bodies, driver, qtm, restart, cycles)


def run() -> list[tuple]:
    return live_parts.run_section(
        lambda: fuzz(
            live_parts.env_int("STRESS_QTM_PACKETS", 1_000_000),
            live_parts.env_float("STRESS_FUZZ_SECONDS", 150.0),
        ),
        lambda live: restarts(live, live_parts.env_int("STRESS_RESTARTS", 20)),
    )


if __name__ == "__main__":
    live_parts.print_rows(run())
