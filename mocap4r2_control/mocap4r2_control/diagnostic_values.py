"""A system's /diagnostics values as a reader gets them back: text, to be read as numbers.

The report (diagnostics.py) writes every value as text, and ``nan`` where its window has
no frames (no latency to average). The tools that show the values (the web panel, the
Foxglove stats) read them with one rule, here. ROS-free, as the web panel's core that
uses it is.
"""

from __future__ import annotations

import math

__all__ = ["reported_number"]


def reported_number(text: object) -> float | None:
    """The value as a float when it is a finite number, else None (``nan``, ``inf``, an
    empty or garbled value from the network, None for a key not reported)."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
