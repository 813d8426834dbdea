"""The web panel's JSON API, WebSocket and security, over real HTTP on loopback, against a
real control plane (a simulated system and a session recorder as processes); covers
``server.py``, ``ros_side.py`` and ``node.py``."""

from __future__ import annotations

import asyncio
import io
import json
import time
import zipfile
from typing import Any

import aiohttp
import pytest
from support import wait_for
from web_plane import RECORDER, SYSTEM, TOKEN, panel_url

from mocap4r2_tools.web_panel.command import WebCommand

SESSION = "web-api-01"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def _request(method: str, url: str, **kwargs: Any) -> tuple[int, Any, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as http,
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


def test_a_request_without_the_token_is_refused(plane, url):
    locked = plane["locked_url"]
    status, answer, _ = request("GET", locked + "api/systems")
    assert status == 401 and "token" in answer["error"]
    status, answer, _ = request(
        "GET", locked + "api/systems", headers={"Authorization": "Bearer wrong-token-000000"}
    )
    assert status == 401
    status, answer, _ = request("POST", locked + "api/start", json={"session_id": "x", "systems": []})
    assert status == 401
    status, rows, _ = request("GET", locked + "api/systems", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and isinstance(rows, list)
    # the page opened with ?token= gets a same-site cookie and a URL without the token
    status, _, headers = request("GET", locked + f"?token={TOKEN}")
    assert status == 302 and headers["Location"] == "/"
    assert "SameSite=Strict" in headers["Set-Cookie"] and "HttpOnly" in headers["Set-Cookie"]
    status, _, _ = request("GET", locked, cookies={"mocap4r2_panel_token": TOKEN})
    assert status == 200


def test_cross_site_requests_are_refused(url, plane):
    port = plane["port"]
    before = len(request("GET", url + "api/log")[1])
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": f"http://evil.example:{port}"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Host": f"evil.example:{port}"},  # a rebound DNS name pointing at 127.0.0.1
    ):
        status, answer, _ = request(
            "POST", url + "api/start", json={"session_id": "evil", "systems": [SYSTEM]}, headers=headers
        )
        assert status == 403, (headers, answer)
    assert len(request("GET", url + "api/log")[1]) == before, "a refused request reached the control plane"
    status, _, _ = request("GET", url + "api/systems", headers={"Origin": f"http://127.0.0.1:{port}"})
    assert status == 200
    status, _, headers = request("GET", url)
    assert "default-src 'self'" in headers["Content-Security-Policy"] and headers["X-Frame-Options"] == "DENY"


async def _websockets(url: str, port: int) -> dict[str, Any]:
    ws_url = url.replace("http://", "ws://") + "ws"
    results: dict[str, Any] = {}
    # limit=0: aiohttp's client would otherwise hold the 101st connection back
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        # cross-site WebSocket: refused before the upgrade
        try:
            async with http.ws_connect(ws_url, headers={"Origin": "http://evil.example"}):
                results["cross_site"] = "opened"
        except aiohttp.WSServerHandshakeError as exc:
            results["cross_site"] = exc.status
        healthy = await http.ws_connect(ws_url)
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
            ws = await http.ws_connect(ws_url)
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
        async with http.get(url + "api/systems") as response:
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
    assert {b["name"] for b in frame["bodies"]} == {"box", "hider"}
    assert frame["segments"] and frame["markers"]
    assert results["systems_status"] == 200 and results["healthy_open"]
    assert plane["panel"].alive()


async def _frames_of_clients_at_one_rate(url: str, count: int, seconds: float) -> list[list[tuple]]:
    """Each client's frames (number, encoding time) while ``count`` clients at 30/s watch."""
    ws_url = url.replace("http://", "ws://") + "ws"
    got: list[list[tuple]] = [[] for _ in range(count)]
    async with aiohttp.ClientSession() as http:
        sockets = [await http.ws_connect(ws_url) for _ in range(count)]
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
    cli = str(INSTALL / "mocap4r2_control" / "bin" / "mocap4r2")
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
