"""The QoS profiles of mocap4r2's topics are all keep-last: a depth, reliable or best
effort, volatile or transient local (a late joiner receives the last ``depth`` messages)."""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy


def keep_last(depth: int, *, reliable: bool = True, transient_local: bool = False) -> QoSProfile:
    """A keep-last profile of ``depth`` messages."""
    return QoSProfile(
        depth=depth,
        history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if transient_local else DurabilityPolicy.VOLATILE,
    )
