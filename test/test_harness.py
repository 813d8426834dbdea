"""The test harness itself (test/fixtures/support.py): what every DDS test relies on.

A test that compares sequences (frame numbers, stamps) needs the harness to keep each
subscription's messages in the order they arrived; a test late in the session needs the
harness to still hear, whatever earlier tests destroyed."""

from __future__ import annotations

import sys
import threading
import time

from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import UInt64
from support import RosHarness, wait_for

RELIABLE = QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE)


def test_each_subscription_keeps_the_order_of_arrival():
    # A reentrant callback group lets the executor's 4 threads run one subscription's
    # callbacks at once, so they append out of order (frame 251 before 250 under load).
    # Two subscriptions, so one group per subscription is what is checked, not one group
    # for all. A harness of its own: the session's has by now the entities of every
    # earlier test in its wait set, and delivers more slowly (about half of 4000 messages
    # in 30 s).
    ros = RosHarness()
    try:
        check_order(ros)
    finally:
        ros.close()


def check_order(ros: RosHarness) -> None:
    topics = ("/harness/order_a", "/harness/order_b")
    collectors = [ros.subscribe(t, UInt64, RELIABLE) for t in topics]
    pubs = [ros.publisher(t, UInt64, RELIABLE) for t in topics]
    wait_for(lambda: all(p.get_subscription_count() for p in pubs), 10, what="the harness's readers")
    # the race is between the take and the callback: switching threads often, and a
    # thread that wants the interpreter, widen it (a loaded machine does the same)
    count = 4000
    interval = sys.getswitchinterval()
    busy = threading.Event()

    def spin():
        while not busy.is_set():
            pass

    spinner = threading.Thread(target=spin, daemon=True)
    sys.setswitchinterval(1e-5)
    spinner.start()
    try:
        for k in range(count):
            for pub in pubs:
                pub.publish(UInt64(data=k))
            if k % 500 == 0:
                time.sleep(0.01)
        for c in collectors:
            wait_for(
                lambda c=c: len(c.snapshot()) == count,
                60,
                what=f"{count} messages",
                describe=lambda c=c: f"{len(c.snapshot())} received",
            )
    finally:
        busy.set()
        spinner.join()
        sys.setswitchinterval(interval)
    for c in collectors:
        received = [m.data for m in c.snapshot()]
        swapped = [i for i, (a, b) in enumerate(zip(received, received[1:])) if b < a]
        assert not swapped, f"{len(swapped)} messages out of order, first at {swapped[:5]}"


# the session harness destroys a test's subscriptions when the test ends (conftest.py):
# the two tests below run in this order
_counts: dict[str, int] = {}


def test_a_test_makes_a_subscription(ros):
    _counts["before"] = ros.subscription_count()
    ros.subscribe("/harness/for_one_test", UInt64)
    assert ros.subscription_count() == _counts["before"] + 1


def test_it_is_gone_when_the_next_test_begins(ros):
    assert ros.subscription_count() == _counts["before"]
    assert "/harness/for_one_test" not in [s.topic_name for s in ros.node.subscriptions]


def test_a_transition_slower_than_the_retry_is_not_reported_as_failed(ros, monkeypatch):
    """change_state asks again when no answer came within the retry interval (a request
    sent just after discovery can be lost). A transition is not idempotent: when the
    first request was executed but answered late, the second is refused by the node
    (configure is not valid in inactive), and that refusal must not be returned as the
    outcome of a configure that succeeded."""
    import support
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn

    class SlowToConfigure(LifecycleNode):
        def on_configure(self, state):
            time.sleep(0.8)
            return TransitionCallbackReturn.SUCCESS

        def on_activate(self, state):
            return TransitionCallbackReturn.FAILURE

    node = SlowToConfigure("slow_to_configure", namespace="/harness", context=ros.context)
    executor = SingleThreadedExecutor(context=ros.context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    monkeypatch.setattr(support, "SERVICE_RETRY_INTERVAL", 0.3)
    try:
        assert ros.change_state("/harness/slow_to_configure", "configure")
        assert ros.get_state("/harness/slow_to_configure") == "inactive"
        # a transition the node refuses is still reported as refused
        assert not ros.change_state("/harness/slow_to_configure", "activate")
        assert ros.get_state("/harness/slow_to_configure") == "inactive"
    finally:
        executor.shutdown()
        spinner.join(5)
        node.destroy_node()


def test_a_process_that_closes_its_harness_exits_cleanly():
    """``make stress`` and the benches open a harness, close it and exit. With the spinning
    thread still inside the executor's wait at exit, 2 of 5 such processes aborted
    ("terminate called without an active exception", exit status 134) after every figure
    had been printed; closing waits for that thread now."""
    import os
    import subprocess
    from pathlib import Path

    fixtures = str(Path(__file__).resolve().parent / "fixtures")
    script = (
        "from std_msgs.msg import UInt64\n"
        "from support import RosHarness\n"
        "h = RosHarness()\n"
        "h.subscribe('/harness/exit', UInt64)\n"
        "h.close()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([fixtures, os.environ.get("PYTHONPATH", "")])}
    codes = []
    for _ in range(8):
        run = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        codes.append((run.returncode, run.stderr.strip()[-200:]))
    assert all(code == 0 for code, _ in codes), codes
