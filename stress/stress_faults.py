"""The faults of a real lab (issue 39 part 6), each with its target.

A list of cases (:data:`CASES`); each is a name and a function returning its rows. Adding a
fault is adding a case to the list.

* host clock steps (NTP, chrony, resume from sleep) either way, and system clock steps
  (a server's own NTP step, back or forward) on a 250 Hz stream with 2 ms exponential
  jitter, bursts of 4 and +100 ppm, through the real FrameStamper with injected clocks
  (bench/clock_faults.py), over SEEDS streams each with the fault at a random instant:
  the worst recovery and error after it, and the stamps' rules;
* a PX4 vehicle reboot and a host clock step of the bridge, over real UDP against the
  vehicle stand-in (test/fixtures/px4_vehicle.py) with PymavlinkLink: how fast the
  bridge's converged flag goes false, that it is never true while PX4 stamps on arrival,
  and that it comes back when PX4 has converged again;
* marker_tracker started on a read-only install (stress/tracker_faults.py): it starts,
  answers START within the control plane's 10 s, and tracks within a CPU-time budget.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from stress.common import ROOT, Row

SEEDS = 20
RECOVERY_TARGET_S = 1.0
ERROR_TARGET_MS = 0.5
# the bridge's flag must go false this soon after a reboot or a host step (requests at 200 Hz)
FLAG_FALSE_TARGET_S = 0.5
# ... and follow PX4's convergence within this
FLAG_FOLLOWS_TARGET_S = 1.0


@dataclass(frozen=True)
class FaultCase:
    name: str
    run: Callable[[], list[Row]]


def _clock_case(base_name: str, **fault: float) -> FaultCase:
    def run() -> list[Row]:
        from bench import clock_faults

        rng = random.Random(base_name)
        worst_recovery = worst_error = worst_baseline = 0.0
        broken = 0
        for seed in range(SEEDS):
            case = replace(
                clock_faults.IMPAIRED,
                name=base_name,
                seed=seed,
                fault_at=rng.uniform(5.0, 8.0),
                **fault,
            )
            figures = clock_faults.run_case(case)
            worst_recovery = max(worst_recovery, figures["recovery_s"])
            worst_error = max(worst_error, figures["after_max_ms"])
            worst_baseline = max(worst_baseline, figures.get("baseline_after_max_ms", 0.0))
            broken += figures["repeats"] + figures["backwards"] + figures["after_arrival"]
        return [
            Row(
                f"{base_name}: worst recovery of {SEEDS} streams, s",
                round(worst_recovery, 3),
                f"<= {RECOVERY_TARGET_S:g}",
                worst_recovery <= RECOVERY_TARGET_S,
            ),
            Row(
                f"{base_name}: worst error from 1 s after, ms",
                round(worst_error, 3),
                f"< {ERROR_TARGET_MS:g} or the stream's own without the fault",
                worst_error < max(ERROR_TARGET_MS, worst_baseline + 1e-3),
            ),
            Row(f"{base_name}: the same streams without the fault, worst, ms", round(worst_baseline, 3)),
            Row(f"{base_name}: stamps repeated, back or after arrival", broken, "0", broken == 0),
        ]

    return FaultCase(base_name, run)


def _px4_case(name: str, fault: Callable[[object, object, object], None], rounds: int) -> FaultCase:
    def run() -> list[Row]:
        sys.path.insert(0, str(ROOT / "test" / "fixtures"))
        from px4_vehicle import Px4VehicleStandIn, free_udp_port

        from mocap4r2_control.timebase import SteppedClock
        from mocap4r2_tools.px4.links import Connection, PymavlinkLink

        vehicle = Px4VehicleStandIn(free_udp_port(), timesync_rate=200.0)
        clock = SteppedClock()
        link = PymavlinkLink(Connection.parse(f"udpout:127.0.0.1:{vehicle.port}"), 1, 197, clock=clock)
        false_after: list[float] = []
        follows_after: list[float] = []
        lies = 0  # samples where the bridge said converged while PX4 stamped on arrival
        try:
            if link.open(5.0) is not None:
                return [Row(f"{name}: link opened", "no", "yes", False)]
            for _ in range(rounds):
                deadline = time.monotonic() + 30.0
                while not (vehicle.timesync.converged and link.peer.vehicle_converged):
                    if time.monotonic() > deadline:
                        return [Row(f"{name}: converged before the fault", "no", "yes", False)]
                    time.sleep(0.01)
                fault(vehicle, link, clock)
                start = time.monotonic()
                went_false = None
                px4_down = False  # PX4 stamped on arrival since the fault
                px4_back = None
                while time.monotonic() - start < 30.0:
                    now = time.monotonic() - start
                    flag = link.peer.vehicle_converged
                    px4 = vehicle.timesync.converged
                    if went_false is None and not flag:
                        went_false = now
                    if went_false is not None and flag and not px4:
                        lies += 1
                    if not px4:
                        px4_down = True
                    if px4_down and px4_back is None and px4:
                        px4_back = now
                    if px4_back is not None and flag:
                        follows_after.append(now - px4_back)
                        break
                    time.sleep(0.005)
                false_after.append(went_false if went_false is not None else float("inf"))
        finally:
            link.close()
            vehicle.close()
        worst_false = max(false_after)
        worst_follow = max(follows_after) if len(follows_after) == rounds else float("inf")
        return [
            Row(
                f"{name}: flag false after the fault, worst of {rounds}, s",
                round(worst_false, 3),
                f"<= {FLAG_FALSE_TARGET_S:g}",
                worst_false <= FLAG_FALSE_TARGET_S,
            ),
            Row(
                f"{name}: flag true again after PX4 converged, worst, s",
                round(worst_follow, 3),
                f"<= {FLAG_FOLLOWS_TARGET_S:g}",
                worst_follow <= FLAG_FOLLOWS_TARGET_S,
            ),
            Row(f"{name}: flag true while PX4 stamped on arrival (samples)", lies, "0", lies == 0),
        ]

    return FaultCase(name, run)


def _reboot(vehicle, _link, _clock) -> None:
    vehicle.reboot()


def _host_step(_vehicle, _link, clock) -> None:
    clock.offset += 0.5


CASES: list[FaultCase] = [
    *(
        _clock_case(f"host clock step {step * 1e3:+g} ms", host_step=step)
        for step in (0.03, 0.3, 1.0, -0.03, -1.0)
    ),
    *(
        _clock_case(f"system clock step {step * 1e3:+g} ms", vendor_step=step)
        for step in (-0.001, -0.005, -0.03, 0.01)
    ),
    _px4_case("PX4 vehicle reboot", _reboot, rounds=3),
    _px4_case("PX4 bridge host clock step +0.5 s", _host_step, rounds=2),
    FaultCase("tracker start on a read-only install", lambda: _tracker_read_only()),
]


def _tracker_read_only() -> list[Row]:
    from stress.tracker_faults import read_only_start  # its own module: mount namespaces, a node

    return read_only_start()


def run() -> list[Row]:
    rows: list[Row] = []
    for case in CASES:
        start = time.perf_counter()
        try:
            rows += case.run()
        except Exception as exc:  # one broken case must not hide the others' figures
            rows.append(Row(f"{case.name}: ran", f"{type(exc).__name__}: {exc}"[:60], "no error", False))
        print(f"    ({case.name}: {time.perf_counter() - start:.1f} s)", flush=True)
    return rows
