"""Test session setup: an isolated DDS domain per run, and shared fixtures.

Every pytest run claims its own ROS_DOMAIN_ID (a lock file per id under /tmp) and keeps
discovery on localhost, so two runs on one machine never see each other's nodes. This
happens at import time, before any test imports rclpy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from isolation import claim_domain_id

if "MOCAP4R2_TEST_DOMAIN" not in os.environ:
    os.environ["MOCAP4R2_TEST_DOMAIN"] = str(claim_domain_id())
os.environ["ROS_DOMAIN_ID"] = os.environ["MOCAP4R2_TEST_DOMAIN"]
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("RCUTILS_LOGGING_BUFFERED_STREAM", "0")
os.environ["PYTHONUNBUFFERED"] = "1"

from support import ProcessRunner, RosHarness

# a test hanging the whole process ends the run with every thread's stack (hang_watchdog.py)
pytest_plugins = ["hang_watchdog"]


def pytest_report_header(config):
    return f"mocap4r2: ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']}, discovery LOCALHOST"


@pytest.fixture(scope="session")
def ros_session():
    """A live rclpy node spun in a background thread, for subscribing and calling."""
    harness = RosHarness()
    yield harness
    harness.close()


@pytest.fixture(scope="session")
def ros(ros_session):
    """The session's harness (module-wide fixtures ask for ros_session by that name)."""
    return ros_session


@pytest.fixture(autouse=True)
def subscriptions_end_with_the_test(request):
    """Destroys the harness subscriptions a test made when it ends (module fixtures' stay).

    Each subscription stays in the harness's wait set, and rclpy's executor walks that
    set in Python for every message: with 200 subscriptions left by earlier tests the
    harness took in 125 messages/s, with 800 18/s (0 left: 2574/s). Late tests then
    lagged their 100 Hz streams, and a reliable writer's bounded history dropped what
    the harness had not taken yet."""
    if "ros_session" not in request.fixturenames:
        yield
        return
    harness = request.getfixturevalue("ros_session")
    count = harness.subscription_count()
    yield
    harness.unsubscribe_since(count)


@pytest.fixture
def procs(tmp_path):
    """Starts installed executables; every process is stopped at teardown."""
    runner = ProcessRunner(tmp_path)
    yield runner
    runner.stop_all()
