"""qtm_simulator: a stand-in for QTM's real-time server, serving a simulated scene.

It speaks the QTM RT protocol on the little-endian TCP port (base port + 1, 22223 by
default): the welcome string, ``Version``, ``QTMVersion``, ``ByteOrder``, ``GetState``,
``GetParameters`` (General, 3D, 6D, Skeleton), ``GetCurrentFrame`` and ``StreamFrames``
(AllFrames, Frequency:n, FrequencyDivisor:n) with the components 3D, 3DRes, 3DNoLabels,
3DNoLabelsRes, 6D, 6DRes and Skeleton[:global], ``TakeControl`` / ``ReleaseControl``
(with an optional password) and ``Quit``; everything else gets QTM's error answers.

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
import math
import signal
import sys
import time
from dataclasses import dataclass

from mocap4r2_control.stop_signals import stop_noted

from ..impairment import Delivery, ServerClock, TimeImpairment, TruthLog, add_arguments, from_arguments
from ..simulated.scene import Scene, SceneError, default_scene_path
from . import protocol as qp
from .protocol import Event, PacketType
from .scene_stream import SceneStream, parameters_xml, version_tuple

__all__ = ["QtmSimulator", "SceneStream", "Session", "StreamRequest", "load_scene", "main", "parameters_xml"]

WELCOME = "QTM RT Interface connected"
QTM_VERSION = "QTM Version is 2.26 (build 1; mocap4r2 qtm_simulator)"
SUPPORTED_MINOR = range(1, 27)  # protocol versions 1.1 .. 1.26
DEFAULT_VERSION = "1.1"  # what QTM assumes until a client sends Version
MAX_SEND_BUFFER = 4 * 1024 * 1024  # a slower client loses frames beyond this backlog
MAX_LATENESS = 0.25  # s behind real time before the server skips ahead
UNSUPPORTED_COMPONENTS = {
    "2d",
    "2dlin",
    "analog",
    "analogsingle",
    "force",
    "forcesingle",
    "6deuler",
    "6deulerres",
    "image",
    "gazevector",
    "eyetracker",
    "timecode",
}
PARAMETER_PARTS = ("general", "3d", "6d", "skeleton")


# ====================================================================== server
@dataclass
class StreamRequest:
    """What a client asked StreamFrames for."""

    components: list[str]
    divisor: int = 1  # send frames whose number is a multiple of this
    frequency: float = 0.0  # or about this many frames per second (0: every frame)


@dataclass
class Session:
    """One connected RT client."""

    writer: asyncio.StreamWriter
    peer: str
    version: str = DEFAULT_VERSION
    stream: StreamRequest | None = None
    frames_sent: int = 0
    frames_skipped: int = 0
    closed: bool = False
    last_slot: int = -1

    def send(self, data: bytes) -> None:
        if not self.closed:
            self.writer.write(data)

    def send_text(self, packet_type: PacketType, text: str) -> None:
        self.send(qp.pack_text(packet_type, text))

    def wants(self, k: int, rate: float) -> bool:
        stream = self.stream
        if stream is None:
            return False
        if stream.frequency > 0:
            slot = math.floor(k * stream.frequency / rate)
            if slot == self.last_slot:
                return False
            self.last_slot = slot
            return True
        return k % stream.divisor == 0


class QtmSimulator:
    """The RT server: sessions, commands and the real-time frame clock."""

    def __init__(
        self,
        scene: Scene,
        password: str | None = None,
        max_clients: int = 10,
        verbose: bool = False,
        impairment: TimeImpairment | None = None,
    ):
        self.scene = scene
        self.password = password
        self.max_clients = max_clients
        self.verbose = verbose
        self.encoder = SceneStream(scene)
        self.sessions: list[Session] = []
        self.master: Session | None = None
        self.start_time = time.monotonic()  # the measurement started with the server
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
        self.frames_late_skipped = 0
        self.port = 0
        self.capturing = False  # Start .. Stop
        self.unsaved_capture = False  # stopped, not saved yet
        self.saved: list[str] = []  # file names of saved captures (bounded below)

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
        peer_address = writer.get_extra_info("peername")
        peer = f"{peer_address[0]}:{peer_address[1]}" if peer_address else "?"
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
        if self.master is session:
            self.master = None
        self._update_streaming()
        with contextlib.suppress(Exception):  # already closed
            session.writer.close()

    # ------------------------------------------------------------------ commands
    def _handle(self, session: Session, packet_type: int, payload: bytes) -> None:
        if packet_type == PacketType.XML:
            session.send_text(PacketType.ERROR, "Setting parameters is not supported by qtm_simulator")
            return
        if packet_type != PacketType.COMMAND:
            session.send_text(PacketType.ERROR, "Parse Error")
            return
        text = qp.unpack_text(payload)
        if self.verbose:
            self.log(f"{session.peer} > {text}")
        name, args = qp.parse_command(text)
        handler = getattr(self, f"_cmd_{name}", None) if name.isalpha() else None
        if handler is None:
            if name in (
                "new",
                "close",
                "load",
                "loadproject",
                "trig",
                "setqtmevent",
                "event",
                "reprocess",
                "led",
                "calibrate",
                "getcapturec3d",
                "getcaptureqtm",
            ):
                session.send_text(PacketType.ERROR, "Command not supported.")
            else:
                session.send_text(PacketType.ERROR, "Parse Error")
            return
        try:
            handler(session, args)
        except Exception as exc:  # noqa: BLE001 - a bad request must not end the server
            self.log(f"client {session.peer}: {text!r} failed: {exc!r}")
            session.send_text(PacketType.ERROR, "Parse Error")

    def _cmd_version(self, session: Session, args: list[str]) -> None:
        if not args:
            session.send_text(PacketType.COMMAND, f"Version is {session.version}")
            return
        try:
            major, minor = version_tuple(args[0])
        except ValueError:
            session.send_text(PacketType.ERROR, "Version NOT supported")
            return
        if major != 1 or minor not in SUPPORTED_MINOR:
            session.send_text(PacketType.ERROR, "Version NOT supported")
            return
        session.version = f"{major}.{minor}"
        session.send_text(PacketType.COMMAND, f"Version set to {session.version}")

    def _cmd_qtmversion(self, session: Session, args: list[str]) -> None:
        session.send_text(PacketType.COMMAND, QTM_VERSION)

    def _cmd_byteorder(self, session: Session, args: list[str]) -> None:
        session.send_text(PacketType.COMMAND, "Byte order is little endian")

    def _cmd_getstate(self, session: Session, args: list[str]) -> None:
        # QTM is connected to its (simulated) cameras and shows real-time data
        session.send(qp.pack_event(Event.CONNECTED))

    def _cmd_getparameters(self, session: Session, args: list[str]) -> None:
        parts: list[str] = []
        for arg in (a.lower() for a in args):
            if arg == "all":
                parts = list(PARAMETER_PARTS)
                break
            if arg in PARAMETER_PARTS or arg == "skeleton:global":
                parts.append(arg)
            elif arg not in ("analog", "force", "image", "gazevector", "eyetracker", "calibration"):
                session.send_text(PacketType.ERROR, "Parse Error")
                return
        if not parts:
            session.send_text(PacketType.ERROR, "Parameters not available")
            return
        session.send_text(PacketType.XML, parameters_xml(self.scene, parts, session.version))

    def _components(self, session: Session, args: list[str]) -> list[str] | None:
        names = []
        for arg in (a.lower() for a in args):
            if arg in qp.COMPONENT_NAMES:
                names.append(arg)
            elif arg.split(":")[0] in UNSUPPORTED_COMPONENTS:
                session.send_text(PacketType.ERROR, f"Component {arg} is not supported by qtm_simulator")
                return None
            else:
                session.send_text(PacketType.ERROR, "Parse Error")
                return None
        if not names:
            session.send_text(PacketType.ERROR, "Parse Error")
            return None
        return names

    def current_frame_number(self) -> int:
        """The newest frame that has been captured and processed by now."""
        elapsed = time.monotonic() - self.start_time - self.scene.latency
        k = max(0, int(elapsed * self.scene.rate))
        while k > 0 and self.scene.is_dropped(k):
            k -= 1
        return k

    def _cmd_getcurrentframe(self, session: Session, args: list[str]) -> None:
        names = self._components(session, args)
        if names is not None:
            session.send(self.encoder.packet(self.current_frame_number(), names))

    def _cmd_streamframes(self, session: Session, args: list[str]) -> None:
        if len(args) == 1 and args[0].lower() == "stop":
            session.stream = None
            self._update_streaming()
            return
        if not args:
            session.send_text(PacketType.ERROR, "Parse Error")
            return
        mode, rest = args[0].lower(), args[1:]
        request = StreamRequest(components=[])
        try:
            if mode == "allframes":
                pass
            elif mode.startswith("frequencydivisor:"):
                request.divisor = int(mode.split(":", 1)[1])
                if request.divisor < 1:
                    raise ValueError
            elif mode.startswith("frequency:"):
                request.frequency = float(mode.split(":", 1)[1])
                if not request.frequency > 0:
                    raise ValueError
            else:
                raise ValueError
        except ValueError:
            session.send_text(PacketType.ERROR, "Parse Error")
            return
        if rest and rest[0].lower().startswith("udp"):
            session.send_text(PacketType.ERROR, "UDP streaming is not supported by qtm_simulator")
            return
        names = self._components(session, rest)
        if names is None:
            return
        request.components = names
        session.stream = request
        session.last_slot = -1
        self._update_streaming()

    def _cmd_takecontrol(self, session: Session, args: list[str]) -> None:
        if self.master is session:
            session.send_text(PacketType.COMMAND, "You are already master")
        elif self.master is not None:
            session.send_text(PacketType.ERROR, f"{self.master.peer.replace(':', ' (')}) is already master")
        elif self.password is not None and (not args or args[0] != self.password):
            session.send_text(PacketType.ERROR, "Wrong or missing password")
        else:
            self.master = session
            session.send_text(PacketType.COMMAND, "You are now master")

    def _cmd_releasecontrol(self, session: Session, args: list[str]) -> None:
        if self.master is session:
            self.master = None
            session.send_text(PacketType.COMMAND, "You are now a regular client")
        else:
            session.send_text(PacketType.COMMAND, "You are already a regular client")

    # QTM's capture commands need control (TakeControl). The answers qtm-rt checks
    # ("Starting measurement", "Stopping measurement", "Measurement saved") are QTM's;
    # the refusals are the stand-in's own words for what QTM refuses.
    def _master_only(self, session: Session) -> bool:
        if self.master is not session:
            session.send_text(PacketType.ERROR, "You must be master to issue this command")
            return False
        return True

    def _cmd_start(self, session: Session, args: list[str]) -> None:
        if not self._master_only(session):
            return
        if self.capturing:
            session.send_text(PacketType.ERROR, "Measurement is already running")
            return
        self.capturing, self.unsaved_capture = True, False
        self.log("capture started")
        session.send_text(PacketType.COMMAND, "Starting measurement")

    def _cmd_stop(self, session: Session, args: list[str]) -> None:
        if not self._master_only(session):
            return
        if not self.capturing:
            session.send_text(PacketType.ERROR, "No measurement is running")
            return
        self.capturing, self.unsaved_capture = False, True
        self.log("capture stopped")
        session.send_text(PacketType.COMMAND, "Stopping measurement")

    def _cmd_save(self, session: Session, args: list[str]) -> None:
        if not self._master_only(session):
            return
        if not args:
            session.send_text(PacketType.ERROR, "Save needs a file name")
            return
        name, overwrite = args[0], args[1:2] == ["overwrite"]
        if not self.unsaved_capture:
            session.send_text(PacketType.ERROR, "No measurement to save")
            return
        if name in self.saved and not overwrite:
            session.send_text(PacketType.ERROR, f"{name} exists already")
            return
        self.unsaved_capture = False
        self.saved = (self.saved + [name])[-100:]
        self.log(f"capture saved as {name}")
        session.send_text(PacketType.COMMAND, f"Measurement saved as '{name}'")

    def _cmd_quit(self, session: Session, args: list[str]) -> None:
        session.send_text(PacketType.COMMAND, "Bye bye")
        session.closed = True

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
        k: int | None = None
        while True:
            if not self._streaming.is_set():
                await self._streaming.wait()
                k = None
            # the newest frame already due: start there, or skip ahead when too late
            due = int((time.monotonic() - self.start_time - scene.latency) * rate)
            if k is None or k < due - MAX_LATENESS * rate:
                if k is not None:
                    self.frames_late_skipped += due - k
                k = max(due + 1, 0)
            if scene.is_dropped(k):
                k += 1
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
            k += 1

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
    parser.add_argument("--scene", default="", help="scene YAML file (default: the demo scene)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=int,
        default=22222,
        help="QTM base port; the little-endian RT port is this + 1 (default 22222); "
        "0 picks a free RT port and prints it",
    )
    parser.add_argument("--rate", type=float, default=0.0, help="frame rate in Hz (default: the scene's)")
    parser.add_argument("--seed", type=int, default=-1, help="random seed (default: the scene's)")
    parser.add_argument(
        "--password", default=None, help="password TakeControl needs (default: any client may take control)"
    )
    parser.add_argument(
        "--max-clients", type=int, default=10, help="simultaneous clients (default 10, as QTM)"
    )
    parser.add_argument("--verbose", action="store_true", help="print every command received")
    add_arguments(parser)
    return parser


def load_scene(path: str, seed: int, rate: float) -> Scene:
    """The scene file (the demo scene for ""), with its seed and rate unless given (>= 0, > 0)."""
    scene = Scene.from_file(path or default_scene_path(), seed=None if seed < 0 else seed)
    if rate > 0:
        scene.config["rate"] = rate
        scene = Scene(scene.config, seed=None if seed < 0 else seed)
    return scene


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
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if stop_noted():  # a signal while the scene loaded and the server started
        stop.set()
    d = scene.description
    print(
        f"qtm_simulator ready: RT port {args.host}:{rt_port} (little-endian, base port {rt_port - 1}), "
        f"{len(d.bodies)} bodies, {sum(len(b.marker_names) for b in d.bodies)} labeled markers, "
        f"{len(d.skeletons)} skeletons at {scene.rate:g} Hz",
        flush=True,
    )
    await stop.wait()
    await simulator.stop()
    simulator.log(f"stopped ({simulator.frames_late_skipped} frames skipped to keep real time)")
    return 0


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
