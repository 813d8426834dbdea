"""`make bench`: run every bench/bench_*.py module's run() and print its figures.

Benchmarks print figures, including ratios against a reference measured in the same
run; they assert nothing about speed (the machines are shared and noisy).
`python -m bench natnet core` runs only the modules whose names contain those words
(a word a chosen module takes as its own argument chooses no other: see selected());
`--json FILE` asks those that can (bench_timing, bench_calibration) to write their figures
there too.

The regression guard: a benchmark whose run() returns GuardFigure values (bench_core: CPU
per frame against `raw`, measured in the same run) has each judged by bench.guard.guard_verdict();
`make bench` then ends with one `BENCH GUARD FAIL` line per figure above its target by
more than its noise interval, and exits 2. Nothing here runs in CI (no timing is asserted
in tests); test_bench_guard.py tests the decision alone.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

from bench.guard import GuardFigure, guard_verdict

JSON_ENV = "MOCAP4R2_BENCH_JSON"
#: exit status of `python -m bench` when a guarded figure exceeds its target (1: a bench broke)
GUARD_FAILED = 2


def main(argv: list[str]) -> int:
    from bench.domain import isolate

    # a domain of our own: benchmarks neither see nor disturb other runs on the machine
    print(f"ROS_DOMAIN_ID={isolate()}, discovery LOCALHOST")
    here = Path(__file__).parent
    names = sorted(p.stem for p in here.glob("bench_*.py"))
    if "--json" in argv:
        # `python -m bench timing --json FILE`: benchmarks that write JSON read the file name here
        at = argv.index("--json")
        if at + 1 < len(argv):
            os.environ[JSON_ENV] = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    if argv:
        names = selected(names, argv)
    failed = 0
    guarded: list[GuardFigure] = []
    for name in names:
        print(f"\n=== {name} " + "=" * max(0, 60 - len(name)), flush=True)
        start = time.perf_counter()
        try:
            result = importlib.import_module(f"bench.{name}").run()
        except Exception as exc:  # one broken benchmark must not hide the others
            failed += 1
            print(f"{name} failed: {type(exc).__name__}: {exc}", flush=True)
        else:
            if isinstance(result, list):
                guarded += [f for f in result if isinstance(f, GuardFigure)]
        print(f"({name}: {time.perf_counter() - start:.1f} s)", flush=True)
    verdicts = [guard_verdict(f) for f in guarded]
    if verdicts:
        print("\n=== regression guard " + "=" * 42)
        for _, line in verdicts:
            print(line, flush=True)
    if failed:
        return 1
    return GUARD_FAILED if not all(ok for ok, _ in verdicts) else 0


def selected(names: list[str], words: list[str]) -> list[str]:
    """The benchmarks ``words`` ask for: those whose names contain one of them, except
    that a word a chosen benchmark takes as its own argument (its ARGUMENTS, e.g.
    bench_timing's path names) chooses no other: `python -m bench timing vrpn` is the
    timing bench of the vrpn path, not that and bench_vrpn."""
    chosen = {n: [w for w in words if w in n] for n in names}
    chosen = {n: found for n, found in chosen.items() if found}
    arguments: set[str] = set()
    for name in chosen:
        arguments |= set(getattr(importlib.import_module(f"bench.{name}"), "ARGUMENTS", ()))
    return [n for n, found in chosen.items() if any(w not in arguments for w in found)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
