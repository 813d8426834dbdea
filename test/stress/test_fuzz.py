"""The fuzzing engine of `make stress` (stress/_fuzz.py): the corpus is replayable and
mutated, and the workers' counts are what the packets did, with a hanging packet ended
by the watchdog and a worker that died resumed after the packet that killed it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fuzz_paths  # noqa: E402  (test/fixtures, on sys.path by conftest)

from stress._fuzz import HANG_SECONDS, chunk_indices, mutants, packet_at, run_fuzz  # noqa: E402 - after the sys.path insert


def test_packets_are_replayable_from_their_index_and_mutated_in_every_way():
    bases = fuzz_paths.bases()
    run = list(mutants(bases, 3, 0, 5000))
    assert [i for i, _, _ in run] == list(range(5000))
    for i in (0, 1, 2047, 2048, 4999):
        assert packet_at(bases, 3, i) == (run[i][1], run[i][2])
    assert list(mutants(bases, 3, 2040, 2050)) == run[2040:2050]
    assert list(mutants(bases, 4, 0, 100)) != run[:100]  # another seed, another corpus
    shorter = sum(len(p) < len(bases[b]) for _, b, p in run)  # truncated, bytes deleted
    longer = sum(len(p) > len(bases[b]) for _, b, p in run)  # noise appended, bytes inserted
    same = [(p, bases[b]) for _, b, p in run if len(p) == len(bases[b])]
    assert shorter > 500 and longer > 300 and len(same) > 3000, (shorter, longer, len(same))

    def bits(p, q):
        return sum(bin(x ^ y).count("1") for x, y in zip(p, q))

    differ = [bits(p, q) for p, q in same]
    assert sum(d == 0 for d in differ) < 50  # a mutant is rarely its base
    assert sum(d == 1 for d in differ) > 100  # single bit flips
    assert sum(d > 8 for d in differ) > 300  # whole bytes and 32-bit fields


def test_chunks_split_the_packets_between_workers_without_overlap():
    total = 300_000
    seen = []
    for w in range(2):
        seen += [i for first, stop in chunk_indices(w, 2, 0, total) for i in range(first, stop)]
    assert sorted(seen) == list(range(total))
    # resuming worker 1 after a packet of its own chunk continues there, never in worker 0's
    resumed = list(chunk_indices(1, 2, 20_000, total))
    assert resumed[0][0] == 20_000 and all((first // 16384) % 2 == 1 for first, _ in resumed)


def test_counts_hangs_crashes_and_inconsistent_frames_of_the_planned_packets():
    result = run_fuzz(
        "planned",
        "fuzz_paths:misbehaving_path",
        fuzz_paths.TOTAL,
        budget=240,
        seed=fuzz_paths.SEED,
        workers=2,
    )
    detail = f"{result} problems={result.problems}"
    assert result.packets == fuzz_paths.TOTAL, detail
    assert result.hangs == 1, detail
    assert result.crashes == 3, detail  # two raised, one abort
    assert result.inconsistent == 1, detail
    assert result.accepted + result.rejected + 5 == fuzz_paths.TOTAL, detail
    assert any("packet 700" in p and "twice" in p for p in result.problems), detail
    assert any("packet 1500" in p and "died" in p for p in result.problems), detail
    assert any("packet 300" in p and "IndexError" in p for p in result.problems), detail
    assert result.slowest < HANG_SECONDS * 2 and result.peak_rss_mib > 0, detail
    rows = result.rows(fuzz_paths.TOTAL)
    assert [r[3] for r in rows] == [True, None, False, False, False, True], rows
    assert all(r[3] is True or r[3] is False for r in rows if r[3] is not None), rows  # not numpy's bool
    assert result.cpu_seconds > 0, detail
