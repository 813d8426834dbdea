"""natnet_simulator: a Motive stand-in that serves a simulated scene over real NatNet.

It answers NAT_CONNECT with NAT_SERVERINFO, NAT_REQUEST_MODELDEF with NAT_MODELDEF,
NAT_REQUEST commands (Bitstream, FrameRate, and the stand-in's own RenameRigidBody),
and streams NAT_FRAMEOFDATA at the scene's rate, multicast to a group or unicast to
each connected client while it sends keep-alives, in NatNet bitstream 3.0, 3.1 or 4.0 to
4.5 (``--natnet-version``).

Bitstreams follow Motive: multicast always streams the server's own version (which the
``Bitstream,M.m`` command changes for everyone, as Motive's settings would, flagging the
change in the next frame's params). Over unicast each client gets the version it asks for
in its NAT_CONNECT (0: the server's own) or by a ``Bitstream,M.m`` request of its own, up
to the server's own version; its NAT_SERVERINFO and NAT_MODELDEF are in that version too.
4.5 frames carry IMU and GPIO sections and 4.5 model definitions an anchor-marker
description, all with opaque contents (their layouts are not public). The test-only
``--future-motive`` stands for a Motive newer than any we know: it advertises 4.6 and adds
an unknown sized frame section and an unknown description type to the 4.5 layout.

NatNet clients disagree on where unicast frames arrive: OptiTrack's Python sample reads
them on its command socket (the address its NAT_CONNECT came from), other clients bind
the data port on their own interface and wait there, and Motive versions differ too.
``--unicast-to`` chooses: ``command-socket``, ``data-port`` (the client's address, the
server's data port), or ``both`` (the default, so that any client works; a client that
listens on both sockets sees each frame twice and must drop the repeat).

What it sends is what Motive sends for such a scene: Y-up by default (``--up-axis``),
rigid bodies with their marker sets and labeled markers (id = body id << 16 | member),
unlabeled markers (model id 0, "unlabeled" bit), skeleton bones (id = skeleton id << 16
| bone id) in world or parent coordinates, a body that loses tracking (valid bit off,
zero pose, as Motive does), and the server clock stamps of each frame.

Commands are answered on a select() loop; the frames have a thread of their own
(:class:`~.frame_sender.FrameSender`), which computes each frame ahead and sends it at
its instant, as Motive sends from its own machine whatever its command handling does.
"""

from __future__ import annotations

import argparse
import logging
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mocap4r2_control.stop_signals import stop_noted

from ..common import ClientStats, reject_input
from ..impairment import (
    Delivery,
    ServerClock,
    TimeImpairment,
    TruthLog,
    add_arguments,
    from_arguments,
    wall_clock_offset,
)
from ..sim_server import load_scene, seed_value
from ..simulated import scene as scene_module
from . import protocol as nn
from .frame_sender import CLOCK_FREQUENCY, FrameSender, FrameSource, PreparedFrame
from .protocol import MessageId, NatNetProtocolError, Version
from .scene_stream import SceneStream
from .server_commands import MotiveCommands

__all__ = [
    "CLOCK_FREQUENCY",
    "FrameSender",
    "FUTURE_VERSION",
    "NatNetSimulator",
    "SceneStream",
    "ServerOptions",
    "build_parser",
    "main",
]

UNICAST_TARGETS = ("command-socket", "data-port", "both")
#: what ``--future-motive`` advertises: one minor version past the newest known
FUTURE_VERSION = Version(nn.NEWEST_VERSION.major, nn.NEWEST_VERSION.minor + 1)
#: the command loop looks at the stop event and the frame thread at least this often, s
COMMAND_POLL = 0.05
log = logging.getLogger("natnet_simulator")


def _free_udp_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


@dataclass
class ServerOptions:
    """What natnet_simulator serves and how (the command line's options)."""

    scene: str = ""
    seed: int | None = None
    natnet_version: str = "4.1"
    server_address: str = "127.0.0.1"
    command_port: int = nn.DEFAULT_COMMAND_PORT
    data_port: int = nn.DEFAULT_DATA_PORT
    multicast_address: str = nn.DEFAULT_MULTICAST_ADDRESS
    multicast: bool = True
    rate: float = 0.0  # 0: the scene's rate
    up_axis: str = "y"
    skeleton_coordinates: str = "global"
    client_timeout: float = 5.0  # unicast clients silent this long are dropped
    unicast_to: str = "both"  # command-socket, data-port or both (see the module docstring)
    frames: int = 0  # stop after this many frames (0: never)
    app_name: str = "Motive"
    app_version: tuple[int, int, int, int] = (3, 1, 0, 0)
    # test-only: a Motive newer than any known (advertises FUTURE_VERSION, adds an unknown
    # sized frame section and an unknown description type)
    future_motive: bool = False
    # a trained markerset (a NatNet 4.1+ asset) made of the scene's first rigid body
    assets: bool = False
    # what a network and the server's clock do to time (mocap4r2_drivers/impairment.py)
    impairment: TimeImpairment = TimeImpairment()


@dataclass
class UnicastClient:
    """A unicast client: when it was last heard of (monotonic) and the bitstream it asked
    for (None: it gets the server's own, whatever that is now)."""

    heard: float
    version: Version | None


class NatNetSimulator:
    """The stand-in server: sockets, clients and command handling; the frames are sent
    by a :class:`FrameSender` thread while :meth:`serve` runs."""

    def __init__(self, options: ServerOptions):
        self.options = options
        if options.future_motive:
            version = FUTURE_VERSION
        else:
            version = nn.require_supported(Version.parse(options.natnet_version))
            if not version.known:
                raise NatNetProtocolError(
                    f"the stand-in streams NatNet {nn.OLDEST_VERSION} to {nn.NEWEST_VERSION}, not {version}"
                )
        scene = load_scene(options.scene, -1 if options.seed is None else options.seed, options.rate)
        # a Motive 3.2+ (its own bitstream 4.2 or later) describes the bones' rotational offsets
        self.stream = SceneStream(
            scene,
            up_axis=options.up_axis,
            skeleton_coordinates=options.skeleton_coordinates,
            future=options.future_motive,
            rotational_offsets=version.description_orientation,
            assets=options.assets,
        )
        self.rate = scene.rate
        self.commands = MotiveCommands(self.stream, version, self.rate, future=options.future_motive)
        self.command: socket.socket | None = None
        self.data: socket.socket | None = None
        self.data_port = options.data_port
        self.clients: dict[tuple[str, int], UnicastClient] = {}  # unicast clients by address
        # held by the two threads around the clients and the commands' version and params bits
        self.lock = threading.Lock()
        self.sender: FrameSender | None = None
        self.bad_packets = 0
        self.rejected = ClientStats()  # malformed command packets, logged once
        self.last_frame: PreparedFrame | None = None  # the newest frame sent (NAT_REQUEST_FRAMEOFDATA)
        impairment = options.impairment
        self.impairment = impairment
        # the server clock is the monotonic one unless an offset, drift or reset is asked for
        self.clock = ServerClock(impairment, time.monotonic())
        self.delivery: Delivery[PreparedFrame] = Delivery(impairment)
        self.truth = TruthLog(impairment.truth_log) if impairment.truth_log else None
        self.wall_offset = wall_clock_offset()  # Unix - monotonic, for the truth log

    @property
    def version(self) -> Version:
        """The server's own bitstream, streamed multicast (a command may change it)."""
        return self.commands.version

    @property
    def frames_sent(self) -> int:
        return self.sender.sent if self.sender is not None else 0

    def version_for(self, requested: tuple[int, int, int, int] | None) -> Version:
        """The bitstream a unicast client gets for the one it asks for: its own when the
        server knows it and it is not newer than the server's, else the server's."""
        own = self.version
        if requested is None:
            return own
        wanted = Version(requested[0], requested[1])
        return wanted if wanted.known and wanted <= own else own

    # ------------------------------------------------------------------ sockets
    def open(self) -> None:
        o = self.options
        command = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        command.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        command.bind((o.server_address, o.command_port))
        command.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        command.setblocking(False)
        self.command = command
        data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        data.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        data.bind((o.server_address, 0))
        if self.data_port == 0:
            # a free port number for the destination: multicast, this socket's own one
            # (held while the server runs, so no other server on this host takes it);
            # unicast, another one, since a client on this host binds the data port of its
            # interface and must be the only one receiving there
            self.data_port = data.getsockname()[1] if o.multicast else _free_udp_port(o.server_address)
        data.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(o.server_address))
        data.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        data.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        data.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
        self.data = data

    @property
    def command_address(self) -> tuple[str, int]:
        return self.command.getsockname() if self.command else ("", 0)

    def close(self) -> None:
        for sock in (self.command, self.data):
            if sock is not None:
                sock.close()
        self.command = self.data = None

    def ready_line(self) -> str:
        o = self.options
        host, port = self.command_address
        target = (
            f"{o.multicast_address}:{self.data_port}"
            if o.multicast
            else f"each client (unicast to {o.unicast_to})"
        )
        return (
            f"natnet_simulator ready: NatNet {self.version} {'multicast' if o.multicast else 'unicast'} "
            f"command={host}:{port} data={target} data_port={self.data_port} rate={self.rate:g} Hz "
            f"up_axis={o.up_axis}"
        )

    # ------------------------------------------------------------------ messages
    def server_info(self, version: Version | None = None) -> nn.ServerInfo:
        """NAT_SERVERINFO, saying ``version`` (a unicast client's) or the server's own."""
        o = self.options
        version = version or self.version
        return nn.ServerInfo(
            app_name=o.app_name,
            app_version=o.app_version,
            natnet_version=(version.major, version.minor, 0, 0),
            clock_frequency=CLOCK_FREQUENCY,
            data_port=self.data_port,
            multicast=o.multicast,
            multicast_address=o.multicast_address,
        )

    def handle(self, packet: bytes, source: tuple[str, int]) -> None:
        """Answer one command datagram; malformed ones are counted and logged, never fatal."""
        try:
            message_id, payload = nn.unpack(packet)
        except NatNetProtocolError as exc:
            self._bad(f"from {source[0]}:{source[1]}: {exc}")
            return
        reply: bytes | None = None
        now = time.monotonic()
        with self.lock:
            client = self.clients.get(source)
            if client is not None:  # any packet of a client's keeps it alive
                client.heard = now
        if message_id == MessageId.CONNECT:
            request = nn.decode_connect(payload)
            asked: Version | None = None
            if not self.options.multicast:
                if request.requested_bitstream is not None:
                    asked = self.version_for(request.requested_bitstream)
                if client is None:
                    log.info(
                        f"unicast client {source[0]}:{source[1]} connected ({request.client_name or '?'}), "
                        f"NatNet {asked or self.version}"
                    )
                with self.lock:
                    self.clients[source] = UnicastClient(now, asked)
            reply = nn.encode_server_info(self.server_info(asked))
        elif message_id == MessageId.REQUEST_MODELDEF:
            reply = self.commands.models_packet(client.version if client is not None else None)
        elif message_id == MessageId.REQUEST_FRAMEOFDATA:
            last = self.last_frame
            if last is not None:
                version = (client.version if client is not None else None) or self.version
                reply = last.packet if last.version == version else nn.encode_frame(last.frame, version)
        elif message_id == MessageId.REQUEST:
            text = nn.decode_string(payload)
            if client is not None and text.partition(",")[0].strip().lower() == "bitstream":
                reply = self._client_bitstream(client, source, text.partition(",")[2])
            else:
                with self.lock:  # the frame thread takes the version and params bits together
                    reply = self.commands.reply(text)
        elif message_id == MessageId.DISCONNECT:
            with self.lock:
                gone = self.clients.pop(source, None) is not None
            if gone:
                log.info(f"unicast client {source[0]}:{source[1]} disconnected")
        elif message_id != MessageId.KEEPALIVE:
            reply = nn.pack(MessageId.UNRECOGNIZED_REQUEST)
        if reply is not None:
            self._send(self.command, reply, source)

    def _client_bitstream(self, client: UnicastClient, source: tuple[str, int], argument: str) -> bytes:
        """``Bitstream[,M.m]`` from a unicast client: asks or changes its own bitstream only
        (0 when changed, -1 for a version the server cannot stream)."""
        if not argument.strip():
            return nn.encode_response(f"Bitstream,{client.version or self.version}")
        try:
            wanted = Version.parse(argument)
        except NatNetProtocolError:
            return nn.encode_response(-1)
        version = self.version_for((wanted.major, wanted.minor, 0, 0))
        if version != wanted:
            return nn.encode_response(-1)
        if version != (client.version or self.version):
            log.info(f"unicast client {source[0]}:{source[1]} now gets NatNet {version}")
        client.version = version
        return nn.encode_response(0)

    def _bad(self, what: str) -> None:
        self.bad_packets += 1
        reject_input(self.rejected, log, "malformed_command", f"a malformed command packet {what}")

    def _send(self, sock: socket.socket | None, packet: bytes, target: tuple[str, int]) -> None:
        if sock is None:
            return
        try:
            sock.sendto(packet, target)
        except OSError as exc:  # a vanished client or a full buffer must not stop the server
            log.debug(f"send to {target} failed: {exc}")

    # ------------------------------------------------------------------ frames
    def transmit(self, frame: PreparedFrame) -> None:
        """(frame thread) Send a frame: to the multicast group in the server's version, or
        to every unicast client not timed out (``--unicast-to``) in the client's version
        (each version encoded once)."""
        o = self.options
        packets = {frame.version: frame.packet}

        def packet_for(version: Version) -> bytes:
            packet = packets.get(version)
            if packet is None:
                packet = packets[version] = nn.encode_frame(frame.frame, version)
            return packet

        own = self.version
        if frame.version != own:  # the bitstream changed since the frame was encoded
            frame.packet, frame.version = packet_for(own), own
        self.last_frame = frame
        if o.multicast:
            self._send(self.data, frame.packet, (o.multicast_address, self.data_port))
            return
        now = time.monotonic()
        with self.lock:
            clients = [
                (address, state, state.heard, state.version) for address, state in self.clients.items()
            ]
        for address, state, heard, version in clients:
            if now - heard > o.client_timeout:
                with self.lock:
                    gone = self.clients.get(address) is state and state.heard == heard
                    if gone:
                        del self.clients[address]
                if gone:
                    log.info(f"unicast client {address[0]}:{address[1]} timed out (no keep-alive)")
                continue
            packet = packet_for(version or own)
            if o.unicast_to in ("command-socket", "both"):
                self._send(self.command, packet, address)
            if o.unicast_to in ("data-port", "both"):
                self._send(self.data, packet, (address[0], self.data_port))

    def next_params(self) -> tuple[int, Version]:
        """(frame thread) The params bits of the next frame and the version it streams in."""
        with self.lock:  # a command changes the two together
            return self.commands.take_params(), self.commands.version

    def serve(self, stop: threading.Event) -> None:
        """Answer commands, while a frame thread streams the scene, until ``stop`` (or,
        with ``--frames``, until the frame thread has sent them)."""
        source = FrameSource(
            stream=self.stream,
            rate=self.rate,
            frames=self.options.frames,
            clock=self.clock,
            shifts_clock=self.impairment.shifts_clock,
            delays=self.impairment.delays,
            delivery=self.delivery,
            next_params=self.next_params,
            transmit=self.transmit,
            truth=self.truth,
            wall_offset=self.wall_offset,
        )
        sender = self.sender = FrameSender(source, time.monotonic())
        halt = threading.Event()
        thread = threading.Thread(target=sender.run, args=(halt,), name="natnet-frames", daemon=True)
        thread.start()
        try:
            while not stop.is_set() and thread.is_alive():
                if not self._poll_commands(COMMAND_POLL):
                    return
        finally:
            halt.set()
            thread.join(2.0)  # it never waits for this thread: a short wait

    def _poll_commands(self, timeout: float) -> bool:
        """Answer the commands that arrive within ``timeout`` s; False once the command
        socket is closed."""
        command = self.command
        if command is None:
            return False
        try:
            readable, _, _ = select.select([command], [], [], timeout)
        except (OSError, ValueError):
            return False
        if readable:
            self._drain_commands(command)
        return True

    def _drain_commands(self, command: socket.socket) -> None:
        for _ in range(64):
            try:
                packet, source = command.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue  # e.g. ICMP port unreachable from a client that went away
            self.handle(packet, source)


# ---------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    """natnet_simulator's command line."""
    p = argparse.ArgumentParser(
        prog="natnet_simulator",
        description="A Motive stand-in: serves a simulated mocap scene over OptiTrack NatNet (UDP).",
    )
    p.add_argument("--scene", default="", help="scene YAML (default: the demo scene of mocap4r2_drivers)")
    p.add_argument("--seed", type=seed_value, default=None, help="random seed (default: the scene's)")
    p.add_argument(
        "--natnet-version",
        default="4.1",
        choices=[str(v) for v in nn.SUPPORTED_VERSIONS],
        help="NatNet bitstream version to stream multicast, and the newest a unicast client may ask "
        "for (default 4.1, as Motive 3.1; 4.2 as Motive 3.2 and later)",
    )
    p.add_argument(
        "--assets",
        action="store_true",
        help="stream an asset (a trained markerset, NatNet 4.1+) made of the scene's first rigid body",
    )
    p.add_argument(
        "--future-motive",
        action="store_true",
        help=f"(tests) stand for a Motive newer than any known: advertise NatNet {FUTURE_VERSION}, add an "
        "unknown sized frame section and an unknown description type to the newest layout",
    )
    p.add_argument(
        "--server-address",
        default="127.0.0.1",
        help="address to serve on; also the multicast interface (default 127.0.0.1)",
    )
    p.add_argument(
        "--command-port",
        type=int,
        default=nn.DEFAULT_COMMAND_PORT,
        help="command port (default 1510; 0 picks a free one)",
    )
    p.add_argument(
        "--data-port",
        type=int,
        default=nn.DEFAULT_DATA_PORT,
        help="data port of the multicast stream (default 1511; 0 picks a free one)",
    )
    p.add_argument(
        "--multicast-address",
        default=nn.DEFAULT_MULTICAST_ADDRESS,
        help="multicast group (default 239.255.42.99)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--multicast",
        dest="multicast",
        action="store_true",
        default=True,
        help="stream to the multicast group (default)",
    )
    mode.add_argument(
        "--unicast", dest="multicast", action="store_false", help="stream to each connected client"
    )
    p.add_argument(
        "--unicast-to",
        choices=UNICAST_TARGETS,
        default="both",
        help="where unicast frames go: the client's command socket, the data port of its "
        "address, or both (default: both, so that any NatNet client receives them)",
    )
    p.add_argument("--rate", type=float, default=0.0, help="frame rate in Hz (default: the scene's)")
    p.add_argument(
        "--up-axis", choices=("y", "z"), default="y", help="up axis of the stream (Motive default: y)"
    )
    p.add_argument(
        "--skeleton-coordinates",
        choices=("global", "local"),
        default="global",
        help="bone poses in world coordinates or relative to their parent bone",
    )
    p.add_argument(
        "--client-timeout",
        type=float,
        default=5.0,
        help="seconds without keep-alive after which a unicast client is dropped",
    )
    p.add_argument("--frames", type=int, default=0, help="stop after this many frames (default: run forever)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every client event")
    add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM (or ``--frames``); the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="[natnet_simulator] %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    if args.rate < 0 or (args.rate and args.rate > 10000):
        print("natnet_simulator: --rate must be in (0, 10000]", file=sys.stderr)
        return 2
    group = args.multicast_address.split(".")
    if len(group) != 4 or not all(p.isdigit() for p in group) or not 224 <= int(group[0]) <= 239:
        print(
            f"natnet_simulator: --multicast-address {args.multicast_address} is not a multicast group "
            "(224.0.0.0-239.255.255.255)",
            file=sys.stderr,
        )
        return 2
    try:
        impairment = from_arguments(args, seed=args.seed or 0)
    except ValueError as exc:
        print(f"natnet_simulator: {exc}", file=sys.stderr)
        return 2
    if impairment.clock_offset_s < 0:
        print(
            "natnet_simulator: --clock-offset-s must be >= 0 (Motive's clock counts up from 0)",
            file=sys.stderr,
        )
        return 2
    options = ServerOptions(
        impairment=impairment,
        scene=args.scene,
        seed=args.seed,
        natnet_version=args.natnet_version,
        server_address=args.server_address,
        command_port=args.command_port,
        data_port=args.data_port,
        multicast_address=args.multicast_address,
        multicast=args.multicast,
        rate=args.rate,
        up_axis=args.up_axis,
        skeleton_coordinates=args.skeleton_coordinates,
        client_timeout=args.client_timeout,
        frames=args.frames,
        unicast_to=args.unicast_to,
        future_motive=args.future_motive,
        assets=args.assets,
    )
    try:
        server = NatNetSimulator(options)
    except (scene_module.SceneError, NatNetProtocolError) as exc:
        print(f"natnet_simulator: {exc}", file=sys.stderr)
        return 2
    try:
        server.open()
    except OSError as exc:
        print(
            f"natnet_simulator: cannot open sockets on {args.server_address} "
            f"(command port {args.command_port}): {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    stop = threading.Event()

    def _stop(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if stop_noted():  # a signal while the scene loaded and the sockets opened
        stop.set()
    print(server.ready_line(), flush=True)
    try:
        server.serve(stop)
    finally:
        server.close()
        log.info(f"stopped after {server.frames_sent} frames")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
