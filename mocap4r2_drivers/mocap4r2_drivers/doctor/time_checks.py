"""Time: is the host clock disciplined (NTP or PTP), and how far each system's clock
model says the mocap clock is from the host's (offset, drift), from /diagnostics.

The kernel's own answer comes first: adjtimex(2) with no change requested reports
STA_UNSYNC while no NTP/PTP daemon disciplines the clock, and its estimated error. Where
chronyc is installed, its tracking line adds the source and the offset."""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
from collections.abc import Mapping

from .report import Check, noted, passed, warned

AREA = "time"
STA_UNSYNC = 0x0040
TIME_ERROR = 5  # adjtimex's return value when the clock is not synchronised
COMMAND_TIMEOUT = 2.0
DRIFT_WARN_PPM = 100.0  # beyond a crystal's tolerance: a wrong clock frequency or a bad fit


class _Timex(ctypes.Structure):
    # struct timex's first fields; the kernel writes the whole struct, so room is kept
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("rest", ctypes.c_byte * 256),
    ]


def kernel_sync() -> tuple[bool, int] | None:
    """(synchronised, estimated error in us) from adjtimex, or None where unavailable."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        timex = _Timex()
        state = libc.adjtimex(ctypes.byref(timex))
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    synced = state != TIME_ERROR and not timex.status & STA_UNSYNC
    return synced, int(timex.esterror)


def chrony_tracking() -> str | None:
    """The tracking summary of chronyc, where chrony runs."""
    if not shutil.which("chronyc"):
        return None
    try:
        result = subprocess.run(
            ["chronyc", "-c", "tracking"],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def check_host_clock(sync: tuple[bool, int] | None, chrony: str | None) -> Check:
    """Unsynchronised or unknown: WARN (stamps across machines carry the clocks' difference)."""
    title = "host clock synchronisation"
    detail = ""
    if chrony:
        fields = chrony.split(",")
        if len(fields) > 4:
            detail = f"; chrony: source {fields[1] or fields[0]}, offset {fields[4]} s"
    if sync is None:
        return warned(
            title,
            "the kernel's synchronisation state cannot be read here" + detail,
            "run an NTP (chrony) or PTP (linuxptp) client so that stamps of several machines agree",
            AREA,
        )
    synced, error_us = sync
    if synced:
        return passed(title, f"synchronised (estimated error {error_us} us){detail}", AREA)
    return warned(
        title,
        "the kernel reports the clock unsynchronised (STA_UNSYNC): no NTP/PTP daemon disciplines it" + detail,
        "install and enable chrony (or linuxptp against the lab's PTP grandmaster); stamps compared "
        "across machines (a robot's estimate against mocap) carry the clocks' difference",
        AREA,
    )


def check_clock_model(system: str, values: Mapping[str, str]) -> Check:
    """A system's clock model as its /diagnostics report it (clock_model.py's keys)."""
    title = f"clock model of {system}"
    if "clock_converged" not in values:
        return noted(title, "this system reports no clock model (stamped on arrival)", AREA)
    if values.get("clock_converged") != "True":
        source = values.get("time_source_in_use", "?")
        return noted(title, f"not in use or not converged yet (stamps: {source})", AREA)
    offset = float(values.get("clock_offset_s", "nan"))
    reported = values.get("clock_drift_ppm", "nan")
    resets = values.get("clock_resets", "0")
    if reported == "unknown":  # no fit sure enough yet: the stamps follow the offset alone
        return passed(title, f"offset {offset:.6f} s, drift not fitted yet, {resets} resets", AREA)
    drift = float(reported)
    evidence = f"offset {offset:.6f} s, drift {drift:.2f} ppm, {resets} resets"
    if abs(drift) > DRIFT_WARN_PPM:
        return warned(
            title,
            evidence,
            "a drift beyond a crystal's tolerance: check the server's clock frequency (NatNet) or "
            "that the mocap software's clock does not jump; docs/timing.md",
            AREA,
        )
    return passed(title, evidence, AREA)
