"""The bridge follows PX4's own timesync state (issue 39 part 2): its converged flag goes
false on a vehicle reboot, on a host clock step and after PX4 would have reset its filter,
and true again when PX4 has converged again.

Two ways: pure (TimesyncPeer against the stand-in's PX4 filter, written from PX4's
Timesync.cpp, on simulated clocks), and over real UDP (PymavlinkLink against the vehicle
stand-in, which reboots; the bridge's host clock stepped through an injected clock).
Before: ``vehicle_converged`` counted fast answers over the link's lifetime and never
went back to false.
"""

from __future__ import annotations

import time

import pytest
from px4_vehicle import Px4Timesync, Px4VehicleStandIn, free_udp_port

from mocap4r2_control.timebase import SteppedClock
from mocap4r2_tools.px4.links import Connection, PymavlinkLink
from mocap4r2_tools.px4.timesync import (
    CONVERGENCE_MARGIN,
    PX4_CONVERGENCE_ANSWERS,
    TimesyncPeer,
    recommended_ev_delay_ms,
)

MS = 1_000_000  # ns


class Exchange:
    """PX4 asks every 100 ms of its boot clock, the peer answers, PX4's filter takes it."""

    def __init__(self, host_minus_vehicle_ns: int):
        self.peer = TimesyncPeer()
        self.px4 = Px4Timesync()
        self.host_minus_vehicle = host_minus_vehicle_ns
        self.t = 42 * 10**9  # the vehicle's boot clock

    def run(self, answers: int, check=None) -> None:
        for _ in range(answers):
            arrival = self.t + MS + self.host_minus_vehicle
            reply = self.peer.on_timesync(0, self.t, arrival, arrival + MS // 2)
            assert reply is not None
            self.px4.update((self.t + MS + MS // 2 + MS) // 1000, reply.tc1, reply.ts1)
            self.t += 100 * MS
            if check is not None:
                check(self)

    def px4_error_ms(self) -> float:
        """How far PX4's conversion of a host time is from the truth, ms."""
        host_us = (self.t + self.host_minus_vehicle) // 1000
        return (self.px4.sync_stamp(host_us, 0) - self.t // 1000) / 1000


def agree(ex: Exchange) -> None:
    # whenever the bridge says converged, PX4 converts within 2 ms; and PX4 stamping on
    # arrival is never called converged
    if ex.peer.vehicle_converged:
        assert ex.px4.converged
        assert abs(ex.px4_error_ms()) <= 2.0 + 0.1


def test_converges_with_px4_and_not_before():
    ex = Exchange(1_700_000_000 * 10**9)
    ex.run(PX4_CONVERGENCE_ANSWERS - 1, agree)
    assert not ex.peer.vehicle_converged and not ex.px4.converged
    assert "stamps samples on arrival" in ex.peer.px4_state()
    ex.run(1, agree)
    assert ex.px4.converged and not ex.peer.vehicle_converged  # the margin for answers PX4 dropped
    ex.run(CONVERGENCE_MARGIN, agree)
    assert ex.peer.vehicle_converged
    assert ex.peer.px4_state() == "PX4 converts time_usec to its clock"


def test_a_vehicle_reboot_makes_it_false_until_px4_converged_again():
    ex = Exchange(1_700_000_000 * 10**9)
    ex.run(PX4_CONVERGENCE_ANSWERS + CONVERGENCE_MARGIN + 10, agree)
    assert ex.peer.vehicle_converged
    # the vehicle reboots: a new filter, and its boot clock starts again
    ex.px4 = Px4Timesync()
    ex.host_minus_vehicle += ex.t - 3 * 10**9
    ex.t = 3 * 10**9
    ex.run(1, agree)
    assert not ex.peer.vehicle_converged
    state = ex.peer.px4_state()
    assert "stamps samples on arrival" in state and "rebooted" in state
    assert recommended_ev_delay_ms(ex.peer.vehicle_converged, 5.0, 1.0) == pytest.approx(5.5)
    ex.run(PX4_CONVERGENCE_ANSWERS - 2, agree)
    assert not ex.px4.converged and not ex.peer.vehicle_converged
    ex.run(1 + CONVERGENCE_MARGIN, agree)
    assert ex.px4.converged and ex.peer.vehicle_converged


def test_a_host_step_beyond_100_ms_is_followed_through_px4s_reset():
    ex = Exchange(1_700_000_000 * 10**9)
    ex.run(PX4_CONVERGENCE_ANSWERS + CONVERGENCE_MARGIN + 10, agree)
    ex.host_minus_vehicle += 500 * MS  # NTP steps the host clock forward 0.5 s
    ex.peer.host_stepped(500 * MS)
    ex.run(1, agree)
    assert not ex.peer.vehicle_converged  # PX4 is converged, but on the old clock: 0.5 s off
    assert ex.px4.converged and abs(ex.px4_error_ms()) > 400
    ex.run(6, agree)
    assert ex.px4.resets == 1 and not ex.px4.converged  # PX4 reset after 6 answers that far off
    assert "reset its filter" in ex.peer.px4_state()
    ex.run(PX4_CONVERGENCE_ANSWERS + CONVERGENCE_MARGIN, agree)
    assert ex.px4.converged and ex.peer.vehicle_converged


@pytest.mark.parametrize("step_ms", [30, -30])
def test_a_host_step_under_100_ms_is_false_until_px4_has_followed(step_ms):
    ex = Exchange(1_700_000_000 * 10**9)
    ex.run(PX4_CONVERGENCE_ANSWERS + CONVERGENCE_MARGIN + 10, agree)
    ex.host_minus_vehicle += step_ms * MS
    ex.peer.host_stepped(step_ms * MS)
    ex.run(1, agree)
    assert not ex.peer.vehicle_converged and ex.px4.converged and ex.px4.resets == 0
    assert "not reset" in ex.peer.px4_state() or "off" in ex.peer.px4_state()
    followed = 0
    for _ in range(3000):  # PX4's final gain: tens of seconds of answers
        ex.run(1, agree)
        if ex.peer.vehicle_converged:
            followed += 1
            break
    assert followed, "PX4 never followed the step"
    assert abs(ex.px4_error_ms()) <= 2.1


# ---------------------------------------------------------------------------- over UDP
def wait(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.01)
    raise AssertionError(f"{what} not within {timeout} s")


@pytest.fixture
def link_and_vehicle():
    # 200 requests a second (PX4's `mavlink stream -r`): 500 answers in 2.5 s, not 50
    vehicle = Px4VehicleStandIn(free_udp_port(), timesync_rate=200.0)
    clock = SteppedClock()
    link = PymavlinkLink(Connection.parse(f"udpout:127.0.0.1:{vehicle.port}"), 1, 197, clock=clock)
    try:
        assert link.open(5.0) is None
        yield link, vehicle, clock
    finally:
        link.close()
        vehicle.close()


def test_the_vehicle_stand_in_reboots_and_the_flag_follows(link_and_vehicle):
    link, vehicle, _ = link_and_vehicle
    wait(lambda: vehicle.timesync.converged and link.peer.vehicle_converged, 30.0, "convergence")
    assert link.timesync()["timesync_converged"] == "true"
    vehicle.reboot()
    took = wait(lambda: not link.peer.vehicle_converged, 2.0, "the flag going false after the reboot")
    values = link.timesync()
    assert values["timesync_converged"] == "false"
    assert "rebooted" in values["px4_timesync"] and "on arrival" in values["px4_timesync"]
    assert not vehicle.timesync.converged
    again = wait(lambda: vehicle.timesync.converged, 30.0, "the vehicle converging again")
    wait(lambda: link.peer.vehicle_converged, 2.0, "the flag following")
    print(f"reboot: flag false {took * 1e3:.0f} ms after, vehicle converged again {again:.1f} s after")


def test_a_host_clock_step_makes_the_flag_false_until_px4_reset_and_converged(link_and_vehicle):
    link, vehicle, clock = link_and_vehicle
    wait(lambda: vehicle.timesync.converged and link.peer.vehicle_converged, 30.0, "convergence")
    clock.offset += 0.5
    took = wait(lambda: not link.peer.vehicle_converged, 2.0, "the flag going false after the step")
    assert link.timesync()["host_clock_steps"] == "1"
    wait(lambda: vehicle.timesync.resets == 1, 5.0, "the vehicle resetting its filter")
    assert not link.peer.vehicle_converged
    again = wait(lambda: vehicle.timesync.converged, 30.0, "the vehicle converging again")
    wait(lambda: link.peer.vehicle_converged, 2.0, "the flag following")
    print(f"host step +0.5 s: flag false {took * 1e3:.0f} ms after, vehicle converged again {again:.1f} s")


# ---------------------------------------------------------------------------- use_sim_time
def test_use_sim_time_is_refused_by_name(procs):
    """time_usec would be simulation time while TIMESYNC is answered on the system clock:
    the bridge says so by name and sends nothing (not even a HEARTBEAT)."""
    vehicle = Px4VehicleStandIn(free_udp_port())
    try:
        bridge = procs.start(
            "mocap4r2_tools",
            "px4_bridge",
            name="px4_bridge",
            namespace="/px4_sim_time",
            params={
                "body": "drone",
                "connection": f"udpout:127.0.0.1:{vehicle.port}",
                "connect_timeout": 1.0,
                "use_sim_time": True,
            },
        )
        wait(lambda: "use_sim_time is true: refused" in bridge.log(), 30.0, "the refusal in the log")
        time.sleep(1.5)  # the bridge would have sent its first HEARTBEAT by now
        assert bridge.popen.poll() is None, bridge.log()[-2000:]  # refused, not dead
        assert vehicle.messages() == []
    finally:
        vehicle.close()
