"""Running a mocap4r2 node as a program: spin, and leave cleanly on Ctrl-C or SIGTERM.

rclpy's own signal handler shuts the context down at the first Ctrl-C, after which a
node can no longer tell the control plane it is going away. We take the signals
ourselves, so ``finish(node)`` still runs with a live context: it stops the reader
thread, disconnects, and announces the finalized state before the context goes.
"""
from __future__ import annotations

import signal
import sys
from typing import Callable

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Stop()


def run_node(make_node: Callable[[], Node], finish: Callable[[Node], None] | None = None,
             args: list[str] | None = None, threads: int = 2,
             make_executor: Callable[[], Executor] | None = None) -> int:
    """Spin ``make_node()`` until Ctrl-C/SIGTERM, then ``finish(node)``. The executor is a
    MultiThreadedExecutor with ``threads`` threads unless ``make_executor`` gives another
    (a node with high-rate callbacks may want a faster single-threaded one)."""
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    node = None
    executor = None
    code = 0
    try:
        node = make_node()
        executor = make_executor() if make_executor is not None else MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        executor.spin()
    except (_Stop, KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # noqa: BLE001 - report, then release below
        print(f"fatal: {exc!r}", file=sys.stderr)
        code = 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if sig == signal.SIGINT else handler)
        if node is not None:
            if finish is not None:
                try:
                    finish(node)
                except Exception as exc:  # noqa: BLE001 - keep releasing
                    print(f"while finishing: {exc!r}", file=sys.stderr)
            if executor is not None:
                executor.shutdown(timeout_sec=1.0)
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return code
