"""What the web panel decides without ROS or a server: what a request from the page may
hold, who may talk to the panel, and the compact form of a live frame for the browser.

Everything the page sends is treated like a packet from the network: sizes are bounded
before anything is parsed further, and a refusal says why."""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import math
import re
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mocap4r2_control.diagnostic_values import reported_number

from ..recording.session_id import session_id_problem

#: a request body larger than this is refused before it is parsed (a START names at most
#: MAX_SYSTEMS systems of MAX_SYSTEM_NAME bytes)
MAX_BODY_BYTES = 64 * 1024
MAX_SYSTEMS = 64
MAX_SYSTEM_NAME = 256
#: a fully qualified ROS node name: /ns/.../name, each token [A-Za-z_][A-Za-z0-9_]*
_NODE_NAME = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)+$")
LOOPBACK_NAMES = ("localhost",)
EXPORT_FORMATS = ("c3d", "trc", "csv")
TRANSITIONS = ("configure", "activate", "deactivate")
#: the browser never gets more than this many frames per second, whatever it asks for
MAX_CLIENT_RATE = 30.0
DEFAULT_CLIENT_RATE = 30.0
#: markers sent per frame at most (a frame with more is cut, and says so)
MAX_MARKERS = 2000


class RequestError(ValueError):
    """A request from the page that is refused; the message says why (HTTP 400)."""


def system_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a system (a fully qualified node name), or None."""
    if not isinstance(name, str):
        return f"a system name must be a string, got {type(name).__name__}"
    if len(name.encode("utf-8", "replace")) > MAX_SYSTEM_NAME:
        return f"a system name is at most {MAX_SYSTEM_NAME} bytes"
    if not _NODE_NAME.match(name):
        return f"{name[:80]!r} is not a fully qualified node name (like /sim/simulated_system)"
    return None


@dataclass(frozen=True)
class ControlRequest:
    """A checked START or STOP from the page (``systems`` empty: every system)."""

    session_id: str
    systems: tuple[str, ...]


def parse_control_request(body: object, start: bool) -> ControlRequest:
    """The ``{session_id, systems}`` of POST /api/start or /api/stop, checked: a START needs
    a session id the recorder accepts; a STOP's may be empty. ``systems`` empty means all."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object {session_id, systems}")
    unknown = sorted(set(body) - {"session_id", "systems"})
    if unknown:
        raise RequestError(f"unknown fields: {', '.join(str(k)[:40] for k in unknown[:5])}")
    session_id = body.get("session_id", "")
    if not isinstance(session_id, str):
        raise RequestError("session_id must be a string")
    if start or session_id:
        problem = session_id_problem(session_id)
        if problem:
            raise RequestError(problem)
    systems = body.get("systems", [])
    if not isinstance(systems, list):
        raise RequestError("systems must be a list of node names")
    if len(systems) > MAX_SYSTEMS:
        raise RequestError(f"systems lists {len(systems)} entries, at most {MAX_SYSTEMS}")
    for name in systems:
        problem = system_name_problem(name)
        if problem:
            raise RequestError(problem)
    return ControlRequest(session_id, tuple(dict.fromkeys(systems)))


def parse_transition(body: object, known: Iterable[str]) -> tuple[str, str]:
    """The ``{system, transition}`` of POST /api/lifecycle: a known system, a transition
    the panel offers."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object {system, transition}")
    system, transition = body.get("system"), body.get("transition")
    problem = system_name_problem(system)
    if problem:
        raise RequestError(problem)
    assert isinstance(system, str)
    if system not in set(known):
        raise RequestError(f"{system} has not announced itself")
    if transition not in TRANSITIONS:
        raise RequestError(f"transition must be one of {', '.join(TRANSITIONS)}")
    return system, str(transition)


def parse_export(session: str, fmt: str, system: str | None) -> tuple[str, str, str | None]:
    """The session, format and (optional) system of an export download."""
    problem = session_id_problem(session)
    if problem:
        raise RequestError(problem)
    if fmt not in EXPORT_FORMATS:
        raise RequestError(f"format must be one of {', '.join(EXPORT_FORMATS)}")
    if system:
        problem = system_name_problem(system)
        if problem:
            raise RequestError(problem)
    return session, fmt, system or None


def parse_rate(value: object) -> float:
    """A live view's frames per second: a finite number, clamped to (0, MAX_CLIENT_RATE]."""
    try:
        rate = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise RequestError("rate must be a number") from None
    if not math.isfinite(rate) or rate <= 0:
        raise RequestError("rate must be a positive finite number")
    return min(rate, MAX_CLIENT_RATE)


# ------------------------------------------------------------------------- security
#: what the panel answers a request without the token (true for a token file too: the
#: printed URL always carries the token)
TOKEN_REQUIRED = (
    "this panel requires its token: open the URL the panel printed at start (it carries "
    "?token=...), or send 'Authorization: Bearer <token>'"
)
ALL_INTERFACES = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address to listen on) reaches only this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None


def split_host(header: str) -> tuple[str, int | None] | None:
    """The name and port of a Host header (``name``, ``name:port``, ``[v6]:port``), the
    name lower-cased; None when it is not one."""
    header = header.strip().lower()
    if not header or len(header) > 300:
        return None
    if header.startswith("["):
        name, _, rest = header[1:].partition("]")
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:]
    else:
        name, _, port_text = header.partition(":")
    if not name:
        return None
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        return name, int(port_text)
    return name, None


@dataclass
class AccessPolicy:
    """Who may use the panel.

    * ``token``: always required (Jupyter's rule, loopback included: any local user or
      process could otherwise drive the lab). The page gets it once from ``/?token=...``
      and keeps it as an HttpOnly, SameSite=Strict cookie; programs send
      ``Authorization: Bearer <token>``. A request with neither is refused.
    * ``names``: the host names the panel answers to. A page of another site whose name
      is made to resolve to this machine (DNS rebinding) arrives with its own name in
      Host and is refused. An IP literal cannot be rebound, so on every interface
      (``any_address``) any IP literal is accepted; names only when listed (this
      machine's host names and ``extra_hosts``).
    * The Origin of a browser request must be the panel's own; a cross-site request
      (Origin of another site, or ``Sec-Fetch-Site: cross-site``) is refused.
    """

    port: int
    token: str
    names: Sequence[str] = ("127.0.0.1", "localhost", "::1")
    any_address: bool = False

    def host_problem(self, host: str | None) -> str | None:
        """Why a request with this Host header is not for this panel, or None."""
        parts = split_host(host) if host else None
        refused = f"Host {str(host)[:100]!r} is not this panel's"
        if parts is None:
            return refused
        name, port = parts
        if port is not None and port != self.port:
            return refused
        if port is None and self.port not in (80, 443):
            return refused
        if name in self.names or name.strip("[]") in self.names:
            return None
        if self.any_address and _ip(name) is not None:
            return None
        return refused

    def origin_problem(self, origin: str | None, host: str | None, fetch_site: str | None) -> str | None:
        """Why a request with these headers is cross-site, or None. A request without
        Origin comes from a program, not a page of another site (browsers send Origin
        on every POST and WebSocket); it still needs the token."""
        if fetch_site == "cross-site":
            return "cross-site request refused"
        if origin is None:
            return None
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not host or parts.netloc.lower() != host.lower():
            return f"Origin {origin[:100]!r} is not this panel's"
        return None

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())


def host_names(host: str, extra: Iterable[str] = (), machine: Iterable[str] = ()) -> tuple[str, ...]:
    """The names the panel listening on ``host`` answers to: loopback's, ``host``
    itself, this ``machine``'s own names and addresses (listening beyond loopback) and
    the ``extra`` names the lab gave (a DNS alias of the lab PC)."""
    names = {"127.0.0.1", "localhost", "::1"}
    if host not in ALL_INTERFACES:
        names.add(host.lower().strip("[]"))
    if not is_loopback(host):
        names.update(n.lower() for n in machine)
    names.update(n.lower().strip("[]") for n in extra if n)
    return tuple(sorted(names))


def machine_addresses() -> list[str]:
    """The addresses of this machine (IPv4 of each interface, global IPv6, and what its host
    name resolves to), read with the standard library only (Linux's SIOCGIFADDR and
    /proc/net/if_inet6); the printed URLs and the names the panel answers to."""
    found: list[str] = []
    with contextlib.suppress(OSError, ImportError):
        import fcntl
        import struct

        for _, name in socket.if_nameindex():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                try:
                    packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
                except OSError:  # an interface without an IPv4 address
                    continue
                found.append(socket.inet_ntoa(packed[20:24]))
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines()[:256]:
            digits = line.split()[0]
            found.append(str(ipaddress.IPv6Address(bytes.fromhex(digits))))
    with contextlib.suppress(OSError, UnicodeError):
        for info in socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)[:64]:
            found.append(str(info[4][0]))
    return list(dict.fromkeys(found))


def machine_names() -> list[str]:
    """The host name and fully qualified name of this machine."""
    names = [socket.gethostname()]
    with contextlib.suppress(OSError, UnicodeError):
        names.append(socket.getfqdn())
    return [n for n in dict.fromkeys(names) if n]


def load_token(token_file: str) -> tuple[str, str]:
    """The token the panel requires, and where it came from: read from ``token_file``
    when given, otherwise generated (192 random bits)."""
    if token_file:
        text = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        if len(text) < 16 or len(text) > 256 or not text.isprintable() or " " in text:
            raise ValueError(f"{token_file}: a token is 16 to 256 printable characters without spaces")
        return text, f"read from {token_file}"
    return secrets.token_urlsafe(24), "generated"


def token_file_warning(token_file: str) -> str | None:
    """A warning when other users of this machine can read the token file."""
    if not token_file:
        return None
    try:
        mode = Path(token_file).expanduser().stat().st_mode
    except OSError:
        return None
    if mode & 0o077:
        return f"{token_file} can be read by other users of this machine (chmod 600 it)"
    return None


def listen_problem(host: str, tls: bool, allow_plain_http: bool) -> tuple[str | None, str | None]:
    """(why the panel must not start, a warning) for listening on ``host``: beyond
    loopback the token would cross the lab network in the clear without TLS, so that
    takes TLS or an explicit ``allow_plain_http``, and the latter is warned about."""
    if is_loopback(host) or tls:
        return None, None
    where = "every interface" if host in ALL_INTERFACES else host
    if not allow_plain_http:
        return (
            f"listening on {where} without TLS would send the token over the network in the clear: "
            "give --certfile/--keyfile (certfile/keyfile), or --allow-plain-http "
            "(allow_plain_http) on a network you trust",
            None,
        )
    return None, (
        f"serving plain HTTP on {where}: the token crosses the network in the clear "
        "(anyone on it can read it and drive the lab); give --certfile/--keyfile for TLS"
    )


def panel_urls(
    host: str, port: int, token: str, tls: bool, *, addresses: Iterable[str] = (), hostname: str = ""
) -> list[str]:
    """The URLs to print: ones that work from the machine that opens them, each carrying
    the token. Listening on every interface, those are this machine's non-loopback
    addresses (then its name); 127.0.0.1 is of no use on the lab's tablet."""
    scheme = "https" if tls else "http"
    if host in ALL_INTERFACES:
        shown: list[str] = []
        for address in addresses:
            ip = _ip(address)
            if ip is None or ip.is_loopback or ip.is_link_local or (ip.version == 6 and host != "::"):
                continue
            shown.append(f"[{ip}]" if ip.version == 6 else str(ip))
        if hostname and hostname.lower() != "localhost":
            shown.append(hostname)
        if not shown:
            shown = ["127.0.0.1"]
    else:
        ip = _ip(host)
        shown = [f"[{ip}]" if ip is not None and ip.version == 6 else host]
    return [f"{scheme}://{name}:{port}/?token={token}" for name in dict.fromkeys(shown)]


# ------------------------------------------------------------------------- live frames
def next_due(now: float, period: float) -> float:
    """When a live view sending every ``period`` seconds is next due after ``now``: the
    next multiple of ``period`` on the clock. On this grid every client at the same rate
    is due at the same instant (so the frame taken then is taken and encoded once for
    all of them), and a client's own send time never shifts its phase."""
    return (math.floor(now / period) + 1) * period


def _round(values: Iterable[float], digits: int = 4) -> list[float | None]:
    return [round(v, digits) if math.isfinite(v) else None for v in values]


@dataclass
class LiveFrame:
    """One system's latest frame in the form the page draws: plain lists, rounded."""

    system: str
    frame_number: int
    stamp: float
    received: float
    markers: list[list[float | None]] = field(default_factory=list)
    occluded: list[bool] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "frame",
            "system": self.system,
            "frame": self.frame_number,
            "stamp": self.stamp,
            "taken": self.received,
            "sent": time.time(),
            "markers": self.markers,
            "occluded": self.occluded,
            "bodies": self.bodies,
            "segments": self.segments,
        }


def marker_rows(points: Sequence[tuple[float, float, float, bool]]) -> tuple[list, list[bool]]:
    """At most MAX_MARKERS (x, y, z) rows and their occlusion flags."""
    cut = points[:MAX_MARKERS]
    return [_round(p[:3]) for p in cut], [bool(p[3]) for p in cut]


def body_row(name: str, body_id: int, position: Sequence[float], quaternion: Sequence[float], tracked: bool):
    """A body (or a skeleton's segment) as the page draws it."""
    return {
        "name": name[:64],
        "id": int(body_id),
        "p": _round(position),
        "q": _round(quaternion, 5),
        "tracked": bool(tracked),
    }


class LatestFrames:
    """The hand-off of live data from the ROS thread to the server: one slot per system
    (the latest frame only, overwritten), so a burst at 1 kHz costs one dict store per
    message and nothing waits; each client reads at its own rate."""

    def __init__(self, max_systems: int = 64) -> None:
        self._lock = threading.Lock()
        self._slots: dict[str, Any] = {}
        self._max_systems = max_systems

    def put(self, system: str, kind: str, message: Any) -> None:
        with self._lock:
            slot = self._slots.get(system)
            if slot is None:
                if len(self._slots) >= self._max_systems:
                    return
                slot = self._slots[system] = {}
            slot[kind] = (message, time.time())

    def get(self, system: str) -> dict[str, tuple[Any, float]]:
        with self._lock:
            return dict(self._slots.get(system, {}))

    def newest(self, system: str) -> float | None:
        """The receive time of the newest message of ``system``, None before the first."""
        with self._lock:
            slot = self._slots.get(system)
            return max(at for _, at in slot.values()) if slot else None

    def systems(self) -> list[str]:
        with self._lock:
            return sorted(self._slots)


# ------------------------------------------------------------------------- what the page shows
#: the transitions the panel offers that the lifecycle accepts in each state (ROS 2's
#: lifecycle: configure from unconfigured, activate from inactive, deactivate from active)
VALID_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "unconfigured": ("configure",),
    "inactive": ("activate",),
    "active": ("deactivate",),
}
#: states the system is not streaming in, and what that means for the person at the panel
IDLE_MEANING = {
    "unconfigured": "not configured; configure it, or START it",
    "inactive": "configured, not streaming; activate it, or START it",
    "finalized": "shut down; restart its node",
    "unknown": "state unknown",
}


def system_status(state: str, level: int, message: str, kind: str = "") -> tuple[str, str]:
    """The status cell of a system: (tone, text). The colour follows the lifecycle state
    as well as /diagnostics: only an active system that reports OK is green (an
    unconfigured one reports OK too: it is not streaming, so it is shown as idle); an
    ERROR is red in any state; a WARN amber; an active system not heard from yet grey."""
    message = message[:200]
    if level >= 2:
        return "error", "ERROR" + (f": {message}" if message else "")
    if state != "active":
        meaning = "not recording; START a session" if kind == "recorder" else IDLE_MEANING.get(state, state)
        text = f"idle: {meaning}"
        if level == 1:
            return "warn", "WARN: " + (message or text)
        return "idle", text
    if level == 1:
        return "warn", "WARN" + (f": {message}" if message else "")
    if level == 0:
        return "ok", "OK" + (f": {message}" if message else "")
    return "waiting", "active, no diagnostics yet"


def shown_number(text: object) -> str:
    """A /diagnostics value for a table cell: its text when it is a finite number, else
    "" (the page shows "-"). A system not streaming reports ``latency_mean_ms: nan``
    (no frames in its window), which the page must not print as "nan"."""
    return str(text) if reported_number(text) is not None else ""


class History:
    """Each system's rate, latency and tracking over the last ``window`` seconds, for the
    page's small plots: a bounded deque per system (at most ``max_points`` samples, at
    most ``max_systems`` systems, the least recently heard from dropped first), fed from
    /diagnostics; the page gets it on every poll, so a page opened late still shows the
    last minute."""

    SERIES = ("rate", "latency", "tracking")

    def __init__(self, window: float = 60.0, max_points: int = 240, max_systems: int = 64) -> None:
        self.window = window
        self.max_points = max_points
        self.max_systems = max_systems
        self._lock = threading.Lock()
        self._samples: dict[str, deque[tuple[float, float | None, float | None, float | None]]] = {}

    def add(self, system: str, now: float, values: dict[str, str]) -> None:
        """One /diagnostics status of ``system`` (its key-value pairs) at ``now``
        (monotonic seconds). Tracking: the mean of its bodies' tracking ratios, in %."""
        ratios = [reported_number(v) for k, v in values.items() if k.startswith("tracking_ratio/")]
        known = [r for r in ratios if r is not None]
        tracking = 100.0 * sum(known) / len(known) if known else None
        sample = (
            now,
            reported_number(values.get("rate_hz")),
            reported_number(values.get("latency_mean_ms")),
            tracking,
        )
        with self._lock:
            samples = self._samples.get(system)
            if samples is None:
                if len(self._samples) >= self.max_systems:
                    # /diagnostics carries more than systems: the one heard from least
                    # recently makes room, so a live system is never shut out
                    stalest = min(
                        self._samples, key=lambda k: self._samples[k][-1][0] if self._samples[k] else -1e300
                    )
                    del self._samples[stalest]
                samples = self._samples[system] = deque(maxlen=self.max_points)
            samples.append(sample)
            while samples and samples[0][0] < now - self.window:
                samples.popleft()

    def series(self, system: str, now: float) -> dict[str, list[float | None]]:
        """``{"age": [s before now], "rate": [Hz], "latency": [ms], "tracking": [%]}``,
        oldest first, the last ``window`` seconds only (None: not reported then)."""
        with self._lock:
            samples = [s for s in self._samples.get(system, ()) if s[0] >= now - self.window]
        out: dict[str, list[float | None]] = {"age": [round(now - s[0], 2) for s in samples]}
        for i, name in enumerate(self.SERIES, start=1):
            out[name] = [None if s[i] is None else round(s[i], 3) for s in samples]  # type: ignore[arg-type]
        return out
