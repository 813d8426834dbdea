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

from support import wait_for

RELIABLE = QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE)


def test_each_subscription_keeps_the_order_of_arrival(ros):
    # A reentrant callback group lets the executor's 4 threads run one subscription's
    # callbacks at once, so they append out of order (a test-load run: frame 251 before
    # 250 in test_frames). Two subscriptions, so one group per subscription is what is
    # checked, not one group for all.
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
            wait_for(lambda c=c: len(c.snapshot()) == count, 30, what=f"{count} messages",
                     describe=lambda c=c: f"{len(c.snapshot())} received")
    finally:
        busy.set()
        spinner.join()
        sys.setswitchinterval(interval)
    for c in collectors:
        received = [m.data for m in c.snapshot()]
        swapped = [i for i, (a, b) in enumerate(zip(received, received[1:])) if b < a]
        assert not swapped, f"{len(swapped)} messages out of order, first at {swapped[:5]}"
