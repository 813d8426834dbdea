"""The tracker starts anywhere: on a read-only install, and within the START timeout.

Read-only for real: each process runs in a private mount namespace (``unshare -m``, we
are root) where the repository (sources, build, install space and virtualenv) and, where
asked, /tmp and /var/tmp are bind-mounted read-only, with HOME inside the read-only tree
(missing, uncreatable: numba's per-user cache has nowhere to go), as a container image,
``HOME=/nonexistent`` or systemd's DynamicUser leave it. Before kernel_cache.py, importing
the kernels there raised ``RuntimeError: cannot cache function '_quat_matrix': no locator
available`` and the node died with that traceback.

Compiling takes 11-16 s on this machine (more under load); these tests compile three
times, in processes of their own (the test process's kernels are not touched).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from markers_messages import markers_message
from rclpy.qos import QoSProfile, ReliabilityPolicy
from read_only_mounts import NO_HOME, ROOT, TEMPS, read_only, why_not_here
from support import executable, wait_subscribed

from mocap4r2_control.control_plane import SYSTEMS_QOS, SYSTEMS_TOPIC, ControlClient
from mocap4r2_interfaces.msg import Markers, MocapSystemInfo, RigidBodies

KERNELS = 8  # the @kernel functions of tracking/kernels.py
# their index files: numba names them <module>.<function>-<line>.<python>.nbi, and the
# same cache also holds the node's compiled markers pass (mocap4r2_control), not counted
TRACKER_INDEXES = "kernels.*.nbi"
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
LAYOUT = np.array([[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]])
COMPILE_WAIT = 180.0  # s: compiling under a heavy load


@pytest.fixture(scope="module")
def namespaces() -> None:
    reason = why_not_here()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI must run the read-only install tests)")
        pytest.skip(reason)


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR")}
    env.update(HOME=NO_HOME, **extra)
    return env


PROBE = """
import json, sys
from mocap4r2_tools.tracking import kernels
from mocap4r2_tools.tracking.bodies import parse_config
from mocap4r2_tools.tracking.tracker import Tracker
prepared = kernels.prepare(note=lambda text: print("NOTE", text, file=sys.stderr))
kernels.prepare(note=lambda text: print("NOTE", text, file=sys.stderr))  # said once
layout = [[0.0, 0.0, 0.02], [0.025, 0.0, 0.0], [-0.01, 0.018, 0.0], [-0.012, -0.02, 0.005]]
config = parse_config({"layouts": {"cf": layout}, "bodies": [{"name": "a", "layout": "cf"}]})
result = Tracker(config).update(__import__("numpy").array(layout) + 1.0, 0.0)
hits = sum(sum(k.stats.cache_hits.values()) for k in (kernels.newton_fits, kernels.commit))
print(json.dumps({"kind": prepared.cache.kind, "directory": prepared.cache.directory,
                  "valid": bool(result.valid[0]), "cache_hits": hits}))
"""


def _probe(env: dict[str, str], directories: list[str]) -> tuple[dict[str, object], str]:
    done = subprocess.run(
        read_only([sys.executable, "-c", PROBE], directories),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=COMPILE_WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_on_a_read_only_install_the_kernels_are_kept_in_a_private_temporary_cache(namespaces, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = _environment(TMPDIR=str(temp))
    first, said = _probe(env, [str(ROOT)])
    assert first["kind"] == "private" and first["valid"], first
    directory = Path(str(first["directory"]))
    assert directory.parent == temp and directory.name == f"mocap4r2-numba-{os.getuid()}"
    assert (directory.stat().st_mode & 0o777) == 0o700  # numba's cache files are code: ours only
    assert said.count("NOTE") == 1 and f"kept in {directory}" in said, said
    assert len(list(directory.rglob(TRACKER_INDEXES))) == KERNELS
    # the next process loads what the first compiled
    second, _ = _probe(env, [str(ROOT)])
    assert second["kind"] == "private" and second["directory"] == str(directory)
    assert int(str(second["cache_hits"])) >= 2 and first["cache_hits"] == 0


def _start_and_track(ros, procs, tmp_path, name: str, command_of, env: dict[str, str], look=None):
    """Start marker_tracker (``command_of`` wraps its command), wait for its announcement,
    START it through the control plane with the control plane's own 10 s timeout, and
    track a frame; returns (process, its log when it was first announced, what ``look()``
    returned then)."""
    bodies = tmp_path / "bodies.yaml"
    bodies.write_text(
        yaml.safe_dump(
            {
                "layouts": {"cf": LAYOUT.tolist()},
                "bodies": [{"name": "solo", "id": 4, "layout": "cf", "initial_position": [0.5, 0.0, 1.0]}],
            }
        )
    )
    namespace = f"/{name}"
    tracked = ros.subscribe(f"{namespace}/rigid_bodies", RigidBodies, RELIABLE)
    systems = ros.subscribe(SYSTEMS_TOPIC, MocapSystemInfo, SYSTEMS_QOS)
    command = [
        str(executable("mocap4r2_tools", "marker_tracker")),
        "--ros-args",
        "-r",
        "__node:=tracker",
        "-r",
        f"__ns:={namespace}",
        "-p",
        f"markers_topic:={namespace}/cloud",
        "-p",
        f"bodies:={bodies}",
    ]
    proc = procs.start_command(command_of(command), label=name, env=env)
    client = ControlClient(ros.node)
    try:
        systems.wait_for(lambda m: m.system == f"{namespace}/tracker", timeout=COMPILE_WAIT)
        seen = proc.log()
        looked = look() if look is not None else None
        result = client.start(systems=[f"{namespace}/tracker"], session_id="ro")  # the 10 s default
        assert result.ok, (result.acks, proc.log()[-3000:])
    finally:
        client.destroy()
    publisher = ros.publisher(f"{namespace}/cloud", Markers, RELIABLE)
    wait_subscribed(publisher)
    for number in range(1, 40):
        publisher.publish(markers_message(number, LAYOUT + [0.5 + 0.001 * number, 0.0, 1.0]))
    first = tracked.wait_for(lambda m: m.rigid_bodies and m.rigid_bodies[0].tracking_valid, timeout=30)
    assert first.rigid_bodies[0].name == "solo"
    return proc, seen, looked


def test_the_tracker_starts_on_a_read_only_install_with_nothing_writable(namespaces, ros, procs, tmp_path):
    """Repository, /tmp, /var/tmp and HOME read-only: no cache at all. The node compiles
    before it is announced, says so once, answers START within the control plane's 10 s
    and tracks. ROS's own file logging needs a writable ~/.ros (rclpy.init fails
    without one), so it is turned off as such a deployment must (or set ROS_LOG_DIR)."""
    proc, seen, _ = _start_and_track(
        ros,
        procs,
        tmp_path,
        "ro_none",
        lambda command: read_only([*command, "--disable-external-lib-logs"], [str(ROOT), *TEMPS]),
        _environment(),
    )
    log = proc.log()
    assert log.count("compiled without a cache") == 1, log[-3000:]
    assert "tracker kernels ready" in seen and "(no cache)" in seen, seen[-3000:]
    assert seen.index("tracker kernels ready") < seen.index("system ready (unconfigured)")
    assert "Traceback" not in log and proc.alive()


def test_a_first_start_with_an_empty_cache_compiles_before_the_tracker_is_announced(ros, procs, tmp_path):
    """An empty cache (the first start after an install): when the control plane first
    hears of the tracker, every kernel is already compiled into the cache, so a START
    only configures; compiling inside configure took 11-16 s against the 10 s START
    timeout."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    proc, seen, compiled = _start_and_track(
        ros, procs, tmp_path, "first_start", list, env, look=lambda: len(list(cache.rglob(TRACKER_INDEXES)))
    )
    assert compiled == KERNELS, seen[-3000:]
    assert "tracker kernels ready" in seen and "(numba's cache)" in seen, seen[-3000:]
    assert proc.alive()


@pytest.mark.parametrize("planted", ["writable by others", "a link"])
def test_a_cache_directory_someone_else_could_have_prepared_is_never_used(planted, tmp_path, monkeypatch):
    """numba's cache files are code a process loads: a ``mocap4r2-numba-<uid>`` in the
    temporary directory that others can write to, or that is a link to elsewhere, is not
    read; a fresh directory of this process (0700) is used instead."""
    import tempfile

    from mocap4r2_tools.tracking import kernel_cache

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    name = tmp_path / f"mocap4r2-numba-{os.getuid()}"
    if planted == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        name.symlink_to(tmp_path / "elsewhere")
    else:
        name.mkdir()
        name.chmod(0o777)
    chosen = Path(str(kernel_cache._private_directory()))
    assert chosen.parent == tmp_path and chosen != name and chosen.name.startswith("mocap4r2-numba-")
    assert (chosen.lstat().st_mode & 0o777) == 0o700 and not chosen.is_symlink()
