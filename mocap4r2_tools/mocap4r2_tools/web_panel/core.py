"""What the web panel decides without ROS or a server: what a request from the page may
hold, who may talk to the panel, and the compact form of a live frame for the browser.

Everything the page sends is treated like a packet from the network: sizes are bounded
before anything is parsed further, and a refusal says why."""

from __future__ import annotations

import hmac
import ipaddress
import math
import re
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address to listen on) reaches only this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class AccessPolicy:
    """Who may use the panel.

    * ``token``: required (as a cookie the page got from ``/?token=...``, or an
      ``Authorization: Bearer`` header) when not None; the panel requires one whenever it
      listens beyond loopback.
    * ``allowed_hosts``: the Host headers accepted (a page of another site resolving its
      name to 127.0.0.1, DNS rebinding, arrives with its own name and is refused).
    * The Origin of a browser request must be the panel's own; a cross-site request
      (Origin of another site, or ``Sec-Fetch-Site: cross-site``) is refused.
    """

    port: int
    token: str | None = None
    extra_hosts: Sequence[str] = ()
    #: listening on every interface (0.0.0.0): any Host is accepted, the token guards it
    any_host: bool = False
    allowed_hosts: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = {"127.0.0.1", "localhost", "[::1]", *self.extra_hosts}
        self.allowed_hosts = frozenset(f"{n}:{self.port}" for n in names) | frozenset(
            n for n in names if self.port == 80
        )

    def host_problem(self, host: str | None) -> str | None:
        """Why a request with this Host header is not for this panel, or None."""
        if host and self.any_host and self.token is not None:
            return None
        if not host or host.lower() not in self.allowed_hosts:
            return f"Host {str(host)[:100]!r} is not this panel's"
        return None

    def origin_problem(self, origin: str | None, host: str | None, fetch_site: str | None) -> str | None:
        """Why a request with these headers is cross-site, or None. A request without
        Origin comes from a program, not a page of another site (browsers send Origin
        on every POST and WebSocket)."""
        if fetch_site == "cross-site":
            return "cross-site request refused"
        if origin is None:
            return None
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not host or parts.netloc.lower() != host.lower():
            return f"Origin {origin[:100]!r} is not this panel's"
        return None

    def token_ok(self, presented: str | None) -> bool:
        if self.token is None:
            return True
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())


def load_token(host: str, token_file: str) -> tuple[str | None, str]:
    """The token the panel requires, and where it came from: read from ``token_file``
    when given; generated when the panel listens beyond loopback; None on loopback."""
    if token_file:
        text = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        if len(text) < 16 or len(text) > 256 or not text.isprintable():
            raise ValueError(f"{token_file}: a token is 16 to 256 printable characters")
        return text, f"read from {token_file}"
    if is_loopback(host):
        return None, "none (loopback only)"
    return secrets.token_urlsafe(24), "generated"


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
