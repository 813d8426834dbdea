"""The executors our programs spin: single-threaded unless a node must run two callbacks at once.

Why not rclpy's ``MultiThreadedExecutor`` as it is: its wait loop hands every callback
that is in its pool but not yet started back to the pool on each pass, without waiting
(``Executor._wait_for_ready_callbacks`` yields tasks in progress before it waits, and
``MultiThreadedExecutor._spin_once_impl`` submits whatever it is given). Once messages
arrive faster than the workers start them, the pool's queue fills with copies of the
same few tasks, the loop never sleeps, and the workers fight it for the interpreter.
Measured on a 2-core machine (rclpy 9.x, Kilted wheels), one subscription fed at 500
msg/s from another process: ``MultiThreadedExecutor`` handled 7 msg/s on a full core,
``SingleThreadedExecutor`` all 500 on 0.17 of one. A gazebo_system fed two 250 Hz pose
topics took 20 of its 500 msg/s. Reported upstream as ros2/rclpy#1452 and fixed in
rclpy by pull request #1547 (merged November 2025); the releases our users run and the
wheels here do not all have it. With the fix, no task is handed back while queued and
this class behaves as rclpy's own.

:class:`PatientMultiThreadedExecutor` keeps rclpy's scheduling and submits each task to
the pool once: a task handed back while it still waits for a worker makes the loop wait
(at most ``QUEUED_WAIT``) until some queued task has started, instead of submitting it
again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rclpy.context import Context
from rclpy.executors import (
    ConditionReachedException,
    Executor,
    ExternalShutdownException,
    MultiThreadedExecutor,
    ShutdownException,
    SingleThreadedExecutor,
    TimeoutException,
    TimeoutObject,
)
from rclpy.task import Task

# the longest the wait loop sleeps for a queued task to start before it looks again (a
# worker that frees up starts the next task at once and wakes the loop)
QUEUED_WAIT = 0.05


class PatientMultiThreadedExecutor(MultiThreadedExecutor):
    """A MultiThreadedExecutor that gives the pool each task once (see the module docstring)."""

    def __init__(self, num_threads: int | None = None, *, context: Context | None = None) -> None:
        super().__init__(num_threads=num_threads, context=context)
        self._queued: set[Task[Any]] = set()  # tasks submitted to the pool, not yet started
        self._running: set[Task[Any]] = set()  # tasks started by a worker, not yet returned
        self._started = threading.Condition()  # notified whenever a queued task starts

    def _spin_once_impl(
        self,
        timeout_sec: float | TimeoutObject | None = None,
        wait_condition: Callable[[], bool] = lambda: False,
    ) -> None:
        try:
            handler, _entity, _node = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        with self._started:
            if handler in self._queued:
                # handed back only because no worker has started it yet: wait for one
                self._started.wait(QUEUED_WAIT)
                return
            if handler in self._running:
                return  # started, not yet marked executing: it is the worker's
            self._queued.add(handler)
        self._executor.submit(self._start, handler)
        self._futures.append(handler)
        for future in self._futures[:]:
            if future.done():
                self._futures.remove(future)
                future.result()  # raise any exceptions, as rclpy's does

    def _start(self, handler: Task[Any]) -> None:
        with self._started:
            self._queued.discard(handler)
            self._running.add(handler)
            self._started.notify_all()
        try:
            handler()
        finally:
            # a coroutine callback that awaits returns here unfinished and is handed back
            # to be resumed: it must be submittable again
            with self._started:
                self._running.discard(handler)


def make_executor(threads: int = 1) -> Executor:
    """The executor for ``threads``: single-threaded for 1, else the patient multi-threaded one.

    ``SingleThreadedExecutor`` sleeps in rcl until there is work and runs each callback
    in the spinning thread. ``threads > 1`` is for a node with a callback that waits for
    another callback of its own (configure waiting for the first message of a
    subscription in another callback group, a service client answered while a request
    is being handled)."""
    if threads <= 1:
        return SingleThreadedExecutor()
    return PatientMultiThreadedExecutor(num_threads=threads)
