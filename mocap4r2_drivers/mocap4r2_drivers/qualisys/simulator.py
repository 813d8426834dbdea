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
import math
import signal
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from mocap4r2_control.frame import UNKNOWN_ID, MocapFrame
from mocap4r2_control.geometry import quat_multiply, quat_rotate
from mocap4r2_control.stop_signals import stop_noted

from ..simulated.scene import Scene, SceneError, default_scene_path
from . import protocol as qp
from .protocol import ComponentType, Event, PacketType

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


def _version_tuple(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


# ====================================================================== parameters XML
def _fmt(value: float) -> str:
    return f"{float(value):.6f}"


def _general_xml(parent: ET.Element, scene: Scene) -> None:
    general = ET.SubElement(parent, "General")
    rate = scene.rate
    ET.SubElement(general, "Frequency").text = str(int(rate)) if float(rate).is_integer() else repr(rate)
    ET.SubElement(general, "Capture_Time").text = "0.000000"
    for key in (
        "Start_On_External_Trigger",
        "Start_On_Trigger_NO",
        "Start_On_Trigger_NC",
        "Start_On_Trigger_Software",
    ):
        ET.SubElement(general, key).text = "False"


def _threed_xml(parent: ET.Element, scene: Scene) -> None:
    threed = ET.SubElement(parent, "The_3D")
    ET.SubElement(threed, "AxisUpwards").text = "+Z"
    ET.SubElement(threed, "CalibrationTime").text = "2024-01-01 00:00:00"
    labels = [name for body in scene.description.bodies for name in body.marker_names]
    ET.SubElement(threed, "Labels").text = str(len(labels))
    for name in labels:
        label = ET.SubElement(threed, "Label")
        ET.SubElement(label, "Name").text = name
        ET.SubElement(label, "RGBColor").text = "65280"
        ET.SubElement(label, "Trajectory_Type").text = "Measured"
    ET.SubElement(threed, "Bones")


def _sixd_xml(parent: ET.Element, scene: Scene, version: tuple[int, int]) -> None:
    sixd = ET.SubElement(parent, "The_6D")
    bodies = scene.description.bodies
    if version < (1, 21):
        # the layout before 1.21: a body count and child elements per point
        ET.SubElement(sixd, "Bodies").text = str(len(bodies))
    for body in bodies:
        element = ET.SubElement(sixd, "Body")
        ET.SubElement(element, "Name").text = body.name
        points_mm = body.marker_layout * 1000.0
        if version < (1, 21):
            ET.SubElement(element, "RGBColor").text = "16711680"
            for point in points_mm:
                p = ET.SubElement(element, "Point")
                for axis, value in zip("XYZ", point):
                    ET.SubElement(p, axis).text = _fmt(value)
            continue
        ET.SubElement(element, "Enabled").text = "true"
        ET.SubElement(element, "Color", R="255", G="0", B="0")
        ET.SubElement(element, "MaximumResidual").text = "10.000000"
        ET.SubElement(element, "MinimumMarkersInBody").text = "3"
        ET.SubElement(element, "BoneLengthTolerance").text = "5.000000"
        ET.SubElement(element, "Filter", Preset="No filter")
        points = ET.SubElement(element, "Points")
        for name, point in zip(body.marker_names, points_mm):
            ET.SubElement(
                points,
                "Point",
                X=_fmt(point[0]),
                Y=_fmt(point[1]),
                Z=_fmt(point[2]),
                Virtual="0",
                PhysicalId="0",
                Name=name,
            )
        ET.SubElement(
            element, "Data_origin", X="0.000000", Y="0.000000", Z="0.000000", Relative_body="0"
        ).text = "0"
        ET.SubElement(
            element,
            "Data_orientation",
            R11="1.000000",
            R12="0.000000",
            R13="0.000000",
            R21="0.000000",
            R22="1.000000",
            R23="0.000000",
            R31="0.000000",
            R32="0.000000",
            R33="1.000000",
            Relative_body="0",
        ).text = "0"
    if version < (1, 21):
        euler = ET.SubElement(sixd, "Euler")
        for key, value in (("First", "Roll"), ("Second", "Pitch"), ("Third", "Yaw")):
            ET.SubElement(euler, key).text = value


def _skeleton_xml(parent: ET.Element, scene: Scene, version: tuple[int, int]) -> None:
    skeletons = ET.SubElement(parent, "Skeletons")
    for spec in scene.description.skeletons:
        skeleton = ET.SubElement(skeletons, "Skeleton", Name=spec.name)
        ids = spec.segment_ids.tolist()
        parents = spec.parent_ids.tolist()
        offsets_mm = spec.offsets * 1000.0
        if version < (1, 22):
            # flat list with Parent_ID attributes (omitted for the root)
            for sid, name, parent_id, offset in zip(ids, spec.segment_names, parents, offsets_mm):
                attrs = {"Name": name, "ID": str(sid)}
                if parent_id >= 0:
                    attrs["Parent_ID"] = str(parent_id)
                segment = ET.SubElement(skeleton, "Segment", attrs)
                ET.SubElement(segment, "Position", X=_fmt(offset[0]), Y=_fmt(offset[1]), Z=_fmt(offset[2]))
                ET.SubElement(segment, "Rotation", X="0.000000", Y="0.000000", Z="0.000000", W="1.000000")
            continue
        # 1.22 and later: segments nest inside their parent
        ET.SubElement(skeleton, "Solver").text = "Global Optimization"
        ET.SubElement(skeleton, "Scale").text = "1.000000"
        container = ET.SubElement(skeleton, "Segments")
        elements: dict[int, ET.Element] = {}
        for sid, name, parent_id, offset in zip(ids, spec.segment_names, parents, offsets_mm):
            holder = elements.get(parent_id, container)
            segment = ET.SubElement(holder, "Segment", Name=name, ID=str(sid))
            ET.SubElement(segment, "Solver").text = "Global Optimization"
            for tag in ("Transform", "DefaultTransform"):
                transform = ET.SubElement(segment, tag)
                ET.SubElement(transform, "Position", X=_fmt(offset[0]), Y=_fmt(offset[1]), Z=_fmt(offset[2]))
                ET.SubElement(transform, "Rotation", X="0.000000", Y="0.000000", Z="0.000000", W="1.000000")
            ET.SubElement(segment, "DegreesOfFreedom")
            ET.SubElement(segment, "Endpoint", X="0.000000", Y="0.000000", Z="0.000000")
            ET.SubElement(segment, "Markers")
            ET.SubElement(segment, "RigidBodies")
            elements[sid] = segment


def parameters_xml(scene: Scene, parts: list[str], version: str) -> str:
    """The XML QTM answers GetParameters with, for the given (lower-case) parts."""
    vt = _version_tuple(version)
    root = ET.Element(f"QTM_Parameters_Ver_{version}")
    for part in parts:
        if part == "general":
            _general_xml(root, scene)
        elif part == "3d":
            _threed_xml(root, scene)
        elif part == "6d":
            _sixd_xml(root, scene, vt)
        elif part in ("skeleton", "skeleton:global"):
            _skeleton_xml(root, scene, vt)
    ET.indent(root, space="    ")
    return ET.tostring(root, encoding="unicode")


# ====================================================================== frames
class SceneStream:
    """A scene as QTM data components (what NatNet's SceneStream is for NAT_FRAMEOFDATA):
    encodes the components of one scene frame, each at most once per frame."""

    def __init__(self, scene: Scene):
        self.scene = scene
        skeletons = scene.description.skeletons
        self._segment_counts = [len(s.segment_ids) for s in skeletons]
        # parent row of each segment within all segments, -1 for roots (local skeletons)
        parent_rows = []
        start = 0
        for spec in skeletons:
            index = {int(sid): start + i for i, sid in enumerate(spec.segment_ids.tolist())}
            parent_rows += [index.get(int(p), -1) for p in spec.parent_ids.tolist()]
            start += len(spec.segment_ids)
        self._parent_rows = np.asarray(parent_rows, dtype=np.int64)
        self._k: int | None = None
        self._frame: MocapFrame | None = None
        self._cache: dict[str, bytes] = {}

    def frame(self, k: int) -> MocapFrame:
        if k != self._k:
            self._k = k
            self._frame = self.scene.frame(k)
            self._cache = {}
        return self._frame

    def component(self, k: int, name: str) -> bytes:
        frame = self.frame(k)
        packed = self._cache.get(name)
        if packed is None:
            packed = self._encode(frame, name)
            self._cache[name] = packed
        return packed

    def packet(self, k: int, names: list[str]) -> bytes:
        timestamp = int(round(k * 1e6 / self.scene.rate))
        return qp.encode_frame(timestamp, k, [self.component(k, name) for name in names])

    # ------------------------------------------------------------------ components
    def _encode(self, frame: MocapFrame, name: str) -> bytes:
        ctype = qp.COMPONENT_NAMES[name]
        if ctype in (ComponentType.MARKERS_3D, ComponentType.MARKERS_3D_RESIDUALS):
            labeled = frame.bodies.markers  # in the order of the 3D labels
            return qp.pack_markers(ctype, labeled.positions * 1000.0, _residuals_mm(labeled.residuals))
        if ctype in qp.MARKER_DTYPES:
            rows = frame.markers.ids == UNKNOWN_ID
            positions = frame.markers.positions[rows]
            return qp.pack_markers(
                ctype,
                positions * 1000.0,
                _residuals_mm(frame.markers.residuals[rows]),
                np.arange(1, positions.shape[0] + 1, dtype=np.int32),
            )
        if ctype in qp.BODY_DTYPES:
            bodies = frame.bodies
            rotations = np.full((len(bodies), 9), np.nan)
            good = bodies.valid & np.isfinite(bodies.orientations).all(axis=1)
            if good.any():
                rotations[good] = qp.matrices_to_qtm(
                    Rotation.from_quat(bodies.orientations[good]).as_matrix()
                )
            positions = np.where(good[:, None], bodies.positions * 1000.0, np.nan)
            return qp.pack_bodies(ctype, positions, rotations, _residuals_mm(bodies.mean_errors))
        if ctype == ComponentType.SKELETON:
            return self._skeletons(frame, global_coordinates=name.endswith(":global"))
        raise ValueError(f"component {name} cannot be encoded")

    def _skeletons(self, frame: MocapFrame, global_coordinates: bool) -> bytes:
        sk = frame.skeletons
        seg = sk.segments
        positions = seg.positions
        orientations = seg.orientations
        if not global_coordinates and len(seg):
            # local coordinates: each segment relative to its parent (roots stay global)
            rows = np.flatnonzero(self._parent_rows >= 0)
            parents = self._parent_rows[rows]
            inverse = orientations[parents] * np.array([-1.0, -1.0, -1.0, 1.0])
            positions = positions.copy()
            orientations = orientations.copy()
            positions[rows] = quat_rotate(inverse, seg.positions[rows] - seg.positions[parents])
            orientations[rows] = quat_multiply(inverse, seg.orientations[rows])
        out: list[np.ndarray | None] = []
        for i in range(len(sk)):
            if not sk.valid[i]:
                out.append(None)
                continue
            a, b = int(sk.segment_offsets[i]), int(sk.segment_offsets[i + 1])
            records = np.zeros(b - a, dtype=qp.SEGMENT_DTYPE)
            records["id"] = seg.ids[a:b]
            records["position"] = positions[a:b] * 1000.0
            records["rotation"] = orientations[a:b]
            out.append(records)
        return qp.pack_skeletons(out)


def _residuals_mm(residuals_m: np.ndarray) -> np.ndarray:
    """Residuals in mm; unknown (negative) ones stay -1."""
    r = np.asarray(residuals_m, dtype=np.float64)
    return np.where(r >= 0, r * 1000.0, -1.0)


# ====================================================================== server
@dataclass
class StreamRequest:
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
        self, scene: Scene, password: str | None = None, max_clients: int = 10, verbose: bool = False
    ):
        self.scene = scene
        self.password = password
        self.max_clients = max_clients
        self.verbose = verbose
        self.encoder = SceneStream(scene)
        self.sessions: list[Session] = []
        self.master: Session | None = None
        self.start_time = time.monotonic()  # the measurement started with the server
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
        for session in list(self.sessions):
            try:
                await asyncio.wait_for(session.writer.wait_closed(), 1.0)
            except Exception:  # noqa: BLE001 - the peer may already be gone
                pass

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
        try:
            session.writer.close()
        except Exception:  # noqa: BLE001 - already closed
            pass

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
            major, minor = _version_tuple(args[0])
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
            self._send_frame(k)
            k += 1

    def _send_frame(self, k: int) -> None:
        rate = self.scene.rate
        for session in self.sessions:
            if session.closed or not session.wants(k, rate):
                continue
            if session.writer.transport.get_write_buffer_size() > MAX_SEND_BUFFER:
                session.frames_skipped += 1
                continue
            session.send(self.encoder.packet(k, session.stream.components))
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
    return parser


def load_scene(path: str, seed: int, rate: float) -> Scene:
    scene = Scene.from_file(path or default_scene_path(), seed=None if seed < 0 else seed)
    if rate > 0:
        scene.config["rate"] = rate
        scene = Scene(scene.config, seed=None if seed < 0 else seed)
    return scene


async def _run(args: argparse.Namespace, scene: Scene) -> int:
    simulator = QtmSimulator(
        scene, password=args.password, max_clients=args.max_clients, verbose=args.verbose
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
    args = _parser().parse_args(argv)
    if args.port < 0 or args.port > 65534:
        print("qtm_simulator: --port must be in [0, 65534]", file=sys.stderr)
        return 2
    try:
        scene = load_scene(args.scene, args.seed, args.rate)
    except (SceneError, ValueError) as exc:
        print(f"qtm_simulator: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_run(args, scene))


if __name__ == "__main__":
    raise SystemExit(main())
