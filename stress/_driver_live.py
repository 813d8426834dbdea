"""What the NatNet and QTM stress sections share: mutation of packets in numpy batches,
a fuzzing loop with crash/hang/consistency counts, and live processes (stand-ins and
drivers) with a DDS subscriber, kill/restart cycles and process figures."""
from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HANG_SECONDS = 1.0


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def mutated_batches(bases: list[bytes], total: int, rng: np.random.Generator, batch: int = 4096):
    """Yields (base index, packet bytes) for ``total`` mutants of ``bases``: 1 to 8 bytes
    overwritten (at random places, or in the first 64 bytes where the counts and sizes
    live), sometimes truncated or extended with noise. Mutation is done per batch in
    numpy; only the bytes() of each row is per packet."""
    width = max(len(b) for b in bases) + 64
    table = np.zeros((len(bases), width), np.uint8)
    lengths = np.array([len(b) for b in bases])
    for i, b in enumerate(bases):
        table[i, :len(b)] = np.frombuffer(b, np.uint8)
    done = 0
    while done < total:
        n = min(batch, total - done)
        which = rng.integers(0, len(bases), n)
        rows = table[which].copy()
        length = lengths[which].copy()
        hits = rng.integers(1, 9, n)
        # positions: half anywhere in the packet, half in its head (counts and sizes)
        span = np.where(rng.random(n) < 0.5, length, np.minimum(length, 64))
        for j in range(8):
            active = hits > j
            pos = (rng.random(n) * span).astype(np.int64)
            rows[active, pos[active]] = rng.integers(0, 256, int(active.sum()), dtype=np.uint8)
        cut = rng.random(n)
        length = np.where(cut < 0.08, (rng.random(n) * length).astype(np.int64), length)
        grow = (cut > 0.96)
        rows[grow, :] = np.where(np.arange(width)[None, :] >= length[grow, None],
                                 rng.integers(0, 256, (int(grow.sum()), width), dtype=np.uint8), rows[grow, :])
        length = np.where(grow, np.minimum(length + rng.integers(1, 64, n), width), length)
        for r in range(n):
            yield int(which[r]), rows[r, :length[r]].tobytes()
        done += n


class FuzzCounts:
    def __init__(self, name: str):
        self.name = name
        self.packets = 0
        self.rejected = 0
        self.accepted = 0
        self.crashes = 0
        self.hangs = 0
        self.inconsistent = 0
        self.stalls = 0     # slow once, fast again: the machine, not the decoder
        self.slowest = 0.0
        self.slowest_packet: tuple[int, bytes] | None = None
        self.first_crash = ""
        self.seconds = 0.0

    def run(self, packets, step: Callable[[int, bytes], str], budget: float) -> "FuzzCounts":
        """``step`` returns "rejected", "accepted" or "inconsistent"; any exception it
        raises is a crash. Stops at the end of ``packets`` or after ``budget`` s."""
        start = time.monotonic()
        for base, packet in packets:
            t = time.perf_counter()
            try:
                outcome = step(base, packet)
            except Exception as exc:  # noqa: BLE001 - what we count
                outcome = "crash"
                if not self.first_crash:
                    self.first_crash = f"{type(exc).__name__}: {exc}"
            dt = time.perf_counter() - t
            if dt > self.slowest:
                self.slowest, self.slowest_packet = dt, (base, packet)
            if dt > HANG_SECONDS:
                # a stall of the machine, or of the decoder? the same packet again says
                t = time.perf_counter()
                try:
                    step(base, packet)
                except Exception:  # noqa: BLE001 - counted above
                    pass
                if time.perf_counter() - t > HANG_SECONDS:
                    self.hangs += 1
                else:
                    self.stalls += 1
            self.packets += 1
            if outcome == "rejected":
                self.rejected += 1
            elif outcome == "accepted":
                self.accepted += 1
            elif outcome == "inconsistent":
                self.inconsistent += 1
            else:
                self.crashes += 1
            if (self.packets & 1023) == 0 and time.monotonic() - start > budget:
                break
        self.seconds = time.monotonic() - start
        return self

    def rows(self, target_packets: int) -> list[tuple]:
        rate = self.packets / self.seconds if self.seconds else 0.0
        label = self.name
        rows = [
            (f"{label}: mutated packets (accepted {self.accepted}, rejected {self.rejected}, "
             f"{rate:,.0f}/s)", self.packets, f">= {target_packets}", self.packets >= target_packets),
            (f"{label}: crashes{' (' + self.first_crash[:80] + ')' if self.first_crash else ''}", self.crashes,
             "0", self.crashes == 0),
            (f"{label}: hangs > {HANG_SECONDS:g} s, repeatable (slowest {self.slowest * 1e3:.1f} ms; "
             f"{self.stalls} machine stalls not repeated)", self.hangs, "0",
             self.hangs == 0),
            (f"{label}: inconsistent frames passed", self.inconsistent, "0", self.inconsistent == 0),
        ]
        return rows


# ---------------------------------------------------------------------- live processes
class Live:
    """Processes and a DDS subscriber, with the test fixtures' helpers (an own domain)."""

    def __init__(self):
        fixtures = ROOT / "test" / "fixtures"
        if str(fixtures) not in sys.path:
            sys.path.insert(0, str(fixtures))
        from isolation import claim_domain_id  # noqa: PLC0415 - the test fixtures' domain claim

        if "MOCAP4R2_TEST_DOMAIN" not in os.environ:
            os.environ["MOCAP4R2_TEST_DOMAIN"] = str(claim_domain_id())
        os.environ["ROS_DOMAIN_ID"] = os.environ["MOCAP4R2_TEST_DOMAIN"]
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        os.environ["PYTHONUNBUFFERED"] = "1"
        from support import ProcessRunner, RosHarness  # noqa: PLC0415

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
    from support import wait_for as support_wait_for  # noqa: PLC0415 - on sys.path once Live() runs

    try:
        return support_wait_for(condition, timeout, what=what, interval=0.01)
    except AssertionError as exc:
        raise TimeoutError(str(exc)) from None


def restart_cycles(vendor: str, bodies, driver, server, restart: Callable[[], tuple], cycles: int) -> list[tuple]:
    """Kill the vendor's server ``cycles`` times under a live driver and restart it
    (``restart() -> (server process, time it said ready)``); the rows of restart_rows."""
    time.sleep(1.0)   # steady state before counting threads and memory
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
    time.sleep(1.0)   # let a leaking driver show its leak before counting again
    threads_after, rss_after = proc_threads(driver.pid), proc_rss_mib(driver.pid)
    driver.stop()
    server.stop()
    return restart_rows(vendor, recoveries, (threads_before, threads_after), (rss_before, rss_after), failures,
                        cycles)


def restart_rows(vendor: str, recoveries: list[float], threads: tuple[int, int], rss: tuple[float, float],
                 failures: int, cycles: int) -> list[tuple]:
    got = np.asarray(recoveries) if recoveries else np.asarray([float("inf")])
    p50, worst = float(np.median(got)), float(got.max())
    return [
        (f"{vendor}: server kill/restart cycles recovered", f"{len(recoveries)}/{cycles}", f"{cycles}/{cycles}",
         len(recoveries) == cycles and failures == 0),
        (f"{vendor}: recovery p50 (s, first frame after the restarted server is ready)", round(p50, 3),
         "<= 2", p50 <= 2.0),
        (f"{vendor}: recovery max (s)", round(worst, 3), "<= 2", worst <= 2.0),
        (f"{vendor}: driver threads before/after", f"{threads[0]}/{threads[1]}", "equal", threads[0] == threads[1]),
        (f"{vendor}: driver RSS before/after (MiB)", f"{rss[0]:.1f}/{rss[1]:.1f}", "growth < 10 %",
         rss[1] <= rss[0] * 1.10),
    ]
