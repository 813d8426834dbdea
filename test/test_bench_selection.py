"""`python -m bench WORDS` chooses benchmarks by the words in their names, except that a
word a chosen benchmark takes as its own argument chooses no other (bench_timing's path
names): `python -m bench timing vrpn` ran bench_vrpn as well before."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.__main__ import selected  # noqa: E402

NAMES = sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))


def test_a_path_of_the_timing_bench_is_not_another_benchmark():
    assert selected(NAMES, ["timing", "vrpn"]) == ["bench_timing"]
    assert selected(NAMES, ["timing", "qtm", "sim"]) == ["bench_timing"]


def test_words_alone_still_choose_by_name():
    assert selected(NAMES, ["vrpn"]) == ["bench_vrpn"]
    assert selected(NAMES, ["natnet", "core"]) == ["bench_core", "bench_natnet"]
    assert selected(NAMES, ["timing"]) == ["bench_timing"]
    assert selected(NAMES, ["nothing_like_it"]) == []
