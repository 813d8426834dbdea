"""Each system's own probe: what the doctor checks beyond its parameters, named by the
system's row in registry.py (``probe="mocap4r2_drivers.doctor.probes:<name>"``).

A probe is a function of a :class:`Target` (the system's parameter values as the node
would see them, the step timeout, and for a system with a server the address and the
route the network checks found) returning its checks. The socket probes themselves are
in server_checks.py; the probes of the systems without a server (a file to replay, a
scene, the tracker's kernels and bodies) are here. Each imports what it needs when it
runs: the `mocap4r2` command line imports the doctor for every verb it lists.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import network_checks, server_checks
from .network_checks import Interface, Route
from .report import Check, failed, passed, skipped, warned

AREA = "system"


@dataclass(frozen=True)
class Target:
    """What a probe is given: ``values`` (every parameter of the system, defaults
    overridden by the params file), ``timeout`` (seconds per step) and, for a system that
    talks to a server, its resolved address, this machine's interfaces and the route."""

    values: Mapping[str, Any]
    timeout: float
    server: str = ""
    interfaces: list[Interface] = field(default_factory=list)
    route: Route | None = None


Probe = Callable[[Target], list[Check]]


def optitrack(target: Target) -> list[Check]:
    """local_address against the route, then NatNet: server info, frames, multicast
    group, MTU against the frame size, a datagram to our own data port."""
    from mocap4r2_drivers.optitrack.optitrack_system import OptiTrackAdapter

    if target.route is None:
        return []
    interfaces, route = target.interfaces, target.route
    config = OptiTrackAdapter.from_parameters(target.values).config
    local = network_checks.check_local_address(config.local_address, config.server_address, interfaces, route)
    out = [local]
    if local.status.value == "FAIL":
        return out  # the probe would fail for the same reason
    probe = server_checks.probe_natnet(config, target.timeout)
    joining = probe.local_address or route.src
    joining_dev = next((i.name for i in interfaces if i.address == joining), "")
    if config.connection_type == "multicast":
        try:
            group_route: Route | None = network_checks.route_to(config.multicast_address)
        except OSError:
            group_route = None
        out.append(
            network_checks.check_multicast(config.multicast_address, joining, joining_dev, group_route)
        )
    out += probe.checks
    if probe.frame_bytes:
        out.append(
            network_checks.check_mtu(
                probe.frame_bytes, next((i for i in interfaces if i.name == joining_dev), None)
            )
        )
    out.append(network_checks.check_udp_to_self(joining, config.data_port))
    return out


def qualisys(target: Target) -> list[Check]:
    """QTM's banner, the protocol version asked for, and its parameters."""
    values = target.values
    return server_checks.probe_qtm(
        target.server, int(values["port"]), str(values["protocol_version"]), target.timeout
    )


def vrpn(target: Target) -> list[Check]:
    """The VRPN handshake and the first tracker reports."""
    values = target.values
    return server_checks.probe_vrpn(
        target.server, int(values["port"]), str(values["connection"]), target.timeout
    )


def vicon(target: Target) -> list[Check]:
    """A TCP connection to the DataStream port (the SDK is not needed for it)."""
    return [
        server_checks.probe_tcp(
            "Vicon DataStream server",
            target.server,
            int(target.values["port"]),
            "start Nexus/Tracker/Shogun with the DataStream server on; set host and port (801)",
            target.timeout,
        )
    ]


def replay(target: Target) -> list[Check]:
    """The ``file`` parameter: given, readable, and a format the replay reads (opened as
    configure opens it: a bag folder, an .mcap, a .db3 or a .c3d, with its mocap topics)."""
    from mocap4r2_drivers.replay.readers import open_source
    from mocap4r2_drivers.replay.replay_system import parse_bodies
    from mocap4r2_drivers.replay.source import ReplayFileError

    values = target.values
    name = str(values["file"])
    title = "replay file"
    if not name.strip():
        return [
            failed(
                title, "the file parameter is empty", "set file: a session folder, .mcap, .db3 or .c3d", AREA
            )
        ]
    path = Path(name).expanduser()
    if not path.exists():
        return [
            failed(title, f"{path} does not exist", "give the path of a recorded session or C3D file", AREA)
        ]
    try:
        source = open_source(
            path, str(values["source"]), str(values["up_axis"]), parse_bodies(str(values["bodies"]))
        )
    except (ReplayFileError, ValueError, OSError) as exc:
        return [
            failed(
                title,
                f"{path}: {exc}",
                "give a bag folder, an .mcap, a .db3 or a .c3d (docs/replay.md)",
                AREA,
            )
        ]
    try:
        info = source.info
        names = info.names
        evidence = (
            f"{path}: {info.kind}, {info.frame_count} frames, {info.duration:.1f} s at {info.rate:.1f} Hz; "
            f"{len(names.rigid_bodies)} bodies, {len(names.markers)} markers, "
            f"{len(names.skeletons)} skeletons"
        )
    finally:
        source.close()
    if info.frame_count == 0:
        return [warned(title, evidence, "the file holds no frame to play: record or choose another", AREA)]
    return [passed(title, evidence, AREA)]


def simulated(target: Target) -> list[Check]:
    """The scene file (or the default scene) loads as the system loads it."""
    from mocap4r2_drivers.simulated.scene import Scene, SceneError, default_scene_path

    name = str(target.values["scene"]) or str(default_scene_path())
    title = "simulated scene"
    try:
        scene = Scene.from_file(name)
    except SceneError as exc:
        return [failed(title, str(exc), "give a scene YAML (config/demo_scene.yaml is one)", AREA)]
    names = scene.asset_names()
    evidence = (
        f"{name}: {len(names.rigid_bodies)} bodies, {len(names.markers)} markers, "
        f"{len(names.skeletons)} skeletons at {scene.rate:g} Hz"
    )
    return [passed(title, evidence, AREA)]


def tracker(target: Target) -> list[Check]:
    """The bodies file, then the compiled kernels: loaded from numba's cache within the
    step timeout, or still compiling (the first START after an install pays for it)."""
    # the tracker ships with mocap4r2_tools, which the drivers do not depend on: its code
    # is imported by name, as its registry row names its adapter (the doctor says SKIP
    # where the tools are not installed)
    bodies_module = importlib.import_module("mocap4r2_tools.tracking.bodies")
    config_error, load_config = bodies_module.ConfigError, bodies_module.load_config
    out: list[Check] = []
    bodies = str(target.values["bodies"])
    if not bodies:
        out.append(failed("tracker bodies", "the bodies parameter is empty", "set bodies: a YAML path", AREA))
    else:
        try:
            config = load_config(bodies)
            out.append(passed("tracker bodies", f"{bodies}: {len(config.bodies)} bodies", AREA))
        except config_error as exc:
            evidence = str(exc) if bodies in str(exc) else f"{bodies}: {exc}"
            out.append(failed("tracker bodies", evidence, "fix the bodies file (docs/tracking.md)", AREA))
    out.append(_tracker_kernels(target.timeout))
    return out


def _tracker_kernels(timeout: float) -> Check:
    """Import and warm the numba kernels in a thread, waiting ``timeout`` at most (a
    first compile takes seconds; the doctor must not hang on it)."""
    title = "tracker kernels (numba)"
    result: list[BaseException | float] = []
    cache: list[str] = []  # the note of kernel_cache.py where numba's own cache is not writable

    def load() -> None:
        start = time.monotonic()
        try:
            kernels = importlib.import_module("mocap4r2_tools.tracking.kernels")
            cache.append(kernels.CACHE.note)
            kernels.warm_up()
        except Exception as exc:  # noqa: BLE001 - numba's errors (no cache locator, ...) are reported
            result.append(exc)
            return
        result.append(time.monotonic() - start)

    worker = threading.Thread(target=load, name="doctor-kernels", daemon=True)
    worker.start()
    worker.join(timeout)
    if not result:
        return warned(
            title,
            f"not ready within {timeout:g} s: numba is compiling them (no cache for this install yet)",
            "the first START after an install compiles for seconds; run this once with --timeout 60 "
            "to fill the cache, or start the tracker once before the session",
            AREA,
        )
    outcome = result[0]
    if isinstance(outcome, BaseException):
        return failed(
            title,
            f"{type(outcome).__name__}: {outcome}",
            "numba cannot compile here (see the error)",
            AREA,
        )
    if cache and cache[0]:  # a read-only install: a private cache, or none at all
        return warned(
            title,
            f"ready in {outcome:.2f} s, but {cache[0]}",
            "set NUMBA_CACHE_DIR to a writable folder that lasts, so a start loads the kernels in "
            "~0.5 s instead of compiling them (docs/tracking.md, Starting anywhere)",
            AREA,
        )
    return passed(title, f"compiled or loaded from the cache in {outcome:.2f} s", AREA)


def unavailable(system: str, exc: Exception) -> Check:
    """A system whose package is not installed here (the tracker without the tools)."""
    return skipped(
        f"system {system}",
        f"its code cannot be imported here ({exc})",
        "install the package that ships it (mocap4r2_tools for the tracker)",
        AREA,
    )
