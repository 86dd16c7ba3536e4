"""Benchmarks of the session store (issue 3), on a real filesystem with real fsyncs.

1. Cold load of a 300-node, ~4 MB session (``SessionCore.open``: lock,
   leftover scan, journal scan, meta, index) vs merely reading and
   orjson-parsing the same files. Target: ratio <= 1.3.
2. A 64-node marker merge (``merge_node_metadata_batch``, the critical path
   up to the acknowledgement) vs 64 independently fsynced atomic rewrites:
   each node merged on its own (read, merge, encode, durable rewrite), and,
   as a floor, the bare fsynced writes of precomputed bytes. Target: >= 10x
   faster. Journal retirement, off the critical path, is reported too.
3. One append (node file + meta.json, to the acknowledgement) vs one bare
   atomic write, and vs the previous design ("before": :class:`BeforeCore`,
   the same core writing both files durably with ``write_atomic_many``, 4
   fsyncs). The journal's checkpoint, paid off the critical path, is
   reported per append amortised over 16 appends (what an owner that goes
   idle every 16 turns pays), with wall and CPU time: the throughput of a
   2-core host is bound by both.

Run: ``python bench/session_store.py [--dir DIR] [--repeat N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from store._durable import DurableFiles
from store._session import SessionCore

NODES = 300
TOTAL_BYTES = 4 * 1024 * 1024
MERGE_NODES = 64


def _build(state: Path) -> SessionCore:
    core = SessionCore.create(state, "bench", title="bench")
    body = "lorem ipsum dolor sit amet, 茶 " * (TOTAL_BYTES // NODES // 31)
    previous = "ROOT"
    for i in range(NODES):
        message = core.append({
            "id": f"n{i:04d}", "role": ["user", "assistant"][i % 2], "content": body,
            "predecessor": previous, "speaker_kind": "owner", "authority_tier": "owner",
        })
        previous = message["id"]
    core.close()
    return core


def _best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class BeforeCore(SessionCore):
    """The previous append: node file and meta.json each written durably, no journal."""

    def _journal_locked(self, entries: list[tuple[str, bytes]]) -> None:
        self._files.write_atomic_many([(self._path(rel), data) for rel, data in entries])


class SlowFsyncFiles(DurableFiles):
    """Real fsyncs, plus an optional extra latency per fsync (``--fsync-latency-ms``).

    On a disk with a volatile write cache an fsync costs ~0.1 ms and file
    creation dominates; the extra latency emulates a disk whose flush costs
    what commodity SSDs and network volumes charge, for both sides alike.
    """

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def _step(self, step: str, path: str) -> None:
        if self.latency and step in ("fsync", "fsync_dir"):
            time.sleep(self.latency)


def run(directory: Path, repeat: int, fsync_latency: float = 0.0) -> dict[str, dict[str, float]]:
    state = directory / "state"
    _build(state)
    history = state / "sessions" / "bench" / "history"
    size = sum(p.stat().st_size for p in history.iterdir())

    def raw() -> list[object]:
        # the parsed records are kept, as any loader must keep them
        parsed = []
        for name in sorted(os.listdir(history)):
            with open(os.path.join(history, name), "rb") as handle:
                parsed.append(orjson.loads(handle.read()))
        return parsed

    def cold() -> None:
        SessionCore.open(state, "bench")

    raw()  # warm the page cache for both
    cold()
    raw_s = cold_s = float("inf")
    for _ in range(repeat * 3):  # interleaved, best of each: the machine is shared
        raw_s = min(raw_s, _best(raw, 1))
        cold_s = min(cold_s, _best(cold, 1))

    files = SlowFsyncFiles(fsync_latency)
    core = SessionCore.open(state, "bench", files=files)
    ids = [f"n{i:04d}" for i in range(MERGE_NODES)]
    counter = iter(range(10**9))
    retire_times: list[float] = []

    def merge() -> None:
        core.merge_node_metadata_batch(
            {node: {"memory_written_scriptorium": f"w-{next(counter):08x}"} for node in ids}
        )

    merge_times = []
    for _ in range(repeat):
        start = time.perf_counter()
        merge()
        merge_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        core.retire_journals()
        retire_times.append(time.perf_counter() - start)
    node_files = sorted(p for p in history.iterdir() if not p.name.startswith("."))
    node_files = node_files[:MERGE_NODES]
    contents = [p.read_bytes() for p in node_files]

    def rewrites() -> None:  # the same bytes, each file alone: the fsync cost only
        for path, data in zip(node_files, contents):
            files.write_atomic(str(path), data)

    def independent() -> None:  # what each component did alone: read, merge, durable rewrite
        stamp = f"w-{next(counter):08x}"
        for path in node_files:
            with open(path, "rb") as handle:
                record = orjson.loads(handle.read())
            record["metadata"]["memory_written_scriptorium"] = stamp
            files.write_atomic(str(path), json.dumps(record, ensure_ascii=False).encode())

    rewrites_s = _median(rewrites, repeat)
    independent_s = _median(independent, repeat)
    merge_s = statistics.median(merge_times)
    retire_s = statistics.median(retire_times)

    appended = iter(range(10**9))
    scratch = directory / "scratch.json"

    def append() -> None:
        core.append({"id": f"x{next(appended)}", "content": "short turn", "role": "user"})

    append()
    core.retire_journals()
    node_bytes = max(history.iterdir(), key=lambda p: p.name).read_bytes()
    old = BeforeCore.open(state, "bench", files=files)

    def bare() -> None:
        files.write_atomic(str(scratch), node_bytes)

    def before() -> None:
        old.append({"id": f"y{next(appended)}", "content": "short turn", "role": "user"})

    # one owner at a time (each takes the lock; the other catches up on its next call)
    before_s = _median(before, repeat * 4)
    append_s = _median(append, repeat * 4)
    bare_s = _median(bare, repeat * 4)
    core.retire_journals()

    def sixteen() -> None:
        for _ in range(16):
            append()
        core.retire_journals()

    def sixteen_before() -> None:
        for _ in range(16):
            before()

    def per_append(fn: Callable[[], object]) -> tuple[float, float]:
        """Median over rounds of (wall, CPU) seconds per append; the machine is shared."""
        walls, cpus = [], []
        for _ in range(repeat):
            cpu, wall = time.process_time(), time.perf_counter()
            fn()
            walls.append((time.perf_counter() - wall) / 16)
            cpus.append((time.process_time() - cpu) / 16)
        return statistics.median(walls), statistics.median(cpus)

    amortised_s, amortised_cpu_s = per_append(sixteen)
    before()  # catch up with the other owner's appends once, outside the timing
    before_total_s, before_cpu_s = per_append(sixteen_before)
    core.close()
    return {
        "cold_load": {"nodes": NODES, "bytes": size, "raw_ms": raw_s * 1e3,
                      "cold_ms": cold_s * 1e3, "ratio": cold_s / raw_s},
        "merge_64": {"journal_ms": merge_s * 1e3, "independent_ms": independent_s * 1e3,
                     "speedup": independent_s / merge_s, "retire_ms": retire_s * 1e3,
                     "rewrites_ms": rewrites_s * 1e3, "speedup_vs_rewrites": rewrites_s / merge_s},
        "append": {"append_ms": append_s * 1e3, "bare_write_ms": bare_s * 1e3,
                   "ratio": append_s / bare_s, "before_ms": before_s * 1e3,
                   "with_checkpoint_ms": amortised_s * 1e3,
                   "with_checkpoint_cpu_ms": amortised_cpu_s * 1e3,
                   "before_total_ms": before_total_s * 1e3,
                   "before_cpu_ms": before_cpu_s * 1e3},
    }


def _table(results: dict[str, dict[str, float]]) -> str:
    cold, merge, append = results["cold_load"], results["merge_64"], results["append"]
    rows = [
        "| measurement | scriptorium | baseline | ratio | target |",
        "|---|---|---|---|---|",
        (f"| cold load, {cold['nodes']:.0f} nodes, {cold['bytes'] / 2**20:.1f} MiB "
        f"| {cold['cold_ms']:.1f} ms | {cold['raw_ms']:.1f} ms (read + orjson) "
        f"| {cold['ratio']:.2f}x | <= 1.3x |"),
        (f"| marker merge, {MERGE_NODES} nodes (to ack; +{merge['fsync_latency_ms']:g} ms/fsync) "
        f"| {merge['journal_ms']:.2f} ms "
        f"| {merge['independent_ms']:.2f} ms ({MERGE_NODES} independent merges, each "
        "read + merge + fsynced atomic rewrite) "
        f"| {merge['speedup']:.1f}x faster | >= 10x |"),
        (f"| same, bytes precomputed | {merge['journal_ms']:.2f} ms "
         f"| {merge['rewrites_ms']:.2f} ms ({MERGE_NODES} fsynced atomic writes only) "
         f"| {merge['speedup_vs_rewrites']:.1f}x faster | |"),
        f"| journal retirement (off the critical path) | {merge['retire_ms']:.2f} ms | | | |",
        (f"| append (node + meta.json, to ack; 1 flush) | {append['append_ms']:.2f} ms "
        f"| {append['bare_write_ms']:.2f} ms (one atomic write) | {append['ratio']:.2f}x | |"),
        (f"| same | {append['append_ms']:.2f} ms "
         f"| {append['before_ms']:.2f} ms (before: both files durably, 4 fsyncs) "
         f"| {append['before_ms'] / append['append_ms']:.2f}x faster | |"),
        (f"| append + its share of a checkpoint every 16 (wall / CPU) "
         f"| {append['with_checkpoint_ms']:.2f} / {append['with_checkpoint_cpu_ms']:.2f} ms "
         f"| {append['before_total_ms']:.2f} / {append['before_cpu_ms']:.2f} ms (before) "
         f"| {append['before_total_ms'] / append['with_checkpoint_ms']:.2f}x | |"),
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="directory to run in (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--fsync-latency-ms", type=float, default=0.0,
                        help="extra latency per fsync for the merge and append rows")
    args = parser.parse_args()
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="scriptorium-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        results = run(directory, args.repeat, args.fsync_latency_ms / 1e3)
        results["merge_64"]["fsync_latency_ms"] = args.fsync_latency_ms
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    if args.json:
        print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    else:
        print(_table(results))


if __name__ == "__main__":
    main()
