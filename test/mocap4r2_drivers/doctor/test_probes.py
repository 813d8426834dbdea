"""The probes of the systems without a server, on real files and real kernels: a replay's
file (empty, missing, not a recording, a recorded session), the simulated system's scene,
and the tracker's bodies file and numba kernels (loaded, and still compiling in a
process with an empty cache); each registered system can be checked by `mocap4r2 doctor`
as a user runs it, replay and the tracker included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import INSTALL  # test/fixtures

from mocap4r2_drivers import registry
from mocap4r2_drivers.doctor import probes
from mocap4r2_drivers.doctor.config_checks import system_specs
from mocap4r2_drivers.doctor.doctor_command import effective_values
from mocap4r2_drivers.doctor.report import Status

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "test" / "mocap4r2_drivers" / "replay"))
from session_fixture import record_session  # noqa: E402  (test/mocap4r2_drivers/replay)


def target(system: str, **values) -> probes.Target:
    """The values the node would see: the defaults, then ``values``."""
    return probes.Target({**effective_values(system_specs(system), {}), **values}, timeout=2.0)


def test_replay_file_empty_missing_unknown_and_recorded(tmp_path):
    (empty,) = probes.replay(target("replay", file=""))
    assert empty.status is Status.FAIL and "empty" in empty.evidence
    (missing,) = probes.replay(target("replay", file=str(tmp_path / "nothing.mcap")))
    assert missing.status is Status.FAIL and "does not exist" in missing.evidence
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(os.urandom(4096))
    (unknown,) = probes.replay(target("replay", file=str(junk)))
    assert unknown.status is Status.FAIL and str(junk) in unknown.evidence
    (tmp_path / "sessions").mkdir()
    folder, _, _ = record_session(tmp_path / "sessions", frames=30)
    (recorded,) = probes.replay(target("replay", file=str(folder)))
    assert recorded.status is Status.PASS, recorded
    assert "30 frames" in recorded.evidence and "bodies" in recorded.evidence


def test_simulated_scene_loads_or_is_named(tmp_path):
    (default,) = probes.simulated(target("simulated"))
    assert default.status is Status.PASS and "Hz" in default.evidence
    bad = tmp_path / "scene.yaml"
    bad.write_text("rate: -5\n")
    (refused,) = probes.simulated(target("simulated", scene=str(bad)))
    assert refused.status is Status.FAIL and str(bad) in refused.evidence


def test_tracker_bodies_and_kernels(tmp_path):
    pytest.importorskip("mocap4r2_tools", reason="the tracker ships with mocap4r2_tools")
    bodies = str(ROOT / "config" / "swarm_bodies.yaml")
    given = probes.tracker(probes.Target({**target("tracker").values, "bodies": bodies}, timeout=300.0))
    assert [c.status for c in given] == [Status.PASS, Status.PASS], given
    assert "bodies" in given[0].evidence and "compiled or loaded" in given[1].evidence
    bad = tmp_path / "bodies.yaml"
    bad.write_text("layouts: 3\n")
    refused = probes.tracker(probes.Target({**target("tracker").values, "bodies": str(bad)}, timeout=300.0))
    assert refused[0].status is Status.FAIL and str(bad) in refused[0].evidence
    (empty, _) = probes.tracker(probes.Target({**target("tracker").values, "bodies": ""}, timeout=300.0))
    assert empty.status is Status.FAIL and "empty" in empty.evidence


def test_tracker_kernels_still_compiling_are_a_warning_not_a_hang(tmp_path):
    """A process with an empty numba cache compiles the kernels (seconds): the probe waits
    its timeout, then says so, and the doctor goes on."""
    pytest.importorskip("mocap4r2_tools", reason="the tracker ships with mocap4r2_tools")
    code = (
        "import time; from mocap4r2_drivers.doctor.probes import _tracker_kernels\n"
        "start = time.monotonic(); check = _tracker_kernels(0.3)\n"
        "print(check.status.value, round(time.monotonic() - start, 1)); print(check.evidence)\n"
        "import os; os._exit(0)  # the compiling thread is not waited for\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    status, waited = out.stdout.split("\n")[0].split()
    assert status == "WARN" and float(waited) < 5.0, out.stdout + out.stderr
    assert "compiling" in out.stdout


def test_tracker_kernels_without_a_writable_cache_of_numba_are_a_warning(monkeypatch):
    """On a read-only install the kernels work (kernel_cache.py: a private cache, or none),
    but every start may compile: the probe says which, as a warning with the remedy.
    The cache choice is set here as kernel_cache makes it there (test_kernel_cache.py
    proves it through read-only mounts)."""
    kernels = pytest.importorskip("mocap4r2_tools.tracking.kernels")
    from mocap4r2_tools.tracking.kernel_cache import KernelCache

    note = "numba has no writable cache here (...), nor is the temporary directory: compiled without a cache"
    monkeypatch.setattr(kernels, "CACHE", KernelCache("none", "", note))
    check = probes._tracker_kernels(120.0)
    assert check.status is Status.WARN and note in check.evidence, check
    assert "NUMBA_CACHE_DIR" in check.fix


@pytest.mark.parametrize("system", [s.name for s in registry.systems()])
def test_every_registered_system_can_be_checked_by_the_doctor(system, tmp_path):
    """`mocap4r2 doctor --system <each>` as installed: the choice exists, and the report
    has the system's own checks (its parameters at least), ending without a traceback."""
    if system == "tracker":
        pytest.importorskip("mocap4r2_tools", reason="the tracker ships with mocap4r2_tools")
    out = subprocess.run(
        [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "doctor", "--system", system]
        + ["--no-ros", "--json", "--timeout", "0.5"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert "Traceback" not in out.stderr, out.stderr
    report = json.loads(out.stdout)
    titles = [c["title"] for c in report["checks"]]
    assert out.returncode == (0 if report["ok"] else 1)
    own = {
        "replay": "replay file",
        "simulated": "simulated scene",
        "tracker": "tracker kernels (numba)",
        "vrpn": "VRPN server at 127.0.0.1:3883 (udp)",
        "qualisys": "QTM RT server at 127.0.0.1:22223",
        "vicon": "Vicon DataStream server at 127.0.0.1:801",
        "optitrack": "local_address: the interface that receives the stream",
    }
    if system in own:
        assert own[system] in titles, titles
    assert "host clock synchronisation" in titles


def test_the_trackers_source_topic_is_checked_for_a_publisher(ros, tmp_path):
    """With ROS: FAIL while nothing publishes the markers the tracker reads, PASS naming
    the publisher once one does (real DDS, the installed `mocap4r2 doctor`)."""
    pytest.importorskip("mocap4r2_tools", reason="the tracker ships with mocap4r2_tools")
    from mocap4r2_interfaces.msg import Markers

    topic = f"/doctor_{os.getpid()}/markers"
    params = tmp_path / "tracker.yaml"
    bodies = ROOT / "config" / "swarm_bodies.yaml"
    params.write_text(f"/**:\n  ros__parameters:\n    markers_topic: {topic}\n    bodies: {bodies}\n")

    def input_check() -> dict:
        out = subprocess.run(
            [str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "doctor", "--system", "tracker"]
            + ["--params-file", str(params), "--json", "--wait", "3", "--timeout", "120"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        checks = {c["title"]: c for c in json.loads(out.stdout)["checks"]}
        return checks[f"tracker's input on {topic}"]

    missing = input_check()
    assert missing["status"] == "FAIL" and missing["evidence"] == f"no node publishes {topic}", missing
    assert "markers_topic" in missing["fix"]
    publisher = ros.node.create_publisher(Markers, topic, 10)
    try:
        present = input_check()
    finally:
        ros.node.destroy_publisher(publisher)
    assert present["status"] == "PASS" and ros.node.get_name() in present["evidence"], present
