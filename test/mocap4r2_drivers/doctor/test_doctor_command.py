"""`mocap4r2 doctor` as a user runs it: against a healthy natnet_simulator with an
optitrack_system streaming from it, every check passes (the host clock's as the kernel
says); a params file with an unknown key and a bad address exits 1 naming both."""

from __future__ import annotations

import json
import os
import subprocess

import yaml
from optitrack_stand_in import StandIn, start_driver  # test/fixtures
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import INSTALL

from mocap4r2_drivers.doctor.report import Check, Status, as_json, exit_code
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
        [str(INSTALL / "mocap4r2_control" / "bin" / "mocap4r2"), "doctor", *args],
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
