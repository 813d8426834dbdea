"""Executors under a stream: rclpy's MultiThreadedExecutor against ours and the single-threaded one.

gazebo_system and auxiliar_system need two executor threads (a callback waits for
another). rclpy's MultiThreadedExecutor (before rclpy#1547) hands every queued callback
back to its pool on each pass; ``mocap4r2_control.executors.PatientMultiThreadedExecutor``
gives each once. Here a publisher process sends two topics (as two ros_gz_bridge pose
topics) and one subscriber process at a time takes them in with two subscriptions in
one mutually exclusive callback group (as gazebo_system's), spun by each executor:

* ``single``: rclpy's SingleThreadedExecutor, the reference (what a node with one
  thread gets);
* ``rclpy_multi``: rclpy's MultiThreadedExecutor with 2 threads;
* ``patient``: ours with 2 threads.

Printed: messages taken in per second against those the publisher really sent in the
same window, and CPU (user + system of the subscriber, % of one core) with its ratio to
``single``. Nothing is asserted.

    python -m bench executor
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPICS = ("/bench_executor/a", "/bench_executor/b")
KINDS = ("single", "rclpy_multi", "patient")
RATES = (250.0, 1000.0)  # per topic, Hz
WINDOW_S = float(os.environ.get("BENCH_EXECUTOR_WINDOW", 5.0))
WARMUP_S = 1.0
STARTUP_S = 60.0


def _qos():
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


def publish(rate: float) -> int:
    """Both topics at ``rate`` until SIGTERM, printing ``SENT <monotonic time> <messages so
    far>`` every 0.2 s: a starved publisher catches up in a burst, so what a subscriber
    took in is compared with what was really sent in its window (the monotonic clock is
    the same in every process)."""
    import rclpy
    from std_msgs.msg import UInt32

    rclpy.init()
    node = rclpy.create_node("bench_executor_publisher")
    publishers = [node.create_publisher(UInt32, topic, _qos()) for topic in TOPICS]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    start, i, told = time.monotonic(), 0, 0.0
    while True:
        for publisher in publishers:
            publisher.publish(UInt32(data=i))
        i += 1
        now = time.monotonic()
        if now - told >= 0.2:
            print(f"SENT {now:.6f} {len(publishers) * i}", flush=True)
            told = now
        time.sleep(max(0.0, start + i / rate - now))


def subscribe(kind: str) -> int:
    """Both topics in one mutually exclusive group, spun by ``kind``; on SIGTERM prints
    ``RESULT <since> <until> <messages> <cpu fraction>``: monotonic times of the window
    (from WARMUP_S after the first message to the end), messages taken in, CPU over it."""
    import resource

    import rclpy
    from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
    from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
    from std_msgs.msg import UInt32

    from mocap4r2_control.executors import PatientMultiThreadedExecutor

    rclpy.init()
    node = rclpy.create_node(f"bench_executor_{kind}")
    # the window opens WARMUP_S after the first message (what queued up while the process
    # started is taken in by then) and starts at the first message after that
    counted = {"opens": None, "since": None, "cpu": 0.0, "messages": 0}

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def on_message(_msg) -> None:
        now = time.monotonic()
        if counted["opens"] is None:
            counted["opens"] = now + WARMUP_S
            print("READY", flush=True)
        elif now >= counted["opens"]:
            if counted["since"] is None:
                counted.update(since=now, cpu=cpu())
            counted["messages"] += 1

    group = MutuallyExclusiveCallbackGroup()
    for topic in TOPICS:
        node.create_subscription(UInt32, topic, on_message, _qos(), callback_group=group)
    executor = {
        "single": SingleThreadedExecutor,
        "rclpy_multi": lambda: MultiThreadedExecutor(num_threads=2),
        "patient": lambda: PatientMultiThreadedExecutor(num_threads=2),
    }[kind]()
    executor.add_node(node)

    def report(*_):
        until = time.monotonic()
        if counted["since"] is None:  # nothing taken in since the window opened
            print(f"RESULT {counted['opens'] or until:.6f} {until:.6f} 0 nan", flush=True)
            os._exit(0)
        elapsed = max(until - counted["since"], 1e-9)
        print(
            f"RESULT {counted['since']:.6f} {until:.6f} {counted['messages']} "
            f"{(cpu() - counted['cpu']) / elapsed:.3f}",
            flush=True,
        )
        os._exit(0)

    signal.signal(signal.SIGTERM, report)
    executor.spin()
    return 0


def _sent_between(log: Path, since: float, until: float) -> float:
    """Messages the publisher sent between two monotonic times, from its SENT lines."""
    marks = [
        (float(t), int(n))
        for _, t, n in (line.split() for line in log.read_text().splitlines() if line.startswith("SENT "))
    ]

    def at(when: float) -> float:
        before = [m for m in marks if m[0] <= when]
        after = [m for m in marks if m[0] > when]
        if not before or not after:
            raise RuntimeError("the publisher's log does not cover the subscriber's window")
        (t0, n0), (t1, n1) = before[-1], after[0]
        return n0 + (n1 - n0) * (when - t0) / (t1 - t0)

    return at(until) - at(since)


def _measure(kind: str, log: Path) -> tuple[float, float, float]:
    """(messages sent per second, taken in per second, CPU fraction) over ``kind``'s window."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_executor", "subscribe", kind],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_S
        line = ""
        while time.monotonic() < deadline and line.strip() != "READY":
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{kind}: the subscriber ended before its first message")
        time.sleep(WARMUP_S + WINDOW_S)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = [line.split() for line in out.splitlines() if line.startswith("RESULT")]
    if not result:
        raise RuntimeError(f"{kind}: no RESULT line")
    since, until, messages, cpu = (float(v) for v in result[-1][1:])
    time.sleep(0.5)  # the publisher's next SENT line closes the window
    elapsed = until - since
    return _sent_between(log, since, until) / elapsed, messages / elapsed, cpu


def run() -> None:
    print(f"two topics from another process, one mutually exclusive group, {WINDOW_S:g} s per executor")
    print(
        f"{'nominal/s':>9} {'executor':>12} {'sent/s':>7} {'taken in/s':>11} {'taken/sent':>11} "
        f"{'CPU %':>7} {'CPU / single':>13}"
    )
    for rate in RATES:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "publisher.log"
            with open(log, "w") as out:
                publisher = subprocess.Popen(
                    [sys.executable, "-m", "bench.bench_executor", "publish", str(rate)],
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                )
            try:
                results = {kind: _measure(kind, log) for kind in KINDS}
            finally:
                publisher.terminate()
                publisher.wait(10)
        reference = results["single"][2]
        for kind, (sent, taken, cpu) in results.items():
            ratio = cpu / reference if reference > 0 else float("nan")
            print(
                f"{2 * rate:9.0f} {kind:>12} {sent:7.0f} {taken:11.0f} {taken / sent:11.2f} {100 * cpu:7.1f} "
                f"{ratio:13.2f}",
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "publish":
        sys.exit(publish(float(sys.argv[2])))
    if len(sys.argv) >= 3 and sys.argv[1] == "subscribe":
        sys.exit(subscribe(sys.argv[2]))
    run()
