"""The decision of `make bench`'s regression guard (bench/guard.py), without timing
anything: a ratio to raw passes at or below its target, passes within its noise interval
above it, and fails beyond that, or when a round measured nothing."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.guard import GuardFigure, guard_verdict  # noqa: E402


def test_a_ratio_at_or_below_its_target_passes():
    ok, line = guard_verdict(GuardFigure("core 10 bodies", (1.20, 1.25, 1.22, 1.27), 1.3))
    assert ok and line.startswith("bench guard ok core 10 bodies")


def test_the_noise_interval_is_the_t_interval_of_the_rounds_mean():
    figure = GuardFigure("x", (1.0, 2.0, 3.0), 1.0)
    assert figure.ratio == pytest.approx(2.0)
    assert figure.noise == pytest.approx(4.303 * 1.0 / math.sqrt(3))  # t(0.975, 2) * s / sqrt(n)


def test_above_the_target_within_the_noise_passes_and_says_so():
    # mean 1.40, half-width 3.182 * 0.1 / 2 = 0.159: 1.40 - 0.159 <= 1.3
    figure = GuardFigure("core", (1.3, 1.4, 1.5, 1.4), 1.3)
    assert figure.ratio - figure.noise <= 1.3 < figure.ratio
    ok, line = guard_verdict(figure)
    assert ok and "within noise" in line


def test_above_the_target_by_more_than_the_noise_fails_loudly():
    ok, line = guard_verdict(GuardFigure("core 50 bodies", (1.86, 1.90, 1.88, 1.92), 1.5))
    assert not ok
    assert line.startswith("BENCH GUARD FAIL core 50 bodies: ratio 1.89")
    assert "target <= 1.50" in line


def test_a_wide_interval_does_not_hide_a_large_excess_forever():
    # noisy rounds, but every one above the target by far
    ok, _ = guard_verdict(GuardFigure("core", (2.5, 3.5, 3.0, 2.8), 1.3))
    assert not ok


@pytest.mark.parametrize(
    "rounds",
    [(), (math.nan, 1.1, 1.2), (1.1, math.inf), (1.1,)],
    ids=["no rounds", "a round measured nothing", "an infinite ratio", "one round: no noise"],
)
def test_a_guard_that_cannot_measure_fails(rounds):
    ok, line = guard_verdict(GuardFigure("core", rounds, 1.3))
    assert not ok and line.startswith("BENCH GUARD FAIL core")


def test_python_m_bench_exits_2_on_a_guard_failure(monkeypatch, capsys):
    import bench.__main__ as entry

    class Module:
        @staticmethod
        def run():
            return [GuardFigure("fake", (2.0, 2.1, 1.9), 1.3)]

    monkeypatch.setattr(entry, "selected", lambda names, words: ["bench_fake"])
    monkeypatch.setattr(entry.importlib, "import_module", lambda name: Module)
    monkeypatch.setitem(sys.modules, "bench.domain", type(sys)("bench.domain"))
    sys.modules["bench.domain"].isolate = lambda: 0  # type: ignore[attr-defined]
    assert entry.main(["fake"]) == entry.GUARD_FAILED
    assert "BENCH GUARD FAIL fake" in capsys.readouterr().out
