"""Running a mocap4r2 node as a program: spin, and leave cleanly on Ctrl-C or SIGTERM.

How, and why this way:

* **The executor spins in a thread of its own; the main thread waits for the signals.**
  rclpy's own signal handler shuts the context down at the first Ctrl-C, after which a
  node can no longer tell the control plane it is going away, so it is disabled. A Python
  signal handler alone does not help either: it runs only when the main thread returns
  to Python, and an executor waiting in rcl for work that never comes (a node without
  timers, or with a 30 s diagnostics timer) would not return until then. So our handler
  only notes the signal (``stop_signals.py``, installed before the program's imports by
  its entry point), and the main thread waits on the signal wakeup fd (which the
  interpreter writes whichever thread the kernel delivered the signal to); then it wakes
  the executor, joins it, and runs ``finish(node)`` with the context still alive: it
  stops the reader thread, disconnects, and announces the finalized state before the
  context goes.
* **A single-threaded executor unless the node really needs more** (``executors.py``).
  ``SingleThreadedExecutor`` sleeps in rcl until there is work and runs each callback in
  the spinning thread, which we join before finishing. ``threads > 1`` is for a node with
  a callback that waits for another callback of its own (configure waiting for a first
  message); it gets our patient multi-threaded executor, since rclpy's own hands queued
  callbacks back to its pool on every pass and spins a core at mocap rates. rclpy's
  pool can also still run callbacks after the node is destroyed ("exception was never
  retrieved: cannot use Destroyable"), so ``finish`` runs after the spinner is joined.
* **The process ends as soon as everything is released.** Once the node is destroyed
  and the context (so the DDS participant, whose departure the others see at once) is
  gone, the interpreter's own teardown of a process with rclpy, numpy and the message
  modules loaded costs 0.2-0.6 s of CPU that releases nothing anyone else can see
  (measured on our 2-core machines); on a loaded machine that is seconds of wall time
  between Ctrl-C and the end of the process. So ``run_node`` runs the atexit handlers,
  collects garbage (finalizers of unreachable objects run), flushes Python's and C's
  output, and calls ``os._exit``. A node that holds files closes them in ``finish`` or
  ``destroy_node``, as it must anyway (``exit_process=False`` returns instead).
* **Under a launch file, a node does not outlive the launch process.** ``ros2 launch``
  stops its nodes when it ends normally, but not when it is killed or crashes. Our launch
  files set ``MOCAP4R2_EXIT_WITH_PARENT=1``; a node that finds it asks the kernel for a
  SIGTERM when its parent dies (Linux ``PR_SET_PDEATHSIG``), and leaves cleanly on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import rclpy
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future

from . import stop_signals
from .executors import make_executor

# how long the executor may take to return its thread after being told to stop (a
# callback that is running finishes first)
JOIN_TIMEOUT_S = 2.0


class _Spinner(threading.Thread):
    def __init__(self, executor: Executor, stop: Future[None]) -> None:
        super().__init__(name="mocap4r2-spin", daemon=True)
        self.executor = executor
        self.stop = stop
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.executor.spin_until_future_complete(self.stop)
        except ExternalShutdownException:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc


EXIT_WITH_PARENT_ENV = "MOCAP4R2_EXIT_WITH_PARENT"
_PR_SET_PDEATHSIG = 1


def exit_with_parent() -> None:
    """Where MOCAP4R2_EXIT_WITH_PARENT is set: SIGTERM when the parent process dies."""
    if os.environ.get(EXIT_WITH_PARENT_ENV, "").lower() not in ("1", "true", "yes"):
        return
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() == 1:  # the parent died before we asked: it will never be signalled
        os.kill(os.getpid(), signal.SIGTERM)


def leave_process(code: int) -> None:
    """End the process now, without the interpreter's teardown (see the module docstring)."""
    import atexit
    import gc

    with contextlib.suppress(Exception):  # an exit function failing must not stop the exit
        atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the stream may already be closed
            stream.flush()
    with contextlib.suppress(OSError, AttributeError):  # no C library to flush: nothing lost
        ctypes.CDLL(None).fflush(None)  # C stdio: rcutils' log lines
    os._exit(code)


NodeT = TypeVar("NodeT", bound=Node)


def run_node(
    make_node: Callable[[], NodeT],
    finish: Callable[[NodeT], None] | None = None,
    args: list[str] | None = None,
    threads: int = 1,
    exit_process: bool = True,
) -> int:
    """main() of a node: spin until Ctrl-C/SIGTERM, then ``finish(node)`` with a live
    context, destroy the node, shut rclpy down and end the process with the exit code (0,
    or 1 after a fatal error); with ``exit_process=False`` return the code instead.
    Must be called from the main thread."""
    # first (if the entry point has not already: stop_signals.lazy_main): a signal during
    # start-up is noted, not raised in the middle of it; the handler stays to the end, so
    # a second Ctrl-C does not interrupt the release either
    signals = stop_signals.install()
    exit_with_parent()
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    executor = None
    spinner = None
    code = 0
    try:
        node = make_node()
        executor = make_executor(threads)
        executor.add_node(node)
        spinner = _Spinner(executor, Future())
        spinner.start()
        signals.wait(spinner)
    except Exception as exc:  # noqa: BLE001 - report, then release below
        print(f"fatal: {exc!r}", file=sys.stderr)
        code = 1
    finally:
        if spinner is not None:
            spinner.stop.set_result(None)  # wakes the executor's wait
            spinner.join(JOIN_TIMEOUT_S)
            if spinner.error is not None:
                print(f"fatal: {spinner.error!r}", file=sys.stderr)
                code = 1
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
        rclpy.get_default_context().destroy()  # the DDS participant: others see us leave
    if exit_process:
        leave_process(code)
    return code
