"""The inspector's session page for a long session: server time and page weight (issue 24).

A session of ``--turns`` turns (default 5,000) built with the store alone:
every 50th turn a retry forks a branch of two turns, every 500th a spawned
sub-agent branch, the first half marked written by this workspace, the rest
owed. The page is asked for ``--repeat`` times over HTTP from the real
server (uvicorn in its thread); the figure is the median time from request
to last byte, the budget 1 s. Page weight: the HTML's bytes, and gzipped
(what a browser on a compressing proxy would fetch). Run from the
repository root::

    python bench/inspect_page.py [--turns 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memory.inspect import InspectorServer, StateMemory, inspector_app
from memory.ledger import MARKER_KEY
from memory.workspace import load_or_create_workspace_id
from store import DurableFiles, SessionCore

BUDGET = 1.0  # seconds, the bound for the session page of 5,000 turns


def build(state: Path, turns: int) -> str:
    """A session of ``turns`` turns with forks and spawns, half written; returns its id."""
    workspace = load_or_create_workspace_id(str(state / "memory"), DurableFiles())
    core = SessionCore.create(state, "long", title="a long session")
    ids: list[str] = []
    while len(ids) < turns:
        n = len(ids)
        role = "user" if n % 2 == 0 else "assistant"
        ids.append(core.append({"role": role, "content": f"turn {n}: " + "words " * 20})["id"])
        if n and n % 50 == 0 and len(ids) + 2 <= turns:  # a retry: a branch of two turns
            tip = ids[-1]
            core.set_head(ids[-2])
            ids += [core.append({"role": "assistant", "content": f"retry {n}"})["id"],
                    core.append({"role": "user", "content": f"after retry {n}"})["id"]]
            core.set_head(tip)
        if n and n % 500 == 0 and len(ids) < turns:
            ids.append(core.spawn_branch(ids[-1], "bench", f"sub-agent {n}")["id"])
    core.merge_node_metadata_batch({i: {MARKER_KEY: workspace} for i in ids[: turns // 2]})
    core.close()
    return "long"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        started = time.perf_counter()
        sid = build(state, args.turns)
        built = time.perf_counter() - started
        memory = StateMemory(str(state))
        with InspectorServer(inspector_app(str(state), memory)) as server, httpx.Client(
                base_url=server.url.rstrip("/"), timeout=60) as client:
            times, size = [], 0
            for _ in range(args.repeat):
                started = time.perf_counter()
                answer = client.get(f"/session/{sid}")
                times.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text[:500]
                size = len(answer.content)
            gzipped = len(gzip.compress(answer.content))
        memory.close()
    median = statistics.median(times)
    print(json.dumps({
        "turns": args.turns, "build_seconds": round(built, 2),
        "session_page_seconds": {"median": round(median, 3), "min": round(min(times), 3),
                                 "max": round(max(times), 3)},
        "page_bytes": size, "page_bytes_gzip": gzipped, "budget_seconds": BUDGET,
        "within_budget": median <= BUDGET,
    }, indent=2))


if __name__ == "__main__":
    main()
