"""A control plane for the web panel's tests, as real processes on loopback: a simulated
system (one body always tracked, one that loses tracking 1.5 s in every 4 s, a walking
skeleton), a session recorder, and two web panels (one on loopback without a token, one
that requires the token of a file)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import ProcessRunner, wait_for

SIM = ("mocap4r2_drivers", "simulated_system")
REC = ("mocap4r2_tools", "session_recorder")
PANEL = ("mocap4r2_tools", "web_panel")
SYSTEM, RECORDER, IDLE = "/web/sim", "/web/session_recorder", "/idle/sim"
TOKEN = "test-token-0123456789abcdef"
#: the URL the panel prints (its token optional here, so that a panel that prints none is
#: found and then fails the tests that want one)
URL_LINE = re.compile(r"web_panel: open (https?://(\[[^\]]+\]|[^:/\s]+):(\d+)/)(?:\?token=(\S+))?")
#: the token of each panel, by its base URL (the tests' requests carry it)
TOKENS: dict[str, str] = {}

SCENE = {
    "seed": 3,
    "rate": 120.0,
    "dropped_frames": 0.0,
    "occlusion": 0.0,
    "unlabeled_markers": 2,
    "rigid_bodies": [
        {
            "name": "box",
            "id": 1,
            "markers": [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]],
            "trajectory": {"type": "circle", "center": [0, 0, 1], "radius": 1.0, "period": 4.0},
        },
        {
            "name": "hider",
            "id": 2,
            "markers": [[0.2, 0, 0], [0, 0.2, 0], [0.1, 0.1, 0]],
            "trajectory": {"type": "static", "position": [1, -1, 0.5]},
            "tracking_loss": {"every": 4.0, "duration": 1.5},
        },
        # two bodies 4 cm apart: their names, drawn beside them, would overlap
        {
            "name": "twin_a",
            "id": 3,
            "markers": [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]],
            "trajectory": {"type": "static", "position": [-1.0, 1.0, 1.0]},
        },
        {
            "name": "twin_b",
            "id": 4,
            "markers": [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]],
            "trajectory": {"type": "static", "position": [-1.03, 1.02, 1.02]},
        },
    ],
    "skeletons": [
        {
            "name": "walker",
            "id": 1,
            "template": "human",
            "trajectory": {"type": "circle", "center": [0, 0, 0], "radius": 2.0, "period": 30.0},
        }
    ],
}


def listed(url: str) -> set[str]:
    """The systems the panel at ``url`` lists (none while it does not answer)."""
    import json
    import urllib.request

    headers = {"Authorization": f"Bearer {TOKENS[url]}"} if url in TOKENS else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url + "api/systems", headers=headers), timeout=5
        ) as response:
            return {row["system"] for row in json.load(response)}
    except OSError:
        return set()


def printed_urls(proc: Any, timeout: float = 60) -> list[re.Match[str]]:
    """Every ``web_panel: open <url>`` line the panel printed (waiting for the first)."""
    wait_for(lambda: URL_LINE.search(proc.log()), timeout, proc.log, what="the web panel printing its URL")
    return list(URL_LINE.finditer(proc.log()))


def panel_url(proc: Any) -> tuple[str, int]:
    """The first URL the panel printed (its base, noting its token) and its port."""
    match = printed_urls(proc)[0]
    if match.group(4):
        TOKENS[match.group(1)] = match.group(4)
    return match.group(1), int(match.group(3))


@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    tmp: Path = tmp_path_factory.mktemp("web")
    scene = tmp / "scene.yaml"
    scene.write_text(yaml.safe_dump(SCENE))
    sessions = tmp / "sessions"
    sessions.mkdir()
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    runner = ProcessRunner(tmp)
    panel = runner.start(*PANEL, name="web_panel", params={"port": 0, "sessions_dir": str(sessions)})
    locked = runner.start(
        *PANEL,
        name="web_panel_locked",
        params={"port": 0, "sessions_dir": str(sessions), "token_file": str(token_file)},
    )
    url, port = panel_url(panel)
    locked_url, locked_port = panel_url(locked)
    # a system that is never started, listed by the panel before the others: the page
    # must not show its (absent) frames once another system is active
    runner.start(*SIM, name="sim", namespace="/idle", params={"scene": str(scene)})
    wait_for(lambda: IDLE in listed(url), 60, what="the panel listing the idle system")
    runner.start(*SIM, name="sim", namespace="/web", params={"scene": str(scene)})
    runner.start(*REC, name="session_recorder", namespace="/web", params={"output_dir": str(sessions)})
    yield {
        "url": url,
        "port": port,
        "token": TOKENS.get(url),
        "locked_url": locked_url,
        "locked_port": locked_port,
        "sessions": sessions,
        "tmp": tmp,
        "panel": panel,
        "locked": locked,
        "runner": runner,
    }
    runner.stop_all()
