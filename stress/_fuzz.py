"""Fuzzing a packet-reading path with a million mutated packets in a few minutes.

The corpus: valid packets from the project's own encoders (``bases``), mutated in numpy
batches (overwritten bytes, bit flips, 32-bit fields overwritten with boundary values or
nudged by a few units, truncations, appended noise, inserted and deleted bytes). Packet
``i`` of a run depends only on (seed, i): a batch is drawn from a generator seeded with
(seed, batch number), so a hanging or crashing packet can be generated again from its
index alone and a worker can resume right after it.

The reading path runs in worker processes (one per core) that report through shared
memory: the index of the packet being read (the heartbeat), whether it is reading one,
and the outcome counters.
The parent only watches: a worker whose heartbeat has not moved for HANG_SECONDS is
killed and restarted on the same packet once more; a second stall on the same packet
is a hang (counted, the worker resumes after it), a packet that passes the second time
was the machine, not the reader (a "stall"). A worker that dies (a signal, an
interpreter abort) counts as a crash on the packet it was reading, and is resumed
after it. No per-packet thread, process or pipe round-trip: the watchdog costs the
reading path two stores into shared memory per packet.

A path is described by ``"module:function"``: a module-level function returning
``(bases, step)``, called in each worker (spawned, not forked: the parent may hold DDS
threads from earlier sections). ``step(base index, packet) -> "rejected" | "accepted" |
"converted" | "inconsistent"``: "converted" is accepted after the full conversion to a
frame and its consistency check (a path may run that costly part on a sample of the
packets whose structure the mutation left alone; the table says how many); any exception
``step`` raises is a crash.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import queue
import resource
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HANG_SECONDS = 1.0
BATCH = 2048
CHUNK = 8 * BATCH  # packets a worker takes at a time: worker w reads chunks w, w+W, ...
# int32 values that break length and count fields: zero, one, negative, huge, 16-bit edges
BOUNDARY = np.array(
    [0, 1, 2, -1, -2, 0x7FFFFFFF, -0x80000000, 0xFFFF, 0x10000, 0x7FFF, 0x8000, 255, 256, 1 << 20, 1 << 24],
    dtype=np.int64,
).astype(np.uint32)

# shared state of one worker (int64 slots)
(
    _HEARTBEAT,
    _READING,
    _PHASE,
    _STOP,
    _PACKETS,
    _REJECTED,
    _ACCEPTED,
    _CONVERTED,
    _INCONSISTENT,
    _CRASHES,
    _SLOWEST_NS,
    _SLOWEST_AT,
    _RSS_KIB,
    _CPU_MS,
    _SLOTS,
) = range(15)
_STARTING, _RUNNING, _DONE = 0, 1, 2
_OUTCOME = {
    "rejected": _REJECTED,
    "accepted": _ACCEPTED,
    "converted": _CONVERTED,
    "inconsistent": _INCONSISTENT,
}


# ---------------------------------------------------------------------- the corpus
def _base_table(bases: list[bytes]) -> tuple[np.ndarray, np.ndarray, int]:
    width = max(len(b) for b in bases) + 64
    table = np.zeros((len(bases), width), np.uint8)
    for i, b in enumerate(bases):
        table[i, : len(b)] = np.frombuffer(b, np.uint8)
    return table, np.array([len(b) for b in bases], dtype=np.int64), width


def mutate_batch(
    table: np.ndarray, lengths: np.ndarray, width: int, seed: int, batch: int, n: int = BATCH
) -> list[tuple[int, bytes]]:
    """Batch ``batch`` of the sequence ``seed``: ``n`` (base index, mutant) pairs."""
    rng = np.random.default_rng((seed, batch))
    rows_n = np.arange(n)
    which = rng.integers(0, len(table), n)
    rows = table[which]  # fancy indexing: a copy
    length = lengths[which].copy()
    # where: half anywhere in the packet, half in its first 64 bytes (headers, counts, sizes)
    span = np.maximum(np.where(rng.random(n) < 0.5, length, np.minimum(length, 64)), 1)
    kind = rng.random(n)
    # 1. overwrite 1..8 bytes (45 %)
    hits = np.where(kind < 0.45, rng.integers(1, 9, n), 0)
    for j in range(8):
        active = hits > j
        pos = (rng.random(n) * span).astype(np.int64)
        rows[active, pos[active]] = rng.integers(0, 256, int(active.sum()), dtype=np.uint8)
    # 2. flip 1..4 single bits (25 %)
    flips = np.where((kind >= 0.45) & (kind < 0.70), rng.integers(1, 5, n), 0)
    for j in range(4):
        active = flips > j
        pos = (rng.random(n) * span).astype(np.int64)
        rows[active, pos[active]] ^= (np.uint8(1) << rng.integers(0, 8, n, dtype=np.uint8))[active]
    # 3. a 32-bit little-endian field (at any offset: fields after strings are unaligned)
    #    set to a boundary value, or nudged by -16..16 (an off-by-a-few length) (30 %)
    field_rows = rows_n[kind >= 0.70]
    if len(field_rows):
        at = (rng.random(len(field_rows)) * np.maximum(span[field_rows] - 3, 1)).astype(np.int64)
        cols = at[:, None] + np.arange(4)
        old = rows[field_rows[:, None], cols].astype(np.uint32)
        value = old[:, 0] | old[:, 1] << 8 | old[:, 2] << 16 | old[:, 3] << 24
        nudge = rng.random(len(field_rows)) < 0.5
        value = np.where(
            nudge,
            value + rng.integers(-16, 17, len(field_rows)).astype(np.uint32),
            BOUNDARY[rng.integers(0, len(BOUNDARY), len(field_rows))],
        ).astype(np.uint32)
        rows[field_rows[:, None], cols] = (value[:, None] >> (8 * np.arange(4, dtype=np.uint32))).astype(
            np.uint8
        )
    # then the length: 8 % truncated, 4 % grown with noise, 5 % bytes deleted, 5 % inserted
    cut = rng.random(n)
    length = np.where(cut < 0.08, (rng.random(n) * length).astype(np.int64), length)
    grow = cut > 0.96
    if grow.any():
        noise = rng.integers(0, 256, (int(grow.sum()), width), dtype=np.uint8)
        rows[grow, :] = np.where(np.arange(width)[None, :] >= length[grow, None], noise, rows[grow, :])
        length = np.where(grow, np.minimum(length + rng.integers(1, 64, n), width), length)
    edit_at = (rng.random(n) * length).astype(np.int64)
    edit_size = rng.integers(1, 17, n)
    insert = rng.integers(0, 256, 16, dtype=np.uint8).tobytes()
    out = []
    for r in range(n):
        packet = rows[r, : length[r]].tobytes()
        c = cut[r]
        if 0.08 <= c < 0.13:
            packet = packet[: edit_at[r]] + packet[edit_at[r] + edit_size[r] :]
        elif 0.13 <= c < 0.18:
            packet = packet[: edit_at[r]] + insert[: edit_size[r]] + packet[edit_at[r] :]
        out.append((int(which[r]), packet))
    return out


def mutants(bases: list[bytes], seed: int, first: int, stop: int) -> Iterator[tuple[int, int, bytes]]:
    """(packet index, base index, packet) for indices first..stop-1 of sequence ``seed``."""
    table, lengths, width = _base_table(bases)
    index = first
    while index < stop:
        batch, skip = divmod(index, BATCH)
        for base, packet in mutate_batch(table, lengths, width, seed, batch)[skip : skip + stop - index]:
            yield index, base, packet
            index += 1


def packet_at(bases: list[bytes], seed: int, index: int) -> tuple[int, bytes]:
    """Packet ``index`` of sequence ``seed`` again (to report or replay it)."""
    table, lengths, width = _base_table(bases)
    batch, skip = divmod(index, BATCH)
    return mutate_batch(table, lengths, width, seed, batch)[skip]


def chunk_indices(worker: int, workers: int, start: int, total: int) -> Iterator[tuple[int, int]]:
    """The (first, stop) index ranges worker ``worker`` reads from index ``start`` on."""
    chunk = max(start // CHUNK, 0)
    chunk += (worker - chunk) % workers
    while chunk * CHUNK < total:
        first, stop = max(chunk * CHUNK, start), min((chunk + 1) * CHUNK, total)
        if first < stop:
            yield first, stop
        chunk += workers


def load_path(spec: str) -> tuple[list[bytes], Callable[[int, bytes], str]]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module, function = spec.split(":")
    return getattr(importlib.import_module(module), function)()


# ---------------------------------------------------------------------- the worker
def _worker(spec: str, seed: int, worker: int, workers: int, start: int, total: int, state, errors) -> None:
    import warnings

    warnings.simplefilter("ignore")  # NaN casts of mutated floats are expected, not news
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a reader that aborts leaves no core file behind
    slots = np.frombuffer(state, dtype=np.int64)
    bases, step = load_path(spec)
    clock = time.perf_counter_ns
    slots[_PHASE] = _RUNNING
    stopped = False
    for first, stop in chunk_indices(worker, workers, start, total):
        for index, base, packet in mutants(bases, seed, first, stop):
            if not index & 1023:
                _usage(slots)  # kept current: a worker killed later still has its figures
                if slots[_STOP]:
                    stopped = True
                    break
            slots[_HEARTBEAT] = index
            slots[_READING] = 1  # between packets (mutating the next batch) is not a hang
            t = clock()
            try:
                slots[_OUTCOME[step(base, packet)]] += 1
            except Exception as exc:  # noqa: BLE001 - what we count
                slots[_CRASHES] += 1
                if slots[_CRASHES] <= 3:
                    errors.put((index, f"{type(exc).__name__}: {exc}"[:200]))
            dt = clock() - t
            slots[_READING] = 0
            if dt > slots[_SLOWEST_NS]:
                slots[_SLOWEST_NS], slots[_SLOWEST_AT] = dt, index
            slots[_PACKETS] += 1
        _usage(slots)
        if stopped:
            break
    _usage(slots)
    slots[_PHASE] = _DONE


def _usage(slots) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    slots[_RSS_KIB] = usage.ru_maxrss
    slots[_CPU_MS] = int((usage.ru_utime + usage.ru_stime) * 1000)


# ---------------------------------------------------------------------- the parent
@dataclass
class FuzzResult:
    name: str
    workers: int
    packets: int = 0
    rejected: int = 0
    accepted: int = 0  # of which converted
    converted: int = 0
    inconsistent: int = 0
    crashes: int = 0
    hangs: int = 0
    stalls: int = 0  # slow once, not the second time: the machine, not the reader
    slowest: float = 0.0
    slowest_at: int = -1
    peak_rss_mib: float = 0.0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the workers' CPU time: the rate a loaded machine does not change
    problems: list[str] = field(default_factory=list)  # first crashes and hangs, with packet indices

    def rows(self, target_packets: int) -> list[tuple]:
        rate = self.packets / self.seconds if self.seconds else 0.0
        label = self.name
        first = f" (first: {self.problems[0][:80]})" if self.problems else ""
        per_cpu = self.packets / self.cpu_seconds if self.cpu_seconds else 0.0
        return [
            (
                f"{label}: mutated packets (accepted {self.accepted}, {self.converted} of them converted and "
                f"checked; rejected {self.rejected}; {rate:,.0f}/s,"
                f" {self.workers} workers, {self.seconds:.0f} s)",
                self.packets,
                f">= {target_packets}",
                self.packets >= target_packets,
            ),
            (
                f"{label}: packets per CPU second of a worker ({target_packets:,} would take "
                f"{target_packets / max(per_cpu, 1e-9) / self.workers:.0f} s on {self.workers} idle cores)",
                round(per_cpu),
                "-",
                None,
            ),
            (f"{label}: crashes{first if self.crashes else ''}", self.crashes, "0", self.crashes == 0),
            (
                f"{label}: hangs > {HANG_SECONDS:g} s, repeatable (slowest passing {self.slowest * 1e3:.1f} "
                "ms; "
                f"{self.stalls} machine stalls not repeated)",
                self.hangs,
                "0",
                self.hangs == 0,
            ),
            (f"{label}: inconsistent frames passed", self.inconsistent, "0", self.inconsistent == 0),
            (
                f"{label}: peak RSS of a fuzzing worker (MiB)",
                round(self.peak_rss_mib, 1),
                "< 1024",
                self.peak_rss_mib < 1024,
            ),
        ]


class _Slot:
    """One worker process and the counts of the processes it replaced."""

    def __init__(self, ctx, index: int):
        self.ctx = ctx
        self.index = index
        self.state = ctx.RawArray("q", _SLOTS)
        self.slots = np.frombuffer(self.state, dtype=np.int64)
        self.carried = np.zeros(_SLOTS, dtype=np.int64)  # counts of earlier processes of this slot
        self.process = None
        self.retrying: int | None = None  # the packet restarted on after a stall
        self.seen = -1
        self.since = 0.0

    def start(self, spec, seed, workers, start, total, errors) -> None:
        self.slots[:] = 0
        self.slots[_HEARTBEAT] = start - 1
        self.process = self.ctx.Process(
            target=_worker,
            args=(spec, seed, self.index, workers, start, total, self.state, errors),
            daemon=True,
        )
        self.process.start()
        self.seen, self.since = -2, time.monotonic()

    def bank(self) -> None:
        """Keep the dead process's counts before the slot is reused."""
        for k in (_PACKETS, _REJECTED, _ACCEPTED, _CONVERTED, _INCONSISTENT, _CRASHES, _CPU_MS):
            self.carried[k] += self.slots[k]
        if self.slots[_SLOWEST_NS] > self.carried[_SLOWEST_NS]:
            self.carried[_SLOWEST_NS], self.carried[_SLOWEST_AT] = (
                self.slots[_SLOWEST_NS],
                self.slots[_SLOWEST_AT],
            )
        self.carried[_RSS_KIB] = max(self.carried[_RSS_KIB], self.slots[_RSS_KIB])
        self.slots[:] = 0

    def total(self, k: int) -> int:
        return int(self.carried[k] + self.slots[k])


def run_fuzz(
    name: str, spec: str, total: int, budget: float, seed: int, workers: int | None = None
) -> FuzzResult:
    """Read packets 0..total-1 of sequence ``seed`` through the path ``spec`` in
    ``workers`` processes (default: one per core, at most 2), for at most ``budget`` s."""
    workers = workers or max(1, min(2, os.cpu_count() or 1))
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    result = FuzzResult(name, workers)
    slots = [_Slot(ctx, w) for w in range(workers)]
    start = time.monotonic()
    for slot in slots:
        slot.start(spec, seed, workers, 0, total, errors)
    stopping = False
    died = 0

    def restart(slot: _Slot, at: int) -> None:
        slot.process.kill()
        slot.process.join(10)
        slot.bank()
        if not stopping and at < total:
            slot.start(spec, seed, workers, at, total, errors)
        else:
            slot.process = None

    while any(s.process is not None for s in slots):
        time.sleep(0.05)
        now = time.monotonic()
        if not stopping and now - start > budget:
            stopping = True
            for s in slots:
                s.slots[_STOP] = 1
        for s in slots:
            if s.process is None:
                continue
            beat = int(s.slots[_HEARTBEAT])
            phase = int(s.slots[_PHASE])
            if phase == _DONE:
                if s.retrying is not None:  # the stalled packet was its last one, and it passed
                    result.stalls += 1
                    s.retrying = None
                s.process.join(10)
                s.bank()
                s.process = None
                continue
            if not s.process.is_alive() and phase != _RUNNING:
                raise RuntimeError(
                    f"{name}: fuzzing worker {s.index} failed to start (exit code "
                    f"{s.process.exitcode}; its error is printed above)"
                )
            if not s.process.is_alive():
                # died without an exception reaching Python: a crash on the packet it read
                died += 1
                result.problems.append(
                    f"packet {beat} (seed {seed}): worker died, exit code {s.process.exitcode}"
                )
                restart(s, beat + 1)
                continue
            if phase != _RUNNING:
                if now - s.since > 120:  # a worker that cannot even start: say so, do not wait forever
                    raise RuntimeError(f"{name}: fuzzing worker {s.index} did not start in 120 s")
                continue
            if beat != s.seen or not s.slots[_READING]:
                if s.retrying is not None and beat > s.retrying:
                    result.stalls += 1  # the packet passed the second time
                    s.retrying = None
                s.seen, s.since = beat, now
                continue
            if now - s.since > HANG_SECONDS and not stopping:
                if s.retrying == beat:
                    result.hangs += 1
                    result.problems.append(f"packet {beat} (seed {seed}): over {HANG_SECONDS:g} s twice")
                    s.retrying = None
                    restart(s, beat + 1)
                else:
                    s.retrying = beat
                    restart(s, beat)
            elif now - s.since > 10 * HANG_SECONDS:  # stopping: do not wait on a hung packet
                restart(s, total)
    result.seconds = time.monotonic() - start
    while True:
        try:
            index, text = errors.get(timeout=0.5)
        except queue.Empty:
            break
        result.problems.append(f"packet {index} (seed {seed}): {text}")
    # a packet that hung or killed its worker was read too (it has no outcome of its own)
    result.packets = sum(s.total(_PACKETS) for s in slots) + result.hangs + died
    result.rejected = sum(s.total(_REJECTED) for s in slots)
    result.converted = sum(s.total(_CONVERTED) for s in slots)
    result.accepted = sum(s.total(_ACCEPTED) for s in slots) + result.converted
    result.inconsistent = sum(s.total(_INCONSISTENT) for s in slots)
    result.crashes = died + sum(s.total(_CRASHES) for s in slots)
    slowest = max(slots, key=lambda s: s.carried[_SLOWEST_NS])
    result.slowest, result.slowest_at = (
        float(slowest.carried[_SLOWEST_NS]) / 1e9,
        int(slowest.carried[_SLOWEST_AT]),
    )
    result.cpu_seconds = sum(s.total(_CPU_MS) for s in slots) / 1000.0
    result.peak_rss_mib = float(max(s.carried[_RSS_KIB] for s in slots)) / 1024.0  # a float, not numpy's
    return result
