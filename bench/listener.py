"""What every end-to-end benchmark needs on the receiving side: a subscriber that keeps
up with kHz streams. It takes messages serialized (raw=True) and reads only the header
stamp and frame number from the CDR bytes, so the receiver is never the bottleneck it
would be if it deserialized hundreds of markers per message in Python."""

from __future__ import annotations

import contextlib
import struct
import subprocess
import threading
import time


def parse_header(data: bytes) -> tuple[float, int]:
    """(stamp seconds, frame_number) of a serialized Markers / RigidBodies / Skeletons."""
    sec, nanosec, length = struct.unpack_from("<iII", data, 4)
    pos = (12 + length + 7) & ~7  # frame_id string, then uint64 aligned to 8
    (frame_number,) = struct.unpack_from("<Q", data, 4 + pos)
    return sec + nanosec * 1e-9, frame_number


class FrameListener:
    """Receives ``rigid_bodies`` of ``namespace`` (and consumes its other topics) in its
    own rclpy context and thread; ``record(seconds)`` keeps (receipt time, stamp, frame
    number) of each frame that arrives in the window."""

    def __init__(self, namespace: str = "/bench", other_topics: tuple[str, ...] = ("markers", "skeletons")):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        from mocap4r2_interfaces.msg import Markers, RigidBodies, Skeletons

        self._rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("bench_listener", context=self.context)
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        types = {"markers": Markers, "skeletons": Skeletons}
        self.recording = False
        self.samples: list[tuple[float, float, int]] = []
        self.seen = 0
        self.node.create_subscription(
            RigidBodies, f"{namespace}/rigid_bodies", self._on_bodies, qos, raw=True
        )
        for topic in other_topics:
            self.node.create_subscription(types[topic], f"{namespace}/{topic}", lambda _: None, qos, raw=True)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        # the context may be shut down while spinning: that ends the thread, nothing to report
        with contextlib.suppress(Exception):
            self.executor.spin()

    def _on_bodies(self, data: bytes) -> None:
        self.seen += 1
        if self.recording:
            stamp, number = parse_header(data)
            self.samples.append((time.time(), stamp, number))

    def wait_first(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        start = self.seen
        while self.seen == start and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.seen > start

    def record(self, seconds: float) -> list[tuple[float, float, int]]:
        self.samples = []
        self.recording = True
        time.sleep(seconds)
        self.recording = False
        return list(self.samples)

    def close(self) -> None:
        self.executor.shutdown(1.0)
        self._thread.join(2.0)
        self.node.destroy_node()
        self._rclpy.shutdown(context=self.context)


def measure_process(
    cmd: list[str],
    receiver: FrameListener,
    warmup_s: float,
    measure_s: float,
    cwd=None,
    ready_line: bool = False,
) -> tuple[list[tuple[float, float, int]], float]:
    """Run a publishing process ``cmd``: wait for its first frame, let it warm up for
    ``warmup_s`` (start-up, precomputation and DDS matching are not measured), then
    record ``measure_s`` of frames. Returns the samples and the CPU seconds the process
    used while they were recorded; ([], 0.0) when no frame came. ``ready_line``: the
    process prints one line once its own preparation is done; wait for it first."""
    import psutil

    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE if ready_line else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        ps = psutil.Process(proc.pid)
        if ready_line:
            proc.stdout.readline()
        if not receiver.wait_first(timeout=60):
            return [], 0.0
        time.sleep(warmup_s)  # benchmark warm-up span, not a wait for a condition
        cpu0 = sum(ps.cpu_times()[:2])
        samples = receiver.record(measure_s)
        cpu1 = sum(ps.cpu_times()[:2])
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
    return samples, cpu1 - cpu0
