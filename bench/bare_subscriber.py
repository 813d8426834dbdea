"""The reference of the tool CPU benchmark: a bare rclpy node that subscribes to given
topics with a SingleThreadedExecutor and does nothing with the messages (rclpy still
takes and deserializes each one, as it does for a tool). What a tool costs beyond this is
its own work and its executor.

    python -m bench.bare_subscriber /sim/rigid_bodies:mocap4r2_interfaces/msg/RigidBodies[:best_effort] ...

Prints ``READY`` once a message has arrived on every topic, and, when stopped (SIGINT or
SIGTERM), ``RATE <messages per second on all topics since READY>``: the load both it and
its tool were under.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import time


def message_type(name: str):
    package, _, type_name = name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), type_name)


def main(argv: list[str]) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    rclpy.init()
    node = rclpy.create_node("bare_subscriber")
    waiting = set()
    counted = {"since": 0.0, "messages": 0}

    def callback_for(topic: str):
        def on_message(_msg) -> None:
            counted["messages"] += 1
            if topic in waiting:
                waiting.discard(topic)
                if not waiting:
                    counted.update(since=time.monotonic(), messages=0)
                    print("READY", flush=True)

        return on_message

    for spec in argv:
        topic, type_name, *flags = spec.split(":")
        reliability = ReliabilityPolicy.BEST_EFFORT if "best_effort" in flags else ReliabilityPolicy.RELIABLE
        waiting.add(topic)
        node.create_subscription(
            message_type(type_name), topic, callback_for(topic), QoSProfile(depth=10, reliability=reliability)
        )
    executor = SingleThreadedExecutor()
    executor.add_node(node)

    def report(*_):
        if counted["since"]:
            print(
                f"RATE {counted['messages'] / max(time.monotonic() - counted['since'], 1e-9):.1f}", flush=True
            )
        os._exit(0)

    signal.signal(signal.SIGTERM, report)
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        executor.spin()
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
