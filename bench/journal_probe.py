"""Where a simulate run's time goes with each journal: flushes, commit waits, CPU.

The runtime log cut the flushes of a simulate run sevenfold without making
it faster (docs/decisions.md, "The runtime log": why the session journal
stays the default). This probe shows why, one in-process ``simulate`` run
per journal: every ``os.fsync`` and ``os.fdatasync`` counted and timed
(thread time spent in them), the event loop's thread CPU and the process's
user and kernel CPU. (What a committer of the runtime log waits for its
group was timed once by wrapping ``RuntimeLog.commit``; ``bench/`` does not
patch the store, so that wrapper is not kept here.) A diagnostic, not a
benchmark: one run each, no floor, no target, so it is not a row of
``bench/run.py``. Run from the repository root::

    python bench/journal_probe.py [--sessions N] [--turns N] [--journal session|shared]...
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory.simulate import SimulationConfig, simulate

ROOT = Path(__file__).resolve().parent.parent


class Timed:
    """Calls and the thread seconds spent in them, across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                with self._lock:
                    self.calls[name] = self.calls.get(name, 0) + 1
                    self.seconds[name] = (self.seconds.get(name, 0.0)
                                          + time.perf_counter() - began)
        return timed


def probe(journal: str, sessions: int, turns: int) -> dict[str, Any]:
    timed = Timed()
    saved = (os.fsync, os.fdatasync)
    os.fsync = timed.wrap("fsync", os.fsync)
    os.fdatasync = timed.wrap("fdatasync", os.fdatasync)
    try:
        with tempfile.TemporaryDirectory(dir=ROOT) as state:
            config = SimulationConfig(state_dir=state, sessions=sessions, turns=turns, seed=1,
                                      journal=journal)  # type: ignore[arg-type]
            before = resource.getrusage(resource.RUSAGE_SELF)
            wall, loop = time.perf_counter(), time.thread_time()
            result = anyio.run(simulate, config)
            loop, wall = time.thread_time() - loop, time.perf_counter() - wall
            after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        os.fsync, os.fdatasync = saved
    return {
        "journal": journal, "sessions": sessions, "turns": result.turns,
        "appending_turns_per_s": round(result.turns / result.workload_seconds, 1),
        "wall_s": round(wall, 1), "appending_s": round(result.workload_seconds, 1),
        "event_loop_cpu_s": round(loop, 1),
        "user_s": round(after.ru_utime - before.ru_utime, 1),
        "kernel_s": round(after.ru_stime - before.ru_stime, 1),
        "calls": timed.calls, "thread_seconds": {k: round(v, 1) for k, v in timed.seconds.items()},
        "every_invariant_passed": all(v.passed for v in result.invariants.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--journal", action="append", choices=["session", "shared"],
                        help="repeat; default: session, then shared")
    args = parser.parse_args()
    for journal in args.journal or ["session", "shared"]:
        print(json.dumps(probe(journal, args.sessions, args.turns)), flush=True)


if __name__ == "__main__":
    main()
