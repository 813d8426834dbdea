"""vrpn_simulator: a VRPN server stand-in serving a simulated scene's bodies as trackers.

It behaves as a vrpn_server with one vrpn_Tracker per body (named after the body,
sensor 0) or, with ``--multi-sensor NAME``, one tracker NAME whose sensor i is body i.
It listens on TCP and UDP on one port (3883 by default) and accepts both ways of
connecting: a client connecting by TCP (``tcp://``), and vrpn's default, a UDP
connection request after which the server connects back to the client's TCP port.
After the cookies it describes its senders ("VRPN Control" first, as vrpn_server
does, then the trackers) and types; a client that describes a UDP port gets the
reports by UDP, several messages per datagram (at most 1472 bytes, vrpn's limit), any
other client by TCP. Pings are answered with pongs from the pinged device.

Frame k of the scene is measured at ``origin + k / rate`` (Unix time, the message time
of its reports) and sent ``latency`` later; a body the scene does not track in frame k
is not reported (a VRPN server has no way to say "untracked"). Like a real server it
keeps real time: frames it cannot send in time are skipped, and a client whose TCP
buffer holds more than 4 MiB loses reports.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import selectors
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sim_server import FramePacer, add_scene_arguments, load_scene, peer_name, run_until_signalled
from ..simulated.scene import Scene, SceneError
from . import protocol as vp

SERVER_TYPES = (
    "VRPN_Connection_Got_First_Connection",
    "VRPN_Connection_Got_Connection",
    "VRPN_Connection_Dropped_Connection",
    "VRPN_Connection_Dropped_Last_Connection",
    vp.TEXT,
    vp.PING,
    vp.PONG,
    vp.POS_QUAT,
    vp.VELOCITY,
    vp.ACCELERATION,
)
MAX_SEND_BUFFER = 4 * 1024 * 1024
LATENESS_KEPT = 1 << 16  # frames whose send lateness the summary at stop covers


@dataclass
class Session:
    """One connected client: its own ids (it describes them) and where reports go."""

    writer: asyncio.StreamWriter
    peer: str
    senders: vp.NameTable = field(default_factory=lambda: vp.NameTable("sender"))
    types: vp.NameTable = field(default_factory=lambda: vp.NameTable("type"))
    udp_target: tuple[str, int] | None = None
    reports_sent: int = 0
    reports_skipped: int = 0
    closed: bool = False


class _RequestProtocol(asyncio.DatagramProtocol):
    def __init__(self, server: VrpnSimulator) -> None:
        self.server = server

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.server.connection_request(data, addr)


class VrpnSimulator:
    """The server: sessions, connection requests and the real-time report clock."""

    def __init__(
        self, scene: Scene, multi_sensor: str = "", verbose: bool = False, send_times: str = ""
    ) -> None:
        self.scene = scene
        self.send_times = send_times
        self.verbose = verbose
        bodies = [b.name for b in scene.description.bodies]
        self.multi_sensor = multi_sensor
        self.trackers = [multi_sensor] if multi_sensor else bodies
        self.sender_names = [vp.CONTROL_SENDER, *self.trackers]
        # body row -> (sender id, sensor)
        self.body_sender = [(1, i) if multi_sensor else (i + 1, 0) for i in range(len(bodies))]
        self.type_ids = {name: i for i, name in enumerate(SERVER_TYPES)}
        self.sessions: list[Session] = []
        self.origin = float(math.floor(time.time()))  # Unix time of frame 0's measurement
        self._t0 = time.monotonic() - (time.time() - self.origin)
        self.pacer = FramePacer(scene.rate, scene.latency, self._t0)
        self.rejected_requests = 0
        self.lateness = Lateness()
        self.port = 0
        self._tcp_server: asyncio.base_events.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._clock_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._calling: set[tuple[str, int]] = set()  # clients being called back or served

    @property
    def frames_late_skipped(self) -> int:
        """Frames not sent because the server fell behind real time."""
        return self.pacer.skipped

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int) -> int:
        """Listen on TCP and UDP ``port`` (0: a free port for both); the port."""
        loop = asyncio.get_running_loop()
        for _ in range(50):
            server = await asyncio.start_server(self._accepted, host, port)
            chosen = server.sockets[0].getsockname()[1]
            try:
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: _RequestProtocol(self), local_addr=(host, chosen)
                )
            except OSError:
                server.close()
                if port:
                    raise
                continue
            self._tcp_server, self._udp, self.port = server, transport, chosen
            break
        else:
            raise OSError("no port free for both TCP and UDP")
        self._clock_task = loop.create_task(self._clock())
        return self.port

    async def stop(self) -> None:
        for session in list(self.sessions):
            self._drop(session)
        if self._tcp_server is not None:
            self._tcp_server.close()
        if self._udp is not None:
            self._udp.close()
        if self._clock_task is not None:
            self._clock_task.cancel()
        self.log(self.lateness.summary())
        if self.send_times:
            try:
                self.lateness.save(self.send_times)
            except OSError as exc:
                self.log(f"cannot write {self.send_times}: {exc}")

    def log(self, text: str) -> None:
        print(f"vrpn_simulator: {text}", flush=True)

    # ------------------------------------------------------------------ connections
    def connection_request(self, data: bytes, addr: tuple[str, int]) -> None:
        """A UDP request to be called back: connect to the client's TCP port."""
        try:
            _, port = vp.parse_connect_request(data)
        except vp.VrpnProtocolError as exc:
            self.rejected_requests += 1
            if self.rejected_requests <= 3:
                self.log(f"ignored a request from {addr[0]}: {exc}")
            return
        # like vrpn_server: call back the address the request came from, not the one it
        # names; a client repeats its request until called back, so repeats are ignored
        target = (addr[0], port)
        if target in self._calling:
            return
        self._calling.add(target)
        task = asyncio.get_running_loop().create_task(self._call_back(*target))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call_back(self, host: str, port: int) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
        except (OSError, TimeoutError) as exc:
            self.log(f"cannot call back {host}:{port}: {exc}")
            self._calling.discard((host, port))
            return
        try:
            await self._serve(reader, writer)
        finally:
            self._calling.discard((host, port))

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._serve(reader, writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = peer_name(writer)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        session = Session(writer=writer, peer=peer)
        writer.write(vp.cookie())
        try:
            vp.check_cookie(await asyncio.wait_for(reader.readexactly(vp.COOKIE_SIZE), 10.0))
        except (vp.VrpnProtocolError, asyncio.IncompleteReadError, TimeoutError, OSError) as exc:
            self.log(f"client {peer} refused: {exc}")
            writer.close()
            return
        writer.write(self._descriptions())
        self.sessions.append(session)
        self.log(f"client {peer} connected ({len(self.sessions)} connected)")
        stream = vp.MessageReader()
        try:
            while not session.closed:
                data = await reader.read(65536)
                if not data:
                    break
                for message in stream.feed(data):
                    self._handle(session, message)
        except (vp.VrpnProtocolError, OSError) as exc:
            self.log(f"client {peer}: {exc}")
        self._drop(session)

    def _descriptions(self) -> bytes:
        now = time.time()
        sec, usec = int(now), int(now % 1 * 1e6)
        out = [
            vp.pack_message(i, vp.SENDER_DESCRIPTION, vp.pack_description(name), sec, usec)
            for i, name in enumerate(self.sender_names)
        ]
        out += [
            vp.pack_message(i, vp.TYPE_DESCRIPTION, vp.pack_description(name), sec, usec)
            for i, name in enumerate(SERVER_TYPES)
        ]
        return b"".join(out)

    def _drop(self, session: Session) -> None:
        if session in self.sessions:
            self.sessions.remove(session)
            self.log(f"client {session.peer} gone ({session.reports_sent} reports sent)")
        session.closed = True
        session.writer.close()

    def _handle(self, session: Session, m: vp.Message) -> None:
        if m.type == vp.SENDER_DESCRIPTION:
            session.senders.describe(m.sender, vp.parse_description(m.payload))
        elif m.type == vp.TYPE_DESCRIPTION:
            session.types.describe(m.sender, vp.parse_description(m.payload))
        elif m.type == vp.UDP_DESCRIPTION:
            address, port = vp.parse_udp_description(m.sender, m.payload)
            session.udp_target = (session.writer.get_extra_info("peername")[0], port)
            if self.verbose:
                self.log(f"client {session.peer} takes reports by UDP at {address}:{port}")
        elif m.type >= 0 and session.types.name(m.type) == vp.PING:
            device = session.senders.name(m.sender)
            if device in self.sender_names:
                now = time.time()
                pong = vp.pack_message(
                    self.sender_names.index(device), self.type_ids[vp.PONG], b"", int(now), int(now % 1 * 1e6)
                )
                session.writer.write(pong)

    # ------------------------------------------------------------------ the report clock
    async def _clock(self) -> None:
        scene = self.scene
        rate = scene.rate
        while True:
            if not self.sessions:
                await asyncio.sleep(0.05)
                self.pacer.restart()
                continue
            k = self.pacer.take(time.monotonic())
            # computed before it is due, so the frame leaves at its instant: the scene's
            # latency models the server's processing, this process's own time is not part of it
            messages = [] if scene.is_dropped(k) else self.frame_messages(k)
            due = k / rate + scene.latency
            delay = due - (time.monotonic() - self._t0)
            await asyncio.sleep(max(delay, 0.0))
            self._send(messages)
            self.lateness.add(k, time.monotonic() - self._t0 - due)

    def frame_messages(self, k: int) -> list[bytes]:
        """The Pos_Quat messages of scene frame k (its tracked bodies)."""
        frame = self.scene.frame(k)
        bodies = frame.bodies
        stamp = self.origin + k / self.scene.rate
        sec = int(math.floor(stamp))
        usec = min(int(round((stamp - sec) * 1e6)), 999_999)
        type_id = self.type_ids[vp.POS_QUAT]
        good = (
            bodies.valid
            & np.isfinite(bodies.positions).all(axis=1)
            & np.isfinite(bodies.orientations).all(axis=1)
        )
        rows = np.flatnonzero(good).tolist()
        positions = bodies.positions[rows].tolist()
        orientations = bodies.orientations[rows].tolist()
        pack = vp.pack_pos_quat_message
        out = []
        for row, p, q in zip(rows, positions, orientations):
            sender, sensor = self.body_sender[row]
            out.append(pack(sender, type_id, sensor, p, q, sec, usec))
        return out

    def send_frame(self, k: int) -> None:
        """Send scene frame k to every client now (nothing when the scene drops it)."""
        if not self.scene.is_dropped(k):
            self._send(self.frame_messages(k))

    def _send(self, messages: list[bytes]) -> None:
        if not messages:
            return
        datagrams: list[bytes] | None = None
        stream = b"".join(messages)
        for session in self.sessions:
            if session.closed:
                continue
            if session.udp_target is not None and self._udp is not None:
                if datagrams is None:
                    datagrams = _datagrams(messages)
                for datagram in datagrams:
                    self._udp.sendto(datagram, session.udp_target)
            elif session.writer.transport.get_write_buffer_size() > MAX_SEND_BUFFER:
                session.reports_skipped += len(messages)
                continue
            else:
                session.writer.write(stream)
            session.reports_sent += len(messages)


class Lateness:
    """How late frames left after their due instant (s): the newest LATENESS_KEPT, for the
    figures printed at stop (what the stand-in adds to a latency measured from the message time)."""

    def __init__(self) -> None:
        self._frames = np.zeros(LATENESS_KEPT, dtype=np.int64)
        self._values = np.zeros(LATENESS_KEPT)
        self._count = 0

    def add(self, k: int, seconds: float) -> None:
        """Frame k left ``seconds`` after its instant."""
        at = self._count % LATENESS_KEPT
        self._frames[at] = k
        self._values[at] = seconds
        self._count += 1

    def save(self, path: str) -> None:
        """The kept frames as a .npy array of rows (frame number, lateness s)."""
        kept = min(self._count, LATENESS_KEPT)
        np.save(path, np.column_stack([self._frames[:kept].astype(np.float64), self._values[:kept]]))

    def summary(self) -> str:
        """``frames sent after their instant: p50 0.05 ms, p99 0.20 ms, max 1.00 ms``."""
        kept = self._values[: min(self._count, LATENESS_KEPT)] * 1e3
        if not kept.size:
            return "no frames sent"
        p50, p99, top = np.percentile(kept, (50, 99, 100))
        return f"frames sent after their instant: p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {top:.3f} ms"


def _datagrams(messages: list[bytes]) -> list[bytes]:
    """Messages packed into datagrams of at most vp.UDP_PAYLOAD bytes, in order."""
    out: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for m in messages:
        if current and size + len(m) > vp.UDP_PAYLOAD:
            out.append(b"".join(current))
            current, size = [], 0
        current.append(m)
        size += len(m)
    if current:
        out.append(b"".join(current))
    return out


# ====================================================================== command line
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vrpn_simulator",
        description="A VRPN server stand-in serving a simulated scene's bodies as vrpn_Tracker devices.",
    )
    add_scene_arguments(parser, rate_help="report rate in Hz (default: the scene's)")
    parser.add_argument(
        "--port", type=int, default=vp.DEFAULT_PORT, help="TCP and UDP port (default 3883; 0: a free one)"
    )
    parser.add_argument(
        "--multi-sensor",
        default="",
        metavar="NAME",
        help="one tracker NAME with body i as sensor i (default: one tracker per body)",
    )
    parser.add_argument("--verbose", action="store_true", help="say more about each client")
    parser.add_argument(
        "--send-times",
        default="",
        metavar="FILE",
        help="at stop, write the newest 65536 frames' numbers and how late each was sent (s) to "
        "FILE (.npy): what a benchmark measuring latency from the message time can take out",
    )
    return parser


async def _run(args: argparse.Namespace, scene: Scene) -> int:
    simulator = VrpnSimulator(
        scene, multi_sensor=args.multi_sensor, verbose=args.verbose, send_times=args.send_times
    )
    try:
        port = await simulator.start(args.host, args.port)
    except OSError as exc:
        print(f"vrpn_simulator: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    layout = (
        f"tracker {args.multi_sensor!r} with {len(simulator.body_sender)} sensors"
        if args.multi_sensor
        else f"{len(simulator.trackers)} trackers"
    )
    return await run_until_signalled(
        simulator,
        f"vrpn_simulator ready: {args.host}:{port} (TCP and UDP), {layout} at {scene.rate:g} Hz, "
        f"time origin {simulator.origin:.0f}",
    )


def main(argv: list[str] | None = None) -> int:
    """The vrpn_simulator command."""
    args = _parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        print("vrpn_simulator: --port must be in [0, 65535]", file=sys.stderr)
        return 2
    if args.multi_sensor and len(args.multi_sensor.encode()) >= vp.MAX_NAME:
        print("vrpn_simulator: --multi-sensor name too long", file=sys.stderr)
        return 2
    try:
        scene = load_scene(args.scene, args.seed, args.rate)
    except (SceneError, ValueError) as exc:
        print(f"vrpn_simulator: {exc}", file=sys.stderr)
        return 2
    # select() waits to the microsecond; epoll, asyncio's default, rounds every wait up to
    # the next millisecond, which at 1 kHz sends each frame up to a period after its instant
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())) as runner:
        return runner.run(_run(args, scene))


if __name__ == "__main__":
    raise SystemExit(main())
