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

With the time impairment flags (``--jitter-ms``, ``--burst``, ``--clock-drift-ppm``,
``--clock-offset-s``, ``--clock-reset-at``, ``--truth-log``; mocap4r2_drivers/impairment.py)
it serves time as a network and a server clock do: the message time of frame k is the
server clock's reading of its measurement instant (with any clock flag that clock reads
``--clock-offset-s`` at frame 0, not Unix time), the reports of a frame leave when the
network releases its burst, and the truth log has the true measurement instant (host
clock, Unix s) of every frame sent.

Connections, cookies, descriptions and pings run on an asyncio loop; the reports are
sent by a thread of their own at each frame's instant, as a VRPN server's mainloop
sends whatever else its machine does (:mod:`.simulator_sender`).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import threading
import time
from typing import Any

import numpy as np

from ..impairment import (
    Delivery,
    ServerClock,
    TimeImpairment,
    TruthLog,
    add_arguments,
    from_arguments,
    wall_clock_offset,
)
from ..sim_server import FramePacer, add_scene_arguments, load_scene, peer_name, run_until_signalled
from ..simulated.scene import Scene, SceneError
from . import protocol as vp
from .simulator_sender import FrameEvents, FrameSender, Lateness, PreparedFrame, Session, datagrams

#: highest --clock-offset-s: VRPN's message time has 32-bit signed seconds, and a clock
#: started there still has more than 4 years before it overflows
MAX_CLOCK_OFFSET = 2.0e9

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


class _RequestProtocol(asyncio.DatagramProtocol):
    def __init__(self, server: VrpnSimulator) -> None:
        self.server = server

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.server.connection_request(data, addr)


class VrpnSimulator:
    """The server: sessions, connection requests and the lifecycle of the frame thread
    (:class:`FrameSender`), which sends the reports."""

    def __init__(
        self,
        scene: Scene,
        multi_sensor: str = "",
        verbose: bool = False,
        send_times: str = "",
        impairment: TimeImpairment | None = None,
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
        self._body_senders = np.array([sender for sender, _ in self.body_sender], dtype=np.int32)
        self._body_sensors = np.array([sensor for _, sensor in self.body_sender], dtype=np.int32)
        self.type_ids = {name: i for i, name in enumerate(SERVER_TYPES)}
        self.sessions: list[Session] = []
        # what the frame thread reads: a new tuple whenever a client comes or goes, never changed
        self.receivers: tuple[Session, ...] = ()
        self.origin = float(math.floor(time.time()))  # Unix time of frame 0's measurement
        self._t0 = time.monotonic() - (time.time() - self.origin)
        self.pacer = FramePacer(scene.rate, scene.latency, self._t0)
        # what a network and the server's clock do to time (mocap4r2_drivers/impairment.py)
        self.impairment = impairment or TimeImpairment()
        self.clock = ServerClock(self.impairment, self._t0)  # reads clock_offset_s at frame 0's measurement
        self.delivery: Delivery[PreparedFrame] = Delivery(self.impairment)
        self.truth = TruthLog(self.impairment.truth_log) if self.impairment.truth_log else None
        self.wall_offset = wall_clock_offset()  # Unix - monotonic, for the truth log
        self.rejected_requests = 0
        self.lateness = Lateness()
        self.port = 0
        self._tcp_server: asyncio.base_events.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        # handed to the frame thread: wake (look again: clients came, or stop), stopping
        self.events = FrameEvents()
        self._thread: threading.Thread | None = None
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
        sender = FrameSender(self, self.events, rate=self.scene.rate, held=self.impairment.delays)
        self._thread = threading.Thread(target=sender.run, name="vrpn-frames", daemon=True)
        self._thread.start()
        return self.port

    async def stop(self) -> None:
        self.events.stopping.set()
        self.events.wake.set()
        if self._thread is not None:
            self._thread.join(2.0)  # it never waits for the loop: a short wait
        for session in list(self.sessions):
            self._drop(session)
        if self._tcp_server is not None:
            self._tcp_server.close()
        if self._udp is not None:
            self._udp.close()
        if self.truth is not None:
            self.truth.close()
        if self.impairment.delays:
            # a frame leaves when the network releases it, which is not its instant
            self.log(f"frames sent when the network released them ({self.delivery.dropped} dropped)")
        else:
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
        session = Session(writer=writer, peer=peer, loop=asyncio.get_running_loop())
        writer.write(vp.cookie())
        try:
            vp.check_cookie(await asyncio.wait_for(reader.readexactly(vp.COOKIE_SIZE), 10.0))
        except (vp.VrpnProtocolError, asyncio.IncompleteReadError, TimeoutError, OSError) as exc:
            self.log(f"client {peer} refused: {exc}")
            writer.close()
            return
        writer.write(self._descriptions())
        self.sessions.append(session)
        self.receivers = tuple(self.sessions)
        self.events.wake.set()
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
            self.receivers = tuple(self.sessions)
            self.log(f"client {session.peer} gone ({session.reports_sent} reports sent)")
        session.close()

    def _handle(self, session: Session, m: vp.Message) -> None:
        if m.type == vp.SENDER_DESCRIPTION:
            session.senders.describe(m.sender, vp.parse_description(m.payload))
        elif m.type == vp.TYPE_DESCRIPTION:
            session.types.describe(m.sender, vp.parse_description(m.payload))
        elif m.type == vp.UDP_DESCRIPTION:
            address, port = vp.parse_udp_description(m.sender, m.payload)
            # like vrpn_server: the client's address as the TCP connection has it, the port it names
            try:
                session.send_by_udp((session.writer.get_extra_info("peername")[0], port))
            except OSError as exc:
                self.log(f"client {session.peer}: cannot send to its UDP port {port}: {exc}; TCP it is")
                return
            if self.verbose:
                self.log(f"client {session.peer} takes reports by UDP at {address}:{port}")
        elif m.type >= 0 and session.types.name(m.type) == vp.PING:
            device = session.senders.name(m.sender)
            if device in self.sender_names:
                now = time.time()
                pong = vp.pack_message(
                    self.sender_names.index(device), self.type_ids[vp.PONG], b"", int(now), int(now % 1 * 1e6)
                )
                session.send(pong)

    # ------------------------------------------------------------------ the reports
    def frame_records(self, k: int) -> np.ndarray[Any, np.dtype[np.void]]:
        """The Pos_Quat messages of scene frame k (its tracked bodies, in body order) as
        :data:`~.protocol.POS_QUAT_RECORD` records: the bytes :func:`~.protocol.pack_pos_quat_message`
        makes, for all bodies in a few array operations (at 1 kHz with 50 bodies, packing
        them one by one took a tenth of a core)."""
        positions, orientations, valid = self.scene.body_poses(k)  # VRPN streams no markers
        if self.impairment.shifts_clock:
            # a VRPN server stamps a report with the time of its measurement on its own clock
            stamp = self.clock.read(self.captured(k))
        else:
            stamp = self.origin + k / self.scene.rate
        sec = int(math.floor(stamp))
        usec = min(int(round((stamp - sec) * 1e6)), 999_999)
        good = valid & np.isfinite(positions).all(axis=1) & np.isfinite(orientations).all(axis=1)
        rows = np.flatnonzero(good)
        records = np.zeros(rows.size, dtype=vp.POS_QUAT_RECORD)
        records["length"] = vp.HEADER_SIZE + vp.POS_QUAT_SIZE
        records["seconds"] = sec
        records["microseconds"] = usec
        records["sender"] = self._body_senders[rows]
        records["type"] = self.type_ids[vp.POS_QUAT]
        records["sensor"] = records["padding"] = self._body_sensors[rows]  # vrpn_Tracker repeats the sensor
        records["position"] = positions[rows]
        records["orientation"] = orientations[rows]
        return records

    def frame_messages(self, k: int) -> list[bytes]:
        """The Pos_Quat messages of scene frame k (its tracked bodies), one bytes each."""
        data = self.frame_records(k).tobytes()
        size = vp.POS_QUAT_RECORD.itemsize
        return [data[at : at + size] for at in range(0, len(data), size)]

    def captured(self, k: int) -> float:
        """Monotonic instant of scene frame k's measurement."""
        return self._t0 + k / self.scene.rate

    def hand_out(self, frame: PreparedFrame) -> None:
        """(frame thread) ``frame`` leaves the server (to the network, or straight to the
        clients): its truth line."""
        if self.truth is not None and frame.reports:
            self.truth.write(frame.number, self.wall_offset + self.captured(frame.number))

    def prepare(self, k: int) -> PreparedFrame:
        """Scene frame k encoded for sending (no reports when the scene drops it)."""
        messages = [] if self.scene.is_dropped(k) else self.frame_messages(k)
        due = self._t0 + k / self.scene.rate + self.scene.latency
        return PreparedFrame(k, due, len(messages), b"".join(messages), datagrams(messages))


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
    add_arguments(parser)
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
        scene,
        multi_sensor=args.multi_sensor,
        verbose=args.verbose,
        send_times=args.send_times,
        impairment=args.impairment,
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
        args.impairment = from_arguments(args, seed=max(args.seed or 0, 0))
    except (SceneError, ValueError) as exc:
        print(f"vrpn_simulator: {exc}", file=sys.stderr)
        return 2
    if not 0.0 <= args.impairment.clock_offset_s <= MAX_CLOCK_OFFSET:
        # the message time's seconds are a signed 32-bit field, and a drifting clock must stay in it
        print(f"vrpn_simulator: --clock-offset-s must be in [0, {MAX_CLOCK_OFFSET:.0f}]", file=sys.stderr)
        return 2
    with asyncio.Runner() as runner:
        return runner.run(_run(args, scene))


if __name__ == "__main__":
    raise SystemExit(main())
