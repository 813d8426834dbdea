"""Helpers of the Foxglove tests: Foxglove's own client (test/fixtures/foxglove_client,
@foxglove/ws-protocol, run by node) and the foxglove node started as its executable."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from shared_data import under_ci

ROOT = Path(__file__).resolve().parents[3]
CLIENT_DIR = ROOT / "test" / "fixtures" / "foxglove_client"
CLIENT = CLIENT_DIR / "client.js"


def require_client() -> str:
    """The node executable, once the client's packages are installed; where node or the
    packages are absent, skip naming why (fail under CI=true, where make setup installs
    them)."""
    node = shutil.which("node")
    if node is None:
        reason = "node is not installed: the Foxglove client (@foxglove/ws-protocol) cannot run"
    elif not (CLIENT_DIR / "node_modules" / "@foxglove" / "ws-protocol").is_dir():
        reason = f"{CLIENT_DIR}/node_modules is missing (make setup installs it with npm ci)"
    else:
        return node
    if under_ci():
        pytest.fail(f"{reason}; CI=true: make setup must have installed it")
    pytest.skip(reason)


def run_client(*args: str, stdin: str | None = None, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Run client.js with ``args`` and return its JSON lines."""
    node = require_client()
    done = subprocess.run(
        [node, str(CLIENT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=CLIENT_DIR,
    )
    assert done.returncode == 0, f"client.js {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def live_client(port: int, seconds: float, pattern: str = ".*", summary: bool = False) -> subprocess.Popen:
    """Start client.js live against the node on ``port``; read it with :func:`client_events`."""
    node = require_client()
    args = [node, str(CLIENT), "live", f"ws://127.0.0.1:{port}", str(seconds), pattern]
    if summary:
        args.append("--summary")
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=CLIENT_DIR)


def client_events(proc: subprocess.Popen, timeout: float = 60.0) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"client.js failed ({proc.returncode}): {err[-2000:]}"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    errors = [e for e in events if e["event"] == "error"]
    assert not errors, errors
    return events


def start_foxglove(procs: Any, name: str, params: dict[str, Any] | None = None) -> tuple[Any, int]:
    """The foxglove node on a free port; (process, port) once it serves."""
    proc = procs.start("mocap4r2_tools", "foxglove", name=name, params={"port": 0, **(params or {})})
    assert proc.wait_log("serving Foxglove WebSocket on ws://", timeout=30), proc.log()
    match = re.search(r"serving Foxglove WebSocket on ws://[\d.]+:(\d+)", proc.log())
    assert match, proc.log()
    return proc, int(match.group(1))


def messages(events: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "message" and e["topic"] == topic]


def stamp_ns(stamp: Any) -> int:
    """ns of a builtin_interfaces/Time or of a decoded google.protobuf.Timestamp."""
    if isinstance(stamp, dict) and "seconds" in stamp:
        return int(stamp["seconds"]) * 1_000_000_000 + int(stamp["nanos"])
    if isinstance(stamp, dict):  # the JSON records' {sec, nsec}
        return int(stamp["sec"]) * 1_000_000_000 + int(stamp["nsec"])
    return stamp.sec * 1_000_000_000 + stamp.nanosec
