"""A clone without ../shared passes as it is, and CI never hides that absence.

The replay tests of the vendor C3D files and the motion_control_interfaces specification
tests need ../shared (data/c3d, seeds). They are run here for real, in a pytest of their
own, once as a user's clone sees it (the folder absent) and once as CI (CI=true).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shared_data import require_shared  # test/fixtures

ROOT = Path(__file__).resolve().parents[1]
NEEDS_SHARED = [
    "test/mocap4r2_drivers/replay/test_replay_readers.py::test_the_screen_hints_are_reported_not_trusted",
    "test/mocap4r2_drivers/replay/test_replay_system.py::test_c3d_with_bodies_plays_as_a_system",
    "test/motion_control_interfaces/test_specification.py::test_the_specification_has_exactly_these_8_interfaces",
]


def run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MOCAP4R2_SHARED": str(tmp_path / "no-shared-here")}
    env.pop("CI", None)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", *NEEDS_SHARED],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_clone_without_shared_skips_naming_the_path_and_what_is_lost(tmp_path):
    result = run(tmp_path, ci=None)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "3 skipped" in result.stdout, result.stdout[-3000:]
    absent = str(tmp_path / "no-shared-here")
    assert f"{absent}/data/c3d" in result.stdout and f"{absent}/seeds" in result.stdout
    assert "would have checked replaying the vendor C3D files as a system" in result.stdout


def test_under_ci_the_same_absence_fails(tmp_path):
    result = run(tmp_path, ci="true")
    # the fixtures that look for the folder fail, so pytest reports each test as an error
    assert result.returncode == 1, result.stdout[-3000:]
    assert "3 errors" in result.stdout and "passed" not in result.stdout, result.stdout[-3000:]
    assert "CI=true" in result.stdout


def test_with_shared_beside_the_clone_they_run():
    """Where ../shared is there (this workplace, CI), the same tests run and pass."""
    shared = require_shared(checks="that the tests needing ../shared run where it is")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *NEEDS_SHARED],
        cwd=ROOT,
        env={**os.environ, "MOCAP4R2_SHARED": str(shared)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0 and "3 passed" in result.stdout, result.stdout[-3000:]
