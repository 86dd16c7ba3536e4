"""Run every benchmark of the project and rewrite ``bench/RESULTS.md``.

A figure means little without the floor it is measured against on the same
machine at the same moment (this one is shared, and its disks and load
change from run to run), so each benchmark measures its own raw floor (bare
file operations, the same computation on a small session...) and this script
reports, per benchmark, a table of figure, floor, ratio and target, plus the
absolute figures, the machine (``uname -a``, CPU count, Python) and the date.

Each benchmark runs in its own process with ``--json``; one that is missing
on this branch is listed as such, one that fails or times out is reported
with its exit status and the end of its stderr, and the others still run.
The ledger baselines (``memory._baselines``: the owed-turn computation on
1k/10k/100k-node sessions, and the four ledgers side by side) run the same
way.

Run from the repository root::

    python bench/run.py              # every benchmark, rewrites bench/RESULTS.md
    python bench/run.py --quick      # smaller sizes, for a smoke run
    python bench/run.py --only store --only baselines --out /tmp/RESULTS.md
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
BASELINES_CODE = """
import json, sys
from memory._baselines import render_baselines, run_baselines
sizes = tuple(int(s) for s in sys.argv[1].split(","))
report = run_baselines(seed=1, sessions=int(sys.argv[2]), turns=int(sys.argv[3]),
                       scaling_sizes=sizes, repeat=int(sys.argv[4]))
report["markdown"] = render_baselines(report)
print(json.dumps(report))
"""

Row = tuple[str, str, str, str, str]  # figure, measured, floor, ratio, target


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


def _ms(value: float) -> str:
    return f"{value:.3f} ms" if value < 10 else f"{value:,.1f} ms"


def _store_rows(data: Any) -> list[Row]:
    cold, merge, append = data["cold_load"], data["merge_64"], data["append"]
    return [
        (f"cold load, {cold['nodes']} nodes, {cold['bytes'] / 2**20:.1f} MiB",
         _ms(cold["cold_ms"]), f"{_ms(cold['raw_ms'])} (read + orjson parse)",
         f"{cold['ratio']:.2f}x", "<= 1.3x"),
        ("marker merge of a 64-node batch (to the ack)", _ms(merge["journal_ms"]),
         f"{_ms(merge['independent_ms'])} (64 independent read + merge + fsynced rewrites)",
         f"{merge['speedup']:.1f}x faster", ">= 10x faster"),
        ("same batch, bytes precomputed", _ms(merge["journal_ms"]),
         f"{_ms(merge['rewrites_ms'])} (64 fsynced atomic writes only)",
         f"{merge['speedup_vs_rewrites']:.1f}x faster", ""),
        ("journal retirement (off the critical path)", _ms(merge["retire_ms"]), "", "", ""),
        ("append (node file + meta.json)", _ms(append["append_ms"]),
         f"{_ms(append['bare_write_ms'])} (one atomic write)", f"{append['ratio']:.2f}x", ""),
    ]


def _archive_rows(data: Any) -> list[Row]:
    rows: list[Row] = []
    for row in data["archive_append"]:
        rows.append((
            (f"archive append of {row['batch']} frames to {row['existing_frames']:,} "
            f"({row['file_bytes'] / 1024:,.0f} KiB)"),
            _ms(row["append_ms"]), f"{_ms(row['raw_ms'])} (read + durable replace)",
            f"{row['ratio']:.2f}x", "uncached scan",
        ))
        rows.append((
            "the same with the cached scan (what the workspace actor runs)",
            _ms(row["cached_ms"]), f"{_ms(row['raw_ms'])} (read + durable replace)",
            f"{row['cached_ratio']:.2f}x", "flat as the archive grows",
        ))
    walk = data["ledger_walk"]
    rows.append((f"ledger walk over {walk['messages']:,} messages", _ms(walk["walk_ms"]), "",
                 "", f"{walk['records_per_s']:,.0f} records/s"))
    return rows


def _actor_rows(data: Any) -> list[Row]:
    """``bench/actor_kernel.py``: per backend, rows of ``{metric, value, floor, ratio, target, unit}``."""
    rows: list[Row] = []
    for backend, metrics in data.items() if isinstance(data, dict) else ():
        for m in metrics if isinstance(metrics, list) else ():
            unit = m.get("unit", "")
            floor = m.get("floor")
            rows.append((
                f"{backend}: {m.get('metric', '')}",
                f"{m.get('value', 0):,.4g} {unit}",
                "" if floor is None else f"{floor:,.4g} {unit}",
                "" if m.get("ratio") is None else f"{m['ratio']:.2f}x",
                f"{m.get('target', '')}{'' if m.get('ok', True) else ' (missed)'}",
            ))
    return rows


def _generic_rows(data: Any) -> list[Row]:
    """``{"rows": [{measure, value, raw, ratio[, target]}]}``, else every number, flattened."""
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        return [
            (str(r.get("measure", "")), str(r.get("value", "")), str(r.get("raw", "")),
             str(r.get("ratio", "")), str(r.get("target", "")))
            for r in data["rows"] if isinstance(r, dict)
        ]
    rows: list[Row] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for number, item in enumerate(value):
                walk(item, f"{path}[{number}]")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append((path, f"{value:,.4g}", "", "", ""))

    walk(data, "")
    return rows


_SCALING_PARTS = {
    "core_get_branch": ("`SessionCore.get_branch` on disk", ""),
    "get_branch": ("get_branch (every node, as messages)", ""),
    "records_filter": ("records filter over the whole branch", ""),
    "marker_walk": ("marker walk (`unwritten_turns`) alone", "<= 1.5x"),
    "cursor": ("(a) cursor: owed computation", ""),
    "external_set": ("(c) external id set: owed computation", ""),
    "markers_full": ("(d) markers over the whole branch (the rule, unoptimised)", ""),
    "markers_tail": ("(d) markers, tail walk (`owed_from_tip`)", "<= 1.5x"),
    "core_tail": ("(d) tail walk through `SessionCore` on disk (`owed_from_core`)", "<= 1.5x"),
}


def _baseline_rows(data: Any) -> list[Row]:
    scaling = data["owed_scaling"]
    small, large = str(min(scaling["sizes"])), str(max(scaling["sizes"]))
    rows: list[Row] = []
    for key, (label, target) in _SCALING_PARTS.items():
        if key not in scaling["ratios"]:
            continue
        rows.append((
            f"{label}, {int(large):,}-node session, {scaling['backlog_turns']}-turn backlog",
            _ms(scaling["rows"][large][f"{key}_ms"]),
            f"{_ms(scaling['rows'][small][f'{key}_ms'])} (same, {int(small):,}-node session)",
            f"{scaling['ratios'][key]:.2f}x", target,
        ))
    for name, ledger in data["ledgers"].items():
        rows.append((f"{name}: omitted / duplicated / lost keys",
                     f"{ledger['omitted']} / {ledger['duplicated']} / {ledger['lost_keys']}",
                     "", "", "0 / 0 / 0 for markers"))
    return rows


# The raw floor of the simulate figures, measured in the same run by ``_disk_floor``.
_FLOOR: dict[str, float] = {}


def _disk_floor(seconds: float = 2.0, threads: int = 40) -> float:
    """Durable atomic writes per second (temp, fsync, rename, dir fsync) from 40 threads.

    Every appended turn costs at least one such write, so a turn rate can be
    read against it.
    """
    import os
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    with tempfile.TemporaryDirectory(dir=ROOT) as root:
        dirs = [os.path.join(root, f"s{i}") for i in range(threads)]
        for directory in dirs:
            os.mkdir(directory)
        deadline = time.perf_counter() + seconds

        def writer(directory: str) -> int:
            done = 0
            while time.perf_counter() < deadline:
                temp = os.path.join(directory, f".{done}.tmp")
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, b"x" * 600)
                os.fsync(fd)
                os.close(fd)
                os.replace(temp, os.path.join(directory, f"{done}.json"))
                dfd = os.open(directory, os.O_RDONLY)
                os.fsync(dfd)
                os.close(dfd)
                done += 1
            return done

        began = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            total = sum(pool.map(writer, dirs))
        return total / (time.perf_counter() - began)


def _simulate_rows(data: Any) -> list[Row]:
    """``scriptorium simulate --json``: the issue 6 figures and the oracle's verdicts."""
    latency = data.get("latency_ms", {})
    appending = data["turns"] / data["workload_seconds"] if data.get("workload_seconds") else 0
    floor = _FLOOR.get("atomic_writes_per_s", 0.0)
    raw = f"{floor:,.0f} atomic writes/s (40 threads)" if floor else ""

    def ratio(rate: float) -> str:
        return f"{rate / floor:.3f}" if floor else ""

    rows: list[Row] = [
        (f"turns ({data['sessions']} sessions, {data.get('branches', 0):,} branches)",
         f"{data['turns']:,}", "", "", ""),
        ("end to end, to every branch written", f"{data['turns_per_s']:,.1f} turns/s", raw,
         ratio(data["turns_per_s"]), ">= 3,000 turns/s"),
        ("appending phase alone", f"{appending:,.1f} turns/s", raw, ratio(appending), ""),
        ("write cycle p50 / p99 (queueing included)",
         f"{latency.get('write_cycle_p50', 0):,.0f} / {latency.get('write_cycle_p99', 0):,.0f} ms",
         "", "", ""),
        ("marker merge p50 / p99",
         f"{latency.get('marker_merge_p50', 0):,.1f} / {latency.get('marker_merge_p99', 0):,.1f} ms",
         "", "", ""),
        ("supervisor restarts / quarantined / runtime crashes survived",
         f"{data['restarts']} / {data['quarantined']} / {data.get('runtime_incarnations', 1) - 1}",
         "", "", ""),
        ("peak RSS", f"{data['peak_rss_mb']:,.0f} MB", "", "", "<= 1 GB"),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in data.get("injected", {}).items())
         or "none", "", "", ""),
    ]
    for name, verdict in data["invariants"].items():
        rows.append((f"invariant: {name}", verdict, "", "", "PASS"))
    return rows


def _simulate(python: str, name: str, args: list[str], timeout: float) -> Bench:
    return Bench(name, "memory/_simulate.py",
                 [python, "-c", "from memory._cli import main; main()", "simulate", "--json",
                  *args], ["--sessions", "20", "--turns", "20"], _simulate_rows, timeout=timeout)


def _benches(python: str) -> list[Bench]:
    def script(name: str) -> list[str]:
        return [python, f"bench/{name}.py", "--json"]

    return [
        Bench("actors", "bench/actor_kernel.py", script("actor_kernel"), [], _actor_rows),
        Bench("store", "bench/session_store.py", script("session_store"), ["--repeat", "3"],
              _store_rows),
        # The same on a disk whose flush costs what commodity SSDs charge (both sides alike).
        Bench("store, fsync +2 ms", "bench/session_store.py",
              [*script("session_store"), "--fsync-latency-ms", "2"], ["--repeat", "3"],
              _store_rows),
        Bench("workspace", "bench/workspace.py", script("workspace"),
              ["--files", "200", "--commits", "5", "--records", "1000"], _generic_rows),
        Bench("workspace_archive", "bench/workspace_archive.py", script("workspace_archive"),
              ["--repeat", "5"], _archive_rows),
        Bench("baselines", "memory/_baselines.py",
              [python, "-c", BASELINES_CODE, "1000,10000,100000", "20", "60", "3"],
              [], _baseline_rows, notes=lambda data: data.get("markdown", "")),
        _simulate(python, "simulate, every fault on (trio)",
                  ["--faults", "all", "--backend", "trio", "--seed", "1"], 900.0),
        _simulate(python, "simulate, every fault on (asyncio)",
                  ["--faults", "all", "--backend", "asyncio", "--seed", "1"], 900.0),
        # Issue 6's target: 1,000 concurrent sessions, 100,000 turns, extractive writer.
        _simulate(python, "simulate, target size", ["--sessions", "1000", "--turns", "100"],
                  2400.0),
    ]


@dataclass
class Outcome:
    bench: Bench
    status: str  # "ok" | "missing" | "failed"
    seconds: float = 0.0
    data: Any = None
    detail: str = ""


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
        + "; do not edit by hand. Each figure is set against a raw floor measured in the "
        "same run on the same machine; the ratio is what the design adds on top of it.",
        "",
        *_machine(),
    ]
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
        lines += [
            f"Ran in {outcome.seconds:.1f} s.",
            "",
            "| figure | measured | raw floor (same run) | ratio | target |",
            "|---|---:|---|---:|---|",
        ]
        lines += [f"| {' | '.join(row)} |" for row in bench.rows(outcome.data)]
        notes = bench.notes(outcome.data)
        if notes:
            lines += ["", notes]
        shown = {k: v for k, v in outcome.data.items() if k != "markdown"} if isinstance(
            outcome.data, dict) else outcome.data
        lines += ["", "<details><summary>absolute figures (JSON)</summary>", "", "```json",
                  json.dumps(shown, indent=1, sort_keys=True), "```", "", "</details>"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--only", action="append", default=[], help="run only these (repeat)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    args = parser.parse_args()
    benches = [b for b in _benches(sys.executable) if not args.only or b.name in args.only]
    outcomes = []
    for bench in benches:
        print(f"running {bench.name} ...", file=sys.stderr, flush=True)
        if bench.name.startswith("simulate") and not _FLOOR:
            _FLOOR["atomic_writes_per_s"] = _disk_floor()
        outcome = _run(bench, args.quick, max(args.timeout, bench.timeout))
        print(f"  {outcome.status} ({outcome.seconds:.1f} s) {outcome.detail.splitlines()[0]}"
              if outcome.detail else f"  {outcome.status} ({outcome.seconds:.1f} s)",
              file=sys.stderr, flush=True)
        outcomes.append(outcome)
    Path(args.out).write_text(render(outcomes, args.quick), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
