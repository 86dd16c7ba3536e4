"""Run every benchmark of the project and rewrite ``bench/RESULTS.md``.

A figure means little without what it is set against, measured on the same
machine at the same moment (this one is shared, and its disks and load
change from run to run). So each benchmark measures, in the same rounds as
its figures, a *floor* (the cheapest correct way to do the same work) or,
named as such, a ceiling, a scaling baseline, the same run's CPU time or a
baseline to beat; and every row says whether its target is met. Timing goes
through one shared helper, ``bench/_harness.py`` (warm-up, at least five
rounds, median with min and max, one percentile function), and every table
is rendered by it. Figures from an emulated disk say "emulated".

Each benchmark runs in its own process with ``--json``; one that is missing
on this branch is listed as such, one that fails or times out is reported
with its exit status and the end of its stderr, and the others still run.
The ledger baselines (``memory/simulate/baselines/``) and ``scriptorium simulate``
are package code with their own JSON: this script turns it into the same
rows (their figures are one run each; the simulate ceiling is measured
here, in rounds, right before each simulate run). The open-loop row runs
the closed loop first, at the same size, to measure the capacity, then
``simulate --rate`` at half of it.

Run from the repository root::

    python bench/run.py              # every benchmark, rewrites bench/RESULTS.md
    python bench/run.py --quick      # smaller sizes, for a smoke run
    python bench/run.py --only store --only baselines --out /tmp/RESULTS.md
    python bench/run.py --only recall --keep /tmp/outcomes.json  # the rest from an earlier
                                                                  # run with the same --keep
    python bench/run.py --render --keep /tmp/outcomes.json       # RESULTS.md from it alone
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    CEILING,
    SCALING,
    TO_BEAT,
    Row,
    Summary,
    markdown_table,
    missed,
    ratio_row,
    rounds,
    value_row,
)
from _raw import RawDisk

ROOT = Path(__file__).resolve().parent.parent
BASELINES_CODE = """
import json, sys
from memory.simulate.baselines import render_baselines, run_baselines
sizes = tuple(int(s) for s in sys.argv[1].split(","))
report = run_baselines(seed=1, sessions=int(sys.argv[2]), turns=int(sys.argv[3]),
                       scaling_sizes=sizes, repeat=int(sys.argv[4]))
report["markdown"] = render_baselines(report)
print(json.dumps(report))
"""

@dataclass
class Bench:
    """One benchmark: how to run it and how to read its JSON into rows."""

    name: str
    script: str  # path under the repository root, shown to the reader
    command: list[str]
    quick: list[str]
    rows: Callable[[Any], list[Row]]
    timeout: float = 900.0
    notes: Callable[[Any], str] = field(default=lambda data: "")
    # simulate rows: run once per journal (``--journal J``), one after the other, side by side
    journals: tuple[str, ...] = ()


def _harness_rows(data: Any) -> list[Row]:
    """A benchmark of ``bench/``: its ``--json`` holds the rows, as ``bench/_harness.py`` made them."""
    return [Row.from_json(row) for row in data["rows"]]


_SCALING_PARTS = {
    "core_get_branch": ("`SessionCore.get_branch` on disk", False),
    "get_branch": ("get_branch (every node, as messages)", False),
    "records_filter": ("records filter over the whole branch", False),
    "marker_walk": ("marker walk (`unwritten_turns`) alone", True),
    "cursor": ("(a) cursor: owed computation", False),
    "external_set": ("(c) external id set: owed computation", False),
    "markers_full": ("(d) markers over the whole branch (the rule, unoptimised)", False),
    "markers_tail": ("(d) markers, tail walk (`owed_from_tip`)", True),
    "core_tail": ("(d) tail walk through `SessionCore` on disk (`owed_from_core`)", True),
}


def _baseline_rows(data: Any) -> list[Row]:
    """``memory/simulate/baselines/``: the owed-cost scaling (a scaling baseline) and the four ledgers."""
    scaling = data["owed_scaling"]
    small, large = str(min(scaling["sizes"])), str(max(scaling["sizes"]))
    bound = float(scaling.get("target_ratio", 1.5))
    rows: list[Row] = []
    for key, (label, targeted) in _SCALING_PARTS.items():
        if key not in scaling["ratios"]:
            continue
        rows.append(ratio_row(
            f"{label}, {int(large):,}-node session, {scaling['backlog_turns']}-turn backlog",
            Summary.single(scaling["rows"][large][f"{key}_ms"]), "ms",
            Summary.single(scaling["rows"][small][f"{key}_ms"]), kind=SCALING,
            what=(f"the same, {int(small):,}-node session (best of interleaved samples, "
                  "baselines timing)"),
            op="<=" if targeted else "", bound=bound))
    for name, ledger in data["ledgers"].items():
        counts = (ledger["omitted"], ledger["duplicated"], ledger["lost_keys"])
        text = " / ".join(str(count) for count in counts)
        if name == "markers":
            rows.append(Row(f"{name}: omitted / duplicated / lost keys", Summary.single(0), "",
                            target="0 / 0 / 0", met=counts == (0, 0, 0), text=text))
        else:  # a ledger the markers replace: its losses are the finding, not a target
            rows.append(Row(f"{name}: omitted / duplicated / lost keys (baseline ledger)",
                            Summary.single(0), "", text=text))
    return rows


CEILING_GROUP = 64  # turns per shared flush


CEILING_THREADS = 40  # anyio's default worker-thread limit, which simulate's runtime uses


def _format_ceiling(turns: int) -> Summary:
    """Turns/s if a turn cost only what the format must do: the ceiling of a simulate run.

    Per turn, two unsynced atomic installs (its node file and its session's
    ``meta.json``, which the reference agent reads) and, per
    :data:`CEILING_GROUP` turns across all sessions, one fdatasync'd log
    record shared by the group; no parsing, no actors. From
    :data:`CEILING_THREADS` threads, one session directory each, as the
    runtime spreads its sessions' file work over its worker threads (one
    thread is no ceiling: the runtime's appending phase beat it). Five rounds
    of ``turns`` turns after a warm-up round.
    """
    import tempfile
    import threading
    from concurrent.futures import ThreadPoolExecutor

    disk = RawDisk(0.0)
    node = b'{"id": "n", "role": "user", "content": "' + b"x" * 400 + b'", "metadata": {}}'
    with tempfile.TemporaryDirectory(dir=ROOT) as root, \
            ThreadPoolExecutor(CEILING_THREADS) as pool:
        sessions = [os.path.join(root, f"s{i}") for i in range(CEILING_THREADS)]
        for session in sessions:
            os.makedirs(os.path.join(session, "history"))
        log = os.open(os.path.join(root, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        flush = threading.Lock()
        counter = iter(range(10**12))  # next() on an iterator is atomic under the GIL

        def session_turns(session: str, count: int) -> None:
            for _ in range(count):
                turn = next(counter)
                disk.install(os.path.join(session, "history", f"n{turn}.json"), node,
                             synced=False)
                disk.install(os.path.join(session, "meta.json"), b'{"head_id": "n%d"}' % turn,
                             synced=False)
                if turn % CEILING_GROUP == CEILING_GROUP - 1:
                    with flush:
                        disk.log_append(log, node * CEILING_GROUP)

        def measure() -> float:
            each = max(1, turns // CEILING_THREADS)
            began = time.perf_counter()
            list(pool.map(session_turns, sessions, [each] * CEILING_THREADS))
            return each * CEILING_THREADS / (time.perf_counter() - began)

        try:
            return rounds(measure)
        finally:
            os.close(log)


def _simulate_rows(data: Any, target_run: bool) -> list[Row]:
    """``scriptorium simulate --json``: one run's figures, against the format ceiling."""
    latency = data.get("latency_ms", {})
    appending = data["turns"] / data["workload_seconds"] if data.get("workload_seconds") else 0
    found = data.get("format_ceiling")  # put there by main(), measured before this run
    ceiling = None if found is None else Summary.from_json(found)
    what = (f"2 unsynced installs per turn + one fdatasync per {CEILING_GROUP} turns, "
            f"{CEILING_THREADS} threads, measured before this run")

    def rate(figure: str, value: float, bound: float) -> Row:
        if ceiling is None:
            return value_row(figure, Summary.single(value), "turns/s",
                             op=">=" if target_run else "", bound=bound)
        return value_row(figure, Summary.single(value), "turns/s",
                         op=">=" if target_run else "", bound=bound, against=ceiling,
                         kind=CEILING, what=what)

    # the turn-rate targets are the target run's (1,000 sessions x 100 turns), not a smoke run's
    target_run = target_run and data["sessions"] >= 1000
    rss = data["peak_rss_mb"]
    rows: list[Row] = [
        Row(f"turns ({data['sessions']} sessions, {data.get('branches', 0):,} branches)",
            Summary.single(data["turns"]), ""),
        rate("end to end, to every branch written", data["turns_per_s"], 2_000),
        rate("appending phase alone", appending, 3_000),
        Row("write cycle p50 / p99 (closed loop, queueing included)", Summary.single(0), "",
            text=(f"{latency.get('write_cycle_p50', 0):,.0f} / "
                  f"{latency.get('write_cycle_p99', 0):,.0f} ms")),
        Row("marker merge p50 / p99", Summary.single(0), "",
            text=(f"{latency.get('marker_merge_p50', 0):,.1f} / "
                  f"{latency.get('marker_merge_p99', 0):,.1f} ms")),
        Row("supervisor restarts / quarantined / runtime crashes survived", Summary.single(0),
            "", text=(f"{data['restarts']} / {data['quarantined']} / "
                      f"{data.get('runtime_incarnations', 1) - 1}")),
        value_row("peak RSS", Summary.single(rss), "MB", op="<=", bound=1024),
        Row("faults injected", Summary.single(0), "",
            text=", ".join(f"{k} {v}" for k, v in data.get("injected", {}).items()) or "none"),
    ]
    for name, verdict in data["invariants"].items():
        rows.append(Row(f"invariant: {name}", Summary.single(0), "", target="PASS",
                        met=verdict == "PASS", text=verdict))
    return rows


def _simulate(python: str, name: str, args: list[str], timeout: float,
              target_run: bool = False, journals: tuple[str, ...] = ()) -> Bench:
    rows: Callable[[Any], list[Row]] = lambda data: _simulate_rows(data, target_run)
    if journals:
        rows = _journal_rows(rows, _simulate_compared)
    return Bench(name, "memory/simulate/_simulate.py",
                 [python, "-c", "from memory.cli import main; main()", "simulate", "--json",
                  *args], ["--sessions", "20", "--turns", "20"], rows, timeout=timeout,
                 journals=journals)


# RuntimeConfig.journal: each session's own journal (the default), then issue 15's runtime log
JOURNALS = ("session", "shared")
# --journal shared refuses outside-appends (the session's lock is held while it is active)
SHARED_FAULTS = ",".join(fault for fault in (
    "writer-raise", "writer-hang", "reject", "empty", "slow-disk", "crash-before-mark",
    "actor-crash", "agent-writes"))


def by_journal(data: Any) -> dict[str, Any]:
    """A simulate outcome's runs by journal; an outcome from before the pairing is the session one's."""
    if isinstance(data, dict) and "journals" in data:
        return dict(data["journals"])
    return {"session": data}


def compared(figure: str, value: float, against: float, unit: str, *, lower: bool) -> Row:
    """``--journal shared``'s figure set against ``--journal session``'s, the run right before.

    Each side is one run, so the ratio is of two single figures (not paired
    rounds); ``lower``: smaller is better (a latency), read as "x faster".
    """
    return ratio_row(f"shared / session: {figure}", Summary.single(value), unit,
                     Summary.single(against), kind=TO_BEAT,
                     what="--journal session (per-session journals), one run right before",
                     faster=lower, paired=False)


def _journal_rows(rows: Callable[[Any], list[Row]],
                  compare: Callable[[dict[str, Any], dict[str, Any]], list[Row]]
                  ) -> Callable[[Any], list[Row]]:
    """Each journal's rows, named by it, then the shared log's figures set against the session's."""
    def paired(data: Any) -> list[Row]:
        runs = by_journal(data)
        found: list[Row] = []
        for journal, run in runs.items():
            found += [dataclasses.replace(row, figure=f"--journal {journal}: {row.figure}")
                      for row in rows(run)]
        if "session" in runs and "shared" in runs:
            found += compare(runs["shared"], runs["session"])
        return found
    return paired


def _appending(data: Any) -> float:
    return float(data["turns"] / data["workload_seconds"]) if data.get("workload_seconds") else 0.0


def _simulate_compared(shared: dict[str, Any], session: dict[str, Any]) -> list[Row]:
    return [
        compared("end to end", shared["turns_per_s"], session["turns_per_s"], "turns/s",
                 lower=False),
        compared("appending phase", _appending(shared), _appending(session), "turns/s",
                 lower=False),
        compared("peak RSS", shared["peak_rss_mb"], session["peak_rss_mb"], "MB", lower=False),
    ]


def _recall_notes(data: Any) -> str:
    """What the recall figures were measured on, and how tokens were counted."""
    memory = data.get("memory", {})
    ingested = ", ".join(f"{name} {part['turns']} turns ({part['boundary']})"
                         for name, part in memory.get("ingest", {}).items())
    return (f"LoCoMo development split ({', '.join(data['conversations'])}: "
            f"{data['turns']:,} turns, {data['questions']} non-adversarial questions with "
            f"evidence), one state directory, each conversation imported as one session "
            f"through `import jsonl` and written by the extractive writer at its boundary "
            f"({ingested}). Baseline tokens: {data['baseline']['counter']}; memory's: "
            "`rt.context`'s `.tokens` (the ledger's counter).")
def _load_notes(data: Any) -> str:
    """``bench/load.py``'s loads, and its chart linked (a PNG beside RESULTS.md)."""
    chart = data.get("chart")
    loads = ", ".join(f"{load}%" for load in data.get("loads", ()))
    text = (f"Offered loads {loads} of the closed-loop end-to-end capacity, Poisson "
            f"(`simulate --rate`), {data.get('sessions')} sessions x {data.get('turns')} turns, "
            f"seed {data.get('seed')}, {data.get('backend')}.")
    if "capacity" in data:  # the closed loop per --processes value, beside the floor
        values = ", ".join(str(value) for value in data.get("processes", ()))
        text += (f" Closed loop: {data.get('repeat')} runs per `--processes` value ({values}), "
                 f"each beside a floor round of its own, on one scratch disk "
                 f"(`{data.get('scratch')}`); the capacity is the best median of them "
                 f"(`--processes {data['capacity']['processes']}`), and the open loop runs "
                 "with that value.")
    if not chart:
        return text + " No chart was written."
    return f"{text} Latency against load (`{chart}`):\n\n![latency against load]({Path(chart).name})"


OPEN_LOOP = "simulate, open loop at half the closed-loop capacity"


def _open_loop_rows(data: Any) -> list[Row]:
    """``simulate --rate`` at half the capacity the closed loop measured right before it."""
    latency = data.get("latency_ms", {})
    loop = data["open_loop"]
    closed = data["closed_loop"]
    size = f"{data['sessions']} sessions x {closed['turns_per_session']} turns"
    cycles = data.get("latency_samples", {}).get("due_to_durable_load", 0)
    figure = f"write cycle p99, due to markers durable ({cycles:,} batches due under load)"
    if cycles:
        cycle_p99 = value_row(figure, Summary.single(latency["due_to_durable_load_p99"]), "ms",
                              op="<=", bound=2_000)
    else:  # no figure is no pass: the run was too small for a batch to come due under load
        cycle_p99 = Row(figure, Summary.single(0), "ms", target="<= 2,000 ms", met=False,
                        text="no batch came due under load: run a larger size")
    rows: list[Row] = [
        Row(f"capacity: closed-loop appending phase, {size}, measured right before",
            Summary.single(closed["capacity"]), "turns/s"),
        Row("offered (Poisson, half the capacity) / issued", Summary.single(loop["rate"]),
            "turns/s", text=f"{loop['rate']:,.0f} / {loop['issued_per_s']:,.0f} turns/s"),
        Row("late arrivals (their session still busy) / scheduled", Summary.single(loop["late"]),
            "", text=(f"{loop['late']:,} / {loop['scheduled']:,} "
                      f"(lateness p99 {loop['lateness_p99_ms']:,.1f} ms)")),
        Row("write cycle p50, due to markers durable (batches due under load)",
            Summary.single(latency.get("due_to_durable_load_p50", 0)), "ms"),
        cycle_p99,
        Row("append ack p50", Summary.single(latency.get("append_ack_p50", 0)), "ms"),
        value_row("append ack p99", Summary.single(latency.get("append_ack_p99", 0)), "ms",
                  op="<=", bound=5),
    ]
    for name, verdict in data["invariants"].items():
        rows.append(Row(f"invariant: {name}", Summary.single(0), "", target="PASS",
                        met=verdict == "PASS", text=verdict))
    return rows


def _open_loop_compared(shared: dict[str, Any], session: dict[str, Any]) -> list[Row]:
    def latency(data: dict[str, Any], key: str) -> float:
        return float(data.get("latency_ms", {}).get(key, 0.0))

    return [
        compared("capacity (closed-loop appending phase)", shared["closed_loop"]["capacity"],
                 session["closed_loop"]["capacity"], "turns/s", lower=False),
        compared("write cycle p99, due to markers durable",
                 latency(shared, "due_to_durable_load_p99"),
                 latency(session, "due_to_durable_load_p99"), "ms", lower=True),
        compared("append ack p99", latency(shared, "append_ack_p99"),
                 latency(session, "append_ack_p99"), "ms", lower=True),
    ]


def _open_loop(python: str, sessions: int, turns: int, timeout: float,
               journals: tuple[str, ...] = ()) -> Bench:
    """The open-loop row; :func:`_run_open_loop` adds ``--rate`` once the capacity is known."""
    rows = _journal_rows(_open_loop_rows, _open_loop_compared) if journals else _open_loop_rows
    return Bench(OPEN_LOOP, "memory/simulate/_open_loop.py",
                 [python, "-c", "from memory.cli import main; main()", "simulate", "--json",
                  "--sessions", str(sessions), "--turns", str(turns), "--seed", "1"],
                 ["--sessions", "20", "--turns", "20"], rows, timeout=timeout,
                 journals=journals)


def _last_value(command: list[str], flag: str) -> str:
    """The value the command line gives ``flag`` (its last occurrence wins, as in click)."""
    return next(command[i + 1] for i in range(len(command) - 2, -1, -1) if command[i] == flag)


def _run_open_loop(bench: Bench, quick: bool, timeout: float) -> Outcome:
    """The closed loop at the same size (its appending phase is the capacity), then half of it."""
    closed = _run(dataclasses.replace(bench, rows=lambda data: []), quick, timeout)
    if closed.status != "ok":
        closed.detail = f"the closed-loop run that measures the capacity: {closed.detail}"
        return dataclasses.replace(closed, bench=bench)
    data = closed.data
    capacity = data["turns"] / data["workload_seconds"]
    half = dataclasses.replace(bench, command=[*bench.command, "--rate", f"{capacity / 2:.1f}"])
    outcome = _run(dataclasses.replace(half, rows=lambda data: []), quick, timeout)
    outcome.bench = bench
    outcome.seconds += closed.seconds
    if outcome.status == "ok":
        outcome.data["closed_loop"] = {
            "capacity": round(capacity, 1), "turns_per_s": data["turns_per_s"],
            "workload_seconds": data["workload_seconds"],
            "turns_per_session": _last_value(
                [*bench.command, *(bench.quick if quick else [])], "--turns"),
            "invariants": data["invariants"]}
        try:
            bench.rows(outcome.data)
        except (ValueError, KeyError, TypeError) as exc:
            return Outcome(bench, "failed", outcome.seconds,
                           detail=f"its --json output could not be read ({exc!r})")
    return outcome


def _run_simulate(bench: Bench, quick: bool, timeout: float) -> Outcome:
    """One simulate benchmark; a closed-loop run gets the format ceiling measured right before it."""
    ceiling = None
    if bench.name != OPEN_LOOP:
        ceiling = _format_ceiling(1_000 if quick else 4_000)
        outcome = _run(bench, quick, timeout)
    else:
        outcome = _run_open_loop(bench, quick, timeout)
    if ceiling is not None and isinstance(outcome.data, dict):
        outcome.data["format_ceiling"] = ceiling.to_json()
    return outcome


def _run_journals(bench: Bench, quick: bool, timeout: float) -> Outcome:
    """The benchmark once per journal, one after the other; their data side by side.

    The first journal that fails fails the row (with its name), as one run would.
    """
    runs: dict[str, Any] = {}
    seconds = 0.0
    for journal in bench.journals:
        single = dataclasses.replace(bench, command=[*bench.command, "--journal", journal],
                                     rows=lambda data: [], journals=())
        print(f"  --journal {journal} ...", file=sys.stderr, flush=True)
        outcome = _run_simulate(single, quick, timeout)
        seconds += outcome.seconds
        if outcome.status != "ok":
            return Outcome(bench, outcome.status, seconds,
                           detail=f"--journal {journal}: {outcome.detail}")
        runs[journal] = outcome.data
    data = {"journals": runs}
    try:
        bench.rows(data)
    except (ValueError, KeyError, TypeError) as exc:
        return Outcome(bench, "failed", seconds,
                       detail=f"its --json output could not be read ({exc!r})")
    return Outcome(bench, "ok", seconds, data)


EMULATED = ("EMULATED disk: a 2 ms sleep after every fsync and fdatasync, on the store's "
            "side and the floors' alike; not a measurement of a real disk.")


def _benches(python: str) -> list[Bench]:
    def script(name: str) -> list[str]:
        return [python, f"bench/{name}.py", "--json"]

    return [
        Bench("actors", "bench/actor_kernel.py", script("actor_kernel"), ["--quick"],
              _harness_rows),
        Bench("store", "bench/session_store.py", script("session_store"), ["--repeat", "5"],
              _harness_rows),
        # Issue 15's premise, measured: what one group-committed log buys over per-session flushes.
        Bench("shared_flush", "bench/shared_flush.py", script("shared_flush"), ["--repeat", "5"],
              _harness_rows),
        # What the journal saves where a flush costs what commodity SSDs charge: emulated.
        Bench("store, fsync +2 ms (emulated)", "bench/session_store.py",
              [*script("session_store"), "--fsync-latency-ms", "2"], ["--repeat", "5"],
              _harness_rows, notes=lambda data: EMULATED),
        Bench("workspace", "bench/workspace.py", script("workspace"),
              ["--files", "200", "--commits", "5", "--records", "600"], _harness_rows),
        Bench("workspace_archive", "bench/workspace_archive.py", script("workspace_archive"),
              ["--repeat", "5", "--sizes", "0,100,1000"], _harness_rows),
        # Issue 13: LoCoMo recall next to BM25 on raw turns, and the index at scale.
        Bench("recall", "bench/recall.py", script("recall"), ["--quick"], _harness_rows,
              notes=_recall_notes, timeout=1800.0),
        Bench("writer", "bench/writer.py", script("writer"), ["--quick"], _harness_rows),
        # Issue 23: LoCoMo topics before and after a consolidation pass.
        Bench("consolidate", "bench/consolidate.py", script("consolidate"), ["--quick"],
              _harness_rows, timeout=1800.0),
        # Issue 15: the writer's and the commit's CPU work in-thread against in-process.
        Bench("writer CPU off the GIL", "bench/writer_cpu.py", script("writer_cpu"),
              ["--quick"], _harness_rows, timeout=1800.0),
        Bench("baselines", "memory/simulate/baselines/__init__.py",
              [python, "-c", BASELINES_CODE, "1000,10000,100000", "20", "60", "3"],
              [], _baseline_rows, notes=lambda data: data.get("markdown", "")),
        _simulate(python, "simulate, every fault on (trio)",
                  ["--faults", "all", "--backend", "trio", "--seed", "1"], 900.0),
        _simulate(python, "simulate, every fault on (asyncio)",
                  ["--faults", "all", "--backend", "asyncio", "--seed", "1"], 900.0),
        # Issue 15's runtime log under every fault it admits, on both backends.
        _simulate(python, "simulate, every fault but outside-appends, --journal shared (trio)",
                  ["--faults", SHARED_FAULTS, "--backend", "trio", "--seed", "1",
                   "--journal", "shared"], 900.0),
        _simulate(python, "simulate, every fault but outside-appends, --journal shared (asyncio)",
                  ["--faults", SHARED_FAULTS, "--backend", "asyncio", "--seed", "1",
                   "--journal", "shared"], 900.0),
        # Issue 15's target run: 1,000 concurrent sessions, 100,000 turns, extractive writer;
        # per-session journals and the runtime log side by side.
        _simulate(python, "simulate, target size", ["--sessions", "1000", "--turns", "100"],
                  2400.0, target_run=True, journals=JOURNALS),
        # Issue 15's latency targets: the target size, open loop at half its capacity.
        _open_loop(python, 1000, 100, 2400.0, journals=JOURNALS),
        # Issue 20: the closed-loop ratio to the format floor and the latency-load curve.
        Bench("load", "bench/load.py", script("load"), ["--sessions", "20", "--turns", "10"],
              _harness_rows, timeout=3600.0, notes=_load_notes),
    ]


@dataclass
class Outcome:
    bench: Bench
    status: str  # "ok" | "missing" | "failed"
    seconds: float = 0.0
    data: Any = None
    detail: str = ""
    commit: str = ""  # the commit measured (``git describe --always --dirty``)


def _run(bench: Bench, quick: bool, timeout: float) -> Outcome:
    if not (ROOT / bench.script).exists():
        return Outcome(bench, "missing", detail=f"{bench.script} is not on this branch")
    command = list(bench.command)
    if quick:
        if bench.name == "baselines":
            command[3:7] = ["1000,10000", "5", "30", "2"]
        else:
            command += bench.quick
    began = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(bench, "failed", time.perf_counter() - began,
                       detail=f"timed out after {timeout:.0f} s")
    seconds = time.perf_counter() - began
    if done.returncode != 0 and not done.stdout.strip():
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        return Outcome(bench, "failed", seconds, detail=f"exit status {done.returncode}\n{tail}")
    # A non-zero exit with a JSON document is a verdict (simulate's oracle found a
    # FAIL), not a crash: keep the figures, which show which check failed.
    try:
        data = json.loads(done.stdout)
        bench.rows(data)  # an unreadable shape is a failure too, reported here
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return Outcome(bench, "failed", seconds,
                       detail=f"its --json output could not be read ({exc!r})")
    return Outcome(bench, "ok", seconds, data)


def _commit() -> str:
    """The commit the benchmarks run on, "-dirty" if the worktree has changes; "" outside git."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _uname() -> str:
    try:
        return subprocess.run(["uname", "-a"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return " ".join(part for part in platform.uname() if part)


def _machine() -> list[str]:
    return [
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
        f"- machine (`uname -a`): `{_uname()}`",
        f"- CPUs: {os.cpu_count()} (shared with other work while measuring)",
        f"- Python: {platform.python_version()} ({platform.python_implementation()})",
    ]


def render(outcomes: list[Outcome], quick: bool) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Generated by `python bench/run.py`" + (" --quick" if quick else "")
        + "; do not edit by hand. Each figure is set against what its row names: a floor "
        "(the cheapest correct way to do the same work, measured in the same rounds) or, "
        "named as such, a ceiling, a scaling baseline, the same run's CPU time or a baseline "
        "to beat. Measured figures are the median (min-max) of at least 5 rounds after a "
        "warm-up (`bench/_harness.py`); simulate and baselines figures are one run each. "
        "The ratio is figure / what it is set against (\"x faster\": the other way round), "
        "the median of the per-round ratios where both were measured in the same rounds; "
        "`met` says whether the row's target holds.",
        "",
        *_machine(),
    ]
    failing = [(outcome.bench.name, row) for outcome in outcomes if outcome.status == "ok"
               for row in missed(outcome.bench.rows(outcome.data))]
    lines += ["", "## Targets missed in this run", ""]
    if failing:
        lines += [f"- {name}: {row.figure} (target {row.target})" for name, row in failing]
    else:
        lines.append("None.")
    broken = [outcome.bench.name for outcome in outcomes if outcome.status != "ok"]
    if broken:
        lines.append(f"\nNot measured (missing or failed): {', '.join(broken)}.")
    for outcome in outcomes:
        bench = outcome.bench
        lines += ["", f"## {bench.name} (`{bench.script}`)", ""]
        if outcome.status == "missing":
            lines.append(f"Not run: {outcome.detail}.")
            continue
        if outcome.status == "failed":
            lines += [f"**FAILED** after {outcome.seconds:.1f} s: ", "", "```",
                      outcome.detail, "```"]
            continue
        on = f" on commit {outcome.commit}" if outcome.commit else ""
        lines += [f"Ran in {outcome.seconds:.1f} s{on}.", ""]
        notes = bench.notes(outcome.data)
        if notes and bench.name.endswith("(emulated)"):
            lines += [notes, ""]
        lines.append(markdown_table(bench.rows(outcome.data)))
        if notes and not bench.name.endswith("(emulated)"):
            lines += ["", notes]
        shown = {k: v for k, v in outcome.data.items() if k not in ("markdown", "rows")} \
            if isinstance(outcome.data, dict) else outcome.data
        lines += ["", "<details><summary>absolute figures (JSON)</summary>", "", "```json",
                  json.dumps(shown, indent=1, sort_keys=True), "```", "", "</details>"]
    return "\n".join(lines) + "\n"


def _load_kept(path: str | None, every: list[Bench], running: set[str]) -> list[Outcome]:
    """The outcomes a ``--keep`` file holds for benchmarks not run this time."""
    if path is None or not Path(path).exists():
        return []
    by_name = {bench.name: bench for bench in every}
    return [Outcome(by_name[item["name"]], item["status"], item["seconds"], item["data"],
                    item["detail"], item.get("commit", ""))
            for item in json.loads(Path(path).read_text(encoding="utf-8"))
            if item["name"] in by_name and item["name"] not in running]


def _save_kept(path: str, outcomes: list[Outcome]) -> None:
    """Every outcome to the ``--keep`` file, replaced whole (a temp file renamed over it)."""
    temp = f"{path}.new"
    Path(temp).write_text(json.dumps(
        [{"name": o.bench.name, "status": o.status, "seconds": o.seconds, "data": o.data,
          "detail": o.detail, "commit": o.commit} for o in outcomes]), encoding="utf-8")
    os.replace(temp, path)


def _in_bench_order(every: list[Bench], outcomes: list[Outcome]) -> list[Outcome]:
    order = {bench.name: i for i, bench in enumerate(every)}
    return sorted(outcomes, key=lambda outcome: order[outcome.bench.name])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--only", action="append", default=[], help="run only these (repeat)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    parser.add_argument("--keep", default=None, metavar="JSON",
                        help="outcomes file: the benchmarks not run now are taken from it, and "
                             "every outcome is saved to it (one RESULTS.md from several runs)")
    parser.add_argument("--render", action="store_true",
                        help="run nothing: write RESULTS.md from the --keep file alone")
    args = parser.parse_args()
    every = _benches(sys.executable)
    unknown = sorted(set(args.only) - {b.name for b in every})
    if unknown:  # a typo would otherwise rewrite RESULTS.md with nothing run
        parser.error(f"no benchmark named {', '.join(map(repr, unknown))}; the names are: "
                     + ", ".join(repr(b.name) for b in every))
    if args.render and args.keep is None:
        parser.error("--render shows the outcomes of a --keep file: name it with --keep")
    benches = [] if args.render else [b for b in every if not args.only or b.name in args.only]
    kept = _load_kept(args.keep, every, {b.name for b in benches})
    outcomes = []
    commit = _commit()  # at the start: the worktree may change while a long run goes on
    for bench in benches:
        print(f"running {bench.name} ...", file=sys.stderr, flush=True)
        timeout = max(args.timeout, bench.timeout)
        if bench.journals:
            outcome = _run_journals(bench, args.quick, timeout)
        elif bench.name.startswith("simulate"):
            outcome = _run_simulate(bench, args.quick, timeout)
        else:
            outcome = _run(bench, args.quick, timeout)
        outcome.commit = commit
        print(f"  {outcome.status} ({outcome.seconds:.1f} s) {outcome.detail.splitlines()[0]}"
              if outcome.detail else f"  {outcome.status} ({outcome.seconds:.1f} s)",
              file=sys.stderr, flush=True)
        outcomes.append(outcome)
        if args.keep is not None:  # after each: a run stopped part-way keeps what finished
            _save_kept(args.keep, _in_bench_order(every, [*kept, *outcomes]))
    outcomes = _in_bench_order(every, [*kept, *outcomes])
    if args.keep is not None:
        _save_kept(args.keep, outcomes)
    Path(args.out).write_text(render(outcomes, args.quick), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
