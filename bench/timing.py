"""Timing for the decoder micro-benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_microseconds_per_item(fn: Callable[[], None], items: int, repeats: int = 5) -> float:
    """The best of ``repeats`` runs of ``fn`` (which processes ``items`` items), in
    microseconds per item: the best run is the one least disturbed by other load."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / items * 1e6
