"""`ros2 mocap4r2 ...` where ros2cli is installed (a ROS distribution)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def _ros2cli_available() -> bool:
    try:
        import ros2cli.command  # noqa: F401 - the import is the check
    except ImportError:
        return False
    return shutil.which("ros2") is not None


pytestmark = pytest.mark.skipif(
    not _ros2cli_available(), reason="ros2cli is not installed here (it is on a ROS distribution)"
)


def test_ros2_mocap4r2_lists_and_starts_a_system(procs, tmp_path):
    procs.start("mocap4r2_drivers", "simulated_system", name="sim", namespace="/r2")
    out = subprocess.run(
        ["ros2", "mocap4r2", "systems", "--wait", "10"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "/r2/sim" in out.stdout
    out = subprocess.run(
        ["ros2", "mocap4r2", "start", "--systems", "/r2/sim", "--session", "r2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "START /r2/sim: ok" in out.stdout


def test_ros2_mocap4r2_without_a_verb_prints_its_own_help():
    """ros2cli calls the extension's main() with the root `ros2` parser: the help printed
    must still be that of `ros2 mocap4r2`, with its verbs."""
    out = subprocess.run(["ros2", "mocap4r2"], capture_output=True, text=True, timeout=60)
    assert "usage: ros2 mocap4r2" in out.stdout, out.stdout + out.stderr
    for verb in ("systems", "start", "stop", "status"):
        assert verb in out.stdout, out.stdout
