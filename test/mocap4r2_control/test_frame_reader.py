"""The reader thread's hand-over moments (FrameReader.wait_for_gap), and the /diagnostics
report that waits for them: its two parts, each begun right after a hand-over, run while
the reader waits for the next frame's bytes, instead of holding up whichever frame
arrives while the report runs.

The adapter here hands a frame over only when the test releases one, so each assertion
is about order (what happened before what), not about how long anything took.
"""

from __future__ import annotations

import queue
import threading

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import TransitionCallbackReturn
from support import CROSS_PROCESS_TIMEOUT as WAIT
from support import spinning

from mocap4r2_control.adapter import MocapAdapter
from mocap4r2_control.diagnostics import FrameStatistics
from mocap4r2_control.frame import AssetNames, MocapFrame
from mocap4r2_control.frame_reader import FrameReader

NAMESPACE = "/frame_reader_test"
#: what "still blocked" is checked over: long enough for a caller that does not wait to
#: have returned many times over, on any machine
STILL_BLOCKED_S = 0.3


class ReleasedAdapter(MocapAdapter):
    """Hands over the frames the test puts in ``released``, one per read."""

    system_type = "gaptest"

    def __init__(self) -> None:
        self.released: queue.Queue[int] = queue.Queue()
        self.reading = threading.Event()  # set each time the reader thread asks for a frame

    def connect(self) -> AssetNames:
        return AssetNames()

    def read_frame(self, timeout: float) -> MocapFrame | None:
        self.reading.set()
        try:
            return MocapFrame(frame_number=self.released.get(timeout=timeout))
        except queue.Empty:
            return None

    def disconnect(self) -> None:
        pass

    def past_hand_over(self) -> None:
        """Returns once the reader thread asks for a frame again: it is then past the
        hand-over of the frame it published last (and past letting its waiters go)."""
        self.reading.clear()
        assert self.reading.wait(WAIT)


class Waiter:
    """``wait_for_gap`` called in a thread of its own; what it returned, once it has."""

    def __init__(self, reader: FrameReader, timeout: float, events: list[str]):
        self.result: bool | None = None
        self._events = events
        self._thread = threading.Thread(target=self._run, args=(reader, timeout), daemon=True)
        self._thread.start()

    def _run(self, reader: FrameReader, timeout: float) -> None:
        self.result = reader.wait_for_gap(timeout)
        self._events.append(f"gap {self.result}")

    def blocked_for(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return self._thread.is_alive()

    def finished(self) -> bool:
        self._thread.join(WAIT)
        return not self._thread.is_alive()


def test_wait_for_gap_returns_right_after_a_hand_over_and_not_before(ros):
    node = rclpy.create_node("gap_reader", namespace=NAMESPACE, context=ros.context)
    reader = FrameReader(node, FrameStatistics(), lambda: None)
    adapter = ReleasedAdapter()
    events: list[str] = []
    published = threading.Event()

    def publish(frame: MocapFrame, arrival: float) -> None:
        events.append(f"frame {frame.frame_number}")
        published.set()

    try:
        # no reader running: nothing to wait for, at once
        assert reader.wait_for_gap(WAIT) is False

        reader.start(adapter, 0.05, publish)
        adapter.released.put(1)
        assert published.wait(WAIT)  # the thread runs and hands frames over
        adapter.past_hand_over()  # a waiter from now on cannot be let go by frame 1
        waiter = Waiter(reader, WAIT, events)
        assert waiter.blocked_for(STILL_BLOCKED_S), "returned with no frame handed over since it was called"
        adapter.released.put(2)
        assert waiter.finished() and waiter.result is True
        assert events == ["frame 1", "frame 2", "gap True"]

        # two callers of one moment are both let go by the one hand-over
        first, second = Waiter(reader, WAIT, events), Waiter(reader, WAIT, events)
        assert first.blocked_for(STILL_BLOCKED_S) and second.blocked_for(0.0)
        adapter.released.put(3)
        assert first.finished() and second.finished()
        assert first.result is True and second.result is True

        # no frame within the timeout: False, and the next hand-over is not held up by it
        assert reader.wait_for_gap(0.05) is False
        published.clear()
        adapter.released.put(4)
        assert published.wait(WAIT)
        adapter.past_hand_over()
        # stopping the reader lets a waiter go: no hand-over will come
        stopped = Waiter(reader, WAIT, events)
        assert stopped.blocked_for(STILL_BLOCKED_S)
    finally:
        reader.stop(join_timeout=WAIT)
        node.destroy_node()
    assert stopped.finished() and stopped.result is True
    assert reader.wait_for_gap(WAIT) is False  # stopped: at once again


def test_the_diagnostics_report_waits_for_the_readers_next_hand_over(ros, monkeypatch):
    from mocap4r2_control import system_diagnostics
    from mocap4r2_control.system_node import MocapSystemNode

    reports = ros.subscribe("/diagnostics", DiagnosticArray)
    node = MocapSystemNode(ReleasedAdapter, "gapper", namespace=NAMESPACE, context=ros.context)
    name = f"{NAMESPACE}/gapper"

    def ours(message: DiagnosticArray) -> bool:
        return any(s.name.startswith(name) for s in message.status)

    with spinning(ros.context, node):
        try:
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            adapter = node.adapter
            assert isinstance(adapter, ReleasedAdapter)
            # without a frame the report still goes out, after its bound on the wait
            assert system_diagnostics.GAP_WAIT_S < 1.0
            node.diagnostics.publish()
            assert reports.wait_for(ours, WAIT)

            # with the bound raised past the test's patience, the order is certain: the
            # report's two parts (its figures, then their bytes and the publish) each wait
            # for a hand-over of their own
            monkeypatch.setattr(system_diagnostics, "GAP_WAIT_S", WAIT)
            events: list[str] = []
            reporting = threading.Thread(
                target=lambda: (node.diagnostics.publish(), events.append("report")), daemon=True
            )
            reporting.start()
            reporting.join(STILL_BLOCKED_S)
            assert reporting.is_alive(), "the report did not wait for the reader's hand-over"
            events.append("frame 1 released")
            adapter.released.put(1)
            reporting.join(STILL_BLOCKED_S)
            assert reporting.is_alive(), "the report was published without waiting for a second hand-over"
            events.append("frame 2 released")
            adapter.released.put(2)
            reporting.join(WAIT)
            assert not reporting.is_alive()
            assert events == ["frame 1 released", "frame 2 released", "report"]
        finally:
            node.trigger_deactivate()
    node.destroy_node()
