"""The web panel's JSON API, WebSocket and security, over real HTTP on loopback, against a
real control plane (a simulated system and a session recorder as processes); covers
``server.py``, ``ros_side.py`` and ``node.py``."""

from __future__ import annotations

import asyncio
import io
import json
import math
import time
import zipfile
from typing import Any

import aiohttp
import pytest
from support import wait_for
from web_plane import IDLE, PANEL, RECORDER, SYSTEM, TOKEN, TOKENS, panel_url, printed_urls

from mocap4r2_tools.web_panel.command import WebCommand

SESSION = "web-api-01"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


#: ``token=NO_TOKEN``: a request that carries none
NO_TOKEN = ""


def _auth(url: str, token: str | None) -> dict[str, str]:
    """The Authorization header of a request to ``url``: its panel's token (``token``
    None), the one given, or none (``NO_TOKEN``)."""
    if token is None:
        token = next((t for base, t in TOKENS.items() if url.startswith(base)), NO_TOKEN)
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _request(
    method: str, url: str, token: str | None = None, ssl: Any = None, **kwargs: Any
) -> tuple[int, Any, dict[str, str]]:
    kwargs["headers"] = {**_auth(url, token), **kwargs.get("headers", {})}
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl if ssl is not None else True)) as http,
        http.request(method, url, allow_redirects=False, **kwargs) as response,
    ):
        body = await response.read()
        try:
            data: Any = json.loads(body)
        except ValueError:
            data = body
        return response.status, data, dict(response.headers)


def request(method: str, url: str, **kwargs: Any) -> tuple[int, Any, dict[str, str]]:
    return run(_request(method, url, **kwargs))


def systems(url: str) -> dict[str, dict[str, Any]]:
    status, rows, _ = request("GET", url + "api/systems")
    assert status == 200, rows
    return {row["system"]: row for row in rows}


@pytest.fixture(scope="module")
def url(plane) -> str:
    wait_for(lambda: {SYSTEM, RECORDER} <= set(systems(plane["url"])), 60, what="both systems listed")
    return plane["url"]


def test_systems_lists_every_announced_system_with_its_fields(url):
    rows = systems(url)
    for field in ("system", "type", "state", "rate", "session", "level"):
        assert field in rows[SYSTEM], field
    assert rows[SYSTEM]["type"] == "sim"
    assert isinstance(rows[SYSTEM]["rate"], float)  # the nominal rate, 0 until configured
    assert rows[RECORDER]["type"] == "recorder"
    assert rows[SYSTEM]["live"] is True
    # what the page shows: the status by state and /diagnostics, the transitions the
    # state allows, and the last minute's history
    row = rows[SYSTEM]
    assert row["status"]["tone"] in ("ok", "warn", "error", "idle", "waiting")
    if row["state"] != "active":
        assert row["status"]["tone"] in ("idle", "error", "warn"), row["status"]
    assert row["transitions"] == {
        "unconfigured": ["configure"],
        "inactive": ["activate"],
        "active": ["deactivate"],
    }.get(row["state"], [])
    assert set(row["history"]) == {"age", "rate", "latency", "tracking"}


def test_a_system_not_streaming_sends_no_nan_for_the_page_to_show(url):
    """An unconfigured (or, after the browser tests, inactive) system reports
    ``latency_mean_ms: nan`` on /diagnostics (no frames in its window). The page shows a
    cell's text as sent, or "-" for an empty one, so the row must carry "" there, never
    "nan" (issue 40's panel: the idle system's latency cell read "nan")."""
    wait_for(lambda: systems(url)[IDLE]["level"] >= 0, 30, what="the idle system's /diagnostics")
    row = systems(url)[IDLE]
    assert row["state"] != "active", row
    assert row["latency_ms"] == "", row
    for key in ("measured_rate", "latency_ms", "dropped"):
        value = row[key]
        assert value == "" or math.isfinite(float(value)), (key, row)


def test_start_and_stop_answer_with_every_ack_and_the_recording_can_be_exported(url, plane):
    status, answer, _ = request(
        "POST", url + "api/start", json={"session_id": SESSION, "systems": [SYSTEM, RECORDER]}
    )
    assert status == 200, answer
    acks = {a["system"]: a for a in answer["acks"]}
    assert set(acks) == {SYSTEM, RECORDER} and answer["ok"], answer
    assert "recording to" in acks[RECORDER]["message"] and acks[RECORDER]["recorder"]
    wait_for(lambda: systems(url)[SYSTEM]["state"] == "active", 10, what="the system active")
    assert systems(url)[SYSTEM]["session"] == SESSION
    time.sleep(1.5)
    status, answer, _ = request(
        "POST", url + "api/stop", json={"session_id": "", "systems": [SYSTEM, RECORDER]}
    )
    assert status == 200 and answer["ok"], answer
    recorder = next(a for a in answer["acks"] if a["system"] == RECORDER)
    assert "messages per topic" in recorder["message"], recorder
    status, sessions, _ = request("GET", url + "api/sessions")
    assert status == 200 and SESSION in [s["session"] for s in sessions], sessions
    # the acks are kept for the page
    status, log, _ = request("GET", url + "api/log")
    assert [entry["command"] for entry in log[-2:]] == ["START", "STOP"]

    status, c3d, headers = request("GET", url + "api/export", params={"session": SESSION, "format": "c3d"})
    assert status == 200, c3d
    assert c3d[1] == 0x50, "a C3D file's second byte is its key 0x50"
    assert "attachment" in headers["Content-Disposition"]
    status, trc, _ = request("GET", url + "api/export", params={"session": SESSION, "format": "trc"})
    assert status == 200 and trc.startswith(b"PathFileType"), trc[:40]
    status, csv, _ = request("GET", url + "api/export", params={"session": SESSION, "format": "csv"})
    assert status == 200
    if csv[:2] == b"PK":
        names = zipfile.ZipFile(io.BytesIO(csv)).namelist()
        assert all(n.endswith(".csv") for n in names) and names
    else:
        assert b"," in csv.splitlines()[0]


def test_lifecycle_buttons_go_through_the_lifecycle_services(url):
    status, answer, _ = request(
        "POST", url + "api/lifecycle", json={"system": SYSTEM, "transition": "configure"}
    )
    assert status == 200
    state = systems(url)[SYSTEM]["state"]
    if state == "unconfigured":
        assert answer["success"], answer
    for transition, reached in (("activate", "active"), ("deactivate", "inactive")):
        status, answer, _ = request(
            "POST", url + "api/lifecycle", json={"system": SYSTEM, "transition": transition}
        )
        assert status == 200 and answer["success"], answer
        wait_for(lambda r=reached: systems(url)[SYSTEM]["state"] == r, 10, what=f"the system {reached}")
    # asked in the wrong state: refused, nothing changes
    status, answer, _ = request(
        "POST", url + "api/lifecycle", json={"system": SYSTEM, "transition": "deactivate"}
    )
    assert status == 200 and not answer["success"]
    status, answer, _ = request(
        "POST", url + "api/lifecycle", json={"system": "/nobody", "transition": "activate"}
    )
    assert status == 400 and "has not announced" in answer["error"]


def test_bad_requests_from_the_page_are_refused_with_the_reason(url):
    cases = [
        ({"session_id": "a" * 129, "systems": []}, "more than 128"),
        ({"session_id": "../etc", "systems": []}, "path separator"),
        ({"session_id": "..", "systems": []}, "'..'"),
        ({"session_id": "bad\x07id", "systems": []}, "control character"),
        ({"session_id": "", "systems": []}, "empty"),
        ({"session_id": "ok", "systems": "/web/sim"}, "list"),
        ({"session_id": "ok", "systems": ["not a node"]}, "fully qualified"),
        ({"session_id": "ok", "systems": [7]}, "string"),
        ({"session_id": "ok", "extra": 1}, "unknown fields"),
        (["not", "an", "object"], "JSON object"),
    ]
    for body, reason in cases:
        status, answer, _ = request("POST", url + "api/start", json=body)
        assert status == 400 and reason in answer["error"], (body, answer)
    status, answer, _ = request(
        "POST", url + "api/start", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert status == 400 and "not JSON" in answer["error"]
    status, answer, _ = request("GET", url + "api/export", params={"session": "../../x", "format": "c3d"})
    assert status == 400
    status, answer, _ = request("GET", url + "api/export", params={"session": "nosuch", "format": "c3d"})
    assert status == 400 and "no session" in answer["error"]
    status, answer, _ = request("GET", url + "static/..%2Fcore.py")
    assert status == 404


def test_a_one_megabyte_session_id_is_refused_and_the_panel_goes_on(url):
    body = json.dumps({"session_id": "x" * (1 << 20), "systems": []})
    status, answer, _ = request(
        "POST", url + "api/start", data=body, headers={"Content-Type": "application/json"}
    )
    assert status == 413, answer
    assert SYSTEM in systems(url)
    status, log, _ = request("GET", url + "api/log")
    assert all(len(entry["session_id"]) <= 128 for entry in log)


def test_a_flood_of_requests_aiohttp_cannot_parse_leaves_a_few_log_lines(plane, url):
    """aiohttp logs a traceback at ERROR for each request it cannot parse (here a header
    line over its 8 KiB limit, answered 400): 200 of them wrote 200 tracebacks, about
    2.5 kB each, into the panel's log. They are counted and summed up in one line per
    period instead, and the panel goes on answering."""
    import socket

    host, port = "127.0.0.1", plane["port"]
    before = len(plane["panel"].log())
    for _ in range(200):
        with socket.create_connection((host, port), timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n")
            assert b" 400 " in conn.recv(64)
    assert SYSTEM in systems(url)
    wait_for(lambda: "could not parse" in plane["panel"].log()[before:], 10, what="the summary line")
    written = plane["panel"].log()[before:]
    assert "Traceback" not in written and written.count("LineTooLong") <= 2, written[:3000]
    assert len(written) < 2000, len(written)


def test_a_request_without_the_token_is_refused_on_loopback_too(plane, url):
    """Issue 39: on loopback the panel took no token and requests without Origin, so any
    local user or process could START/STOP sessions with plain curl."""
    assert plane["token"], "the URL printed on loopback carries no token"
    before = len(request("GET", url + "api/log")[1])
    for method, path, body in (
        ("GET", "api/systems", None),
        ("GET", "api/sessions", None),
        ("POST", "api/start", {"session_id": "curl", "systems": [SYSTEM]}),
        ("POST", "api/stop", {"session_id": "", "systems": []}),
        ("POST", "api/lifecycle", {"system": SYSTEM, "transition": "deactivate"}),
    ):
        # curl: no token, no Origin
        status, answer, _ = request(method, url + path, token=NO_TOKEN, json=body)
        assert status == 401, (path, answer)
        assert "printed at start" in answer["error"], answer
        status, answer, _ = request(method, url + path, token="wrong-token-0123456789", json=body)
        assert status == 401, (path, answer)
    assert len(request("GET", url + "api/log")[1]) == before, "a refused request reached the control plane"
    # a browser without the token gets a page saying what to do (and where to paste it)
    status, page, headers = request("GET", url, token=NO_TOKEN)
    assert status == 401 and b"printed when it started" in page, page
    # the WebSocket too
    status = run(_ws_status(url.replace("http://", "ws://") + "ws", {}))
    assert status == 401


async def _ws_status(ws_url: str, headers: dict[str, str]) -> int | str:
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(ws_url, headers=headers):
                return "opened"
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def test_the_printed_url_sets_an_httponly_strict_cookie_of_the_panels_port(plane, url):
    token, port = plane["token"], plane["port"]
    status, _, headers = request("GET", url + f"?token={token}", token=NO_TOKEN)
    assert status == 302 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"mocap4r2_panel_token_{port}={token}"), cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, cookie
    assert "Secure" not in cookie  # plain HTTP on loopback: a Secure cookie would never come back
    status, page, _ = request("GET", url, token=NO_TOKEN, cookies={f"mocap4r2_panel_token_{port}": token})
    assert status == 200 and b"<canvas" in page
    # another panel's cookie (another port) is not this one's
    status, _, _ = request(
        "GET", url + "api/systems", token=NO_TOKEN, cookies={f"mocap4r2_panel_token_{port + 1}": token}
    )
    assert status == 401
    # a wrong ?token= sets no cookie
    status, _, headers = request("GET", url + "?token=wrong-token-0123456789", token=NO_TOKEN)
    assert status == 401 and "Set-Cookie" not in headers


def test_with_a_token_file_the_printed_url_carries_that_token_and_the_401_says_so(plane, url):
    """Issue 39: with ``token_file`` the printed URL had no token, yet the 401 said to open it."""
    locked, port = plane["locked_url"], plane["locked_port"]
    (match,) = printed_urls(plane["locked"])
    assert match.group(4) == TOKEN, match.group(0)
    assert "read from" in plane["locked"].log()
    status, answer, _ = request("GET", locked + "api/systems", token=NO_TOKEN)
    assert status == 401 and "printed at start" in answer["error"]
    status, answer, _ = request(
        "POST", locked + "api/start", token=NO_TOKEN, json={"session_id": "x", "systems": []}
    )
    assert status == 401
    status, rows, _ = request("GET", locked + "api/systems", token=TOKEN)
    assert status == 200 and isinstance(rows, list)
    # what the 401 says works: the printed URL opens the page
    status, _, headers = request("GET", match.group(0).split("open ", 1)[1], token=NO_TOKEN)
    assert status == 302 and f"mocap4r2_panel_token_{port}={TOKEN}" in headers["Set-Cookie"]


def test_cross_site_requests_are_refused(url, plane):
    port = plane["port"]
    before = len(request("GET", url + "api/log")[1])
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": f"http://evil.example:{port}"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Host": f"evil.example:{port}"},  # a rebound DNS name pointing at 127.0.0.1
        {"Host": f"127.0.0.1:{port + 1}"},
        {"Host": "127.0.0.1"},
    ):
        status, answer, _ = request(
            "POST", url + "api/start", json={"session_id": "evil", "systems": [SYSTEM]}, headers=headers
        )
        # refused although the request carries the token
        assert status == 403, (headers, answer)
    assert len(request("GET", url + "api/log")[1]) == before, "a refused request reached the control plane"
    status, _, _ = request("GET", url + "api/systems", headers={"Origin": f"http://127.0.0.1:{port}"})
    assert status == 200
    status, _, headers = request("GET", url)
    assert "default-src 'self'" in headers["Content-Security-Policy"] and headers["X-Frame-Options"] == "DENY"


async def _websockets(url: str, port: int) -> dict[str, Any]:
    ws_url = url.replace("http://", "ws://") + "ws"
    auth = _auth(url, None)
    results: dict[str, Any] = {}
    # limit=0: aiohttp's client would otherwise hold the 101st connection back
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        # cross-site WebSocket: refused before the upgrade
        try:
            async with http.ws_connect(ws_url, headers={"Origin": "http://evil.example", **auth}):
                results["cross_site"] = "opened"
        except aiohttp.WSServerHandshakeError as exc:
            results["cross_site"] = exc.status
        healthy = await http.ws_connect(ws_url, headers=auth)
        await healthy.send_str(json.dumps({"system": SYSTEM, "rate": 1000}))  # clamped to 30
        await healthy.send_str("{not json")
        # the healthy client reads all the time (one that does not is closed as slow)
        received: list[tuple[float, dict[str, Any]]] = []

        async def read() -> None:
            async for message in healthy:
                received.append((time.monotonic(), json.loads(message.data)))

        reader = asyncio.create_task(read())
        # 100 clients asking for frames, then dropped
        others = []
        for _ in range(100):
            ws = await http.ws_connect(ws_url, headers=auth)
            await ws.send_str(json.dumps({"system": SYSTEM, "rate": 30}))
            others.append(ws)
        await asyncio.sleep(1.0)
        # half dropped dead (the connection reset), half left open but never read (slow
        # clients whose socket buffers fill up)
        for n, ws in enumerate(others):
            transport = ws._writer.transport
            if n % 2:
                transport.abort()
            else:
                transport.pause_reading()
        dropped = time.monotonic()
        await asyncio.sleep(3.0)
        results["bad_message"] = next(d for _, d in received if d.get("type") == "error")
        results["frames"] = [d for when, d in received if when > dropped and d.get("type") == "frame"]
        results["healthy_open"] = not healthy.closed
        started = time.monotonic()
        async with http.get(url + "api/systems", headers=auth) as response:
            results["systems_status"] = response.status
        results["systems_seconds"] = time.monotonic() - started
        await healthy.close()
        reader.cancel()
        for ws in others:
            ws._writer.transport.abort()
    return results


def test_a_hundred_websocket_clients_dropped_do_not_stop_the_others(url, plane):
    request("POST", url + "api/start", json={"session_id": "web-ws", "systems": [SYSTEM]})
    wait_for(lambda: systems(url)[SYSTEM]["state"] == "active", 10, what="the system active")
    results = run(_websockets(url, plane["port"]))
    assert results["cross_site"] == 403
    assert "JSON object" in results["bad_message"]["error"]
    frames = results["frames"]
    # 120 Hz in, at most 30 per second out (3 s: at most ~90), and they keep coming
    assert 20 <= len(frames) <= 100, len(frames)
    numbers = [f["frame"] for f in frames]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    frame = frames[-1]
    assert {b["name"] for b in frame["bodies"]} == {"box", "hider", "twin_a", "twin_b"}
    assert frame["segments"] and frame["markers"]
    assert results["systems_status"] == 200 and results["healthy_open"]
    assert plane["panel"].alive()


async def _frames_of_clients_at_one_rate(url: str, count: int, seconds: float) -> list[list[tuple]]:
    """Each client's frames (number, encoding time) while ``count`` clients at 30/s watch."""
    ws_url = url.replace("http://", "ws://") + "ws"
    got: list[list[tuple]] = [[] for _ in range(count)]
    async with aiohttp.ClientSession() as http:
        sockets = [await http.ws_connect(ws_url, headers=_auth(url, None)) for _ in range(count)]
        for ws in sockets:
            await ws.send_str(json.dumps({"system": SYSTEM, "rate": 30}))
        await asyncio.sleep(0.5)  # every client has chosen the system
        started = time.time()

        async def read(index: int, ws: aiohttp.ClientWebSocketResponse) -> None:
            end = time.monotonic() + seconds
            while (left := end - time.monotonic()) > 0:
                try:
                    message = await ws.receive(timeout=left)
                except TimeoutError:
                    break
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                frame = json.loads(message.data)
                if frame.get("type") == "frame":
                    got[index].append((frame["frame"], frame["sent"]))

        await asyncio.gather(*(read(i, ws) for i, ws in enumerate(sockets)))
        for ws in sockets:
            await ws.close()
    # the frames encoded well inside the window (the first and last due instants may
    # fall on either side of a client's read)
    return [[f for f in frames if started + 0.2 <= f[1] <= started + seconds - 0.2] for frames in got]


def test_clients_at_one_rate_get_the_same_frames_taken_and_encoded_once(url):
    """Clients due at the same instant share one take of the newest messages and one
    encoding: the panel's work per instant does not grow with its clients, and they all
    see the same frame (even when newer messages come in between their sends)."""
    request("POST", url + "api/start", json={"session_id": "web-shared", "systems": [SYSTEM]})
    wait_for(lambda: systems(url)[SYSTEM]["state"] == "active", 10, what="the system active")
    got = run(_frames_of_clients_at_one_rate(url, 3, 2.5))
    assert len(got[0]) >= 20, got[0]  # 120 Hz in, 30/s out
    assert got[1] == got[0] and got[2] == got[0]
    numbers = [n for n, _ in got[0]]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_mocap4r2_web_starts_the_panel(plane, url):
    import argparse

    from support import INSTALL

    parser = argparse.ArgumentParser()
    WebCommand().add_arguments(parser)
    assert parser.parse_args([]).port == 8080 and parser.parse_args([]).host == "127.0.0.1"
    flags = parser.parse_args(
        [
            "--certfile",
            "c.pem",
            "--keyfile",
            "k.pem",
            "--allow-plain-http",
            "--allow-host",
            "a",
            "--allow-host",
            "b",
        ]
    )
    assert (flags.certfile, flags.keyfile, flags.allow_plain_http, flags.allow_host) == (
        "c.pem",
        "k.pem",
        True,
        ["a", "b"],
    )
    cli = str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2")
    proc = plane["runner"].start_command(
        [cli, "web", "--port", "0", "--sessions-dir", str(plane["sessions"])], label="mocap4r2-web"
    )
    try:
        web_url, _ = panel_url(proc)
        wait_for(lambda: SYSTEM in systems(web_url), 30, what="mocap4r2 web listing the system")
        status, page, _ = request("GET", web_url)
        assert status == 200 and b"<canvas" in page
    finally:
        assert proc.stop() == 0


def _non_loopback_ipv4() -> list[str]:
    """This machine's IPv4 addresses beyond loopback, read by psutil (not by the code
    under test)."""
    import socket

    import psutil

    return [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]


def _self_signed(directory: Any, addresses: list[str]) -> tuple[str, str]:
    """A self-signed certificate (and its key) for localhost and ``addresses``, made by
    the openssl command line."""
    import shutil
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is missing (Debian: apt-get install openssl)")
    cert, key = directory / "panel.crt", directory / "panel.key"
    names = ",".join(["DNS:localhost", "IP:127.0.0.1", *(f"IP:{a}" for a in addresses)])
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
         "-addext", f"subjectAltName={names}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


def _start_panel(plane: dict[str, Any], name: str, **params: Any) -> Any:
    """Another panel process on a free port, with the plane's sessions."""
    return plane["runner"].start(
        *PANEL, name=name, params={"port": 0, "sessions_dir": str(plane["sessions"]), **params}
    )


def _exit_code(proc: Any, timeout: float = 60) -> int:
    wait_for(lambda: not proc.alive(), timeout, proc.log, what="the panel exiting")
    return proc.popen.returncode


def test_beyond_loopback_without_tls_the_panel_starts_only_when_told_and_warns(plane):
    """Issue 39: beyond loopback there was only plain HTTP, the token crossing the lab
    network in the clear."""
    refused = _start_panel(plane, "web_panel_open", host="0.0.0.0")
    assert _exit_code(refused) == 1, refused.log()
    assert "without TLS" in refused.log() and "--allow-plain-http" in refused.log(), refused.log()
    assert "web_panel: open" not in refused.log()


def test_on_every_interface_the_printed_urls_reach_the_panel_from_the_network_with_the_token(plane):
    """Issue 39: ``--host 0.0.0.0`` printed a 127.0.0.1 URL, of no use on a tablet."""
    addresses = _non_loopback_ipv4()
    if not addresses:
        pytest.fail("this machine has no address beyond loopback to reach the panel on")
    proc = _start_panel(plane, "web_panel_lan", host="0.0.0.0", allow_plain_http=True)
    try:
        matches = printed_urls(proc)
        hosts = [m.group(2) for m in matches]
        assert "127.0.0.1" not in hosts, hosts
        assert set(addresses) <= set(hosts), (addresses, hosts)
        assert all(m.group(4) and len(m.group(4)) >= 24 for m in matches), hosts
        assert "in the clear" in proc.log()
        port, token = int(matches[0].group(3)), matches[0].group(4)
        for m in matches:
            if m.group(2) not in addresses:
                continue  # the host name: it may not resolve here
            # what the tablet does: open the printed URL, then use the page's cookie
            printed = m.group(0).split("open ", 1)[1]
            status, _, headers = request("GET", printed, token=NO_TOKEN)
            assert status == 302 and "HttpOnly" in headers["Set-Cookie"], (printed, status)
            status, rows, _ = request(
                "GET",
                f"{m.group(1)}api/systems",
                token=NO_TOKEN,
                cookies={f"mocap4r2_panel_token_{port}": token},
            )
            assert status == 200 and isinstance(rows, list), rows
            status, _, _ = request("GET", f"{m.group(1)}api/systems", token=NO_TOKEN)
            assert status == 401
            # a rebound name is refused, token or not; an IP literal of this machine is not
            status, answer, _ = request(
                "GET", f"{m.group(1)}api/systems", token=token, headers={"Host": f"evil.example:{port}"}
            )
            assert status == 403 and "Host" in answer["error"], answer
    finally:
        assert proc.stop() == 0


def test_tls_serves_the_panel_over_https_with_a_secure_cookie(plane, tmp_path):
    import ssl

    addresses = _non_loopback_ipv4()
    cert, key = _self_signed(tmp_path, addresses)
    proc = _start_panel(plane, "web_panel_tls", host="0.0.0.0", certfile=cert, keyfile=key)
    try:
        matches = printed_urls(proc)
        assert all(m.group(1).startswith("https://") for m in matches), [m.group(0) for m in matches]
        assert "in the clear" not in proc.log()
        port, token = int(matches[0].group(3)), matches[0].group(4)
        trusted = ssl.create_default_context(cafile=cert)
        for m in matches:
            if m.group(2) not in addresses:
                continue
            printed = m.group(0).split("open ", 1)[1]
            status, _, headers = request("GET", printed, token=NO_TOKEN, ssl=trusted)
            assert status == 302, status
            assert "Secure" in headers["Set-Cookie"] and "HttpOnly" in headers["Set-Cookie"]
            status, rows, _ = request("GET", f"{m.group(1)}api/systems", token=token, ssl=trusted)
            assert status == 200 and isinstance(rows, list)
            # a client that does not trust the certificate does not get in
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                request("GET", f"{m.group(1)}api/systems", token=token)
            # nor does plain HTTP on the TLS port
            with pytest.raises(aiohttp.ClientError):
                request("GET", f"http://{m.group(2)}:{port}/api/systems", token=token)
    finally:
        assert proc.stop() == 0
    # a certificate that cannot be read: the panel says so and does not start
    bad = _start_panel(plane, "web_panel_badtls", host="0.0.0.0", certfile=str(tmp_path / "none.crt"))
    assert _exit_code(bad) == 1 and "cannot load the TLS certificate" in bad.log(), bad.log()
