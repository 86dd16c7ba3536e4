"""Benchmark the runtime under load (issue 20): the closed-loop ratio and the latency-load curve.

Run from the repository root::

    python bench/load.py [--sessions 300] [--turns 40] [--seed 5] [--loads 25,50,80,100]
                         [--processes 1,2] [--repeat 3] [--scratch DIR]
                         [--backend asyncio] [--chart bench/load.png] [--json]

Everything that touches the disk does so in one scratch directory (``--scratch``:
a temporary directory made inside DIR, by default inside the repository), so
the floor and the runtime are measured on the same disk:

1. **the format floor**: what a turn must cost at least on this disk, two
   unsynced atomic installs (its node file and its session's ``meta.json``)
   from one thread, no parsing, no actors (``bench/_raw.py``);
2. **the closed loop**: ``scriptorium simulate --sessions S --turns T`` end
   to end (every agent appends as fast as it is acknowledged, then every
   boundary), set against the floor: the ratio issue 20 asks to be >= 0.2.
   It runs ``--repeat`` times for each ``--processes`` value, each run with
   its own floor round in the same harness round (``interleaved`` of
   ``bench/_harness.py``: floor, run, floor, run..., their order turned
   every round) after one small warm-up floor round, so a change of the
   machine's load lands on both sides of the ratio. The best median
   end-to-end rate of the processes values is the *capacity*;
3. **the open loop** at each of ``--loads`` percent of that capacity
   (``simulate --rate``, Poisson arrivals, the same size and seed, the
   capacity's processes value): the append ack and due -> durable (batches
   due under load) p50 and p99, the CPU time per turn (the simulate
   process's user + system time over its turns, so every thread and core
   counts), the write groups' sizes and the memory lag. The *sustainable
   rate* is the highest offered rate whose due -> durable p99 stays within 5 s.

Each simulate run is its own process (so its CPU time is its own) on its own
fresh state directory in the scratch directory (``--state``), removed after
it, the disk synced before it (``os.sync``, untimed) as before each floor
round, so that neither pays for the other's writeback. ``--processes K`` is
always passed (simulate's own default depends on the cores). The
latency-load chart is written as a PNG (matplotlib, the ``bench`` extra)
next to ``bench/RESULTS.md``, which links it. Small sizes (``--sessions 20
--turns 10 --repeat 2``) make a smoke run of some seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import FLOOR, Row, Summary, interleaved, markdown_table, ratio_row, value_row
from _raw import RawDisk

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "bench" / "load.png"
LOADS = (25, 50, 80, 100)  # percent of the closed-loop capacity
PROCESSES = (1, 2)  # simulate --processes values the closed loop is measured at
REPEAT = 3  # closed-loop runs per processes value
FLOOR_TURNS = 4_000  # turns of one floor round, at most
WARMUP_TURNS = 500  # turns of the warm-up floor round, at most
SUSTAINABLE_P99_MS = 5_000.0  # due -> durable p99 a sustainable rate keeps (issue 20)
ACK_P99_MS = 20.0  # append ack p99 target at 50 % and 80 % of capacity
# What the rows and the chart read of a simulate document (the rest stays out of RESULTS.md).
KEPT = ("turns_per_s", "turns", "seconds", "workload_seconds", "latency_ms", "latency_samples",
        "memory_lag", "open_loop", "invariants", "peak_rss_mb", "batches")
FLOOR_WHAT = ("2 unsynced atomic installs per turn (node file, meta.json), one thread, "
              "same scratch disk, a round beside each run")


def due_target_ms(load: int) -> float | None:
    """Issue 20's due -> durable p99 bound at ``load`` percent of capacity (None: no target)."""
    if load <= 50:
        return 2_000.0
    if load <= 80:
        return 5_000.0
    return None


def ack_target_ms(load: int) -> float | None:
    """Issue 20's append ack p99 bound at ``load`` percent (targets at 50 % and 80 %, and below)."""
    return ACK_P99_MS if load <= 80 else None


def _distinct_numbers(text: str, flag: str, top: int) -> tuple[int, ...]:
    """``"1,2"`` -> whole numbers, each in 1..``top``, in the order given, no repeats."""
    try:
        found = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated whole numbers, not {text!r}") from None
    if not found or any(not 0 < value <= top for value in found) or len(set(found)) != len(found):
        raise ValueError(f"{flag} takes distinct numbers in 1..{top}, not {text!r}")
    return found


def parse_loads(text: str) -> tuple[int, ...]:
    """``"25,50,80,100"`` -> percents of the capacity, each in 1..1000."""
    return _distinct_numbers(text, "--loads", 1000)


def parse_processes(text: str) -> tuple[int, ...]:
    """``"1,2"`` -> simulate ``--processes`` values, each in 1..64."""
    return _distinct_numbers(text, "--processes", 64)


def processes_label(processes: int) -> str:
    """``1 process``, ``2 processes``: how the rows say which runs a figure is from."""
    return f"{processes} process" if processes == 1 else f"{processes} processes"


@dataclass(frozen=True)
class Run:
    """One simulate process: its JSON document, its wall seconds and its CPU seconds."""

    document: dict[str, Any]
    seconds: float
    cpu_seconds: float

    @property
    def cpu_ms_per_turn(self) -> float:
        turns = self.document.get("turns") or 0
        return 1000 * self.cpu_seconds / turns if turns else 0.0

    @property
    def cores_busy(self) -> float:
        """CPU seconds per wall second: how many cores the run kept busy on average."""
        return self.cpu_seconds / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"document": self.document, "seconds": self.seconds,
                "cpu_seconds": self.cpu_seconds}


@dataclass(frozen=True)
class ClosedLoop:
    """The closed-loop runs of one processes value and the floor rounds taken in their rounds.

    ``floor.values[i]`` was measured in the same harness round as ``runs[i]``,
    so :attr:`Row.ratio` pairs them round by round.
    """

    processes: int
    floor: Summary
    runs: tuple[Run, ...]

    @property
    def rate(self) -> Summary:
        """The end-to-end turns/s of the runs, in round order."""
        return Summary.of([float(run.document["turns_per_s"]) for run in self.runs])

    def to_json(self) -> dict[str, Any]:
        return {"processes": self.processes, "floor": self.floor.to_json(),
                "runs": [run.to_json() for run in self.runs]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClosedLoop:
        return cls(int(data["processes"]), Summary.from_json(data["floor"]),
                   tuple(Run(**entry) for entry in data["runs"]))


def measure_closed(processes: Sequence[int], repeat: int, floor: Callable[[], float],
                   closed: Callable[[int], Run]) -> list[ClosedLoop]:
    """``repeat`` closed-loop runs per processes value, each beside a floor round of its own.

    Through the harness's :func:`interleaved` (no warm-up round: a closed
    run takes long; the caller warms the floor up): a round runs, for every
    processes value, one floor round and one closed run, alternating, in an
    order that turns every round (so neither always goes first).
    """
    runs: dict[int, list[Run]] = {value: [] for value in processes}

    def closed_run(value: int) -> Callable[[], float]:
        def measure() -> float:
            run = closed(value)
            runs[value].append(run)
            return float(run.document["turns_per_s"])
        return measure

    measures: dict[str, Callable[[], float]] = {}
    for value in processes:
        measures[f"floor {value}"] = floor
        measures[f"closed {value}"] = closed_run(value)
    found = interleaved(measures, rounds=repeat, warmup=0)
    return [ClosedLoop(value, found[f"floor {value}"], tuple(runs[value])) for value in processes]


def measure_runs(processes: Sequence[int], repeat: int, loads: Sequence[int],
                 floor: Callable[[], float], run: Callable[[int, float | None], Run]
                 ) -> tuple[list[ClosedLoop], ClosedLoop, list[Run]]:
    """The closed loops (:func:`measure_closed`), their capacity, then the open loop.

    ``run(processes, rate)`` is one simulate run (``rate`` None: the closed
    loop); the open loop runs at each of ``loads`` percent of the capacity,
    with the capacity's processes value.
    """
    loops = measure_closed(processes, repeat, floor, lambda value: run(value, None))
    best = capacity(loops)
    return loops, best, [run(best.processes, best.rate.median * load / 100) for load in loads]


def capacity(loops: Sequence[ClosedLoop]) -> ClosedLoop:
    """The processes value whose median end-to-end rate is the highest (the first of a tie)."""
    if not loops:
        raise ValueError("no closed-loop runs to take a capacity from")
    return max(loops, key=lambda loop: loop.rate.median)


def pooled_floor(loops: Sequence[ClosedLoop]) -> Summary:
    """Every floor round of every processes value, as one summary."""
    return Summary.of([value for loop in loops for value in loop.floor.values])


def format_floor(turns: int, scratch: str) -> float:
    """Turns/s of the format's own work alone (see the module docstring), one round in ``scratch``."""
    disk = RawDisk(0.0)
    node = b'{"id": "n", "role": "user", "content": "' + b"x" * 400 + b'", "metadata": {}}'
    with tempfile.TemporaryDirectory(prefix="floor-", dir=scratch) as root:
        sessions = [os.path.join(root, f"s{i}") for i in range(16)]
        for session in sessions:
            os.makedirs(os.path.join(session, "history"))
        os.sync()  # a quiet disk: the last run's writeback is not this round's
        began = time.perf_counter()
        for turn in range(turns):
            session = sessions[turn % len(sessions)]
            disk.install(os.path.join(session, "history", f"n{turn}.json"), node, synced=False)
            disk.install(os.path.join(session, "meta.json"), b'{"head_id": "n%d"}' % turn,
                         synced=False)
        return turns / (time.perf_counter() - began)


def simulate_command(sessions: int, turns: int, seed: int, backend: str, state: str,
                     processes: int = 1, rate: float | None = None) -> list[str]:
    """The ``scriptorium simulate --json`` command line of one run on ``state``.

    ``--processes`` always: simulate's own default depends on the machine.
    """
    command = [sys.executable, "-c", "from memory.cli import main; main()", "simulate", "--json",
               "--sessions", str(sessions), "--turns", str(turns), "--seed", str(seed),
               "--backend", backend, "--state", state, "--processes", str(processes)]
    if rate is not None:
        command += ["--rate", f"{rate:.1f}"]
    return command


def simulate(sessions: int, turns: int, seed: int, backend: str, scratch: str,
             processes: int = 1, rate: float | None = None) -> Run:
    """One simulate process on a fresh state directory in ``scratch``, removed after it.

    Raises if it printed no document.
    """
    state = tempfile.mkdtemp(prefix="state-", dir=scratch)
    try:
        command = simulate_command(sessions, turns, seed, backend, state, processes, rate)
        os.sync()  # a quiet disk: the floor's and the last run's writeback are not this run's
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        shutil.rmtree(state)
    if not done.stdout.strip():
        raise RuntimeError(f"{' '.join(command[3:])} printed nothing (exit {done.returncode}):"
                           f" {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    document = json.loads(done.stdout)
    return Run({key: document[key] for key in KEPT if key in document}, seconds, cpu)


# -- pure: from the runs to the rows -----------------------------------------------------


def figures(run: Run) -> dict[str, Any]:
    """What the chart and the rows read of one open-loop run."""
    latency = run.document.get("latency_ms", {})
    lag = run.document.get("memory_lag", {})
    return {
        "offered": float(run.document.get("open_loop", {}).get("rate", 0.0)),
        "ack_p50": float(latency.get("append_ack_p50", 0.0)),
        "ack_p99": float(latency.get("append_ack_p99", 0.0)),
        "due_p50": float(latency.get("due_to_durable_load_p50", 0.0)),
        "due_p99": float(latency.get("due_to_durable_load_p99", 0.0)),
        "due_samples": int(run.document.get("latency_samples", {}).get("due_to_durable_load", 0)),
        "cpu_ms_per_turn": run.cpu_ms_per_turn,
        "cores_busy": run.cores_busy,
        "group_mean": float(lag.get("group_size_mean", 0.0)),
        "group_max": int(lag.get("group_size_max", 0)),
        "lag_p99": float(lag.get("oldest_due_age_p99_ms", 0.0)),
        "passed": all(v == "PASS" for v in run.document.get("invariants", {}).values()),
    }


def sustainable(points: Sequence[dict[str, Any]]) -> float | None:
    """The highest offered rate whose due -> durable p99 stayed within 5 s (None: none did)."""
    kept = [p["offered"] for p in points
            if p["due_samples"] and p["due_p99"] <= SUSTAINABLE_P99_MS]
    return max(kept, default=None)


def closed_loops(data: dict[str, Any]) -> tuple[list[ClosedLoop], ClosedLoop]:
    """A ``--json`` document's closed loops and the one its capacity (open loop) is from.

    A document of before ``--processes`` (one ``closed`` run, one floor
    measured apart from it) reads as one closed loop of 1 process.
    """
    if "closed_loops" in data:
        loops = [ClosedLoop.from_json(entry) for entry in data["closed_loops"]]
        chosen = int(data["capacity"]["processes"])
        return loops, next(loop for loop in loops if loop.processes == chosen)
    loop = ClosedLoop(1, Summary.from_json(data["floor"]), (Run(**data["closed"]),))
    return [loop], loop


def rows(data: dict[str, Any]) -> list[Row]:
    """The rows of a ``--json`` document's ``floor``, closed loops and ``loads``."""
    floor = Summary.from_json(data["floor"])
    loops, best = closed_loops(data)
    size = f"{data['sessions']} sessions x {data['turns']} turns"
    found: list[Row] = []
    for loop in loops:
        label = processes_label(loop.processes)
        cpu = Summary.of([run.cpu_ms_per_turn for run in loop.runs])
        cores = Summary.of([run.cores_busy for run in loop.runs])
        found += [
            ratio_row(f"closed loop, end to end, {size}, {label}", loop.rate, "turns/s",
                      loop.floor, kind=FLOOR, what=FLOOR_WHAT, op=">=", bound=0.2),
            Row(f"closed loop, {label}: CPU per turn / cores busy (medians)", cpu, "ms",
                text=f"{cpu.median:.2f} ms / {cores.median:.2f}"),
        ]
    at_processes = processes_label(best.processes)
    points = []
    for load, entry in zip(data["loads"], data["runs"], strict=True):
        point = figures(Run(**entry))
        points.append(point)
        at = f"{load}% ({point['offered']:,.0f} turns/s, {at_processes})"
        ack, due = ack_target_ms(load), due_target_ms(load)
        found.append(value_row(f"{at}: append ack p99 (p50 {point['ack_p50']:.2f} ms)",
                               Summary.single(point["ack_p99"]), "ms",
                               op="<=" if ack else "", bound=ack or 0.0))
        figure = (f"{at}: due -> durable p99 (p50 {point['due_p50']:,.0f} ms, "
                  f"{point['due_samples']:,} batches due under load)")
        if due is not None and not point["due_samples"]:  # no figure is no pass
            found.append(Row(figure, Summary.single(0), "ms", target=f"<= {due:,g} ms",
                             met=False, text="no batch came due under load: a larger size"))
        else:
            found.append(value_row(figure, Summary.single(point["due_p99"]), "ms",
                                   op="<=" if due else "", bound=due or 0.0))
        found.append(Row(f"{at}: CPU per turn / cores busy / groups mean, max / lag p99",
                         Summary.single(point["cpu_ms_per_turn"]), "ms",
                         text=(f"{point['cpu_ms_per_turn']:.2f} ms / {point['cores_busy']:.2f}"
                               f" / {point['group_mean']:.1f}, {point['group_max']} / "
                               f"{point['lag_p99']:,.0f} ms")))
    rate = sustainable(points)
    figure = f"sustainable rate (due -> durable p99 <= 5 s), of the loads measured, {at_processes}"
    if rate is None:
        found.append(Row(figure, Summary.single(0), "turns/s", text="none of the loads"))
    else:
        found.append(ratio_row(figure, Summary.single(rate), "turns/s", floor, kind=FLOOR,
                               what=FLOOR_WHAT, paired=False))
    closed = [run.document.get("invariants", {}) for loop in loops for run in loop.runs]
    every = all(closed) and all(p["passed"] for p in points) and all(
        v == "PASS" for verdicts in closed for v in verdicts.values())
    found.append(Row("invariants, every run", Summary.single(0), "", target="PASS",
                     met=bool(every), text="PASS" if every else "FAIL (see the JSON)"))
    return found


def chart(data: dict[str, Any], path: Path) -> None:
    """The latency-load chart: ack and due -> durable p50/p99 against the offered load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [figures(Run(**entry)) for entry in data["runs"]]
    loads = list(data["loads"])
    nan = float("nan")  # no point where no batch came due under load

    def series(key: str) -> list[float]:
        return [p[key] if key.startswith("ack") or p["due_samples"] else nan for p in points]

    fig, (ack, due) = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, key, title, targets in (
        (ack, "ack", "append ack", [(ACK_P99_MS, "target p99 (up to 80 %)")]),
        (due, "due", "due -> durable (batches due under load)",
         [(2_000.0, "target p99 at 50 %"), (5_000.0, "target p99 at 80 %")]),
    ):
        axis.plot(loads, series(f"{key}_p50"), "o-", label="p50")
        axis.plot(loads, series(f"{key}_p99"), "s-", label="p99")
        for bound, label in targets:
            axis.axhline(bound, linestyle="--", linewidth=0.8, color="grey")
            axis.annotate(label, (loads[0], bound), fontsize=7, color="grey",
                          xytext=(0, 2), textcoords="offset points")
        axis.set_yscale("log")
        axis.set_xlabel("offered load, % of the closed-loop capacity")
        axis.set_ylabel("ms")
        axis.set_title(title)
        axis.grid(True, which="both", linewidth=0.3)
    due.plot(loads, [max(p["lag_p99"], 0.1) for p in points], "^:",
             label="memory lag p99 (oldest due, at each group)")
    if not any(p["due_samples"] for p in points):
        due.text(0.5, 0.5, "no batch came due under load at this size", ha="center",
                 transform=due.transAxes, fontsize=8, color="grey")
    for axis in (ack, due):
        axis.legend(fontsize=8)
    best = closed_loops(data)[1]
    fig.suptitle(f"scriptorium under load: {data['sessions']} sessions x {data['turns']} turns, "
                 f"Poisson; capacity {best.rate.median:,.0f} turns/s "
                 f"({processes_label(best.processes)}, {data['backend']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--loads", default=",".join(map(str, LOADS)),
                        help="percents of the closed-loop capacity, comma-separated")
    parser.add_argument("--processes", default=",".join(map(str, PROCESSES)),
                        help="simulate --processes values the closed loop runs at, "
                             "comma-separated; the open loop runs at the best")
    parser.add_argument("--repeat", type=int, default=REPEAT,
                        help="closed-loop runs per processes value, each beside a floor round")
    parser.add_argument("--scratch", default=None, metavar="DIR",
                        help="the disk to measure on: the floor and every simulate state go "
                             "in a temporary directory made here (default: the repository)")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--chart", default=str(CHART), help="the PNG to write ('' for none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        loads = parse_loads(args.loads)
        processes = parse_processes(args.processes)
    except ValueError as exc:
        parser.error(str(exc))
    if args.sessions < 1 or args.turns < 1 or args.repeat < 1:
        parser.error("--sessions, --turns and --repeat must be at least 1")
    where = Path(args.scratch).resolve() if args.scratch else ROOT
    if not where.is_dir():
        parser.error(f"--scratch {args.scratch} is not a directory")
    turns = min(FLOOR_TURNS, args.sessions * args.turns)
    with tempfile.TemporaryDirectory(prefix="load-scratch-", dir=where) as scratch:
        format_floor(min(WARMUP_TURNS, turns), scratch)  # warm-up, not counted
        loops, best, runs = measure_runs(
            processes, args.repeat, loads, lambda: format_floor(turns, scratch),
            lambda value, rate: simulate(args.sessions, args.turns, args.seed, args.backend,
                                         scratch, processes=value, rate=rate))
    data: dict[str, Any] = {
        "sessions": args.sessions, "turns": args.turns, "seed": args.seed,
        "backend": args.backend, "loads": list(loads), "processes": list(processes),
        "repeat": args.repeat, "scratch": str(where),
        "floor": pooled_floor(loops).to_json(),
        "closed_loops": [loop.to_json() for loop in loops],
        "capacity": {"processes": best.processes, "turns_per_s": best.rate.median},
        "runs": [run.to_json() for run in runs], "cpus": os.cpu_count(), "chart": None,
    }
    if args.chart:
        chart(data, Path(args.chart))
        chart_path = Path(args.chart).resolve()
        data["chart"] = (str(chart_path.relative_to(ROOT)) if chart_path.is_relative_to(ROOT)
                         else str(chart_path))
    found = rows(data)
    if args.json:
        print(json.dumps({**data, "rows": [row.to_json() for row in found]}))
    else:
        print(markdown_table(found))
        if data["chart"]:
            print(f"\nchart: {data['chart']}")


if __name__ == "__main__":
    main()
