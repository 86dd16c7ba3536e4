"""Benchmark the writer's CPU work off the interpreter lock (issue 15): thread against process.

Run from the repository root::

    python bench/writer_cpu.py [--rounds 5] [--records 2000] [--simulate-runs 3] [--json]

The extractive writer's extraction and a commit's normalisation are pure
CPU. ``RuntimeConfig.cpu_worker = "thread"`` runs them in a worker thread of
the runtime's process (off the event loop's thread, not off its interpreter
lock); ``"process"`` in one worker process (``memory.writers.CpuWorker``).
Each figure is measured in the same rounds as what it is set against
(``bench/_harness.py``: a warm-up, at least five rounds, median with min and
max, the ratio per round):

- **pipeline alone**: the extractive writer + the transaction on disk, batch
  by batch into a fresh workspace, exactly as the runtime runs them (the
  writer's ``write`` from the event loop, the commit in one worker-thread
  hop), in records/s: in-process against in-thread (the baseline to beat).
  With nothing else to do, the process can only add its hand-offs;
- **pipeline with a busy event loop**: the same while the event loop runs
  pure-Python work in a task (the session actors' share of a runtime), once
  per mode: the pipeline's records/s in-process against in-thread, and the
  loop's work rate in each mode against the same work with nothing else
  running in the same round (the ceiling). This is what the process buys:
  the loop keeps its core;
- **simulate**: ``scriptorium simulate --sessions 300 --turns 40 --json``,
  ``turns_per_s``, ``--cpu-worker process`` against ``thread``, ``--simulate-runs``
  runs of each, alternating (one run each is one round here; a simulate run
  is seconds long, so fewer rounds than the harness's five by default).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import (
    CEILING,
    MIN_ROUNDS,
    TO_BEAT,
    Row,
    Summary,
    ainterleaved,
    markdown_table,
    ratio_row,
)
from workspace import _records  # the workspace benchmark's turns: three facts each

from memory.ledger._records import SourceRecord
from memory.workspace import Transactions
from memory.writers import Batch, CpuWorker, ExtractiveWriter

ROOT = Path(__file__).resolve().parent.parent
BATCH = 100
LOOP_CHUNK = 200  # pure-Python steps between two checkpoints of the loop's work


def _loop_step() -> int:
    """A slice of pure-Python work, like parsing and routing one message."""
    total = 0
    for i in range(LOOP_CHUNK):
        total += len(str(i * 7919)) + (i & 3)
    return total


async def pipeline(root: str, records: list[SourceRecord], worker: CpuWorker | None) -> float:
    """Writer + transaction on disk, batch by batch, into a fresh workspace: seconds."""
    memory = tempfile.mkdtemp(prefix="pipeline-", dir=root)
    tx = Transactions(memory, archived=lambda source: True, run_cpu=worker)
    writer = ExtractiveWriter()
    began = time.perf_counter()
    for start in range(0, len(records), BATCH):
        chunk = tuple(records[start:start + BATCH])
        view = dataclasses.replace(await anyio.to_thread.run_sync(tx.snapshot), run_cpu=worker)
        edits = await writer.write(Batch("bench", chunk, ""), view)
        result = await anyio.to_thread.run_sync(functools.partial(
            tx.commit, edits, base_revision=view.revision,
            batch_sources={r.source_id for r in chunk}))
        assert result.changed_files, result.audit  # a fresh batch always changes memory
    seconds = time.perf_counter() - began
    assert tx.all_cited([record.source_id for record in records])
    shutil.rmtree(memory)
    return seconds


async def loop_work(until: Callable[[], bool]) -> int:
    """Steps of loop work done, a checkpoint after each, until ``until()``."""
    steps = 0
    while not until():
        _loop_step()
        steps += 1
        await anyio.lowlevel.checkpoint()
    return steps


async def bench_pipeline(root: str, records: list[SourceRecord], worker: CpuWorker,
                         rounds: int, loop_seconds: float) -> list[Row]:
    count = len(records)
    loop_rates: dict[str, list[float]] = {"alone": [], "thread": [], "process": []}

    def alone(mode: str) -> Callable[[], Awaitable[float]]:
        async def measure() -> float:
            return count / await pipeline(root, records, worker if mode == "process" else None)
        return measure

    def busy(mode: str) -> Callable[[], Awaitable[float]]:
        async def measure() -> float:
            done = anyio.Event()
            steps: list[int] = []
            seconds: list[float] = []

            async def work() -> None:
                began = time.perf_counter()
                steps.append(await loop_work(done.is_set))
                seconds.append(time.perf_counter() - began)

            async with anyio.create_task_group() as group:
                group.start_soon(work)
                took = await pipeline(root, records, worker if mode == "process" else None)
                done.set()
            loop_rates[mode].append(steps[0] / seconds[0])
            return count / took
        return measure

    async def loop_alone() -> float:
        deadline = time.perf_counter() + loop_seconds
        began = time.perf_counter()
        steps = await loop_work(lambda: time.perf_counter() >= deadline)
        rate = steps / (time.perf_counter() - began)
        loop_rates["alone"].append(rate)
        return rate

    found = await ainterleaved({
        "thread": alone("thread"), "process": alone("process"),
        "thread_busy": busy("thread"), "process_busy": busy("process"),
        "loop_alone": loop_alone,
    }, rounds=rounds, warmup=1)
    loop = {mode: Summary.of(values[-rounds:]) for mode, values in loop_rates.items()}
    what = f"{count:,} records in batches of {BATCH}, three facts each"
    in_thread = "the same pipeline, cpu_worker = thread (a worker thread of this process)"
    return [
        ratio_row(f"writer + transaction, in-process, loop idle ({what})", found["process"],
                  "records/s", found["thread"], kind=TO_BEAT, what=in_thread),
        ratio_row("writer + transaction, in-process, loop busy", found["process_busy"],
                  "records/s", found["thread_busy"], kind=TO_BEAT,
                  what=in_thread + ", loop equally busy"),
        ratio_row("event-loop work while the pipeline runs in-thread", loop["thread"],
                  "steps/s", loop["alone"], kind=CEILING,
                  what="the same loop work with nothing else running, same rounds"),
        ratio_row("event-loop work while the pipeline runs in-process", loop["process"],
                  "steps/s", loop["alone"], kind=CEILING,
                  what="the same loop work with nothing else running, same rounds"),
    ]


def simulate_once(mode: str, sessions: int, turns: int) -> dict[str, Any]:
    command = [sys.executable, "-c", "from memory.cli import main; main()", "simulate",
               "--json", "--sessions", str(sessions), "--turns", str(turns),
               "--cpu-worker", mode]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if not done.stdout.strip():
        raise RuntimeError(f"simulate --cpu-worker {mode} failed: {done.stderr[-2000:]}")
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def bench_simulate(runs: int, sessions: int, turns: int) -> tuple[list[Row], dict[str, Any]]:
    figures: dict[str, list[float]] = {"process": [], "thread": []}
    verdicts: dict[str, list[str]] = {"process": [], "thread": []}
    for number in range(runs):
        for mode in (("thread", "process") if number % 2 == 0 else ("process", "thread")):
            document = simulate_once(mode, sessions, turns)
            figures[mode].append(float(document["turns_per_s"]))
            failed = sorted(name for name, verdict in document["invariants"].items()
                            if verdict != "PASS")
            verdicts[mode].append("PASS" if not failed else "FAIL: " + ", ".join(failed))
    process, thread = Summary.of(figures["process"]), Summary.of(figures["thread"])
    rows = [ratio_row(
        f"simulate --sessions {sessions} --turns {turns}: turns_per_s, --cpu-worker process",
        process, "turns/s", thread, kind=TO_BEAT,
        what=f"the same with --cpu-worker thread, alternating runs ({runs} each)")]
    for mode in ("process", "thread"):
        every = all(verdict == "PASS" for verdict in verdicts[mode])
        rows.append(Row(f"simulate invariants, --cpu-worker {mode}", Summary.single(0), "",
                        target="PASS", met=every,
                        text="PASS" if every else "; ".join(verdicts[mode])))
    return rows, {"simulate_turns_per_s": figures, "simulate_verdicts": verdicts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--records", type=int, default=2000, help="records per pipeline round")
    parser.add_argument("--loop-seconds", type=float, default=1.0,
                        help="seconds of loop work alone per round")
    parser.add_argument("--simulate-runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.records, args.simulate_runs, args.sessions, args.turns = 600, 1, 40, 20
    if args.rounds < MIN_ROUNDS:
        parser.error(f"--rounds must be at least {MIN_ROUNDS}")
    records = _records(args.records)
    worker = CpuWorker()
    try:
        with tempfile.TemporaryDirectory(prefix="scriptorium-bench-") as root:
            rows = anyio.run(bench_pipeline, root, records, worker, args.rounds,
                             args.loop_seconds)
        assert worker.fallbacks == 0 and worker.calls, "every in-process call ran in the worker"
    finally:
        worker.close()
    extra: dict[str, Any] = {}
    if args.simulate_runs:
        simulate_rows, extra = bench_simulate(args.simulate_runs, args.sessions, args.turns)
        rows += simulate_rows
    if args.json:
        print(json.dumps({"rows": [row.to_json() for row in rows], "args": vars(args),
                          "cpus": os.cpu_count(), **extra}))
    else:
        print(markdown_table(rows))


if __name__ == "__main__":
    main()
