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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..sim_server import FrameThread
from . import protocol as nn
from .protocol import FrameOfData, Version

if TYPE_CHECKING:
    from .simulator import NatNetSimulator

__all__ = ["CLOCK_FREQUENCY", "FrameSender", "PreparedFrame"]

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


class FrameSender(FrameThread[PreparedFrame, PreparedFrame]):
    """The frame thread of a :class:`~.simulator.NatNetSimulator` (the schedule is
    :class:`FrameThread`'s; it ends once the last frame of ``--frames`` is sent).

    It shares the server's scene stream, commands (the bitstream version and the params
    bits of the next frame, read under the server's lock), server clock, network
    (``delivery``), truth log and sockets; the command loop changes the version and
    the clients, this thread follows.
    """

    def __init__(self, server: NatNetSimulator, start: float) -> None:
        super().__init__(server.rate, server.delivery, server.impairment.delays)
        self.server = server
        self.start = start  # monotonic: frame k is due at start + k / rate
        self.period = 1.0 / server.rate
        self.latency = server.stream.scene.latency
        self.next_number = 0
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
        server = self.server
        scene = server.stream.scene
        limit = server.options.frames
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
        frame = server.stream.frame_of_data(k)
        captured = due - self.latency
        latency_ticks = int(self.latency * CLOCK_FREQUENCY)
        if server.impairment.shifts_clock:
            transmit = int(server.clock.read(due) * CLOCK_FREQUENCY)
            exposure = int(server.clock.read(captured) * CLOCK_FREQUENCY)
        else:  # the monotonic clock, in ticks
            transmit = int(due * CLOCK_FREQUENCY)
            exposure = transmit - latency_ticks
        frame.stamp_transmit = transmit
        frame.stamp_camera_mid_exposure = exposure
        frame.stamp_data_received = transmit - latency_ticks // 2
        with server.lock:  # a command changes the two together
            frame.params = server.commands.take_params()
            version = server.commands.version
        packet = nn.encode_frame(frame, version)
        return PreparedFrame(k, captured, due, frame, version, packet), due

    def hand_out(self, frame: PreparedFrame) -> PreparedFrame:
        """The frame leaves the server (to the network, or straight to the clients)."""
        server = self.server
        if server.truth is not None:
            server.truth.write(frame.number, server.wall_offset + frame.captured)
        server.frames_sent += 1
        return frame

    def send_released(self, items: list[PreparedFrame]) -> None:
        """Sends frames now, one after the other."""
        for frame in items:
            self._send(frame)

    def _send(self, frame: PreparedFrame) -> None:
        server = self.server
        version = server.commands.version
        if frame.version != version:  # the bitstream changed since it was encoded
            frame.packet, frame.version = nn.encode_frame(frame.frame, version), version
        server.last_frame = frame.packet
        server.transmit(frame.packet)
