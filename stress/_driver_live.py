"""What the vendor stress sections (NatNet, QTM, VRPN) share besides fuzzing
(stress/_fuzz.py): their scene file, live processes (stand-ins and drivers) with a DDS
subscriber, a driver's UDP port, the figures of a flood, kill/restart cycles, process
figures, and running a section (fuzzing, then the live parts)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

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


def scene_file(directory: Path, name: str, scene: dict[str, Any]) -> tuple[Path, Any]:
    """``scene`` written to ``directory/name``: (its path, the Scene read from it)."""
    from mocap4r2_drivers.simulated.scene import Scene

    path = directory / name
    path.write_text(yaml.safe_dump(scene))
    return path, Scene.from_file(path)


def start_stand_in(live: Live, executable: str, args: list[str]) -> tuple[Any, float]:
    """A vendor stand-in (``natnet_simulator``, ...) started with ``args``: (its process,
    the monotonic time it said ready); RuntimeError with its log when it does not."""
    proc = live.procs.start("mocap4r2_drivers", executable, ros=False, name=executable, args=args)
    if not proc.wait_log(f"{executable} ready", 60):
        raise RuntimeError(f"{executable} did not start: {proc.log()[-2000:]}")
    return proc, time.monotonic()


def driver_udp_port(pid: int, exclude: set[int]) -> int | None:
    """A UDP port process ``pid`` holds on 127.0.0.1, but those in ``exclude``."""
    import psutil

    ports = [
        c.laddr.port
        for c in psutil.Process(pid).net_connections(kind="udp4")
        if c.laddr.ip == "127.0.0.1" and c.laddr.port not in exclude
    ]
    return ports[0] if ports else None


def frames_after_flood(bodies) -> list:
    """Every message ``bodies`` collected, once frames flow for 1 s after the flood ended."""
    end = time.monotonic()
    wait_for(lambda: bodies.times and bodies.times[-1] > end + 1.0, 30, "frames after the flood")
    return bodies.snapshot()


def flood_rows(
    vendor: str,
    driver_name: str,
    driver,
    stand_in,
    log_before: int,
    flood: tuple[int, int, float],
    published: int,
    wrong: int,
) -> list[tuple]:
    """Stop ``driver`` and ``stand_in`` after a flood; its rows. ``flood`` is (datagrams
    asked, datagrams sent, seconds), ``published`` the frames published meanwhile and after."""
    asked, sent, seconds = flood
    alive = driver.alive()
    log_growth = len(driver.log()) - log_before
    driver.stop()
    stand_in.stop()
    return [
        (
            f"{vendor} flood: datagrams at a live {driver_name} ({seconds:.1f} s; {published} frames "
            "published meanwhile and after)",
            sent,
            f">= {asked}",
            sent >= asked,
        ),
        (
            f"{vendor} flood: frames published wrongly (not the server's, or not advancing)",
            wrong,
            "0",
            wrong == 0,
        ),
        (f"{vendor} flood: driver alive afterwards", alive, "True", alive),
        (
            f"{vendor} flood: driver log written during the flood (bytes)",
            log_growth,
            "< 20000",
            log_growth < 20000,
        ),
    ]


def run_section(
    fuzz_rows: Callable[[], list[tuple]], *live_parts: Callable[[Live], list[tuple]]
) -> list[tuple]:
    """A vendor section: the fuzzing rows, then each live part's with one Live, closed at the end."""
    rows = fuzz_rows()
    live = Live()
    try:
        for part in live_parts:
            rows += part(live)
    finally:
        live.close()
    return rows


def print_rows(rows: Iterable[tuple]) -> None:
    """A section's rows, one a line (a section run as a script)."""
    for row in rows:
        print(" | ".join(str(x) for x in row))


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
