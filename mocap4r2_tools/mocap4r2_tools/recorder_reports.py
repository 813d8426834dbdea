"""The systems' /diagnostics as ``session_recorder`` reads them: how many frames each
system of a session reports dropped while it records, and whether its report after STOP
has arrived.

They arrive on a helper node with its own executor thread: STOP waits in the control
callback for the systems' last reports, and the recorder's main executor stays
single-threaded (the fastest for its raw callbacks).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Collection

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

DIAGNOSTICS = "/diagnostics"


class SystemReports:
    """Dropped frames per system, counted from the systems' /diagnostics while collecting."""

    def __init__(self, node: Node):
        self.dropped: dict[str, int] = {}  # system -> dropped frames reported while recording
        self._seen: dict[str, float] = {}
        self._systems: Collection[str] = ()
        self._collecting = False
        self._node = rclpy.create_node(
            f"{node.get_name()}_reports", namespace=node.get_namespace(), context=node.context
        )
        self._node.create_subscription(DiagnosticArray, DIAGNOSTICS, self._on_diagnostics, 100)
        self._executor = SingleThreadedExecutor(context=node.context)
        self._executor.add_node(self._node)
        self._thread = threading.Thread(target=self._spin, name="recorder-reports", daemon=True)
        self._thread.start()

    def start(self, systems: Collection[str]) -> None:
        """Count from now on the reports of ``systems`` (a live collection: systems that
        join the session later are counted once they are in it)."""
        self.dropped = {}
        self._systems = systems
        self._collecting = True

    def stop(self) -> dict[str, int]:
        self._collecting = False
        return self.dropped

    def wait(self, systems: Collection[str], timeout: float) -> None:
        """Frames a system drops show in its next /diagnostics report; the window in
        progress at STOP is reported up to one period later. Wait (bounded) for one report
        after now from every one of ``systems``, so those drops are attributed to the
        system and not to the recorder."""
        mark = time.monotonic()
        deadline = mark + timeout
        while time.monotonic() < deadline:
            if all(self._seen.get(s, 0.0) > mark for s in systems):
                return
            time.sleep(0.02)

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=1.0)
        # out of rclpy first: a thread still in the wait when the interpreter exits aborts it
        self._thread.join(timeout=2.0)
        self._node.destroy_node()

    def _spin(self) -> None:
        with contextlib.suppress(Exception):  # the context goes away at exit, ending the thread
            self._executor.spin()

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        if not self._collecting:
            return
        for status in msg.status:
            if status.hardware_id in self._systems:
                self._seen[status.hardware_id] = time.monotonic()
                for kv in status.values:
                    if kv.key == "dropped_frames":
                        with contextlib.suppress(ValueError):
                            self.dropped[status.hardware_id] = self.dropped.get(status.hardware_id, 0) + int(
                                kv.value
                            )
