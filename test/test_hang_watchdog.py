"""scripts/run_tests.sh with test/fixtures/hang_watchdog.py, on a test that hangs pytest.

The hang is the kind pytest-timeout cannot end: the main thread blocked in C with the GIL
held (a second pthread_mutex_lock of a normal mutex, called through ctypes.PyDLL, which
keeps the GIL), so its SIGALRM handler never runs. Without the watchdog this run would
sit until killed from outside. With it, the run must: fail, name the hung test, print its
stack, stop the process the hung run started (in a session of its own, as the suite's
nodes are), and still run and report the test after it."""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "run_tests.sh"

CONFTEST = """
import os, sys
sys.path.insert(0, {fixtures!r})
os.environ["ROS_DOMAIN_ID"] = os.environ["MOCAP4R2_TEST_DOMAIN"] = {domain!r}
pytest_plugins = ["hang_watchdog"]
"""

TESTS = """
import ctypes, os, subprocess, sys
import pytest

def test_before():
    assert True

@pytest.mark.timeout(2)
def test_hangs():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True)
    open({child_pid!r}, "w").write(str(child.pid))
    mutex = ctypes.create_string_buffer(64)  # PTHREAD_MUTEX_INITIALIZER is all zeros in glibc
    libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # never returns, never lets Python run a signal handler

def test_after():
    assert True
"""


def test_a_test_hanging_the_process_fails_with_its_stack_and_the_rest_still_runs(tmp_path):
    domain = f"hang-watchdog-{os.getpid()}"
    child_pid = tmp_path / "child.pid"
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 2\naddopts = -p no:cacheprovider\n")
    (tmp_path / "conftest.py").write_text(
        CONFTEST.format(fixtures=str(ROOT / "test" / "fixtures"), domain=domain)
    )
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(TESTS.format(child_pid=str(child_pid))))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCAP4R2_TEST")}
    start = time.monotonic()
    run = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "-q",
            "-c",
            str(tmp_path / "pytest.ini"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    elapsed = time.monotonic() - start
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "FAILED (hung): test_sample.py::test_hangs" in out, out
    # the hung thread's stack, as faulthandler prints it
    assert "line 16 in test_hangs" in out and "most recent call first" in out, out
    # the first run died after test_before; the second ran only test_after, leaving out
    # the test that ended and the one that hung
    assert "1 passed, 2 deselected" in out, out
    assert elapsed < 60, elapsed
    # the hung run's child is gone (killed by run_tests.sh)
    status = Path(f"/proc/{int(child_pid.read_text())}/status")

    def running() -> bool:
        try:
            return "State:\tZ" not in status.read_text()  # a zombie has ended
        except OSError:
            return False

    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(), f"the hung run's child {status.parent.name} is still running"


def test_without_a_hang_the_script_exits_as_pytest_did(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (tmp_path / "conftest.py").write_text(
        CONFTEST.format(fixtures=str(ROOT / "test" / "fixtures"), domain=f"hang-watchdog-{os.getpid()}")
    )
    (tmp_path / "test_sample.py").write_text("def test_fails():\n    assert 1 == 2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCAP4R2_TEST")}
    script = str(SCRIPT)
    args = ["-q", "-c", str(tmp_path / "pytest.ini"), str(tmp_path)]
    failing = subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=60, env=env)
    assert failing.returncode == 1 and "1 failed" in failing.stdout and "hung" not in failing.stderr
    (tmp_path / "test_sample.py").write_text("def test_passes():\n    assert 1 == 1\n")
    passing = subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=60, env=env)
    assert passing.returncode == 0 and "1 passed" in passing.stdout, passing.stdout + passing.stderr
    # no test collected is a failure, never a silent pass
    (tmp_path / "test_sample.py").write_text("x = 1\n")
    empty = subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=60, env=env)
    assert empty.returncode == 1 and "no tests" in empty.stderr, empty.stdout + empty.stderr
