"""The QTM RT stand-in's sessions and what it answers to each command.

A :class:`Session` is one connected RT client (its protocol version and what it asked to
stream); :class:`QtmCommands` answers its commands as QTM does: ``Version``,
``QTMVersion``, ``ByteOrder``, ``GetState``, ``GetParameters``, ``GetCurrentFrame``,
``StreamFrames``, ``TakeControl`` / ``ReleaseControl``, the capture commands ``Start``,
``Stop`` and ``Save`` (which need control) and ``Quit``; everything else gets QTM's error
answers. The frames themselves are sent by the server (``simulator.py``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from ..simulated.scene import Scene
from . import protocol as qp
from .protocol import Event, PacketType
from .scene_stream import parameters_xml, version_tuple

__all__ = ["QtmCommands", "Session", "StreamRequest"]

QTM_VERSION = "QTM Version is 2.26 (build 1; mocap4r2 qtm_simulator)"
SUPPORTED_MINOR = range(1, 27)  # protocol versions 1.1 .. 1.26
DEFAULT_VERSION = "1.1"  # what QTM assumes until a client sends Version
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
# commands QTM has and the stand-in does not serve
UNSUPPORTED_COMMANDS = (
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
)


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


class QtmCommands:
    """Answers the commands of every session; owns who has control and the capture state."""

    def __init__(
        self,
        scene: Scene,
        *,
        current_packet: Callable[[list[str]], bytes],
        streams_changed: Callable[[], None],
        log: Callable[[str], None],
        password: str | None = None,
        verbose: bool = False,
    ) -> None:
        self.scene = scene
        self.current_packet = current_packet  # the newest frame with these components
        self.streams_changed = streams_changed  # a session started or stopped streaming
        self.log = log
        self.password = password
        self.verbose = verbose
        self.master: Session | None = None
        self.capturing = False  # Start .. Stop
        self.unsaved_capture = False  # stopped, not saved yet
        self.saved: list[str] = []  # file names of saved captures (bounded below)

    def closed(self, session: Session) -> None:
        """A session ended: it gives up control."""
        if self.master is session:
            self.master = None

    def handle(self, session: Session, packet_type: int, payload: bytes) -> None:
        """Answers one packet a client sent."""
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
            if name in UNSUPPORTED_COMMANDS:
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

    def _cmd_getcurrentframe(self, session: Session, args: list[str]) -> None:
        names = self._components(session, args)
        if names is not None:
            session.send(self.current_packet(names))

    def _cmd_streamframes(self, session: Session, args: list[str]) -> None:
        if len(args) == 1 and args[0].lower() == "stop":
            session.stream = None
            self.streams_changed()
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
        self.streams_changed()

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
