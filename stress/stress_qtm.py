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
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

try:   # run as stress.<module> by the stress runner, or as a script from stress/
    from ._driver_live import (FuzzCounts, Live, env_float, env_int, mutated_batches, peak_rss_mib,
                               restart_cycles)
except ImportError:
    from _driver_live import (FuzzCounts, Live, env_float, env_int, mutated_batches, peak_rss_mib,
                              restart_cycles)

SCENE = {
    "seed": 9, "rate": 100.0, "latency": 0.003, "noise": 0.0003, "occlusion": 0.03, "dropped_frames": 0.0,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        {"name": "drone", "id": 1, "trajectory": {"type": "circle", "center": [0, 0, 1.5], "radius": 1.0,
                                                  "period": 4.0}},
        {"name": "cart", "id": 2, "trajectory": {"type": "figure_eight", "center": [0.5, 0.5, 0.2], "period": 7.0}},
    ],
    "skeletons": [{"name": "walker", "trajectory": {"type": "circle", "radius": 1.5, "period": 20.0}}],
}
COMPONENTS = ["6dres", "3dres", "3dnolabelsres", "skeleton:global"]


def _scene(tmp: Path):
    from mocap4r2_drivers.simulated.scene import Scene

    path = tmp / "qtm_scene.yaml"
    path.write_text(yaml.safe_dump(SCENE))
    return path, Scene.from_file(path)


def fuzz(total: int, budget: float) -> list[tuple]:
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)   # NaN casts of mutated floats: expected, not news
    from qtm_rt.packet import QRTPacket

    from mocap4r2_drivers.qualisys import protocol as qp
    from mocap4r2_drivers.qualisys.client import parse_parameters
    from mocap4r2_drivers.qualisys.convert import FrameConverter
    from mocap4r2_drivers.qualisys.simulator import SceneStream, parameters_xml

    _, scene = _scene(Path(tempfile.mkdtemp(prefix="mocap4r2-stress-")))
    stream = SceneStream(scene)
    bases = [stream.packet(k, COMPONENTS) for k in (0, 40, 90)] + \
        [stream.packet(k, ["6d", "3d", "3dnolabels"]) for k in (5, 50)]
    parameters = parse_parameters(parameters_xml(scene, ["general", "3d", "6d", "skeleton:global"], "1.25"))

    def project(base: int, packet: bytes) -> str:
        converter = project.converter
        framed, problem = qp.PacketReader().split(packet)
        if problem is not None or len(framed) != 1:
            return "rejected"
        packet_type, payload = framed[0]
        try:
            qp.check_packet(packet_type, payload)
            if packet_type != qp.PacketType.DATA:
                return "rejected"
            frame = converter.decode(payload)
        except (qp.QtmProtocolError, ValueError):   # the adapter drops and counts these
            return "rejected"
        try:
            frame.check()
        except ValueError:
            return "inconsistent"
        return "accepted"

    project.converter = FrameConverter(parameters)

    getters = ("get_6d_residual", "get_6d", "get_3d_markers_residual", "get_3d_markers",
               "get_3d_markers_no_label_residual", "get_3d_markers_no_label", "get_skeletons")

    def sdk(base: int, packet: bytes) -> str:
        framed, problem = qp.PacketReader().split(packet)
        if problem is not None or len(framed) != 1:
            return "rejected"
        packet_type, payload = framed[0]
        try:
            qp.check_packet(packet_type, payload)     # the guard in front of qtm-rt
        except qp.QtmProtocolError:
            return "rejected"
        if packet_type != qp.PacketType.DATA:
            return "rejected"
        parsed = QRTPacket(payload)
        try:
            for name in getters:
                getattr(parsed, name)()
        except Exception:  # noqa: BLE001 - qtm-rt reading a component past its end: its own bound
            return "rejected"
        return "accepted"

    rows = []
    for name, step in (("QTM project reader", project), ("QTM qtm-rt behind the guard", sdk)):
        counts = FuzzCounts(name)
        counts.run(mutated_batches(bases, total, np.random.default_rng(4)), step, budget)
        rows += counts.rows(total)
    rows.append(("QTM fuzzing: peak RSS of the fuzzing process (MiB)", round(peak_rss_mib(), 1), "< 1024",
                 peak_rss_mib() < 1024))
    return rows


def _start_qtm(live: Live, scene_path, base_port: int):
    proc = live.procs.start("mocap4r2_drivers", "qtm_simulator", ros=False, name="qtm_simulator",
                            args=["--scene", str(scene_path), "--port", str(base_port)])
    if not proc.wait_log("qtm_simulator ready", 60):
        raise RuntimeError(f"qtm_simulator did not start: {proc.log()[-2000:]}")
    ready = time.monotonic()
    rt_port = int(re.search(r"RT port 127\.0\.0\.1:(\d+)", proc.log()).group(1))
    return proc, rt_port - 1, ready


def restarts(live: Live, cycles: int) -> list[tuple]:
    from mocap4r2_interfaces.msg import RigidBodies

    scene_path, _ = _scene(live.tmp)
    qtm, base, _ = _start_qtm(live, scene_path, 0)
    ns = "/stress_qtm_restart"
    bodies = live.ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    driver = live.procs.start("mocap4r2_drivers", "qualisys_system", name="qualisys", namespace=ns,
                              params={"autostart": True, "port": base, "reconnect_period": 0.2})
    bodies.wait_for(timeout=60)

    def restart():
        server, _, ready = _start_qtm(live, scene_path, base)
        return server, ready
    return restart_cycles("QTM", bodies, driver, qtm, restart, cycles)


def run() -> list[tuple]:
    rows = fuzz(env_int("STRESS_QTM_PACKETS", 1_000_000), env_float("STRESS_FUZZ_SECONDS", 150.0))
    live = Live()
    try:
        rows += restarts(live, env_int("STRESS_RESTARTS", 20))
    finally:
        live.close()
    return rows


if __name__ == "__main__":
    for row in run():
        print(" | ".join(str(x) for x in row))
