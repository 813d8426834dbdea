"""The web panel's rules without ROS or a server: what a request from the page may hold,
who may talk to the panel, the token, the live frames' hand-off."""

from __future__ import annotations

import math
import threading

import pytest

from mocap4r2_tools.web_panel.core import (
    MAX_CLIENT_RATE,
    VALID_TRANSITIONS,
    AccessPolicy,
    History,
    LatestFrames,
    RequestError,
    body_row,
    host_names,
    is_loopback,
    listen_problem,
    load_token,
    machine_addresses,
    marker_rows,
    next_due,
    panel_urls,
    parse_control_request,
    parse_export,
    parse_rate,
    parse_transition,
    shown_number,
    system_status,
    token_file_warning,
)


def test_a_start_needs_a_session_id_the_recorder_accepts():
    assert parse_control_request(
        {"session_id": "trial-01", "systems": ["/sim/a", "/sim/a"]}, True
    ).systems == ("/sim/a",)
    for bad in ("", "a/b", "..", ".hidden", " x", "x" * 129, "a\x00b"):
        with pytest.raises(RequestError):
            parse_control_request({"session_id": bad, "systems": []}, True)
    # a STOP may leave it empty
    assert parse_control_request({"session_id": "", "systems": []}, False).session_id == ""
    with pytest.raises(RequestError, match="at most"):
        parse_control_request({"session_id": "t", "systems": [f"/s{i}" for i in range(65)]}, True)


def test_transitions_and_exports_are_checked():
    assert parse_transition({"system": "/a/b", "transition": "activate"}, ["/a/b"]) == ("/a/b", "activate")
    with pytest.raises(RequestError, match="transition"):
        parse_transition({"system": "/a/b", "transition": "shutdown"}, ["/a/b"])
    with pytest.raises(RequestError, match="announced"):
        parse_transition({"system": "/a/c", "transition": "activate"}, ["/a/b"])
    assert parse_export("t1", "trc", "") == ("t1", "trc", None)
    with pytest.raises(RequestError):
        parse_export("t1", "exe", None)
    with pytest.raises(RequestError):
        parse_export("t1", "csv", "/bad name")


def test_a_rate_is_finite_positive_and_clamped():
    assert parse_rate(1000) == MAX_CLIENT_RATE
    assert parse_rate("10") == 10.0
    for bad in ("nan", "inf", 0, -1, None, "x"):
        with pytest.raises(RequestError):
            parse_rate(bad)


def test_the_policy_refuses_other_hosts_and_origins_and_wrong_tokens():
    policy = AccessPolicy(port=8080, token="s3cret-token-0123")
    assert policy.host_problem("127.0.0.1:8080") is None
    assert policy.host_problem("localhost:8080") is None
    assert policy.host_problem("[::1]:8080") is None
    for bad in (
        "evil.example:8080",
        None,
        "",
        "127.0.0.1:8081",
        "127.0.0.1",
        "127.0.0.1:x",
        "[::1",
        "a" * 400,
    ):
        assert policy.host_problem(bad) is not None, bad
    assert policy.origin_problem(None, "127.0.0.1:8080", None) is None
    assert policy.origin_problem("http://127.0.0.1:8080", "127.0.0.1:8080", "same-origin") is None
    assert policy.origin_problem("http://evil.example", "127.0.0.1:8080", None) is not None
    assert policy.origin_problem("null", "127.0.0.1:8080", None) is not None
    assert policy.origin_problem(None, "127.0.0.1:8080", "cross-site") is not None
    assert (
        policy.token_ok("s3cret-token-0123") and not policy.token_ok("s3cret") and not policy.token_ok(None)
    )


def test_a_token_is_required_always_and_generated_when_not_given(tmp_path):
    """Issue 39: on loopback no token was required at all."""
    token, source = load_token("")
    assert token and len(token) >= 24 and source == "generated"
    assert load_token("")[0] != token
    assert not AccessPolicy(port=1, token=token).token_ok(None)
    assert not AccessPolicy(port=1, token=token).token_ok("")
    path = tmp_path / "token"
    path.write_text("abcdefghijklmnopq\n")
    path.chmod(0o600)
    assert load_token(str(path)) == ("abcdefghijklmnopq", f"read from {path}")
    assert token_file_warning(str(path)) is None
    path.chmod(0o644)
    assert "other users" in (token_file_warning(str(path)) or "")
    for bad in ("short", "has a space in it here", "x" * 300):
        path.write_text(bad)
        with pytest.raises(ValueError):
            load_token(str(path))


def test_on_every_interface_ip_literals_pass_and_only_the_machines_names():
    """A DNS-rebinding page arrives with its own name in Host; an IP literal cannot be
    rebound. Issue 39: on 0.0.0.0 any Host was accepted."""
    names = host_names("0.0.0.0", ["panel.lab.example"], ["labpc", "labpc.lab.example", "192.0.2.2"])
    policy = AccessPolicy(port=8080, token="t" * 16, names=names, any_address=True)
    for good in ("192.0.2.2:8080", "10.0.0.5:8080", "[fe80::1]:8080", "labpc:8080", "PANEL.lab.example:8080"):
        assert policy.host_problem(good) is None, good
    for bad in ("evil.example:8080", "labpc.evil.example:8080", "192.0.2.2:9999"):
        assert policy.host_problem(bad) is not None, bad
    # on loopback the machine's names are not this panel's (it cannot be reached by them)
    assert host_names("127.0.0.1", (), ["labpc"]) == ("127.0.0.1", "::1", "localhost")
    # on one address: that address and the machine's names
    assert "192.0.2.2" in host_names("192.0.2.2", (), ["labpc"])


def test_beyond_loopback_plain_http_needs_the_flag_and_is_warned_about():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    assert listen_problem("127.0.0.1", False, False) == (None, None)
    assert listen_problem("localhost", False, False) == (None, None)
    assert listen_problem("0.0.0.0", True, False) == (None, None)
    refusal, warning = listen_problem("0.0.0.0", False, False)
    assert refusal and "--certfile" in refusal and "--allow-plain-http" in refusal and warning is None
    refusal, warning = listen_problem("192.0.2.2", False, True)
    assert refusal is None and warning and "in the clear" in warning


def test_the_printed_urls_work_from_another_machine_and_carry_the_token():
    """Issue 39: on 0.0.0.0 the panel printed a 127.0.0.1 URL."""
    urls = panel_urls(
        "0.0.0.0",
        8080,
        "TOK",
        False,
        addresses=["127.0.0.1", "192.0.2.2", "fe80::1", "2001:db8::5"],
        hostname="labpc",
    )
    assert urls == ["http://192.0.2.2:8080/?token=TOK", "http://labpc:8080/?token=TOK"]
    assert (
        panel_urls("::", 8443, "TOK", True, addresses=["2001:db8::5"])[0]
        == "https://[2001:db8::5]:8443/?token=TOK"
    )
    assert panel_urls("127.0.0.1", 8080, "TOK", False) == ["http://127.0.0.1:8080/?token=TOK"]
    assert panel_urls("0.0.0.0", 8080, "TOK", False, addresses=["127.0.0.1"], hostname="localhost") == [
        "http://127.0.0.1:8080/?token=TOK"
    ]


def test_the_machines_addresses_are_found_without_psutil():
    import socket

    import psutil  # a runtime dependency (requirements.txt), read here as the reference

    expected = {
        a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET
    }
    assert expected <= set(machine_addresses())


def test_the_status_colour_follows_the_lifecycle_state():
    """Issue 40: an unconfigured system reporting OK was shown as a green OK."""
    assert system_status("unconfigured", 0, "unconfigured: not streaming")[0] == "idle"
    assert system_status("inactive", 0, "")[0] == "idle"
    assert "not recording" in system_status("inactive", 0, "", "recorder")[1]
    assert system_status("active", 0, "streaming at 120.0 Hz") == ("ok", "OK: streaming at 120.0 Hz")
    assert system_status("active", 1, "2 dropped frames")[0] == "warn"
    assert system_status("inactive", 2, "cannot connect")[0] == "error"
    assert system_status("active", -1, "")[0] == "waiting"
    assert VALID_TRANSITIONS["unconfigured"] == ("configure",)
    assert VALID_TRANSITIONS["active"] == ("deactivate",)
    assert "finalized" not in VALID_TRANSITIONS


def test_a_table_cell_shows_a_finite_number_or_nothing():
    # what /diagnostics sends for a system not streaming: latency "nan" (no frames yet)
    assert shown_number("nan") == "" and shown_number("inf") == "" and shown_number("-inf") == ""
    assert shown_number("") == "" and shown_number(None) == "" and shown_number("fast") == ""
    assert shown_number("12.500") == "12.500" and shown_number("0") == "0"


def test_the_history_keeps_the_last_minute_bounded():
    history = History(window=60.0, max_points=50, max_systems=2)
    for i in range(200):  # 200 s of 1 Hz diagnostics
        history.add(
            "/a", float(i), {"rate_hz": "120.0", "latency_mean_ms": "nan", "tracking_ratio/x": "0.5",
                             "tracking_ratio/y": "1.0"},
        )  # fmt: skip
    series = history.series("/a", 199.0)
    assert len(series["age"]) == 50 and max(series["age"]) <= 60.0  # the count bound bites first
    assert series["rate"][-1] == 120.0 and series["latency"][-1] is None and series["tracking"][-1] == 75.0
    assert history.series("/a", 400.0)["age"] == []  # nothing older than the window is shown
    # at most max_systems systems: the one heard from least recently makes room
    history.add("/b", 200.0, {})
    history.add("/c", 201.0, {"rate_hz": "1"})
    assert history.series("/a", 201.0)["age"] == []
    assert history.series("/b", 201.0)["age"] == [1.0] and history.series("/c", 201.0)["rate"] == [1.0]


def test_frames_are_rounded_bounded_and_nan_free():
    rows, occluded = marker_rows([(1.234567, math.nan, 0.0, True)] * 3000)
    assert len(rows) == 2000 and rows[0] == [1.2346, None, 0.0] and occluded[0] is True
    row = body_row("b" * 100, 3, (0.0, 1.0, math.inf), (0, 0, 0, 1), False)
    assert len(row["name"]) == 64 and row["p"][2] is None and row["tracked"] is False


def test_latest_frames_keep_one_slot_per_system_under_concurrent_writers():
    frames = LatestFrames(max_systems=2)

    def write(n: int) -> None:
        for i in range(2000):
            frames.put(f"/s{n}", "markers", i)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(frames.systems()) == 2
    assert frames.get(frames.systems()[0])["markers"][0] == 1999


def test_clients_at_one_rate_are_due_together_on_the_clock_grid():
    period = 1.0 / MAX_CLIENT_RATE
    # two clients waking anywhere within one period are due at the same instant
    base = 12345.0 * period
    dues = {next_due(base + f * period, period) for f in (0.001, 0.3, 0.7, 0.999)}
    assert len(dues) == 1
    due = dues.pop()
    assert math.isclose(due, base + period)
    # always ahead of now, by at most one period, whatever the send before it took
    for now in (0.0, 0.01, 1.2345, 1e6 + 0.5, 1.7e9 + 0.123):
        due = next_due(now, period)
        assert now < due <= now + period + 1e-9
        # a client at another rate has a grid of its own
        assert next_due(now, 0.1) - now <= 0.1 + 1e-9
