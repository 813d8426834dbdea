"""The regression guard of `make bench`: a ratio to a reference measured in the same run,
from paired rounds, judged against its target with the rounds' own noise.

Pure (no timing here): bench_core measures, bench/__main__.py prints the verdicts and
sets the exit status, test/test_bench_guard.py tests the decision.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# two-sided 95 % quantiles of Student's t by degrees of freedom (1 to 10); 1.96 beyond
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


@dataclass(frozen=True)
class GuardFigure:
    """A ratio to a reference measured in the same run (lower is better), one value per
    paired round, and the target it must not exceed."""

    name: str
    rounds: tuple[float, ...]
    target: float

    @property
    def ratio(self) -> float:
        """The mean of the rounds' ratios (nan without rounds)."""
        return statistics.fmean(self.rounds) if self.rounds else math.nan

    @property
    def noise(self) -> float:
        """Half-width of the 95 % interval of that mean, from the spread of the rounds
        (Student's t): inf with fewer than two rounds or a round without a finite ratio,
        where noise cannot be measured."""
        n = len(self.rounds)
        if n < 2 or not all(math.isfinite(r) for r in self.rounds):
            return math.inf
        t = _T95[n - 2] if n - 2 < len(_T95) else 1.96
        return t * statistics.stdev(self.rounds) / math.sqrt(n)


def guard_verdict(figure: GuardFigure) -> tuple[bool, str]:
    """(passed, the line to print). A figure fails when its ratio exceeds the target by
    more than its noise interval, or when it has no finite ratio in some round or fewer than
    two rounds (nothing, or no noise, was measured: a guard that cannot see must not
    pass). Within the noise of the target it passes: on
    a shared machine a ratio a little above the target is not yet a regression."""
    ratio, noise = figure.ratio, figure.noise
    shown = (
        f"{figure.name}: ratio {ratio:.2f} +- {noise:.2f} (95 %, {len(figure.rounds)} rounds), "
        f"target <= {figure.target:.2f}"
    )
    if not figure.rounds or not all(math.isfinite(r) for r in figure.rounds):
        return False, f"BENCH GUARD FAIL {figure.name}: no finite ratio measured ({figure.rounds})"
    if len(figure.rounds) < 2:
        return False, f"BENCH GUARD FAIL {shown}: one round, its noise cannot be measured"
    if ratio - noise > figure.target:
        return False, f"BENCH GUARD FAIL {shown}: above its target by more than its noise"
    if ratio > figure.target:
        return True, f"bench guard ok (within noise of the target) {shown}"
    return True, f"bench guard ok {shown}"
