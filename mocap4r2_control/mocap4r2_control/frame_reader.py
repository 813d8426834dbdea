"""The reader thread of an active system: read frames from the adapter, hand each to the
output, until told to stop.

A thread of its own, never the executor: an adapter's ``read_frame`` blocks up to the
node's read_timeout, and the executor must stay free for the lifecycle services, the
control plane and /diagnostics. It enters the node's log route first, so the records of
the adapter's code it runs are logged under the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rclpy.node import Node

from .adapter import MocapAdapter
from .diagnostics import FrameStatistics
from .frame import MocapFrame

__all__ = ["FrameReader", "name_os_thread"]


class FrameReader:
    """The reader thread of an active system: read, publish, until stopped."""

    def __init__(self, node: Node, stats: FrameStatistics, enter_log_route: Callable[[], None]):
        self.node = node
        self.stats = stats
        self._enter_log_route = enter_log_route
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # made by wait_for_gap; set and dropped at the next hand-over or at stop (_release_gap)
        self._gap: threading.Event | None = None

    def start(
        self, adapter: MocapAdapter, timeout: float, publish: Callable[[MocapFrame, float], None]
    ) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(adapter, timeout, publish), name="mocap4r2-reader", daemon=True
        )
        self._thread.start()

    def stop(self, join_timeout: float) -> None:
        """Tell the thread to stop and join it (not from the thread itself)."""
        self._stop.set()
        reader = self._thread
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=join_timeout)
            if reader.is_alive():
                self.node.get_logger().error(
                    "the reader thread did not stop in time (adapter blocked in read)"
                )
        self._thread = None
        self._release_gap()  # no hand-over will come: whoever waits for one goes on

    def wait_for_gap(self, timeout: float) -> bool:
        """Block the calling thread until the reader thread has just handed a frame over
        or has stopped (True), or for at most ``timeout`` s (False; at once when no
        reader runs).

        For work of another thread that holds the interpreter for a while, such as the
        /diagnostics report (about 1 ms): begun at a random moment it holds the reader up
        by its whole length (at 50 VRPN trackers and 1 kHz each report made the 2-3
        frames after it 2-3 ms late, a sixth of the frames above the p99); begun right
        after a hand-over, it runs while the reader waits for the next frame's bytes."""
        reader = self._thread
        if reader is None or not reader.is_alive() or reader is threading.current_thread():
            return False
        gap = self._gap
        if gap is None:
            gap = self._gap = threading.Event()
        return gap.wait(timeout)

    def _loop(
        self, adapter: MocapAdapter, timeout: float, publish: Callable[[MocapFrame, float], None]
    ) -> None:
        name_os_thread("mocap4r2-reader")
        self._enter_log_route()
        # stamps are on the node's clock: system time, or simulation time with use_sim_time
        clock = self.node.get_clock()
        now: Callable[[], float] = (
            (lambda: clock.now().nanoseconds * 1e-9)
            if self.node.get_parameter("use_sim_time").value
            else time.time
        )
        log = self.node.get_logger()
        failing_since: float | None = None
        while not self._stop.is_set():
            try:
                frame = adapter.read_frame(timeout)
            except Exception as exc:  # noqa: BLE001 - the adapter reconnects, we report
                self.stats.error(f"read failed: {exc}")
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.error(f"reading from the {adapter.system_type} system failed: {exc}")
                self._stop.wait(min(0.5, max(timeout, 0.01)))
                continue
            if frame is None:
                continue
            arrival = now()
            if failing_since is not None:
                log.info(f"frames again after {time.monotonic() - failing_since:.1f} s")
                failing_since = None
            try:
                publish(frame, arrival)
            except Exception as exc:  # noqa: BLE001 - a bad frame must not stop the stream
                self.stats.error(f"bad frame {getattr(frame, 'frame_number', '?')}: {exc}", bad_frame=True)
                log.error(f"dropped a bad frame: {exc}", throttle_duration_sec=5.0)
            self._release_gap()

    def _release_gap(self) -> None:
        """Let go whoever waits in :meth:`wait_for_gap` (one attribute read when nobody does)."""
        gap = self._gap
        if gap is not None:
            self._gap = None
            gap.set()


def name_os_thread(name: str) -> None:
    """Give the calling thread a name the OS shows (top -H, /proc/<pid>/task/*/comm),
    so a leaked reader thread can be seen from outside the process."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
