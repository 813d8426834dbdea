"""Network checks: the route and interface that reach the server, interfaces sharing its
subnet (Wi-Fi and wired at once), the interface that joins the multicast group, the MTU
against the frame size, and a UDP datagram to ourselves on the data port (a firewall).

Routes come from ``ip -j route get`` (iproute2); where ``ip`` is missing, the source
address the kernel picks for a UDP socket connected to the server (no packet is sent)
and the interface holding that address. Interface addresses come from the kernel's
SIOCGIFADDR/SIOCGIFNETMASK ioctls (the primary IPv4 address of each interface), MTU and
Wi-Fi from /sys/class/net.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import select
import shutil
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .report import Check, failed, noted, passed, skipped, warned

AREA = "network"
SYS_NET = Path("/sys/class/net")
_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B
_IFF_LOOPBACK = 0x8  # /sys/class/net/<name>/flags: the kernel's loopback device
# operstates (RFC 2863, as the kernel reports them) of an interface that passes no traffic
# now, and of one whose driver does not say
LINK_DOWN = ("down", "lowerlayerdown", "notpresent")
LINK_UNREPORTED = ("unknown", "")
IP_UDP_HEADERS = 28  # IPv4 (20) + UDP (8): what a datagram adds to its payload on the wire
COMMAND_TIMEOUT = 2.0  # longest an external command may take


@dataclass(frozen=True)
class Interface:
    """A local interface with its primary IPv4 address."""

    name: str
    address: str
    prefix: int
    mtu: int
    wireless: bool
    operstate: str = "unknown"  # /sys/class/net/<name>/operstate: up, down, unknown (lo), ...
    loopback: bool = False  # the kernel's loopback device: no link at all

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"{self.address}/{self.prefix}", strict=False)


@dataclass(frozen=True)
class Route:
    """How the kernel reaches an address: interface, source address, gateway (if any)."""

    dev: str
    src: str
    gateway: str = ""
    kind: str = "unicast"


def _ioctl_address(sock: socket.socket, request: int, name: str) -> str | None:
    try:
        answer = fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name[:15].encode()))
    except OSError:  # no IPv4 address on this interface
        return None
    return socket.inet_ntoa(answer[20:24])


def local_interfaces(sys_net: Path = SYS_NET) -> list[Interface]:
    """The interfaces with an IPv4 address: name, address, prefix, MTU, Wi-Fi or not."""
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            address = _ioctl_address(sock, _SIOCGIFADDR, name)
            netmask = _ioctl_address(sock, _SIOCGIFNETMASK, name)
            if address is None or netmask is None:
                continue
            prefix = ipaddress.IPv4Network(f"0.0.0.0/{netmask}").prefixlen
            try:
                mtu = int((sys_net / name / "mtu").read_text())
            except (OSError, ValueError):
                mtu = 1500
            wireless = (sys_net / name / "wireless").exists() or (sys_net / name / "phy80211").exists()
            try:
                operstate = (sys_net / name / "operstate").read_text().strip()
            except OSError:
                operstate = "unknown"
            try:
                loopback = bool(int((sys_net / name / "flags").read_text(), 16) & _IFF_LOOPBACK)
            except (OSError, ValueError):
                loopback = name == "lo"
            out.append(Interface(name, address, prefix, mtu, wireless, operstate, loopback))
    return out


def route_to(address: str, port: int = 9) -> Route:
    """The kernel's route to ``address``; OSError when there is none."""
    if shutil.which("ip"):
        try:
            result = subprocess.run(
                ["ip", "-j", "route", "get", address],
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise OSError(errno.ETIMEDOUT, f"ip route get {address} took over {COMMAND_TIMEOUT} s") from exc
        if result.returncode != 0:
            raise OSError(errno.ENETUNREACH, result.stderr.strip() or "no route")
        routes = json.loads(result.stdout or "[]")
        if routes:
            r = routes[0]
            return Route(
                r.get("dev", ""), r.get("prefsrc", ""), r.get("gateway", ""), r.get("type", "unicast")
            )
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((address, port))  # UDP: the kernel picks a route, nothing is sent
        src = str(probe.getsockname()[0])
    finally:
        probe.close()
    dev = next((i.name for i in local_interfaces() if i.address == src), "")
    return Route(dev, src)


def check_route(server: str, route: Route | None, error: str = "") -> Check:
    """No route: FAIL; through a gateway: WARN (mocap belongs on one subnet)."""
    title = f"route to the server {server}"
    if route is None:
        return failed(
            title,
            f"no route from this machine: {error}",
            "connect this machine to the mocap network (cable, switch, IP address on the server's "
            "subnet) or correct the server address in the params file",
            AREA,
        )
    where = f"through {route.dev or '?'} from {route.src or '?'}"
    if route.gateway:
        return warned(
            title,
            f"{where}, via the gateway {route.gateway}",
            "mocap streams belong on the server's own subnet: multicast does not cross a router and "
            "every hop adds latency; give this machine an address on the server's subnet",
            AREA,
        )
    return passed(title, where, AREA)


def check_link(interface: Interface | None) -> Check:
    """The interface that reaches the server must have its link up (a cable, a switch).

    Only "up" is a PASS. Loopback has no link (INFO), and a driver that reports no link
    state ("unknown": tunnels, some virtual NICs) leaves it untold (SKIP), never a PASS."""
    if interface is None:
        return warned(
            "link of the interface to the server", "the interface is unknown", "fix the route", AREA
        )
    name, state = interface.name, interface.operstate
    title = f"link of {name}"
    if interface.loopback:
        return noted(title, f"{name} is the loopback interface: the server is this machine, no link", AREA)
    if state in LINK_DOWN:
        return failed(
            title,
            f"{name} is {state}: no link",
            f"plug the cable, check the switch port; `ip link set {name} up` if switched off",
            AREA,
        )
    if state in LINK_UNREPORTED:
        return skipped(
            title,
            f"{name}'s driver reports its link state as {state or 'nothing'}: it cannot be told here",
            "look at the port's link light, or `ethtool " + name + "` (Link detected)",
            AREA,
        )
    if state != "up":  # dormant (e.g. waiting for 802.1X), testing
        return warned(title, f"{name} is {state}: it passes no traffic yet", f"`ip link show {name}`", AREA)
    return passed(title, f"{name} is up", AREA)


def check_subnet_interfaces(server: str, interfaces: list[Interface], route: Route | None) -> Check:
    """Several interfaces on the server's subnet, or Wi-Fi on the path, make the kernel's
    choice (and the multicast join) depend on which came up first."""
    title = "interfaces on the server's subnet"
    address = ipaddress.IPv4Address(server)
    on_subnet = [i for i in interfaces if address in i.network]
    names = ", ".join(
        f"{i.name} ({i.address}/{i.prefix}{', Wi-Fi' if i.wireless else ''})" for i in on_subnet
    )
    chosen = route.dev if route else "?"
    if len(on_subnet) > 1:
        wifi = [i for i in on_subnet if i.wireless]
        wired = [i for i in on_subnet if not i.wireless]
        both = " (Wi-Fi and wired at once)" if wifi and wired else ""
        return warned(
            title,
            f"{len(on_subnet)} interfaces on {on_subnet[0].network}{both}: {names}; the kernel uses {chosen}",
            "keep one interface on the mocap subnet (switch Wi-Fi off), or set local_address to "
            "the address of the wired interface so that the stream is joined and read there",
            AREA,
        )
    via = next((i for i in interfaces if route and i.name == route.dev), None)
    if via is not None and via.wireless:
        return warned(
            title,
            f"the server is reached over Wi-Fi ({via.name})",
            "stream mocap over a wired link: Wi-Fi drops and delays multicast frames in bursts",
            AREA,
        )
    if not on_subnet:
        return passed(title, f"none on the server's subnet; reached through {chosen}", AREA)
    return passed(title, names, AREA)


def check_local_address(
    local_address: str, server: str, interfaces: list[Interface], route: Route | None
) -> Check:
    """local_address names the interface that joins the stream; it must be the one that
    reaches the server, or frames arrive on an interface nobody listens to."""
    title = "local_address: the interface that receives the stream"
    if route is None:
        return failed(title, "no route to the server", "fix the route first", AREA)
    if local_address in ("auto", ""):
        return passed(title, f"auto: {route.src} on {route.dev}, the interface that reaches {server}", AREA)
    mine = next((i for i in interfaces if i.address == local_address), None)
    if mine is None:
        known = ", ".join(f"{i.address} ({i.name})" for i in interfaces)
        return failed(
            title,
            f"{local_address} is not an address of this machine (its addresses: {known})",
            f"set local_address: {route.src} (or auto)",
            AREA,
        )
    if route.dev and mine.name != route.dev:
        return failed(
            title,
            f"local_address {local_address} is on {mine.name}, but {server} is reached through "
            f"{route.dev} ({route.src}): the stream is joined and read on the wrong interface",
            f"set local_address: {route.src} (or auto)",
            AREA,
        )
    return passed(title, f"{local_address} on {mine.name}, the interface that reaches {server}", AREA)


def check_multicast(group: str, joining: str, joining_dev: str, kernel_route: Route | None) -> Check:
    """The driver joins the group on the interface of local_address; programs that join
    with INADDR_ANY (many SDK samples) get the kernel's multicast route instead."""
    title = f"multicast group {group}"
    kernel = f"{kernel_route.dev}" if kernel_route else "none"
    evidence = f"joined on {joining_dev or '?'} ({joining}); the kernel's route for the group: {kernel}"
    if kernel_route is not None and joining_dev and kernel_route.dev != joining_dev:
        evidence += (
            f" (a program joining without naming an interface would listen on {kernel_route.dev}; "
            "the driver names it)"
        )
    return noted(title, evidence, AREA)  # where it is joined; the frames check says if data comes


def check_mtu(frame_bytes: int, interface: Interface | None) -> Check:
    """A frame larger than one packet is fragmented: losing any fragment loses the frame."""
    title = "MTU against the frame size"
    if interface is None:
        return warned(title, "the receiving interface is unknown", "fix the route first", AREA)
    datagram = frame_bytes + IP_UDP_HEADERS
    if datagram > interface.mtu:
        fragments = -(-(frame_bytes + 8) // (interface.mtu - 20))
        return warned(
            title,
            f"a frame is {frame_bytes} bytes, {fragments} IP fragments on {interface.name} "
            f"(MTU {interface.mtu}): one lost fragment loses the whole frame",
            "stream fewer assets (e.g. turn off unlabeled markers or marker data), or enable jumbo "
            "frames (MTU 9000) on this interface, the switch and the server",
            AREA,
        )
    return passed(title, f"a frame is {frame_bytes} bytes, fits {interface.name}'s MTU {interface.mtu}", AREA)


def check_udp_to_self(local_address: str, port: int, timeout: float = 1.0) -> Check:
    """A datagram sent to our own data port arrives unless a local firewall drops it."""
    title = f"UDP to this machine's data port {port}"
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            receiver.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            receiver.bind((local_address, port))
        except OSError as exc:
            return warned(
                title,
                f"cannot listen on {local_address}:{port}: {exc.strerror} (another program holds it "
                "without sharing)",
                "stop the program holding the port (ss -ulpn shows it), or change data_port here and "
                "on the server",
                AREA,
            )
        probe = b"mocap4r2 doctor " + struct.pack("<d", timeout)
        sender.sendto(probe, (local_address, port))
        ready, _, _ = select.select([receiver], [], [], timeout)
        if ready and receiver.recv(2048) == probe:
            return passed(title, f"a datagram to {local_address}:{port} arrived", AREA)
        return failed(
            title,
            f"a datagram sent to {local_address}:{port} did not arrive within {timeout:g} s",
            f"allow UDP port {port} in this machine's firewall (e.g. ufw allow {port}/udp; "
            "nft/iptables INPUT rules)",
            AREA,
        )
    finally:
        receiver.close()
        sender.close()
