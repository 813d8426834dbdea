"""The Qualisys path's sustained rate at 10 and 50 bodies (prints figures, asserts nothing).

1. adapter: qtm_simulator (a process) streams at a requested rate; QualisysAdapter
   (qtm-rt + numpy decoding) reads in this process. Figures: frames delivered per
   second, frames lost (numbers missing beyond those the scene drops), CPU time of
   the decoding per frame;
2. node: qtm_simulator -> qualisys_system (a process) -> DDS -> a subscriber here:
   rigid_bodies messages per second and losses;
3. decoding alone, on packets captured from the stand-in: the adapter's numpy decoder
   against qtm-rt's own getters (the reference), microseconds per frame and ratio.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from bench.listener import FrameListener
from bench.stand_ins import ROOT, StandIn, SystemProcess, generated_scene, missing_numbers, own_domain
from bench.timing import best_microseconds_per_item

SECONDS = 3.0


def _scene(directory: Path, bodies: int) -> Path:
    return generated_scene(
        directory / f"bench_{bodies}.yaml",
        bodies,
        4,
        rate=100.0,
        latency=0.0,
        noise=0.0003,
        occlusion=0.0,
        unlabeled_markers=4,
    )


def _qtm(scene: Path, rate: float, log: Path) -> tuple[StandIn, int]:
    """qtm_simulator on a free port: (it, its base port)."""
    args = ["--scene", str(scene), "--port", "0", "--rate", str(rate)]
    sim = StandIn("qtm_simulator", args, log, r"RT port 127\.0\.0\.1:(\d+)")
    return sim, int(sim.ready.group(1)) - 1


def adapter_rate(scene: Path, rate: float, tmp: Path) -> str:
    from mocap4r2_drivers.qualisys.qualisys_system import QualisysAdapter

    sim, base_port = _qtm(scene, rate, tmp / "sim.log")
    try:
        adapter = QualisysAdapter(
            host="127.0.0.1",
            port=base_port,
            protocol_version="1.25",
            components=["6dres", "3dres", "3dnolabelsres"],
        )
        adapter.connect()
        adapter.start_streaming()
        numbers: list[int] = []
        cpu = 0.0
        end = time.monotonic() + SECONDS + 0.5
        warm = time.monotonic() + 0.5
        while time.monotonic() < end:
            c0 = time.thread_time()
            frame = adapter.read_frame(0.1)
            if frame is not None and time.monotonic() >= warm:
                cpu += time.thread_time() - c0
                numbers.append(frame.frame_number)
        dropped = adapter.client.stats.dropped
        adapter.stop_streaming()
        adapter.disconnect()
    finally:
        skipped = sim.stop()
    got = len(numbers) / SECONDS
    return (
        f"{got:6.0f} frames/s of {rate:4.0f} ({100 * got / rate:5.1f} %); lost {missing_numbers(numbers)}: "
        f"{skipped} never sent (stand-in behind real time), {dropped} dropped by a slow reader; "
        f"read+decode {1e6 * cpu / max(len(numbers), 1):5.0f} us/frame"
    )


def node_rate(scene: Path, rate: float, tmp: Path, *extra: str) -> tuple[bool, str]:
    """(every frame received, text)"""
    from diagnostic_msgs.msg import DiagnosticArray

    sim, base_port = _qtm(scene, rate, tmp / "sim_node.log")
    params = {
        "port": base_port,
        "autostart": "true",
        "qos_depth": 100,
        "components": "[6dres,3dres,3dnolabelsres]",
        "diagnostics_period": 1.0,
    }
    node = SystemProcess("qualisys_system", "qualisys", "/bench", params, tmp / "node.log", extra)
    listener = FrameListener("/bench")
    reports: list[dict[str, str]] = []
    listener.node.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda m: reports.extend(
            {kv.key: kv.value for kv in st.values} for st in m.status if "/bench/qualisys" in st.hardware_id
        ),
        10,
    )
    try:
        if not listener.wait_first(timeout=30):
            return False, "no messages (see the node's log)"
        time.sleep(0.5)
        window = [number for _, _, number in listener.record(SECONDS)]
    finally:
        node.stop()
        listener.close()
        skipped = sim.stop()
    got = len(window) / SECONDS
    published = [float(r["rate_hz"]) for r in reports[1:] if r.get("rate_hz") not in (None, "nan")]
    node_hz = f"{max(published):6.0f}" if published else "     ?"
    missing = missing_numbers(window)
    full = got >= 0.97 * rate and missing == 0
    return full, (
        f"{got:6.0f} msgs/s received of {rate:4.0f} ({100 * got / rate:5.1f} %), {missing} frame numbers "
        f"missing, node publishing at {node_hz} Hz (its /diagnostics); stand-in skipped {skipped}"
        + ("" if full else "  (not sustained)")
    )


def decode_cost(scene: Path, tmp: Path) -> str:
    import numpy as np
    from qtm_rt.packet import QRTPacket

    from mocap4r2_drivers.qualisys.client import parse_parameters
    from mocap4r2_drivers.qualisys.qualisys_system import FrameConverter
    from mocap4r2_drivers.qualisys.simulator import SceneStream, parameters_xml
    from mocap4r2_drivers.sim_server import load_scene

    s = load_scene(str(scene), -1, 0.0)
    encoder = SceneStream(s)
    packets = [encoder.packet(k, ["6dres", "3dres", "3dnolabelsres"])[8:] for k in range(200)]
    decoder = FrameConverter(parse_parameters(parameters_xml(s, ["general", "3d", "6d"], "1.25")))

    def ours():
        for p in packets:
            decoder.convert(p)

    def reference():
        # qtm-rt's getters, then the same numpy arrays the adapter needs
        for p in packets:
            packet = QRTPacket(p)
            _, bodies = packet.get_6d_residual()
            np.array([tuple(b[0]) for b in bodies]) * 1e-3
            np.array([b[1].matrix for b in bodies])
            np.array([b[2].residual for b in bodies])
            _, labeled = packet.get_3d_markers_residual()
            np.array([tuple(m) for m in labeled])
            _, strays = packet.get_3d_markers_no_label_residual()
            np.array([tuple(m) for m in strays])

    def timed(fn) -> float:
        return best_microseconds_per_item(fn, len(packets))

    a, b = timed(ours), timed(reference)
    return (
        f"numpy decoder {a:7.1f} us/frame, qtm-rt getters (reference) {b:7.1f} us/frame, ratio {b / a:4.1f}x"
    )


NODE_RATES = (1000.0, 2000.0, 3000.0, 4000.0)


def run() -> None:
    own_domain()
    with tempfile.TemporaryDirectory(prefix="bench_qtm_") as name:
        tmp = Path(name)
        for bodies in (10, 50):
            scene = _scene(tmp, bodies)
            print(f"--- {bodies} bodies ({bodies * 4} labeled + 4 unlabeled markers)", flush=True)
            print(f"decode       : {decode_cost(scene, tmp)}", flush=True)
            for rate in (500.0, 2000.0):
                print(f"adapter {rate:4.0f} : {adapter_rate(scene, rate, tmp)}", flush=True)
            # rates rise until one is not received in full (the reference: 2000 Hz)
            sustained = 0.0
            for rate in NODE_RATES:
                full, text = node_rate(scene, rate, tmp)
                print(f"node    {rate:4.0f} : {text}", flush=True)
                if not full:
                    break
                sustained = rate
            print(f"node sustains {sustained:.0f} Hz" + ("" if full else f", not {rate:.0f} Hz"), flush=True)
            _, text = node_rate(
                scene,
                1000.0,
                tmp,
                "-p",
                "publish_markers:=false",
                "-p",
                "rigid_body_markers:=false",
                "-p",
                "publish_skeletons:=false",
            )
            print(f"node    1000 : rigid_bodies only, no markers: {text}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    run()
