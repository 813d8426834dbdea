"""`mocap4r2 doctor` as a user runs it: against a healthy natnet_simulator with an
optitrack_system streaming from it, every check passes (the host clock's as the kernel
says); a params file with an unknown key and a bad address exits 1 naming both."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys

import yaml
from optitrack_stand_in import StandIn, start_driver  # test/fixtures
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import INSTALL

from mocap4r2_drivers.doctor.report import Check, Status, as_json, as_text, exit_code
from mocap4r2_drivers.doctor.time_checks import kernel_sync
from mocap4r2_interfaces.msg import RigidBodies

SCENE = {
    "seed": 5,
    "rate": 100.0,
    "rigid_bodies": [{"name": "drone1", "id": 1, "trajectory": {"type": "circle", "radius": 1.0}}],
}
HOST_CLOCK = "host clock synchronisation"


def doctor(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="400")
    return subprocess.run(
        [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_everything_passes_against_a_healthy_setup(procs, tmp_path, ros):
    stand_in = StandIn(procs, tmp_path, "--multicast", scene=SCENE)
    _driver, ns = start_driver(procs, stand_in, "multicast")
    frames = ros.subscribe(f"{ns}/rigid_bodies", RigidBodies)
    frames.wait_count(1, WAIT)  # the system is active and streaming
    params = tmp_path / "optitrack.yaml"
    values = {
        "server_address": "127.0.0.1",
        "command_port": stand_in.command_port,
        "data_port": stand_in.data_port,
        "connection_type": "multicast",
        "frame_id": "mocap",
    }
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": values}}))
    out = doctor("--system", "optitrack", "--params-file", str(params), "--json", "--wait", "10")
    report = json.loads(out.stdout)
    checks = {c["title"]: c for c in report["checks"]}
    synced = kernel_sync()
    expected_clock = "PASS" if synced and synced[0] else "WARN"
    assert checks.pop(HOST_CLOCK)["status"] == expected_clock
    judged = [c for c in checks.values() if c["status"] not in ("PASS", "INFO")]
    assert judged == [], out.stdout + out.stderr
    # shown, not judged: loopback has no link, the group is where it was joined, the RMW
    shown = {c["title"] for c in checks.values() if c["status"] == "INFO"}
    assert {"link of lo", "multicast group 239.255.42.99", "RMW implementation"} <= shown, shown
    assert out.returncode == 0
    system = f"{ns}/optitrack"
    assert checks[f"system {system} (optitrack)"]["evidence"].startswith("active")
    assert checks[f"QoS of {ns}/rigid_bodies"]["status"] == "PASS"
    assert f"clock model of {system}" in checks
    for title in ("NatNet frames", "MTU against the frame size", "multicast group 239.255.42.99"):
        assert title in checks, title


def test_unknown_key_and_bad_address_exit_1_with_their_fixes(tmp_path):
    params = tmp_path / "typo.yaml"
    params.write_text(
        yaml.safe_dump(
            {"/**": {"ros__parameters": {"server_adress": "127.0.0.1", "local_address": "10.0.0.300"}}}
        )
    )
    out = doctor("--system", "optitrack", "--params-file", str(params), "--no-ros", "--timeout", "0.5")
    assert out.returncode == 1, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert "FAIL" in text and "parameter server_adress" in text and "did you mean server_address?" in text
    assert "parameter local_address" in text and "10.0.0.300" in text


def test_json_and_exit_code_of_a_report():
    checks = [
        Check(Status.PASS, "a", "seen"),
        Check(Status.WARN, "b", "fragile", "do this"),
    ]
    assert exit_code(checks) == 0
    report = json.loads(as_json([*checks, Check(Status.FAIL, "c", "broken", "fix it", "server")]))
    assert report["counts"] == {"PASS": 1, "WARN": 1, "FAIL": 1, "INFO": 0, "SKIP": 0}
    assert report["ok"] is False
    assert report["checks"][2] == {
        "status": "FAIL",
        "title": "c",
        "evidence": "broken",
        "fix": "fix it",
        "area": "server",
    }


def test_help_has_a_description_examples_and_every_registered_system():
    from mocap4r2_drivers import registry

    out = doctor("--help", timeout=60)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "Check a lab's mocap setup end to end" in text and "SKIP: could not be checked here" in text
    assert "examples: mocap4r2 doctor --system optitrack --params-file config/optitrack.yaml" in text
    for name in registry.names():  # replay, tracker and vrpn included
        assert name in text, name
    assert {"replay", "tracker", "vrpn"} <= set(registry.names())


def test_bad_arguments_are_refused_with_the_reason(tmp_path):
    nan = doctor("--timeout", "nan", "--no-ros")
    assert nan.returncode == 2 and "must be between 0 and 600 s, got 'nan'" in nan.stderr
    alone = doctor("--params-file", str(tmp_path / "x.yaml"), "--no-ros")
    assert alone.returncode == 2 and "--params-file needs --system" in alone.stderr


TABLE = [
    Check(Status.PASS, "parameter server_address", "127.0.0.1", area="configuration"),
    Check(
        Status.FAIL,
        "parameter server_adress",
        "unknown; " * 12,
        "did you mean server_address?",
        "configuration",
    ),
    Check(Status.INFO, "RMW implementation", "rmw_fastrtps_cpp\nfrom RMW_IMPLEMENTATION", area="ros"),
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_the_table_is_plain_text_in_aligned_columns():
    """The doctor's table needs no terminal library (a robot installs the drivers without
    rich): a title, a header, and each check on one line, its columns aligned, no colour."""
    text = as_text(TABLE)
    assert not ANSI.search(text), text
    lines = text.splitlines()
    assert lines[0] == "mocap4r2 doctor" and lines[1].split() == [
        "area",
        "status",
        "check",
        "evidence",
        "fix",
    ]
    rows = lines[3:]
    assert len(rows) == 4, text  # the INFO's evidence has two lines, the second in its column
    for column in ("status", "check", "evidence", "fix"):
        at = lines[1].index(column)
        assert all(row[at - 2 : at] == "  " for row in rows[:3]), (column, text)
    assert rows[1].split()[:4] == ["configuration", "FAIL", "parameter", "server_adress"]
    assert rows[1].endswith("did you mean server_address?"), rows[1]
    assert rows[3].strip() == "from RMW_IMPLEMENTATION" and rows[3].index("from") == lines[1].index(
        "evidence"
    )


def test_the_table_on_a_terminal_is_wrapped_and_coloured_when_asked():
    text = as_text(TABLE, colour=True, width=100)
    plain = ANSI.sub("", text)
    assert all(len(line) <= 100 for line in plain.splitlines()), plain
    assert "\x1b[1;31mFAIL\x1b[0m" in text and "\x1b[32mPASS\x1b[0m" in text and "\x1b[34mINFO\x1b[0m" in text
    assert " ".join(plain.split()).count("unknown;") == 12  # wrapped, nothing lost
    assert plain == as_text(TABLE, width=100)  # the colour adds nothing but the escapes


def doctor_on_a_terminal(**env: str) -> str:
    """`mocap4r2 doctor --no-ros` with its stdout on a pseudo-terminal, as a user runs it."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "doctor", "--no-ros"],
            stdout=follower,
            stderr=subprocess.PIPE,
            env=dict(os.environ, **env),
        )
        os.close(follower)
        follower = -1
        out = b""
        while True:
            ready, _, _ = select.select([leader], [], [], 120)
            if not ready:
                proc.kill()
                raise AssertionError(f"no output for 120 s: {out!r}")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=60) in (0, 1), proc.stderr.read() if proc.stderr else ""
        return out.decode()
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)


def test_colour_only_on_a_terminal_without_no_color():
    coloured = doctor_on_a_terminal()
    assert ANSI.search(coloured), coloured
    assert "host clock synchronisation" in coloured
    plain = doctor_on_a_terminal(NO_COLOR="1")
    assert not ANSI.search(plain) and "host clock synchronisation" in plain, plain
    piped = doctor("--no-ros")
    assert not ANSI.search(piped.stdout) and "host clock synchronisation" in piped.stdout, piped.stdout


# `python3 -m mocap4r2_drivers.doctor` where neither the tools (the `mocap4r2` command) nor
# their terminal libraries can be imported: None in sys.modules, as where not installed
WITHOUT_THE_TOOLS = (
    "import runpy, sys\n"
    "for name in ('mocap4r2_tools', 'rich', 'textual'):\n"
    "    sys.modules[name] = None\n"
    "sys.argv = ['doctor', *sys.argv[1:]]\n"
    "runpy.run_module('mocap4r2_drivers.doctor', run_name='__main__')\n"
)


def test_the_drivers_alone_run_the_doctor(tmp_path):
    """A robot with the drivers and not the tools still has the doctor, with the same
    arguments and findings as `mocap4r2 doctor`."""
    params = tmp_path / "typo.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"server_adress": "127.0.0.1"}}}))
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_TOOLS, "--system", "optitrack", "--params-file", str(params)]
        + ["--no-ros", "--timeout", "0.5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    text = " ".join(out.stdout.split())
    assert text.startswith("mocap4r2 doctor area status check evidence fix"), text
    assert "FAIL" in text and "parameter server_adress" in text and "did you mean server_address?" in text
    assert "host clock synchronisation" in text
