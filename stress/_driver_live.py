"""What the NatNet and QTM stress sections share besides fuzzing (stress/_fuzz.py): live
processes (stand-ins and drivers) with a DDS subscriber, kill/restart cycles and process
figures."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


# ---------------------------------------------------------------------- live processes
class Live:
    """Processes and a DDS subscriber, with the test fixtures' helpers (an own domain)."""

    def __init__(self):
        fixtures = ROOT / "test" / "fixtures"
        if str(fixtures) not in sys.path:
            sys.path.insert(0, str(fixtures))
        from isolation import claim_domain_id  # the test fixtures' domain claim

        if "MOCAP4R2_TEST_DOMAIN" not in os.environ:
            os.environ["MOCAP4R2_TEST_DOMAIN"] = str(claim_domain_id())
        os.environ["ROS_DOMAIN_ID"] = os.environ["MOCAP4R2_TEST_DOMAIN"]
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        os.environ["PYTHONUNBUFFERED"] = "1"
        from support import ProcessRunner, RosHarness

        self.tmp = Path(tempfile.mkdtemp(prefix="mocap4r2-stress-"))
        self.procs = ProcessRunner(self.tmp)
        self.ros = RosHarness()

    def close(self) -> None:
        try:
            self.procs.stop_all()
        finally:
            self.ros.close()


def proc_threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def wait_for(condition: Callable[[], object], timeout: float, what: str):
    """support.wait_for, raising TimeoutError: a stress figure counts a miss, it does not fail."""
    from support import wait_for as support_wait_for  # on sys.path once Live() runs

    try:
        return support_wait_for(condition, timeout, what=what, interval=0.01)
    except AssertionError as exc:
        raise TimeoutError(str(exc)) from None


def restart_cycles(
    vendor: str, bodies, driver, server, restart: Callable[[], tuple], cycles: int
) -> list[tuple]:
    """Kill the vendor's server ``cycles`` times under a live driver and restart it
    (``restart() -> (server process, time it said ready)``); the rows of restart_rows."""
    time.sleep(1.0)  # steady state before counting threads and memory
    threads_before, rss_before = proc_threads(driver.pid), proc_rss_mib(driver.pid)
    recoveries, failures = [], 0
    for _ in range(cycles):
        server.popen.kill()
        server.popen.wait(10)
        wait_for(lambda: not bodies.times or time.monotonic() - bodies.times[-1] > 0.3, 10, "silence")
        server, ready = restart()
        bodies.clear()
        try:
            wait_for(lambda: bodies.times, 20, "a frame after the restart")
            recoveries.append(max(bodies.times[0] - ready, 0.0))
        except TimeoutError:
            failures += 1
    time.sleep(1.0)  # let a leaking driver show its leak before counting again
    threads_after, rss_after = proc_threads(driver.pid), proc_rss_mib(driver.pid)
    driver.stop()
    server.stop()
    return restart_rows(
        vendor, recoveries, (threads_before, threads_after), (rss_before, rss_after), failures, cycles
    )


def restart_rows(
    vendor: str,
    recoveries: list[float],
    threads: tuple[int, int],
    rss: tuple[float, float],
    failures: int,
    cycles: int,
) -> list[tuple]:
    got = np.asarray(recoveries) if recoveries else np.asarray([float("inf")])
    p50, worst = float(np.median(got)), float(got.max())
    return [
        (
            f"{vendor}: server kill/restart cycles recovered",
            f"{len(recoveries)}/{cycles}",
            f"{cycles}/{cycles}",
            len(recoveries) == cycles and failures == 0,
        ),
        (
            f"{vendor}: recovery p50 (s, first frame after the restarted server is ready)",
            round(p50, 3),
            "<= 2",
            p50 <= 2.0,
        ),
        (f"{vendor}: recovery max (s)", round(worst, 3), "<= 2", worst <= 2.0),
        (
            f"{vendor}: driver threads before/after",
            f"{threads[0]}/{threads[1]}",
            "equal",
            threads[0] == threads[1],
        ),
        (
            f"{vendor}: driver RSS before/after (MiB)",
            f"{rss[0]:.1f}/{rss[1]:.1f}",
            "growth < 10 %",
            rss[1] <= rss[0] * 1.10,
        ),
    ]
