"""Another process writing the same sessions while the runtime runs (``outside-appends``).

SPEC §1's lost-marker race needs a second writer: node files are rewritten by
other components, and a marker merged at the same moment must not be lost.
This is that writer, as a real subprocess using the store's
:class:`~store.SessionCore` directly (the cross-process ``.lock`` and the
fingerprint are the only coordination): it appends turns at the head of
chosen sessions and merges a metadata key of its own onto existing nodes,
the very nodes the runtime is marking.

It prints one JSON document on stdout: the nodes it appended and the
``(session, node, key)`` merges it got acknowledged, for the oracle.

Run: ``python -m memory._simulate_outside STATE SEED ROUNDS SID [SID ...]``.
"""

from __future__ import annotations

import random
import sys
import time

import orjson

from memory._simulate_agents import sentence
from store import SessionCore, StoreError

__all__ = ["OUTSIDE_KEY", "main", "run_outside"]

OUTSIDE_KEY = "outside_note"


def run_outside(state_dir: str, seed: int, rounds: int, sessions: list[str],
                pause: float = 0.01) -> dict[str, list[list[str]]]:
    """Append and merge on ``sessions`` for ``rounds`` rounds; returns what was acknowledged."""
    rng = random.Random(f"outside/{seed}")
    appended: list[list[str]] = []
    merged: list[list[str]] = []
    cores = {sid: SessionCore.open(state_dir, sid) for sid in sessions}
    for round_number in range(rounds):
        sid = rng.choice(sessions)
        core = cores[sid]
        try:
            if rng.random() < 0.5:
                head = core.head
                role = "user" if head is None or core.node(head).role != "user" else "assistant"
                node = core.append({"id": f"x{round_number}", "role": role,
                                    "content": f"{sentence(rng)} {sentence(rng)}"})
                appended.append([sid, str(node["id"])])
            else:
                nodes = core.nodes()
                if nodes:
                    target = rng.choice(nodes[-40:]).id
                    core.merge_node_metadata_batch({target: {OUTSIDE_KEY: round_number}})
                    merged.append([sid, target, OUTSIDE_KEY])
        except StoreError:
            pass  # refused without a change (e.g. the head moved under a summary)
        time.sleep(pause)
    for core in cores.values():
        core.close()
    return {"appended": appended, "merged": merged}


def main(argv: list[str]) -> int:
    state_dir, seed, rounds, *sessions = argv
    report = run_outside(state_dir, int(seed), int(rounds), sessions)
    sys.stdout.buffer.write(orjson.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
