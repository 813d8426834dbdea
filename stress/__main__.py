"""`make stress`: run every stress/stress_*.py section and print ONE table of figures
(figure, value, target, met). Not part of `make test`: the sections load the machine for
minutes (about 5 in all on 2 quiet cores, at most about 10) and report figures against targets instead of
asserting. `python -m stress control soak` runs only the sections whose names contain
those words. Exit status 1 when a target is not met or a section fails.

A section is a module ``stress/stress_<name>.py`` with ``run() -> list[Row]``
(stress.common.Row); nothing else needs to change to add one.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    from bench.domain import isolate
    from stress.common import Row

    # a domain of our own: the load neither sees nor disturbs other runs on the machine
    print(f"ROS_DOMAIN_ID={isolate()}, discovery LOCALHOST", flush=True)
    names = sorted(p.stem for p in Path(__file__).parent.glob("stress_*.py"))
    if argv:
        names = [n for n in names if any(word in n for word in argv)]
    rows: list[Row] = []
    for name in names:
        print(f"--- {name} ...", flush=True)
        start = time.perf_counter()
        try:
            section = importlib.import_module(f"stress.{name}").run()
        except Exception as exc:  # one broken section must not hide the others' figures
            traceback.print_exc()
            section = [Row(f"{name}: section ran", f"{type(exc).__name__}: {exc}"[:60], "no error", False)]
        elapsed = time.perf_counter() - start
        # a section may give plain (figure, value, target, met) tuples
        section = [row if isinstance(row, Row) else Row(*row) for row in section]
        for row in section:  # numpy's bool is not True: the count of targets met asks "is True"
            row.met = None if row.met is None else bool(row.met)
        for row in section:  # as soon as known: a later section that hangs does not lose them
            print(f"    {row.figure} | {row.value} | {row.target} | {row.met}", flush=True)
        rows += section
        rows.append(Row(f"{name}: duration s", f"{elapsed:.0f}"))
        print(f"--- {name}: {elapsed:.0f} s", flush=True)
    print_table(rows)
    return 0 if all(row.met is not False for row in rows) else 1


def print_table(rows) -> None:
    def text(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    cells = [("figure", "value", "target", "met")] + [
        (r.figure, text(r.value), r.target, "-" if r.met is None else ("yes" if r.met else "NO"))
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    line = "+".join("-" * (w + 2) for w in widths)
    print()
    for i, cell in enumerate(cells):
        print(" | ".join(c.ljust(w) for c, w in zip(cell, widths)))
        if i == 0:
            print(line)
    met = sum(r.met is True for r in rows)
    targets = sum(r.met is not None for r in rows)
    print(f"\n{met} of {targets} targets met", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
