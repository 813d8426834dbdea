"""mocap4r2_drivers.common: address checks, ids from names and the report of bad input,
shared by the vendors."""

from __future__ import annotations

import logging

from mocap4r2_drivers.common import (
    ClientStats,
    ipv4_check,
    ipv4_problem,
    reject_input,
    stable_id,
    status_fields,
)


def test_ipv4_problems():
    assert ipv4_problem("192.168.1.10", "server_address") is None
    assert "server_address must be an IPv4 address like 192.168.1.10" in ipv4_problem(
        "motive-pc", "server_address"
    )
    assert ipv4_problem("256.1.1.1", "x") and ipv4_problem("1.2.3", "x")
    assert ipv4_problem("auto", "local_address", allow_auto=True) is None
    assert ipv4_problem("auto", "server_address") is not None
    assert "or auto" in ipv4_problem("motive-pc", "local_address", allow_auto=True)
    assert "not a multicast group" in ipv4_problem("10.0.0.1", "group", multicast=True)
    assert ipv4_check("group", multicast=True)("239.255.42.99") is None


def test_stable_id_depends_on_the_name_only_and_fits_an_int32():
    assert stable_id("robot1") == stable_id("robot1") != stable_id("robot2")
    assert all(0 <= stable_id(n) <= 0x7FFFFFFF for n in ("", "a", "subject/segment", "é" * 300))
    # CRC-32 of the UTF-8 name, top bit cleared: the value a restart or another machine gets too
    assert stable_id("robot1") == 610525864


def test_client_stats_start_at_zero_and_have_their_own_event_counts():
    a, b = ClientStats(), ClientStats()
    a.events["EventConnected"] = 1
    assert b.events == {} and a.frames == 0 and a.last_error == ""


def test_rejected_input_is_logged_once_per_kind_then_counted(caplog):
    log = logging.getLogger("mocap4r2.test_common")
    stats = ClientStats()
    caplog.set_level(logging.WARNING, logger=log.name)
    for i in range(1000):
        reject_input(stats, log, "foreign_packet", f"a packet from 10.0.0.{i % 250}")
    reject_input(stats, log, "malformed_packet", "a malformed packet (size 3)")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "ignored a packet from 10.0.0.0; further ones are counted (diagnostics: rejected_foreign_packet)",
        "ignored a malformed packet (size 3); further ones are counted "
        "(diagnostics: rejected_malformed_packet)",
    ]
    assert stats.rejected == {"foreign_packet": 1000, "malformed_packet": 1}
    assert stats.last_error == "ignored a malformed packet (size 3)", "the last thing dropped"
    assert stats.decode_errors == 0, "rejected input is not counted twice"


def test_status_fields_have_one_shape_for_every_system():
    stats = ClientStats(frames=12)
    log = logging.getLogger("mocap4r2.test_common")
    reject_input(stats, log, "foreign_packet", "a packet from 10.0.0.9")
    reject_input(stats, log, "broken_framing", "a broken header")
    fields = status_fields(
        {"server": "127.0.0.1:1510", "frames_received": stats.frames, "connected": True},
        stats,
        when_set={"duplicate_frames": 0, "conversion_errors": 3, "server_application": ""},
    )
    assert fields == {
        "server": "127.0.0.1:1510",
        "frames_received": "12",
        "connected": "True",
        "rejected_broken_framing": "1",
        "rejected_foreign_packet": "1",
        "conversion_errors": "3",
        "last_error": "ignored a broken header",
    }
    assert list(fields)[-1] == "last_error", "what went wrong last closes the list"
    assert status_fields({"server": "x"}) == {"server": "x"}, "no client: the fixed fields only"


def test_lower_timer_slack_applies_to_the_calling_thread_only():
    """The pacing threads (qtm_simulator's sender, replay's pacer) ask Linux for 1 us of
    timer slack so a sleep ends when asked; other threads keep theirs."""
    import ctypes
    import threading

    from mocap4r2_drivers.common import TIMER_SLACK_NS, lower_timer_slack

    libc = ctypes.CDLL(None)
    set_slack, get_slack = 29, 30  # PR_SET_TIMERSLACK, PR_GET_TIMERSLACK
    seen: dict[str, int] = {}

    def pacer() -> None:
        libc.prctl(set_slack, 50_000, 0, 0, 0)  # Linux's default, whatever was inherited
        seen["before"] = libc.prctl(get_slack, 0, 0, 0, 0)
        lower_timer_slack()
        seen["after"] = libc.prctl(get_slack, 0, 0, 0, 0)

    main_thread = libc.prctl(get_slack, 0, 0, 0, 0)
    thread = threading.Thread(target=pacer)
    thread.start()
    thread.join()
    assert (seen["before"], seen["after"]) == (50_000, TIMER_SLACK_NS)
    assert libc.prctl(get_slack, 0, 0, 0, 0) == main_thread


def test_wait_until_returns_at_due_never_before():
    """Stand-ins send and replay hands frames over when wait_until returns: never early,
    with the poll (spin) or with a plain sleep."""
    import time

    from mocap4r2_drivers.common import wait_until

    for spin in (0.0, 0.0003, 1.0):  # sleep only; sleep then poll; poll only
        due = time.monotonic() + 0.02
        assert wait_until(due, spin) is True
        assert time.monotonic() >= due


def test_wait_until_ends_early_on_wake_and_leaves_it_set():
    """A stand-in's sender re-plans when streaming changes or it stops: the wake ends the
    wait at once (not at the due time) and stays set for the caller to read."""
    import threading
    import time

    from mocap4r2_drivers.common import wait_until

    wake = threading.Event()
    timer = threading.Timer(0.05, wake.set)
    timer.start()
    began = time.monotonic()
    assert wait_until(began + 30.0, 0.0003, wake) is False
    assert time.monotonic() - began < 15.0  # far from the 30 s due time
    assert wake.is_set()
    timer.join()
    assert wait_until(time.monotonic() + 30.0, 0.0003, wake) is False  # already set: no wait


def test_wait_until_gives_up_at_the_limit():
    """Replay's pacer bounds each wait (so a pause request is seen); the limit before the
    due time ends the wait with False, not after the due time."""
    import time

    from mocap4r2_drivers.common import wait_until

    began = time.monotonic()
    assert wait_until(began + 30.0, 0.0003, None, began + 0.05) is False
    assert 0.05 <= time.monotonic() - began < 15.0
    past = time.monotonic() - 1.0
    assert wait_until(past, 0.0003, None, past) is True  # due already: True before the limit
