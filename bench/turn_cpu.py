"""CPU per turn of a closed-loop simulate run: the event loop's thread and the worker threads.

Issue 20 asks for less work per turn: before a design can use both cores,
each turn must cost the one it runs on less. This probe runs ``simulate``
in-process (closed loop, ``--sessions 100 --turns 40 --seed 5`` by default)
and reads two clocks at each stage of the run: the event loop's thread CPU
(``time.thread_time`` in the loop's own thread) and the process's CPU
(``time.process_time``: every thread). What the process spent beyond the
loop's thread ran in worker threads (``run_durable`` hops, the writer's
CPU work, the runtime log's flushes). Both are divided by the turns the
run appended, for the appending stage (the append path, with whatever
memory work runs beside it) and for the whole run (boundaries and
invariants included).

A diagnostic, not a benchmark: no floor, no target, so it is not a row of
``bench/run.py``. Compare two versions of the code by running it in each,
in the same session, alternating. Run from the repository root::

    python bench/turn_cpu.py [--sessions 100] [--turns 40] [--seed 5] [--runs 3]
                             [--journal session|shared] [--watchdog-poll S] [--in DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Summary

from memory.simulate import SimulationConfig, simulate
from memory.simulate._config import Stage
from memory.writers import Event

ROOT = Path(__file__).resolve().parent.parent


class Clocks:
    """The loop thread's and the process's CPU seconds at each stage the run announces."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float, float]] = []

    def on_event(self, event: Event) -> None:
        if not isinstance(event, Stage):
            return
        # simulate announces its stages from the event loop's thread
        assert threading.current_thread() is threading.main_thread()
        self.marks.append((event.what, time.thread_time(), time.process_time()))

    def stage(self, prefix: str) -> tuple[float, float]:
        """(loop, process) CPU seconds from the first stage named ``prefix`` to the next one."""
        for at, (what, loop, process) in enumerate(self.marks):
            if what.startswith(prefix) and at + 1 < len(self.marks):
                _, loop_end, process_end = self.marks[at + 1]
                return loop_end - loop, process_end - process
        raise LookupError(f"the run announced no stage {prefix!r} followed by another")


def one_run(sessions: int, turns: int, seed: int, journal: str,
            watchdog_poll: float, parent: Path) -> dict[str, float]:
    clocks = Clocks()
    with tempfile.TemporaryDirectory(dir=parent) as state:
        config = SimulationConfig(state_dir=state, sessions=sessions, turns=turns, seed=seed,
                                  journal=journal,  # type: ignore[arg-type]
                                  watchdog_poll=watchdog_poll, on_event=clocks.on_event)
        loop, process = time.thread_time(), time.process_time()
        result = anyio.run(simulate, config)
        loop, process = time.thread_time() - loop, time.process_time() - process
    if not all(verdict.passed for verdict in result.invariants.values()):
        raise SystemExit("an invariant failed: the figures of a broken run mean nothing")
    append_loop, append_process = clocks.stage("appending turns")
    per_turn = 1e6 / result.turns
    return {
        "turns": result.turns,
        "appending_turns_per_s": result.turns / result.workload_seconds,
        "appending_loop_us": append_loop * per_turn,
        "appending_threads_us": (append_process - append_loop) * per_turn,
        "run_loop_us": loop * per_turn,
        "run_threads_us": (process - loop) * per_turn,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--journal", choices=["session", "shared"], default="session")
    parser.add_argument("--watchdog-poll", type=float, default=SimulationConfig.watchdog_poll,
                        help="seconds between the idle watchdog's disk scans (simulate's "
                             "compressed default; each scan reloads every changed session)")
    parser.add_argument("--in", dest="parent", type=Path, default=ROOT,
                        help="where the run's state directory goes (default: the repository; "
                             "a tmpfs such as /dev/shm leaves the disk's variance out, and "
                             "its flushes cost nothing)")
    parser.add_argument("--json", action="store_true", help="one JSON object, medians")
    args = parser.parse_args()
    runs = [one_run(args.sessions, args.turns, args.seed, args.journal, args.watchdog_poll,
                    args.parent) for _ in range(args.runs)]
    summaries = {key: Summary.of([run[key] for run in runs]) for key in runs[0]}
    if args.json:
        print(json.dumps({"journal": args.journal, "watchdog_poll": args.watchdog_poll,
                          "runs": args.runs,
                          **{key: round(s.median, 1) for key, s in summaries.items()}}))
        return
    print(f"{args.sessions} sessions x {args.turns} turns, seed {args.seed}, "
          f"{args.journal} journal, median (min-max) of {args.runs} runs "
          "(CPU microseconds per turn)")
    for key, summary in summaries.items():
        print(f"  {key:24} {summary.median:>10.1f} ({summary.low:.1f}-{summary.high:.1f})")


if __name__ == "__main__":
    main()
