"""qtm_simulator: a stand-in for QTM's real-time server, serving a simulated scene.

It speaks the QTM RT protocol on the little-endian TCP port (base port + 1, 22223 by
default): the welcome string, ``Version``, ``QTMVersion``, ``ByteOrder``, ``GetState``,
``GetParameters`` (General, 3D, 6D, Skeleton), ``GetCurrentFrame`` and ``StreamFrames``
(AllFrames, Frequency:n, FrequencyDivisor:n) with the components 3D, 3DRes, 3DNoLabels,
3DNoLabelsRes, 6D, 6DRes and Skeleton[:global], ``TakeControl`` / ``ReleaseControl``
(with an optional password) and ``Quit``; everything else gets QTM's error answers
(the answers are in ``commands.py``; this module holds the connections and the clock).

Frames come from :class:`~mocap4r2_drivers.simulated.scene.Scene` with real-time pacing: frame k
is captured at ``start + k / rate`` and sent ``latency`` later; frames the scene drops
are never sent (their numbers are skipped). Like QTM, the server keeps real time: a
client that does not read fast enough loses frames (its send buffer is bounded), and
if the server itself falls behind it skips ahead rather than sending a growing backlog.

Connections and commands run on an asyncio loop; the frames have a thread of their own
(:class:`FrameSender`), as QTM sends from its own machine whatever its
command handling does. A frame leaves when it is due: ``latency`` after its capture, or,
with a time impairment, when the network releases its burst (the due time of the burst's
last frame plus the delay drawn for it). An asyncio timer cannot do that: the loop sleeps
in epoll, whose timeout has 1 ms steps, so a frame would leave up to 1 ms late, a
different amount each time. The thread (scheduled by
:class:`~mocap4r2_drivers.sim_server.FrameThread`) computes and encodes each frame ahead
of its due time (the server's work, which its latency covers), never just before a frame
or burst is due unless no frame is ready, sleeps until shortly before a send and polls the
clock for the rest, then writes to the clients' sockets itself (:class:`StreamSession`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field

from ..impairment import (
    Delivery,
    ServerClock,
    TimeImpairment,
    TruthLog,
    add_arguments,
    from_arguments,
    wall_clock_offset,
)
from ..sim_server import (
    FramePacer,
    FrameThread,
    ThreadedStreamWriter,
    ThreadWrite,
    add_scene_arguments,
    load_scene,
    peer_name,
    run_until_signalled,
)
from ..simulated.scene import Scene, SceneError
from . import protocol as qp
from .commands import QtmCommands, Session, StreamRequest
from .protocol import Event, PacketType
from .scene_stream import SceneStream, parameters_xml

__all__ = [
    "FrameSender",
    "QtmSimulator",
    "SceneStream",
    "Session",
    "StreamRequest",
    "StreamSession",
    "load_scene",
    "main",
    "parameters_xml",
]

WELCOME = "QTM RT Interface connected"
#: a slower client loses frames beyond this backlog (read when a session starts, and per frame)
MAX_SEND_BUFFER = ThreadedStreamWriter.MAX_SEND_BUFFER
#: frames the scene drops one after the other that the frame thread looks through at once
#: (a scene may drop every frame; the thread then waits for the last one's time)
MAX_DROPPED_RUN = 256


@dataclass
class StreamSession(Session):
    """A connected client that two threads write to: the loop (command answers) and the
    frame thread (frames, at their instant). Every write goes through one lock and the
    bytes go out in the order they were written.

    The frame thread writes through a :class:`ThreadedStreamWriter`: to the socket
    itself when nothing is waiting to be written before it, otherwise handed to the
    loop in order. A client that falls further behind loses frames."""

    loop: asyncio.AbstractEventLoop | None = None
    tcp: ThreadedStreamWriter = field(init=False, repr=False, compare=False)  # its lock is the session's lock

    def __post_init__(self) -> None:
        self.tcp = ThreadedStreamWriter(
            self.writer, self.loop, lambda: self.closed, max_send_buffer=MAX_SEND_BUFFER
        )

    def backlog(self) -> int:
        """Bytes the transport holds for the socket (the length of the loop's buffer, read whole)."""
        return self.writer.transport.get_write_buffer_size()

    def send(self, data: bytes) -> None:
        """(loop thread) Write ``data`` after everything written before."""
        self.tcp.write_from_loop(data)

    def send_frames(self, data: bytes, frames: int) -> bool:
        """(frame thread) Write the packets of ``frames`` frames now; False (counted as
        skipped) when the client's backlog is full or the connection is gone."""
        with self.tcp.lock:
            outcome = self.tcp.write_from_thread(data)
            if outcome is ThreadWrite.FULL:
                self.frames_skipped += frames
            return outcome is ThreadWrite.WRITTEN


@dataclass
class PreparedFrame:
    """A frame computed and encoded ahead of its due time."""

    number: int
    captured: float  # monotonic
    due: float  # monotonic: capture + the server's latency
    timestamp: int | None  # the server clock's, us (None: k periods)
    packets: dict[tuple[str, ...], bytes]  # by the components a client streams


class QtmSimulator:
    """The RT server: connections, the streaming state and the frame thread's lifecycle;
    commands go to :class:`QtmCommands`, frames are computed and sent by :class:`FrameSender`."""

    def __init__(
        self,
        scene: Scene,
        password: str | None = None,
        max_clients: int = 10,
        verbose: bool = False,
        impairment: TimeImpairment | None = None,
    ):
        self.scene = scene
        self.max_clients = max_clients
        self.encoder = SceneStream(scene)  # the loop's (GetCurrentFrame)
        self.sessions: list[Session] = []
        self.commands = QtmCommands(
            scene,
            current_packet=lambda names: self.encoder.packet(self.current_frame_number(), names),
            streams_changed=self._update_streaming,
            log=self.log,
            password=password,
            verbose=verbose,
        )
        self.start_time = time.monotonic()  # the measurement started with the server
        self.pacer = FramePacer(scene.rate, scene.latency, self.start_time)
        # what a network and QTM's clock do to time (mocap4r2_drivers/impairment.py)
        self.impairment = impairment or TimeImpairment()
        self.clock = ServerClock(self.impairment, self.start_time)
        # frames on the network: each item is one frame's packets to its clients
        self.delivery: Delivery[list[tuple[StreamSession, bytes]]] = Delivery(self.impairment)
        self.truth = TruthLog(self.impairment.truth_log) if self.impairment.truth_log else None
        self._streaming = threading.Event()  # some client streams (cleared: the frame clock stops)
        self._wake = threading.Event()  # the frame thread re-plans: streaming changed, or stop
        self._stopping = threading.Event()
        self.frame_sender = FrameSender(self)
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def frames_late_skipped(self) -> int:
        """Frames not sent because the server fell behind real time."""
        return self.pacer.skipped

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._thread = threading.Thread(target=self.frame_sender.run, name="qtm-frames", daemon=True)
        self._thread.start()
        return self.port

    async def stop(self) -> None:
        """Tell every client QTM is shutting down, then close (as QTM does)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(2.0)  # it never waits for the loop: a short wait
        for session in list(self.sessions):
            session.send(qp.pack_event(Event.QTM_SHUTTING_DOWN))
            session.closed = True
            session.writer.close()
        if self._server is not None:
            self._server.close()
        if self.truth is not None:
            self.truth.close()
        for session in list(self.sessions):
            with contextlib.suppress(Exception):  # the peer may already be gone
                await asyncio.wait_for(session.writer.wait_closed(), 1.0)

    def log(self, text: str) -> None:
        print(f"qtm_simulator: {text}", flush=True)

    # ------------------------------------------------------------------ connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = peer_name(writer)
        session = StreamSession(writer=writer, peer=peer, loop=asyncio.get_running_loop())
        if len(self.sessions) >= self.max_clients:
            session.send_text(PacketType.ERROR, "Connection refused. Max number of clients reached.")
            writer.close()
            return
        self.sessions.append(session)
        self.log(f"client {peer} connected ({len(self.sessions)} connected)")
        session.send_text(PacketType.COMMAND, WELCOME)
        try:
            while not session.closed:
                header = await reader.readexactly(qp.HEADER.size)
                size, packet_type = qp.parse_header(header, qp.MAX_COMMAND_SIZE)
                payload = await reader.readexactly(size)
                self._handle(session, packet_type, payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except qp.QtmProtocolError as exc:
            # a broken stream cannot be resynchronised: answer and close, as QTM does
            self.log(f"client {peer}: {exc}; closing the connection")
            session.send_text(PacketType.ERROR, "Parse Error")
        finally:
            self._drop(session)

    def _drop(self, session: Session) -> None:
        session.closed = True
        if session in self.sessions:
            self.sessions.remove(session)
            self.log(
                f"client {session.peer} disconnected after {session.frames_sent} frames "
                f"({session.frames_skipped} skipped for a full send buffer)"
            )
        self.commands.closed(session)
        self._update_streaming()
        with contextlib.suppress(Exception):  # already closed
            session.writer.close()

    # ------------------------------------------------------------------ commands
    def _handle(self, session: Session, packet_type: int, payload: bytes) -> None:
        self.commands.handle(session, packet_type, payload)

    def current_frame_number(self) -> int:
        """The newest frame that has been captured and processed by now."""
        elapsed = time.monotonic() - self.start_time - self.scene.latency
        k = max(0, int(elapsed * self.scene.rate))
        while k > 0 and self.scene.is_dropped(k):
            k -= 1
        return k

    # ------------------------------------------------------------------ streaming
    def _update_streaming(self) -> None:
        if any(s.stream is not None and not s.closed for s in self.sessions):
            self._streaming.set()
        else:
            self._streaming.clear()
        self._wake.set()


class FrameSender(FrameThread[PreparedFrame, list[tuple[StreamSession, bytes]]]):
    """The frame thread of a :class:`QtmSimulator`: computes every frame ahead of its due
    time and sends it to every streaming client at its instant (the schedule is
    :class:`FrameThread`'s; the network carries a frame's packets to its clients).

    It shares the simulator's sessions, pacer, server clock, network (``delivery``),
    truth log and events (``_streaming``: some client streams; ``_wake``: re-plan now;
    ``_stopping``); the loop side changes them, this thread follows. Its own are a frame
    encoder (a SceneStream caches the last frame's encodings, so the loop, answering
    GetCurrentFrame, has another) and the offset that turns a capture's monotonic time
    into the wall time of the truth log.
    """

    def __init__(self, simulator: QtmSimulator) -> None:
        super().__init__(simulator.scene.rate, simulator.delivery, simulator.impairment.delays)
        self.scene = simulator.scene
        self.sessions = simulator.sessions  # the simulator's list: clients come and go on the loop
        self.pacer = simulator.pacer
        self.impairment = simulator.impairment
        self.clock = simulator.clock
        self.truth = simulator.truth
        self.start_time = simulator.start_time
        self.log = simulator.log
        self._streaming = simulator._streaming
        self._wake = simulator._wake
        self._stopping = simulator._stopping
        self._frames = SceneStream(simulator.scene)
        self._own_clock = self.impairment.shifts_clock
        self._wall_offset = wall_clock_offset()

    def run(self) -> None:
        """(frame thread) Computes every frame ahead and sends it to every streaming
        client at its instant, until stop."""
        try:
            self.frame_loop(self._stopping, self._wake)
        except Exception as exc:  # e.g. the truth log's disk is full: say why frames stopped
            self.log(f"the frame clock stopped: {exc!r}; no frames are sent any more")
            raise

    # ------------------------------------------------------------------ FrameThread's hooks
    def streaming(self) -> bool:
        """Some client streams (the loop sets and clears it)."""
        return self._streaming.is_set()

    def restart(self) -> None:
        """Nobody was served: start at the newest frame."""
        self.pacer.restart()

    def prepare(self, now: float) -> tuple[PreparedFrame | None, float]:
        """The next frame to send, computed and encoded for the components clients
        stream, and its due time; None (and the due time of the last frame looked at)
        when the scene drops MAX_DROPPED_RUN frames on end."""
        scene = self.scene
        for _ in range(MAX_DROPPED_RUN):
            k = self.pacer.take(now)  # the frame after the previous one, or skip ahead when too late
            if not scene.is_dropped(k):
                break
        else:
            return None, self.start_time + k / scene.rate + scene.latency
        frame = self._frames.frame(k)
        captured = self.start_time + k / scene.rate
        timestamp = int(round(self.clock.read(captured) * 1e6)) if self._own_clock else None
        packets: dict[tuple[str, ...], bytes] = {}
        for session in list(self.sessions):
            stream = session.stream
            if stream is not None and not session.closed:
                key = tuple(stream.components)
                if key not in packets:
                    packets[key] = self._frames.packet(k, stream.components, timestamp)
        due = captured + frame.latency
        return PreparedFrame(k, captured, due, timestamp, packets), due

    def hand_out(self, frame: PreparedFrame) -> list[tuple[StreamSession, bytes]]:
        """Which client gets which packet of ``frame`` (each client's rate, its backlog)."""
        k = frame.number
        rate = self.scene.rate
        if self.truth is not None:
            self.truth.write(k, self._wall_offset + frame.captured)
        out: list[tuple[StreamSession, bytes]] = []
        for session in list(self.sessions):
            stream = session.stream
            if not isinstance(session, StreamSession) or session.closed or stream is None:
                continue
            if not session.wants(k, rate):
                continue
            if session.backlog() > MAX_SEND_BUFFER:
                session.frames_skipped += 1
                continue
            packet = frame.packets.get(tuple(stream.components))
            if packet is None:  # the client changed its components since the frame was computed
                packet = self._frames.packet(k, stream.components, frame.timestamp)
            out.append((session, packet))
            session.frames_sent += 1
        return out

    def send_released(self, items: list[list[tuple[StreamSession, bytes]]]) -> None:
        """Sends frames' packets now: a burst the network releases in one write per client."""
        if len(items) == 1:
            self._write(items[0])
        else:
            self._write([pair for frame in items for pair in frame])

    @staticmethod
    def _write(packets: list[tuple[StreamSession, bytes]]) -> None:
        by_client: dict[int, tuple[StreamSession, list[bytes]]] = {}
        for session, packet in packets:
            by_client.setdefault(id(session), (session, []))[1].append(packet)
        for session, parts in by_client.values():
            session.send_frames(parts[0] if len(parts) == 1 else b"".join(parts), len(parts))


# ====================================================================== command line
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qtm_simulator",
        description="A QTM real-time server stand-in serving a simulated mocap scene "
        "(QTM RT protocol 1.2x, little-endian TCP on base port + 1).",
    )
    add_scene_arguments(parser, rate_help="frame rate in Hz (default: the scene's)")
    parser.add_argument(
        "--port",
        type=int,
        default=22222,
        help="QTM base port; the little-endian RT port is this + 1 (default 22222); "
        "0 picks a free RT port and prints it",
    )
    parser.add_argument(
        "--password", default=None, help="password TakeControl needs (default: any client may take control)"
    )
    parser.add_argument(
        "--max-clients", type=int, default=10, help="simultaneous clients (default 10, as QTM)"
    )
    parser.add_argument("--verbose", action="store_true", help="print every command received")
    add_arguments(parser)
    return parser


async def _run(args: argparse.Namespace, scene: Scene) -> int:
    simulator = QtmSimulator(
        scene,
        password=args.password,
        max_clients=args.max_clients,
        verbose=args.verbose,
        impairment=args.impairment,
    )
    rt_port = 0 if args.port == 0 else args.port + 1
    try:
        rt_port = await simulator.start(args.host, rt_port)
    except OSError as exc:
        print(f"qtm_simulator: cannot listen on {args.host}:{rt_port}: {exc.strerror}", file=sys.stderr)
        return 1
    d = scene.description
    return await run_until_signalled(
        simulator,
        f"qtm_simulator ready: RT port {args.host}:{rt_port} (little-endian, base port {rt_port - 1}), "
        f"{len(d.bodies)} bodies, {sum(len(b.marker_names) for b in d.bodies)} labeled markers, "
        f"{len(d.skeletons)} skeletons at {scene.rate:g} Hz",
    )


def main(argv: list[str] | None = None) -> int:
    """qtm_simulator's command line; the exit status."""
    args = _parser().parse_args(argv)
    if args.port < 0 or args.port > 65534:
        print("qtm_simulator: --port must be in [0, 65534]", file=sys.stderr)
        return 2
    try:
        scene = load_scene(args.scene, args.seed, args.rate)
        args.impairment = from_arguments(args, seed=max(args.seed, 0))
    except (SceneError, ValueError) as exc:
        print(f"qtm_simulator: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_run(args, scene))


if __name__ == "__main__":
    raise SystemExit(main())
