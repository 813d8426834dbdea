"""Time in one vocabulary: seconds (float) <-> builtin_interfaces/Time.

Frames, acks, announcements and every tool convert stamps; doing it in one place keeps
the rounding identical everywhere (a nanosecond field never reaches 1e9). The module
imports no ROS package at load time, so rclpy-free cores (offline evaluation) use it too.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from builtin_interfaces.msg import Time


def split_seconds(seconds: float) -> tuple[int, int]:
    """(sec, nanosec) of builtin_interfaces/Time for a time in seconds."""
    sec = int(seconds // 1)
    return sec, min(int((seconds - sec) * 1e9), 999_999_999)


def time_msg(seconds: float | None = None) -> Time:
    """builtin_interfaces/Time of ``seconds`` (wall time now when None)."""
    from builtin_interfaces.msg import Time  # here, so the module stays importable without ROS

    sec, nanosec = split_seconds(time.time() if seconds is None else seconds)
    return Time(sec=sec, nanosec=nanosec)


def stamp_to_seconds(stamp: Any) -> float:
    """Seconds of a builtin_interfaces/Time (or anything with sec and nanosec)."""
    return float(stamp.sec + stamp.nanosec * 1e-9)
