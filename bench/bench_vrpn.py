"""VRPN end to end at 1 kHz: vrpn_simulator (a process) -> vrpn_system (a process) -> DDS ->
a subscriber here, with 10 and 50 trackers (prints figures, asserts nothing).

Figures, over a window of SECONDS after a warm-up:

* reports delivered: every tracker's report of every instant the stand-in sent, counted
  in the published frames (a report is a body whose pose is the scene's at that
  instant; the scene's bodies all move, so a held pose is never counted twice);
* frames: published per second against the rate, instants missing, frames split;
* latency: receipt here minus the report's VRPN message time (the instant the stand-in
  measured it, on the same clock), p50 / p99 / max, against vrpn_mocap's reference:
  it polls its VRPN connection every 10 ms (update_freq 100 Hz), so its reports wait
  up to 10 ms (5 ms on average) before they are even read;
* of that latency, the stand-in's own part: how late after their instant it sent the
  frames (it prints that when it stops), and the latency from that send instant, frame
  by frame (it writes each frame's lateness to a file when it stops): what the driver,
  the node and DDS take;
* the floor, measured in the same run: a plain rclpy publisher process sending the same
  serialized message (one the node published, stamped with its send time) at the same
  rate to the same kind of subscriber; what the driver and the node add is the rest.
"""

from __future__ import annotations

import contextlib
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.stand_ins import ROOT, StandIn, SystemProcess, generated_scene, missing_numbers, own_domain

SECONDS = 3.0
RATE = 1000.0
REFERENCE_POLL_MS = 10.0  # vrpn_mocap's update_freq default, 100 Hz


def _scene(directory: Path, trackers: int) -> Path:
    return generated_scene(
        directory / f"bench_vrpn_{trackers}.yaml",
        trackers,
        4,
        rate=RATE,
        latency=0.0,
        noise=0.0,
        rigid_bodies=[],
    )


class RawListener:
    """Keeps (receipt time, serialized message) of rigid_bodies while recording; the
    messages are deserialized after the window, so the receiver never falls behind.

    It waits on a wait set of its one subscription and takes every message there, instead
    of spinning an executor: an executor's Python bookkeeping per message took 330-420 us
    of CPU against 80 us for this loop (10 trackers at 1 kHz, load 2.1), a third of a core
    that the stand-in and the driver measured here would otherwise compete for on a 2-core
    machine. The floor's subscriber is the same class."""

    def __init__(self, namespace: str):
        import rclpy
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from mocap4r2_interfaces.msg import RigidBodies

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("bench_vrpn_listener", context=self.context)
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.samples: list[tuple[float, bytes]] = []
        self.recording = False
        self.seen = 0
        self.subscription = self.node.create_subscription(
            RigidBodies, f"{namespace}/rigid_bodies", self._on, qos, raw=True
        )
        self._stop = self.node.create_guard_condition(lambda: None)
        self._running = True
        self._thread = threading.Thread(target=self._take_all, daemon=True)
        self._thread.start()

    def _take_all(self) -> None:
        # rclpy's own wait set (what its executors wait on), with the subscription and a
        # guard condition close() triggers
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        from mocap4r2_interfaces.msg import RigidBodies

        handle = self.subscription.handle
        context = self.context.handle
        assert context is not None  # initialised in __init__
        wait_set = _rclpy.WaitSet(1, 1, 0, 0, 0, 0, context)
        with contextlib.suppress(Exception):  # the context is shut down while waiting
            while self._running:
                wait_set.clear_entities()
                wait_set.add_subscription(handle)
                wait_set.add_guard_condition(self._stop.handle)
                wait_set.wait(200_000_000)  # ns
                while (taken := handle.take_message(RigidBodies, True)) is not None:
                    self._on(taken[0])

    def _on(self, data: bytes) -> None:
        self.seen += 1
        if self.recording:
            self.samples.append((time.time(), data))

    def wait_first(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.seen == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.seen > 0

    def record(self, seconds: float) -> list[tuple[float, bytes]]:
        self.samples = []
        self.recording = True
        time.sleep(seconds)  # the window the figures are measured over
        self.recording = False
        return list(self.samples)

    def close(self) -> None:
        self._running = False
        self._stop.trigger()
        self._thread.join(2.0)  # out of rclpy first: a thread still waiting at exit aborts the process
        self.node.destroy_node()
        self.context.try_shutdown()


def start_stand_in(scene_path: Path, log: Path, send_times: Path | None = None) -> tuple[StandIn, int, float]:
    """vrpn_simulator serving the scene: (it, its port, its time origin); with ``send_times``
    it writes there how late it sent each frame when it stops."""
    args = ["--scene", str(scene_path), "--port", "0"]
    if send_times is not None:
        args += ["--send-times", str(send_times)]
    sim = StandIn("vrpn_simulator", args, log, r"ready: [\d.]+:(\d+) .*time origin (\d+)")
    return sim, int(sim.ready.group(1)), float(sim.ready.group(2))


def stand_in_lateness(log: Path) -> str:
    """What the stand-in printed at stop about how late it sent its frames."""
    match = re.search(r"frames sent after their instant: (.*)", log.read_text())
    return match.group(1) if match else "(not printed)"


STAMP = struct.Struct("<iI")  # header.stamp right after the 4-byte CDR encapsulation (little endian)


def reference_publisher(namespace: str, template_path: str, seconds: float) -> None:
    """The floor's publisher (a process of its own, as the node is): the serialized
    message in ``template_path``, stamped with its send time, at RATE for ``seconds``."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from mocap4r2_interfaces.msg import RigidBodies

    message = bytearray(Path(template_path).read_bytes())
    rclpy.init()
    node = rclpy.create_node("bench_vrpn_reference")
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    publisher = node.create_publisher(RigidBodies, f"{namespace}/rigid_bodies", qos)
    start = time.monotonic()
    k = 0
    # stopped by SIGTERM, whose handler (rclpy's) shuts the context down under a publish
    with contextlib.suppress(Exception, KeyboardInterrupt):
        while (due := start + k / RATE) < start + seconds:
            time.sleep(max(due - time.monotonic(), 0.0))
            now = time.time()
            STAMP.pack_into(message, 4, int(now), int(now % 1 * 1e9))
            publisher.publish(bytes(message))
            k += 1
        node.destroy_node()
    rclpy.try_shutdown()


def reference_floor(template: bytes, tmp: Path) -> tuple[float, float]:
    """p50 and p99 (ms) of send -> receipt of ``template`` from a plain publisher process."""
    path = tmp / "reference_message.cdr"
    path.write_bytes(template)
    listener = RawListener("/bench_vrpn_reference")
    publisher = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_vrpn", "reference", "/bench_vrpn_reference", str(path)],
        cwd=ROOT,
    )
    try:
        if not listener.wait_first(timeout=30):
            return float("nan"), float("nan")
        time.sleep(1.0)  # the same warm-up as the driver's run
        samples = listener.record(SECONDS)
    finally:
        publisher.terminate()
        publisher.wait(10)
        listener.close()
    latency = [
        receipt - (sec + nsec * 1e-9)
        for receipt, data in samples
        for sec, nsec in [STAMP.unpack_from(data, 4)]
    ]
    if not latency:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(np.asarray(latency) * 1e3, (50, 99))
    return float(p50), float(p99)


def adapter_cost(trackers: int, tmp: Path) -> None:
    """The driver's own reading path in this process (no DDS): frames per second and
    CPU per frame of read + decode + frame assembly."""
    from mocap4r2_drivers.vrpn.vrpn_system import VrpnAdapter

    sim, port, _ = start_stand_in(_scene(tmp, trackers), tmp / f"sim_adapter_{trackers}.log")
    try:
        adapter = VrpnAdapter(host="127.0.0.1", port=port)
        adapter.connect()
        frames, cpu = 0, 0.0
        warm = time.monotonic() + 0.5
        end = warm + SECONDS
        while time.monotonic() < end:
            c0 = time.thread_time()
            frame = adapter.read_frame(0.1)
            if frame is not None and time.monotonic() >= warm:
                cpu += time.thread_time() - c0
                frames += 1
        adapter.disconnect()
    finally:
        sim.stop()
    print(
        f"{trackers:3d} trackers, adapter alone: {frames / SECONDS:.0f} frames/s of {RATE:.0f}, "
        f"read + decode + assembly {1e6 * cpu / max(frames, 1):.0f} us CPU per frame",
        flush=True,
    )


def end_to_end(trackers: int, tmp: Path) -> None:
    from rclpy.serialization import deserialize_message

    from mocap4r2_drivers.sim_server import load_scene
    from mocap4r2_interfaces.msg import RigidBodies

    scene_path = _scene(tmp, trackers)
    scene = load_scene(str(scene_path), -1, 0.0)
    sim_log = tmp / f"sim_{trackers}.log"
    send_path = tmp / f"send_times_{trackers}.npy"
    sim, port, origin = start_stand_in(scene_path, sim_log, send_path)
    node_log = tmp / f"node_{trackers}.log"
    params = {
        "port": port,
        "autostart": "true",
        "qos_depth": 1000,
        "publish_markers": "false",
        "publish_skeletons": "false",
    }
    node = SystemProcess("vrpn_system", "vrpn", "/bench_vrpn", params, node_log)
    listener = RawListener("/bench_vrpn")
    try:
        if not listener.wait_first(timeout=30):
            print(f"{trackers:3d} trackers: no messages (see {node_log.name})", flush=True)
            return
        time.sleep(1.0)  # warm-up: discovery done, every tracker announced and reporting
        samples = listener.record(SECONDS)
    finally:
        node.stop()
        listener.close()
        skipped = sim.stop()
    messages = [(t, deserialize_message(data, RigidBodies)) for t, data in samples]
    late = stand_in_lateness(sim_log)
    # frame number -> how late the stand-in sent it (s)
    sent_late = dict(np.load(send_path).tolist()) if send_path.exists() else {}
    floor_p50, floor_p99 = reference_floor(samples[0][1], tmp) if samples else (float("nan"),) * 2

    # each message: the scene instant of each fresh body (its position is the scene's at
    # that instant, looked up exactly: VRPN carries float64 end to end)
    delivered: set[tuple[int, int]] = set()
    latencies: list[float] = []
    from_send: list[float] = []  # receipt - the instant the stand-in sent the frame
    numbers = [m.frame_number for _, m in messages]
    if messages:
        first = int((messages[0][0] - origin - 5.0) * RATE)
        last = int((messages[-1][0] - origin) * RATE) + 10
        instant_of: dict[tuple[int, tuple[float, float, float]], int] = {}
        for k0 in range(max(first, 0), last, 64):
            for k, frame in enumerate(scene.frames(k0, 64), start=k0):
                for row, p in enumerate(frame.bodies.positions.tolist()):
                    instant_of[(row, tuple(p))] = k
        for receipt, msg in messages:
            newest = -1
            for row, b in enumerate(msg.rigid_bodies):
                p = b.pose.position
                k = instant_of.get((row, (p.x, p.y, p.z)), -1)
                if k >= 0:
                    delivered.add((k, row))
                    newest = max(newest, k)
            if newest >= 0:
                latencies.append(receipt - (origin + newest / RATE))
                if newest in sent_late:
                    from_send.append(receipt - (origin + newest / RATE + sent_late[newest]))
    instants = {k for k, _ in delivered}
    span = (max(instants) - min(instants) + 1) if instants else 0
    expected = span * trackers
    lat = np.asarray(latencies) * 1e3 if latencies else np.asarray([float("nan")])
    p50, p99, worst = (float(np.percentile(lat, q)) for q in (50, 99, 100))
    missing = missing_numbers(numbers)
    print(
        f"{trackers:3d} trackers at {RATE:.0f} Hz: reports delivered {len(delivered)} of {expected} "
        f"({100 * len(delivered) / max(expected, 1):.2f} %, instants {min(instants, default=0)}.."
        f"{max(instants, default=0)}); {len(messages) / SECONDS:.0f} frames/s published, "
        f"{missing} frame numbers missing; stand-in skipped {skipped if skipped >= 0 else '?'} "
        "instants to keep real time",
        flush=True,
    )
    print(
        f"{'':3s}             latency message time -> subscriber: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
        f"max {worst:.2f} ms; vrpn_mocap's polling alone adds up to {REFERENCE_POLL_MS:.0f} ms "
        f"(p99 {REFERENCE_POLL_MS / p99:.1f}x ours)",
        flush=True,
    )
    print(f"{'':3s}             of which the stand-in's own lateness: {late}", flush=True)
    sent = np.asarray(from_send) * 1e3 if from_send else np.asarray([float("nan")])
    s50, s99, s_worst = (float(np.percentile(sent, q)) for q in (50, 99, 100))
    print(
        f"{'':3s}             from the stand-in's send -> subscriber (the driver, the node, DDS): "
        f"p50 {s50:.2f} ms, p99 {s99:.2f} ms, max {s_worst:.2f} ms",
        flush=True,
    )
    size = len(samples[0][1]) if samples else 0
    print(
        f"{'':3s}             floor, a plain rclpy publisher process of the same {size}-byte message at "
        f"{RATE:.0f} Hz -> the same subscriber: p50 {floor_p50:.2f} ms, p99 {floor_p99:.2f} ms; "
        f"ours p50 +{p50 - floor_p50:.2f} ms, p99 {p99 / floor_p99:.1f}x the floor",
        flush=True,
    )


def run() -> None:
    own_domain()
    with tempfile.TemporaryDirectory(prefix="bench_vrpn_") as name:
        for trackers in (10, 50):
            adapter_cost(trackers, Path(name))
            end_to_end(trackers, Path(name))


if __name__ == "__main__":
    if sys.argv[1:2] == ["reference"]:  # the floor's publisher process (reference_floor)
        reference_publisher(sys.argv[2], sys.argv[3], 60.0)  # until reference_floor stops it
    else:
        run()
