"""What every vendor folder shares: address checks, ids from names, the counters a
client keeps for /diagnostics and how it reports bad input. Geometry and time helpers
live in mocap4r2_control (:mod:`~mocap4r2_control.geometry`,
:mod:`~mocap4r2_control.timebase`)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import socket
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


def ipv4_problem(text: str, what: str, allow_auto: bool = False, multicast: bool = False) -> str | None:
    """Why ``text`` is not a usable IPv4 address for ``what``, or None.

    ``allow_auto`` accepts "auto" and "" (the interface is chosen at connect time);
    ``multicast`` requires a group address (224-239.x.x.x)."""
    if allow_auto and text in ("auto", ""):
        return None
    parts = str(text).split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        return (
            f"{what} must be an IPv4 address like 192.168.1.10{' or auto' if allow_auto else ''}, "
            f"got {text!r}"
        )
    if multicast and not 224 <= int(parts[0]) <= 239:
        return f"{what} {text} is not a multicast group address (224.0.0.0-239.255.255.255)"
    return None


def ipv4_check(what: str, allow_auto: bool = False, multicast: bool = False) -> Callable[[str], str | None]:
    """A ParameterSpec check for an IPv4 address parameter."""
    return lambda value: ipv4_problem(value, what, allow_auto, multicast)


def stable_id(name: str) -> int:
    """A non-negative int32 id that depends on the name only, for systems whose streams
    carry names but no ids: the same body keeps its id across frames, reconnections and
    restarts."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


@dataclass
class ClientStats:
    """Counters of a vendor client, reported in /diagnostics by its adapter. Each client
    fills the counters that mean something for its transport and leaves the others 0."""

    frames: int = 0  # frames handed to the adapter
    decode_errors: int = 0  # packets that could not be decoded (dropped, counted)
    foreign_packets: int = 0  # packets from an address other than the server's
    dropped: int = 0  # frames lost because the reader fell behind
    connects: int = 0
    disconnects: int = 0
    reconnects: int = 0
    model_requests: int = 0  # asset (model definition) requests sent
    model_updates: int = 0  # asset definitions received that changed the names
    last_error: str = ""
    rejected: dict[str, int] = field(default_factory=dict)  # bad input dropped, by kind (logged once each)
    events: dict[str, int] = field(default_factory=dict)  # server events by name


def reject_input(stats: ClientStats, log: logging.Logger, kind: str, what: str) -> None:
    """Bad input of one ``kind`` (a packet from a stranger, a malformed one, a frame out of
    sequence, ...) was dropped: count it in ``stats.rejected[kind]`` (``rejected_<kind>`` in
    /diagnostics) and keep ``what`` as ``last_error``; log it the first time of its kind only.

    A server or a network that sends bad input usually sends a lot of it: one line per
    packet would flood the log and cost more than the packet, while the first line says
    what to look for and the counters say how much."""
    seen = stats.rejected.get(kind, 0)
    stats.rejected[kind] = seen + 1
    stats.last_error = f"ignored {what}"
    if seen == 0:
        log.warning(f"ignored {what}; further ones are counted (diagnostics: rejected_{kind})")


def status_fields(
    always: Mapping[str, object],
    stats: ClientStats | None = None,
    when_set: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """A system's /diagnostics key-values, in one shape for every vendor: the ``always``
    fields; then, from the client's ``stats``, the bad input dropped by kind
    (``rejected_<kind>``, each logged once by :func:`reject_input`); then the
    ``when_set`` fields that are non-zero or non-empty; last ``last_error`` when there is
    one. Values are shown with str()."""
    out = {key: str(value) for key, value in always.items()}
    if stats is not None:
        for kind, count in sorted(stats.rejected.items()):
            out[f"rejected_{kind}"] = str(count)
    for key, value in (when_set or {}).items():
        if value:
            out[key] = str(value)
    if stats is not None and stats.last_error:
        out["last_error"] = stats.last_error
    return out


#: timer slack of a thread that must wake on time, ns: Linux lets a sleep end up to this
#: late (50 us by default) to group wake-ups
TIMER_SLACK_NS = 1000
_PR_SET_TIMERSLACK = 29


def lower_timer_slack() -> None:
    """TIMER_SLACK_NS for the calling thread (Linux only; elsewhere the default slack):
    for the threads that sleep until shortly before a frame is due and poll the clock for
    the rest (a stand-in's sender, replay's pacer)."""
    with contextlib.suppress(Exception):  # not Linux, or no libc
        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0)


# the kernel's receive time of each datagram (SO_TIMESTAMPNS, Linux; Python names no
# constant for it): a frame's arrival whatever the reader was doing, so that decoding or
# publishing the frames of a burst one after the other does not make the last ones look
# later than they came
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
#: the ancillary buffer recvmsg needs for that time
TIMESTAMP_SPACE = socket.CMSG_SPACE(16) if SO_TIMESTAMPNS is not None else 0
_TIMESPEC = struct.Struct("qq")


def ask_receive_times(sock: socket.socket) -> None:
    """Ask the kernel for each datagram's receive time on ``sock`` (see receive_time)."""
    if SO_TIMESTAMPNS is not None:
        with contextlib.suppress(OSError):  # without it the time of reading stands in
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def receive_time(ancillary: list[tuple[int, int, bytes]]) -> float:
    """The kernel's receive time of a datagram (Unix s) from recvmsg's ancillary data,
    else now."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return seconds + nanoseconds * 1e-9
    return time.time()


def wait_until(
    due: float, spin: float, wake: threading.Event | None = None, limit: float = float("inf")
) -> bool:
    """Waits for the monotonic time ``due``, to the microsecond: True when it has come.

    A sleep ends when the scheduler wakes the thread, often a few hundred microseconds
    late on a busy machine; a stand-in that sends on such a wake-up, or a replay that
    hands a frame over on one, puts that lateness into every stamp measured against it.
    So this sleeps until ``spin`` seconds before ``due`` and polls the clock for the
    rest (call lower_timer_slack once in the waiting thread, so the sleep itself ends
    when asked). ``spin`` 0 only sleeps.

    Returns False, early, when ``wake`` is set (it is left set: the caller decides what
    the wake-up means) or when the monotonic time ``limit`` comes first."""
    while True:
        now = time.monotonic()
        if now >= due:
            return True
        if now >= limit or (wake is not None and wake.is_set()):
            return False
        if due - now > spin:
            pause = min(due - spin, limit) - now
            if wake is None:
                time.sleep(pause)
            elif wake.wait(pause):
                return False
            continue
        while time.monotonic() < due:
            pass  # at most ``spin``: the caller goes on when due, not when woken
        return True
