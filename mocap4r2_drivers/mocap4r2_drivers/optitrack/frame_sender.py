"""natnet_simulator's frame thread: every frame computed ahead and sent at its instant.

Motive sends its frames from its own machine whatever its command handling does, each
as soon as it is processed: ``latency`` after the cameras' mid-exposure, the cameras
exposing on their sync clock, evenly. The stand-in's command channel stays on its
select() loop (:class:`~.simulator.NatNetSimulator`); the frames have this thread. A
frame sent when a loop wakes up and has computed and encoded it leaves that much late, a
different amount each time, and every stamp measured against the frame's capture
carries that lateness. So the thread (scheduled by
:class:`~mocap4r2_drivers.sim_server.FrameThread`) computes and encodes each frame ahead
of its due time (the server's work, which its latency covers), never just before a send
unless no frame is ready, sleeps until shortly before a send and polls the clock for the
rest, then sends: multicast to the group, or unicast to every client (``--unicast-to``).

With a time impairment the network takes each frame at its due time and releases it with
its burst (the due time of the burst's last frame plus the delay drawn for it); the
frame's stamps say it left the server when due. Pure sockets and threads, no ROS.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..impairment import Delivery, ServerClock, TruthLog
from ..sim_server import FrameThread
from . import protocol as nn
from .protocol import FrameOfData, Version
from .scene_stream import SceneStream

__all__ = ["CLOCK_FREQUENCY", "FrameSender", "FrameSource", "PreparedFrame"]

CLOCK_FREQUENCY = 10_000_000  # server clock ticks per second (Motive's is QueryPerformanceCounter)
#: frames the scene drops one after the other that are looked through at once (a scene
#: may drop every frame; the thread then waits for the last one's time)
MAX_DROPPED_RUN = 256
#: a sender this far behind its clock (a stalled machine) skips ahead instead of bursting, s
FAR_BEHIND = 0.25

log = logging.getLogger("natnet_simulator")


@dataclass
class PreparedFrame:
    """A frame computed and encoded ahead of its due time."""

    number: int
    captured: float  # monotonic: the cameras' mid-exposure
    due: float  # monotonic: when the server sends it (capture + its latency)
    frame: FrameOfData
    version: Version  # of ``packet``
    packet: bytes


@dataclass
class FrameSource:
    """What the frame thread needs of the server, and nothing more: the scene's NatNet
    view, the schedule (rate, ``frames`` to send, 0: all), the server clock and the
    network, how to take the next frame's params bits with the version streamed now
    (under the server's lock: a command changes the two together), and where a frame
    goes when it leaves (``transmit``: to the group or the clients)."""

    stream: SceneStream
    rate: float
    frames: int
    clock: ServerClock
    shifts_clock: bool
    delays: bool
    delivery: Delivery[PreparedFrame]
    next_params: Callable[[], tuple[int, Version]]
    transmit: Callable[[PreparedFrame], None]
    truth: TruthLog | None = None
    wall_offset: float = 0.0


class FrameSender(FrameThread[PreparedFrame, PreparedFrame]):
    """The frame thread of a natnet_simulator (the schedule is :class:`FrameThread`'s;
    it ends once the last frame of ``--frames`` is sent). It encodes each frame in the
    version the server streams now; ``source.transmit`` sends it (and encodes it again
    for a unicast client that asked for another version)."""

    def __init__(self, source: FrameSource, start: float) -> None:
        super().__init__(source.rate, source.delivery, source.delays)
        self.source = source
        self.start = start  # monotonic: frame k is due at start + k / rate
        self.period = 1.0 / source.rate
        self.latency = source.stream.scene.latency
        self.next_number = 0
        self.sent = 0  # frames that left the server
        self._finished = False  # every frame asked for (``--frames``) has been computed

    def run(self, halt: threading.Event) -> None:
        """(frame thread) Sends every frame at its instant until ``halt``."""
        try:
            self.frame_loop(halt, halt)
        except Exception as exc:  # e.g. the truth log's disk is full: say why frames stopped
            log.error(f"the frame clock stopped: {exc!r}; no frames are sent any more")
            raise

    def finished(self) -> bool:
        """Every frame asked for (``--frames``) has been computed."""
        return self._finished

    def prepare(self, now: float) -> tuple[PreparedFrame | None, float]:
        """The next frame, computed, stamped and encoded, and its due time; None (and
        the due time of the last frame looked at) when the scene drops MAX_DROPPED_RUN
        frames on end or every frame asked for has been computed."""
        source = self.source
        scene = source.stream.scene
        limit = source.frames
        k = self.next_number
        due = self.start + k * self.period
        if now - due > FAR_BEHIND:
            k = int((now - self.start) / self.period)
        for _ in range(MAX_DROPPED_RUN):
            due = self.start + k * self.period
            if limit and k >= limit:
                self._finished = True
                return None, due
            if not scene.is_dropped(k):
                break
            k += 1
        else:
            self.next_number = k
            return None, due
        self.next_number = k + 1
        frame = source.stream.frame_of_data(k)
        captured = due - self.latency
        latency_ticks = int(self.latency * CLOCK_FREQUENCY)
        if source.shifts_clock:
            transmit = int(source.clock.read(due) * CLOCK_FREQUENCY)
            exposure = int(source.clock.read(captured) * CLOCK_FREQUENCY)
        else:  # the monotonic clock, in ticks
            transmit = int(due * CLOCK_FREQUENCY)
            exposure = transmit - latency_ticks
        frame.stamp_transmit = transmit
        frame.stamp_camera_mid_exposure = exposure
        frame.stamp_data_received = transmit - latency_ticks // 2
        frame.params, version = source.next_params()
        packet = nn.encode_frame(frame, version)
        return PreparedFrame(k, captured, due, frame, version, packet), due

    def hand_out(self, frame: PreparedFrame) -> PreparedFrame:
        """The frame leaves the server (to the network, or straight to the clients)."""
        source = self.source
        if source.truth is not None:
            source.truth.write(frame.number, source.wall_offset + frame.captured)
        self.sent += 1
        return frame

    def send_released(self, items: list[PreparedFrame]) -> None:
        """Sends frames now, one after the other."""
        for frame in items:
            self.source.transmit(frame)
