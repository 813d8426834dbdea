"""mocap4r2_tools.px4.timesync alone: the companion's side of MAVLink TIMESYNC driven
against the PX4 filter of the vehicle stand-in (test/fixtures/px4_vehicle.py, written
from PX4's Timesync.cpp) on simulated clocks and link delays, and the delay figures."""

from __future__ import annotations

import random

import pytest
from px4_vehicle import Px4Timesync

from mocap4r2_tools.px4.timesync import (
    MAX_RTT_NS,
    PX4_CONVERGENCE_ANSWERS,
    DelayWindow,
    TimesyncPeer,
    recommended_ev_delay_ms,
)

MS = 1_000_000  # ns


def exchange(
    peer: TimesyncPeer,
    px4: Px4Timesync,
    host_minus_vehicle_ns: int,
    t_vehicle_ns: int,
    up: int,
    hold: int,
    down: int,
):
    """One PX4 request answered by the peer: the request leaves the vehicle at
    ``t_vehicle_ns``, takes ``up`` ns to arrive, is held ``hold`` ns, and the answer takes
    ``down`` ns back."""
    arrival_host = t_vehicle_ns + up + host_minus_vehicle_ns
    reply = peer.on_timesync(0, t_vehicle_ns, arrival_host, arrival_host + hold)
    assert reply is not None and reply.ts1 == t_vehicle_ns
    back_vehicle_ns = t_vehicle_ns + up + hold + down
    px4.update(back_vehicle_ns // 1000, reply.tc1, reply.ts1)


def test_px4_converges_on_the_answers_to_the_true_offset():
    peer, px4 = TimesyncPeer(), Px4Timesync()
    host_minus_vehicle = 1_700_000_000 * 10**9 - 42 * 10**9  # Unix host, boot-clock vehicle
    rng = random.Random(3)
    t = 42 * 10**9
    for k in range(PX4_CONVERGENCE_ANSWERS + 50):
        delay = int(rng.uniform(0.1, 2.0) * MS)
        exchange(peer, px4, host_minus_vehicle, t, delay, int(rng.uniform(0.0, 1.0) * MS), delay)
        assert px4.converged == (k + 1 >= PX4_CONVERGENCE_ANSWERS)
        t += 100 * MS
    assert px4.converged and peer.vehicle_converged
    # sync_stamp of a host time gives the same instant on the vehicle's clock
    host_us = 1_700_000_123_456_789
    assert px4.sync_stamp(host_us, 0) == pytest.approx(host_us - host_minus_vehicle // 1000, abs=20)


def test_the_answer_is_stamped_midway_through_the_hold():
    """A request held 8 ms before the answer leaves: tc1 in the middle keeps PX4's
    symmetric-delay assumption exact; stamping the arrival would be 4 ms off."""
    peer, px4 = TimesyncPeer(), Px4Timesync()
    offset = 5 * 10**9
    t = 10**9
    for _ in range(PX4_CONVERGENCE_ANSWERS):
        exchange(peer, px4, offset, t, 500_000, 8 * MS, 500_000)
        t += 10 * MS
    assert px4.converged
    assert px4.sync_stamp(10**9, 0) == pytest.approx((10**12 - offset) // 1000, abs=2)


def test_slow_answers_do_not_count_towards_convergence():
    peer = TimesyncPeer()
    reply = peer.on_timesync(0, 1000, 5 * MS, 5 * MS + MAX_RTT_NS)
    assert reply is not None  # answered all the same: PX4 decides
    assert peer.requests_answered == 1 and peer.requests_answered_fast == 0


def test_own_requests_measure_round_trip_and_offset():
    peer = TimesyncPeer()
    vehicle_minus_host = -7 * 10**9
    for k, rtt in enumerate([4 * MS, 2 * MS, 3 * MS]):
        sent = 100 * 10**9 + k * 100 * MS
        request = peer.request(sent)
        assert (request.tc1, request.ts1) == (0, sent)
        vehicle_tc1 = sent + rtt // 2 + vehicle_minus_host
        assert peer.on_timesync(vehicle_tc1, sent, sent + rtt, sent + rtt) is None
    assert peer.rtt_ms == pytest.approx(3.0)
    assert peer.offset_s == pytest.approx(-7.0, abs=1e-9)
    assert peer.samples_used == 3


def test_answers_to_nothing_we_asked_are_ignored():
    peer = TimesyncPeer()
    peer.request(1_000)
    assert peer.on_timesync(5_000, 2_000, 3_000, 3_000) is None  # ts1 we never sent
    assert peer.on_timesync(-5, 1_000, 3_000, 3_000) is None  # negative tc1
    assert peer.on_timesync(5_000, 0, 3_000, 3_000) is None
    assert peer.ignored == 3 and peer.samples_used == 0 and peer.offset_s is None
    # an answer slower than PX4 would use is not used either
    peer.request(10**9)
    peer.on_timesync(10**9 + 5, 10**9, 10**9 + 2 * MAX_RTT_NS, 10**9 + 2 * MAX_RTT_NS)
    assert peer.samples_slow == 1 and peer.rtt_ms is None


def test_delay_window_is_bounded_and_skips_non_finite():
    window = DelayWindow(budget=100)
    for k in range(1000):
        window.add(k * 1e-3)
    window.add(float("nan"))
    assert len(window) == 100
    assert window.percentile(50) == pytest.approx(0.9495)
    assert DelayWindow().percentile(99) is None


def test_recommended_ev_delay():
    assert recommended_ev_delay_ms(True, 12.0, 2.0) == 0.0  # PX4 uses the capture time
    assert recommended_ev_delay_ms(False, 12.0, 2.0) == pytest.approx(13.0)
    assert recommended_ev_delay_ms(False, None, 2.0) is None
