"""The doctor's network checks: each pure check on the interfaces and routes it is
given, the kernel's answers on loopback, and the wrong-interface case made real in
network namespaces of the test's own (two namespaces joined by a veth pair; nothing is
added to the machine's own namespace), skipped with the reason where not allowed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid

import pytest
import yaml
from support import INSTALL, executable  # test/fixtures

from mocap4r2_drivers.doctor.network_checks import (
    Interface,
    Route,
    check_link,
    check_local_address,
    check_mtu,
    check_route,
    check_subnet_interfaces,
    check_udp_to_self,
    local_interfaces,
    route_to,
)
from mocap4r2_drivers.doctor.report import Status

WIRED = Interface("eth0", "192.168.1.10", 24, 1500, False)
WIFI = Interface("wlan0", "192.168.1.23", 24, 1500, True)
OTHER = Interface("eth1", "10.0.0.7", 24, 1500, False)


def test_loopback_route_and_interface_from_the_kernel():
    route = route_to("127.0.0.1")
    assert route.dev == "lo" and route.src == "127.0.0.1"
    lo = next(i for i in local_interfaces() if i.name == "lo")
    assert lo.address == "127.0.0.1" and lo.prefix == 8 and lo.mtu > 0 and not lo.wireless
    assert check_route("127.0.0.1", route).status is Status.PASS


def test_no_route_and_gateway():
    failed = check_route("10.1.2.3", None, "Network is unreachable")
    assert failed.status is Status.FAIL and "Network is unreachable" in failed.evidence
    routed = check_route("10.1.2.3", Route("eth0", "192.168.1.10", gateway="192.168.1.1"))
    assert routed.status is Status.WARN and "192.168.1.1" in routed.evidence


def test_wifi_and_wired_on_the_server_subnet():
    check = check_subnet_interfaces("192.168.1.2", [WIRED, WIFI, OTHER], Route("wlan0", "192.168.1.23"))
    assert check.status is Status.WARN
    assert "Wi-Fi and wired at once" in check.evidence and "the kernel uses wlan0" in check.evidence
    assert "local_address" in check.fix
    over_wifi = check_subnet_interfaces("192.168.1.2", [WIFI, OTHER], Route("wlan0", "192.168.1.23"))
    assert over_wifi.status is Status.WARN and "Wi-Fi" in over_wifi.evidence
    alone = check_subnet_interfaces("192.168.1.2", [WIRED, OTHER], Route("eth0", "192.168.1.10"))
    assert alone.status is Status.PASS


def test_local_address_on_the_wrong_interface():
    route = Route("eth0", "192.168.1.10")
    wrong = check_local_address("10.0.0.7", "192.168.1.2", [WIRED, OTHER], route)
    assert wrong.status is Status.FAIL and "eth1" in wrong.evidence
    assert wrong.fix == "set local_address: 192.168.1.10 (or auto)"
    foreign = check_local_address("172.16.0.1", "192.168.1.2", [WIRED, OTHER], route)
    assert foreign.status is Status.FAIL and "not an address of this machine" in foreign.evidence
    assert check_local_address("auto", "192.168.1.2", [WIRED], route).status is Status.PASS
    assert check_local_address("192.168.1.10", "192.168.1.2", [WIRED], route).status is Status.PASS


def test_link_state():
    up = check_link(Interface("eth0", "192.168.1.10", 24, 1500, False, "up"))
    assert up.status is Status.PASS and "eth0 is up" in up.evidence
    unplugged = check_link(Interface("eth0", "192.168.1.10", 24, 1500, False, "down"))
    assert unplugged.status is Status.FAIL and "eth0 is down" in unplugged.evidence
    assert "ip link set eth0 up" in unplugged.fix


def test_a_link_state_nobody_reports_is_no_pass():
    """The kernel reports lo's operstate as "unknown" (it has no link); the doctor showed
    "link of lo: lo is unknown" as a PASS, where nothing was checked."""
    lo = next(i for i in local_interfaces() if i.name == "lo")  # as the kernel reports it
    check = check_link(lo)
    assert check.status.value != "PASS", check
    assert check.status.value == "INFO" and "loopback" in check.evidence, check
    # an interface whose driver does not report its link: it cannot be told here
    tunnel = check_link(Interface("tun0", "10.8.0.2", 24, 1500, False, "unknown"))
    assert tunnel.status.value == "SKIP" and "tun0" in tunnel.evidence and "unknown" in tunnel.evidence


def test_mtu_against_frame_size():
    assert check_mtu(1400, WIRED).status is Status.PASS
    big = check_mtu(4000, WIRED)
    assert big.status is Status.WARN and "3 IP fragments" in big.evidence and "MTU 1500" in big.evidence


def test_udp_to_self_arrives_on_loopback():
    check = check_udp_to_self("127.0.0.1", _free_port())
    assert check.status is Status.PASS, check


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ network namespaces
def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


@pytest.fixture
def two_namespaces():
    """ns_server (10.77.0.2 on a veth) and ns_client (10.77.0.1 on its peer, and a
    second interface on 10.78.0.1/24, the wrong one)."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = uuid.uuid4().hex[:6]
    server, client = f"mdoc_s{tag}", f"mdoc_c{tag}"
    try:
        _ip("netns", "add", server)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"this machine does not allow network namespaces: {exc.stderr.strip()}")
    try:
        _ip("netns", "add", client)
        _ip(
            "link",
            "add",
            f"vs{tag}",
            "netns",
            server,
            "type",
            "veth",
            "peer",
            "name",
            f"vc{tag}",
            "netns",
            client,
        )
        _ip(
            "link",
            "add",
            f"wa{tag}",
            "netns",
            client,
            "type",
            "veth",
            "peer",
            "name",
            f"wb{tag}",
            "netns",
            client,
        )
        for ns, dev, address in (
            (server, f"vs{tag}", "10.77.0.2/24"),
            (client, f"vc{tag}", "10.77.0.1/24"),
            (client, f"wa{tag}", "10.78.0.1/24"),
        ):
            _ip("-n", ns, "addr", "add", address, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        for ns in (server, client):
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", client, "link", "set", f"wb{tag}", "up")
        yield server, client
    finally:
        for ns in (client, server):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def _doctor_in(ns: str, params_file, timeout: float = 120) -> tuple[int, dict]:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, str(INSTALL / "mocap4r2_tools" / "bin" / "mocap4r2"), "doctor"]
        + ["--system", "optitrack", "--params-file", str(params_file), "--no-ros", "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.stdout.strip(), out.stderr
    return out.returncode, json.loads(out.stdout)


def test_wrong_interface_in_network_namespaces(two_namespaces, procs, tmp_path):
    server_ns, client_ns = two_namespaces
    sim = procs.start_command(
        ["ip", "netns", "exec", server_ns, str(executable("mocap4r2_drivers", "natnet_simulator"))]
        + ["--server-address", "10.77.0.2", "--command-port", "0", "--data-port", "0"],
        label="natnet_simulator_ns",
    )
    assert sim.wait_log("natnet_simulator ready", 30), sim.log()
    match = re.search(r"command=[\d.]+:(\d+) .*data_port=(\d+)", sim.log())
    assert match, sim.log()
    params = {
        "server_address": "10.77.0.2",
        "command_port": int(match.group(1)),
        "data_port": int(match.group(2)),
        "connection_type": "multicast",
    }
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({"/**": {"ros__parameters": {**params, "local_address": "10.78.0.1"}}}))
    code, report = _doctor_in(client_ns, wrong)
    checks = {c["title"]: c for c in report["checks"]}
    local = checks["local_address: the interface that receives the stream"]
    assert code == 1 and local["status"] == "FAIL", report
    assert (
        "10.78.0.1 is on wa" in local["evidence"] and local["fix"] == "set local_address: 10.77.0.1 (or auto)"
    )

    right = tmp_path / "auto.yaml"
    right.write_text(yaml.safe_dump({"/**": {"ros__parameters": {**params, "local_address": "auto"}}}))
    code, report = _doctor_in(client_ns, right)
    checks = {c["title"]: c for c in report["checks"]}
    assert checks["NatNet frames"]["status"] == "PASS", report
    assert checks["route to the server 10.77.0.2"]["evidence"].startswith("through vc")
    assert checks["local_address: the interface that receives the stream"]["status"] == "PASS"
