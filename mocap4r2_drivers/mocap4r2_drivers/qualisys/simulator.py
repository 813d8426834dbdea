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
client that does not read fast enough loses frames (its socket buffer is bounded), and
if the server itself falls behind it skips ahead rather than sending a growing backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time

from ..impairment import Delivery, ServerClock, TimeImpairment, TruthLog, add_arguments, from_arguments
from ..sim_server import FramePacer, add_scene_arguments, load_scene, peer_name, run_until_signalled
from ..simulated.scene import Scene, SceneError
from . import protocol as qp
from .commands import QtmCommands, Session, StreamRequest
from .protocol import Event, PacketType
from .scene_stream import SceneStream, parameters_xml

__all__ = ["QtmSimulator", "SceneStream", "Session", "StreamRequest", "load_scene", "main", "parameters_xml"]

WELCOME = "QTM RT Interface connected"
MAX_SEND_BUFFER = 4 * 1024 * 1024  # a slower client loses frames beyond this backlog


class QtmSimulator:
    """The RT server: connections and the real-time frame clock; commands go to :class:`QtmCommands`."""

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
        self.encoder = SceneStream(scene)
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
        self._own_clock = self.impairment.shifts_clock
        self.delivery: Delivery[tuple[Session, bytes]] = Delivery(self.impairment)
        self._delivery_wake = asyncio.Event()
        self._delivery_task: asyncio.Task | None = None
        self.truth = TruthLog(self.impairment.truth_log) if self.impairment.truth_log else None
        self._wall_offset = time.time() - time.monotonic()
        self._streaming = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._clock_task: asyncio.Task | None = None
        self.port = 0

    @property
    def frames_late_skipped(self) -> int:
        """Frames not sent because the server fell behind real time."""
        return self.pacer.skipped

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._clock_task = asyncio.get_running_loop().create_task(self._clock())
        self._delivery_task = asyncio.get_running_loop().create_task(self._deliver())
        return self.port

    async def stop(self) -> None:
        """Tell every client QTM is shutting down, then close (as QTM does)."""
        for session in list(self.sessions):
            session.send(qp.pack_event(Event.QTM_SHUTTING_DOWN))
            session.closed = True
            session.writer.close()
        if self._server is not None:
            self._server.close()
        if self._clock_task is not None:
            self._clock_task.cancel()
        if self._delivery_task is not None:
            self._delivery_task.cancel()
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
        session = Session(writer=writer, peer=peer)
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

    # ------------------------------------------------------------------ the frame clock
    def _update_streaming(self) -> None:
        if any(s.stream is not None and not s.closed for s in self.sessions):
            self._streaming.set()
        else:
            self._streaming.clear()

    async def _clock(self) -> None:
        """Sends every frame to every streaming client at its real-time instant."""
        scene = self.scene
        rate = scene.rate
        while True:
            if not self._streaming.is_set():
                await self._streaming.wait()
                self.pacer.restart()
            # the newest frame already due: start there, or skip ahead when too late
            k = self.pacer.take(time.monotonic())
            if scene.is_dropped(k):
                continue
            frame = self.encoder.frame(k)
            delay = k / rate + frame.latency - (time.monotonic() - self.start_time)
            # a late frame is sent at once, but the loop still yields: behind real time
            # (a rate the machine cannot keep up with) it would otherwise never let the
            # event loop read a command or handle SIGTERM
            await asyncio.sleep(max(delay, 0.0))
            captured = self.start_time + k / rate
            timestamp = int(round(self.clock.read(captured) * 1e6)) if self._own_clock else None
            if self.truth is not None:
                self.truth.write(k, self._wall_offset + captured)
            self._send_frame(k, timestamp)

    async def _deliver(self) -> None:
        """Sends the frames the impairment held back, each at its time."""
        while True:
            release = self.delivery.next_time()
            if release is None:
                self._delivery_wake.clear()
                await self._delivery_wake.wait()
                continue
            await asyncio.sleep(max(release - time.monotonic(), 0.0))
            for session, packet in self.delivery.due(time.monotonic()):
                session.send(packet)

    def _send_frame(self, k: int, timestamp: int | None = None) -> None:
        rate = self.scene.rate
        for session in self.sessions:
            stream = session.stream
            if session.closed or stream is None or not session.wants(k, rate):
                continue
            if session.writer.transport.get_write_buffer_size() > MAX_SEND_BUFFER:
                session.frames_skipped += 1
                continue
            packet = self.encoder.packet(k, stream.components, timestamp)
            if self.impairment.delays:
                self.delivery.put((session, packet), time.monotonic())
                self._delivery_wake.set()
            else:
                session.send(packet)
            session.frames_sent += 1


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
