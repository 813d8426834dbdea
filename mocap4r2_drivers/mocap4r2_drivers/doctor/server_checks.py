"""Is the mocap server there, and does data flow? Each probe uses the drivers' own
protocol code (NatNet's NAT_CONNECT / NAT_SERVERINFO and frames, QTM's packet reader and
commands) and is bounded in time: a dead server costs at most its timeout."""

from __future__ import annotations

import errno
import logging
import select
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .report import Check, failed, passed, warned

# The vendors' protocol and transport modules are imported inside the probes that use
# them: they pull in numpy (about half a second on a loaded machine), and the `mocap4r2`
# command line loads this module for every verb it lists, so `mocap4r2 systems` would pay
# for it. Only the type checker reads them here.
if TYPE_CHECKING:
    from mocap4r2_drivers.optitrack.protocol import ServerInfo
    from mocap4r2_drivers.optitrack.transport import ClientConfig, NatNetTransport

AREA = "server"
STEP_TIMEOUT = 2.0  # each step (an answer, the first frames) gets this long
RETRY_PERIOD = 0.5  # between NAT_CONNECT requests
FRAMES_WANTED = 3
LOG = logging.getLogger("mocap4r2.doctor")


@dataclass
class NatNetProbe:
    """What the NatNet probe learnt, for the checks that compare it (config, MTU)."""

    server_info: ServerInfo | None = None
    frame_bytes: int = 0
    frames: int = 0
    local_address: str = ""
    checks: list[Check] = field(default_factory=list)


def _ask_server_info(config: ClientConfig, local: str, timeout: float) -> tuple[ServerInfo | None, str]:
    """NAT_CONNECT from a socket connected to the command port (so that an ICMP port
    unreachable comes back as ECONNREFUSED); (server info, what went wrong)."""
    from mocap4r2_drivers.optitrack import protocol as nn
    from mocap4r2_drivers.optitrack.protocol import MessageId, NatNetProtocolError

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    request = nn.encode_connect(nn.ConnectRequest(client_name="mocap4r2 doctor", requested_bitstream=None))
    try:
        sock.bind((local, 0))
        sock.connect((config.server_address, config.command_port))
        deadline = time.monotonic() + timeout
        next_send = 0.0
        while (now := time.monotonic()) < deadline:
            if now >= next_send:
                sock.send(request)
                next_send = now + RETRY_PERIOD
            ready, _, _ = select.select([sock], [], [], min(deadline, next_send) - now)
            if not ready:
                continue
            packet = sock.recv(65536)
            try:
                message_id, payload = nn.unpack(packet)
                if message_id == MessageId.SERVERINFO:
                    return nn.decode_server_info(payload), ""
            except NatNetProtocolError as exc:
                return None, f"the answer is not NatNet: {exc}"
        return None, "silent"
    except ConnectionRefusedError:
        return None, "refused"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    finally:
        sock.close()


def probe_natnet(config: ClientConfig, timeout: float = STEP_TIMEOUT) -> NatNetProbe:
    """Server info on the command port, then frames on the configured stream."""
    from mocap4r2_drivers.common import ClientStats
    from mocap4r2_drivers.optitrack.transport import NatNetConnectionError
    from mocap4r2_drivers.optitrack.transport import NatNetTransport as Transport

    probe = NatNetProbe()
    server = f"{config.server_address}:{config.command_port}"
    transport = Transport(config, ClientStats(), LOG)
    try:
        transport.open()
    except NatNetConnectionError as exc:
        probe.checks.append(failed("NatNet sockets", str(exc), "fix local_address (or use auto)", AREA))
        return probe
    probe.local_address = transport.local_address
    try:
        info, problem = _ask_server_info(config, transport.local_address, timeout)
        if info is None:
            probe.checks.append(_no_server_info(server, problem, timeout))
            return probe
        probe.server_info = info
        probe.checks.append(
            passed(
                f"NatNet server at {server}",
                f"{info.app_name} {'.'.join(map(str, info.app_version))}, NatNet "
                f"{'.'.join(map(str, info.natnet_version))}, "
                + (
                    f"multicast to {info.multicast_address}:{info.data_port}"
                    if info.multicast
                    else f"unicast (data port {info.data_port})"
                    if info.multicast is not None
                    else "connection info not sent"
                ),
                AREA,
            )
        )
        probe.checks.append(check_natnet_version(info))
        probe.checks += check_stream_settings(config, info)
        _read_frames(transport, info, probe, timeout)
        probe.checks.append(_frames_check(config, info, probe, timeout))
    finally:
        transport.close()
    return probe


def _no_server_info(server: str, problem: str, timeout: float) -> Check:
    title = f"NatNet server at {server}"
    if problem == "refused":
        return failed(
            title,
            f"nothing listens on {server} (ICMP port unreachable)",
            "set command_port to Motive's command port (Streaming pane, 1510 by default) and "
            "server_address to the Motive computer; check that Motive is running and streaming",
            AREA,
        )
    if problem == "silent":
        return failed(
            title,
            f"no NAT_SERVERINFO within {timeout:g} s (no refusal either: a host that drops the "
            "request, or a program on that port that is not Motive)",
            "in Motive, turn Streaming > Broadcast Frame Data on; allow UDP 1510-1511 in the Motive "
            "computer's firewall; check server_address and command_port",
            AREA,
        )
    return failed(title, problem, "check server_address and command_port", AREA)


def check_natnet_version(info: ServerInfo) -> Check:
    """The server's bitstream against what the driver decodes: a known one passes, a newer
    one is read with the newest known layout (its new parts skipped and counted), so it
    warns; only one older than 3.0 fails. Over multicast Motive streams its own bitstream
    whatever a client asks, so the fix for an old one is Motive itself."""
    from mocap4r2_drivers.optitrack import protocol as nn

    title = "NatNet version"
    version = info.bitstream
    if version.known:
        return passed(title, f"the server streams NatNet {version}, which the driver reads", AREA)
    if version.supported:
        return warned(
            title,
            f"the server streams NatNet {version}, newer than the newest the driver knows "
            f"({nn.NEWEST_VERSION}): read with the {nn.NEWEST_VERSION} layout, what it adds skipped "
            "and counted in /diagnostics",
            "check the driver's /diagnostics for skipped parts; over unicast, bitstream_version "
            f"can ask Motive for {nn.NEWEST_VERSION}",
            AREA,
        )
    return failed(
        title,
        f"the server streams NatNet {version}; the driver reads {nn.OLDEST_VERSION} and later",
        f"update Motive (its NatNet {version} predates the bitstreams the driver reads)",
        AREA,
    )


def check_stream_settings(config: ClientConfig, info: ServerInfo) -> list[Check]:
    """The params against the server's connection info: the driver follows the server,
    but the user should fix the params (and other clients may not follow)."""
    if info.multicast is None:
        return []
    out = []
    wanted = "multicast" if info.multicast else "unicast"
    if config.connection_type != wanted:
        out.append(
            warned(
                "connection_type against the server",
                f"params say {config.connection_type}, the server streams {wanted}",
                f"set connection_type: {wanted}",
                "configuration",
            )
        )
    if info.multicast and info.data_port and info.data_port != config.data_port:
        out.append(
            warned(
                "data_port against the server",
                f"params say {config.data_port}, the server streams to {info.data_port}",
                f"set data_port: {info.data_port}",
                "configuration",
            )
        )
    if info.multicast and info.multicast_address not in (None, "0.0.0.0", config.multicast_address):
        out.append(
            warned(
                "multicast_address against the server",
                f"params say {config.multicast_address}, the server streams to {info.multicast_address}",
                f"set multicast_address: {info.multicast_address}",
                "configuration",
            )
        )
    if not out:
        out.append(passed("stream settings against the server", f"{wanted}, as configured", "configuration"))
    return out


def _read_frames(transport: NatNetTransport, info: ServerInfo, probe: NatNetProbe, timeout: float) -> None:
    """Frames on the stream as configured (not as the server says: that is what the
    driver would first listen to). Unicast needs the server to know us: NAT_CONNECT from
    the transport's command socket, as the driver does."""
    from mocap4r2_drivers.optitrack import protocol as nn
    from mocap4r2_drivers.optitrack.protocol import MessageId, NatNetProtocolError

    connect = nn.encode_connect(nn.ConnectRequest(client_name="mocap4r2 doctor", requested_bitstream=None))
    if not transport.multicast:
        transport.send(connect)
    deadline = time.monotonic() + timeout
    while probe.frames < FRAMES_WANTED and (now := time.monotonic()) < deadline:
        ready, _, _ = select.select(transport.sockets(), [], [], deadline - now)
        for sock in ready:
            packet = transport.receive(sock)
            if packet is None:
                continue
            try:
                message_id, payload = nn.unpack(packet)
                if message_id != MessageId.FRAMEOFDATA:
                    continue
                nn.decode_frame(payload, info.bitstream)
            except NatNetProtocolError as exc:
                LOG.debug(f"undecodable frame: {exc}")
                continue
            probe.frames += 1
            probe.frame_bytes = max(probe.frame_bytes, len(packet))


def _frames_check(config: ClientConfig, info: ServerInfo, probe: NatNetProbe, timeout: float) -> Check:
    multicast = config.connection_type == "multicast"
    where = (
        f"multicast {config.multicast_address}:{config.data_port} joined on {probe.local_address}"
        if multicast
        else f"unicast to {probe.local_address}"
    )
    title = "NatNet frames"
    if probe.frames:
        return passed(title, f"{probe.frames} frames in under {timeout:g} s on {where}", AREA)
    hints = []
    if info.multicast is not None and info.multicast != multicast:
        hints.append(f"set connection_type: {'multicast' if info.multicast else 'unicast'}")
    if info.multicast and info.multicast_address not in (None, config.multicast_address):
        hints.append(f"set multicast_address: {info.multicast_address}")
    if info.multicast and info.data_port and info.data_port != config.data_port:
        hints.append(f"set data_port: {info.data_port}")
    fix = "; ".join(hints) or (
        "the server answers but sends no frames here: start Motive's live stream; set local_address "
        "to this machine's address on the mocap network; allow the data port in the firewall"
    )
    return failed(title, f"no frame within {timeout:g} s on {where}", fix, AREA)


def probe_qtm(host: str, base_port: int, version: str, timeout: float = STEP_TIMEOUT) -> list[Check]:
    """QTM's RT port (base + 1, little endian): its welcome banner, Version, then the
    parameters (rate, up axis, labels, bodies), each step within ``timeout``."""
    from mocap4r2_drivers.qualisys import protocol as qp
    from mocap4r2_drivers.qualisys.client import QtmConnectionError, parse_parameters

    port = base_port + 1
    title = f"QTM RT server at {host}:{port}"
    reader = qp.PacketReader(qp.MAX_PACKET_SIZE)
    answers: list[tuple[int, bytes]] = []
    xml: bytes | None = None
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:

            def next_answer() -> tuple[int, bytes] | None:
                """The next command, error or XML packet within one step's timeout."""
                deadline = time.monotonic() + timeout
                while not answers:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    sock.settimeout(remaining)
                    chunk = sock.recv(65536)
                    if not chunk:
                        return None
                    answers.extend(
                        (kind, payload)
                        for kind, payload in reader.feed(chunk)
                        if kind in (qp.PacketType.COMMAND, qp.PacketType.ERROR, qp.PacketType.XML)
                    )
                return answers.pop(0)

            first = next_answer()
            banner = qp.unpack_text(first[1]) if first and first[0] != qp.PacketType.XML else None
            if banner is None or "QTM RT Interface connected" not in banner:
                return [
                    failed(
                        title,
                        f"no QTM welcome within {timeout:g} s (got {banner!r})",
                        "check host and port (QTM: Project options > Real-Time output, base port 22222)",
                        AREA,
                    )
                ]
            sock.sendall(qp.pack_text(qp.PacketType.COMMAND, f"Version {version}"))
            reply = next_answer()
            answer = qp.unpack_text(reply[1]) if reply and reply[0] != qp.PacketType.XML else None
            if answer is not None and answer.startswith("Version set to"):
                sock.sendall(qp.pack_text(qp.PacketType.COMMAND, "GetParameters General 3D 6D"))
                parameters = next_answer()
                xml = parameters[1] if parameters and parameters[0] == qp.PacketType.XML else None
    except ConnectionRefusedError:
        return [
            failed(
                title,
                f"nothing listens on {host}:{port} (connection refused)",
                "start QTM with real-time output on; set port to QTM's base port (22222 by default)",
                AREA,
            )
        ]
    except TimeoutError:
        return [failed(title, f"no answer within {timeout:g} s", "check host, and the firewall", AREA)]
    except (OSError, qp.QtmProtocolError) as exc:
        return [failed(title, str(exc), "check host and port", AREA)]
    out = [passed(title, banner, AREA)]
    if answer is None or not answer.startswith("Version set to"):
        out.append(
            failed(
                "QTM RT protocol version",
                f"asked for {version}, QTM answered {answer!r}",
                "set protocol_version to one this QTM supports (QTM 2.x: 1.25 or lower), or update QTM",
                AREA,
            )
        )
        return out
    out.append(passed("QTM RT protocol version", answer, AREA))
    out.append(_qtm_parameters_check(xml, parse_parameters, QtmConnectionError))
    return out


def _qtm_parameters_check(xml: bytes | None, parse: Any, error: type[Exception]) -> Check:
    """What QTM will stream: rate, up axis (the driver follows it), labels and bodies."""
    title = "QTM parameters"
    if xml is None:
        return failed(title, "no parameter XML in answer to GetParameters", "check QTM's RT settings", AREA)
    try:
        parameters = parse(xml.rstrip(b"\0"))
    except error as exc:
        return failed(title, str(exc), "check QTM's project", AREA)
    evidence = (
        f"{parameters.frequency:g} Hz, up axis {parameters.axis_upwards} (converted to +Z by the driver), "
        f"{len(parameters.labels)} labeled markers, {len(parameters.bodies)} 6DOF bodies"
    )
    if not parameters.bodies and not parameters.labels:
        return warned(
            title,
            evidence,
            "define 6DOF bodies or an AIM model in QTM: otherwise only unlabeled markers are published",
            AREA,
        )
    return passed(title, evidence, AREA)


def probe_tcp(what: str, host: str, port: int, fix: str, timeout: float = STEP_TIMEOUT) -> Check:
    """A TCP connect (Vicon's DataStream port): accepted, refused, or silent."""
    title = f"{what} at {host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return passed(title, "TCP connection accepted", AREA)
    except ConnectionRefusedError:
        return failed(title, "connection refused: nothing listens on that port", fix, AREA)
    except TimeoutError:
        return failed(title, f"no answer within {timeout:g} s (host down or firewall)", fix, AREA)
    except OSError as exc:
        detail = "no route" if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) else exc.strerror
        return failed(title, str(detail), fix, AREA)


def probe_vrpn(host: str, port: int, connection: str, timeout: float = STEP_TIMEOUT) -> list[Check]:
    """The driver's own VRPN handshake (``VrpnClient.connect``: the connection over UDP
    request or ``tcp``, both cookies, our descriptions, the server's senders and types),
    then tracker reports for up to ``timeout``: the server is there, speaks VRPN 07, names
    its trackers, and sends their poses."""
    from mocap4r2_drivers.vrpn import protocol as vp
    from mocap4r2_drivers.vrpn.client import VrpnClient
    from mocap4r2_drivers.vrpn.dialog import PoseBlock
    from mocap4r2_drivers.vrpn.transport import VrpnConnectionError

    title = f"VRPN server at {host}:{port} ({connection})"
    client = VrpnClient(host, port, tcp_only=connection == "tcp", timeout=timeout, pose_blocks=True)
    try:
        try:
            trackers = client.connect()
        except VrpnConnectionError as exc:
            return [_vrpn_refusal(title, exc, connection, timeout)]
        names = ", ".join(trackers) or "none"
        out = [passed(title, f"VRPN {client.server_version} handshake; trackers announced: {names}", AREA)]
        reports: dict[str, int] = {}
        deadline = time.monotonic() + timeout
        try:
            while not reports and (left := deadline - time.monotonic()) > 0:
                for item in client.read(left):
                    if isinstance(item, PoseBlock):
                        for sender in item.trackers:
                            reports[sender] = reports.get(sender, 0) + 1
                    elif item.type == vp.POS_QUAT:
                        reports[item.sender] = reports.get(item.sender, 0) + 1
        except VrpnConnectionError as exc:
            out.append(failed("VRPN tracker reports", str(exc), "check the server's log", AREA))
            return out
        if reports:
            seen = ", ".join(f"{name} ({count})" for name, count in sorted(reports.items()))
            out.append(passed("VRPN tracker reports", f"poses within {timeout:g} s from {seen}", AREA))
        else:
            out.append(
                failed(
                    "VRPN tracker reports",
                    f"connected, but no tracker pose within {timeout:g} s (trackers announced: {names})",
                    "the server streams nothing: track a body in it (Motive: rigid bodies, VRPN "
                    "streaming on; Vicon Tracker: objects enabled); over UDP, allow its datagrams "
                    "to this machine in the firewall, or set connection: tcp",
                    AREA,
                )
            )
        return out
    finally:
        client.close()


def _vrpn_refusal(title: str, exc: Exception, connection: str, timeout: float) -> Check:
    """A handshake that failed, named by its cause."""
    from mocap4r2_drivers.vrpn import protocol as vp

    cause = exc.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return failed(
            title,
            "connection refused: nothing listens on that port",
            "start the VRPN server (Motive/Tracker: VRPN streaming on); set host and port (3883)",
            AREA,
        )
    if isinstance(cause, TimeoutError | socket.timeout):
        fix = "check host and port; allow the server's TCP connection back to this machine in its firewall"
        if connection == "tcp":
            fix = "check host and port, and the firewall"
        return failed(title, f"no connection within {timeout:g} s", fix, AREA)
    if isinstance(cause, vp.VrpnProtocolError):
        return failed(title, str(exc), "host and port must name a VRPN server", AREA)
    return failed(title, str(exc), "check host and port", AREA)
