"""The web panel's rules without ROS or a server: what a request from the page may hold,
who may talk to the panel, the token, the live frames' hand-off."""

from __future__ import annotations

import math
import threading

import pytest

from mocap4r2_tools.web_panel.core import (
    MAX_CLIENT_RATE,
    AccessPolicy,
    LatestFrames,
    RequestError,
    body_row,
    is_loopback,
    load_token,
    marker_rows,
    next_due,
    parse_control_request,
    parse_export,
    parse_rate,
    parse_transition,
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
    assert policy.host_problem("evil.example:8080") is not None
    assert policy.host_problem(None) is not None
    assert policy.origin_problem(None, "127.0.0.1:8080", None) is None
    assert policy.origin_problem("http://127.0.0.1:8080", "127.0.0.1:8080", "same-origin") is None
    assert policy.origin_problem("http://evil.example", "127.0.0.1:8080", None) is not None
    assert policy.origin_problem("null", "127.0.0.1:8080", None) is not None
    assert policy.origin_problem(None, "127.0.0.1:8080", "cross-site") is not None
    assert (
        policy.token_ok("s3cret-token-0123") and not policy.token_ok("s3cret") and not policy.token_ok(None)
    )
    assert AccessPolicy(port=1).token_ok(None)
    # on every interface any Host is accepted, only with a token
    assert AccessPolicy(port=8080, token="t" * 16, any_host=True).host_problem("10.0.0.5:8080") is None
    assert AccessPolicy(port=8080, any_host=True).host_problem("10.0.0.5:8080") is not None


def test_a_token_is_required_beyond_loopback(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    assert load_token("127.0.0.1", "") == (None, "none (loopback only)")
    token, source = load_token("0.0.0.0", "")
    assert token and len(token) >= 24 and source == "generated"
    path = tmp_path / "token"
    path.write_text("abcdefghijklmnopq\n")
    assert load_token("127.0.0.1", str(path))[0] == "abcdefghijklmnopq"
    path.write_text("short")
    with pytest.raises(ValueError):
        load_token("0.0.0.0", str(path))


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
