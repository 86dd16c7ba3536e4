"""Other processes writing the same sessions while the runtime runs.

``outside-appends``: a process using the store with its lock.
``agent-writes``: a process doing what the reference agent does, unlocked.

SPEC §1's lost-marker race needs a second writer: node files are rewritten by
other components, and a marker merged at the same moment must not be lost.
This is that writer, as a real subprocess using the store's
:class:`~store.SessionCore` directly (the cross-process ``.lock`` and the
fingerprint are the only coordination): it appends turns at the head of
chosen sessions and merges a metadata key of its own onto existing nodes,
the very nodes the runtime is marking.

It prints one JSON document on stdout: the nodes it appended and the
``(session, node, key)`` merges it got acknowledged, for the oracle.

The reference agent takes no lock at all: it merges node metadata with a
read-modify-write of the node file and rewinds by rewriting node files and
meta.json (:func:`agent_merge`, :func:`agent_rewind`, in its byte format).
:func:`run_agent` does both on the chosen sessions, so scriptorium's
marker merges, journal replays after a crash and checkpoints run against
it; the oracle's ``no_outside_write_reverted`` checks that none of these
writes was undone.

Run: ``python -m memory.simulate._outside STATE SEED ROUNDS SID [SID ...]``, or
``python -m memory.simulate._outside --agent STATE SEED ROUNDS SID [SID ...]``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import orjson

from memory.simulate._agents import sentence
from store import SessionCore, StoreError
from store.lowlevel import parse_filename

__all__ = [
    "AGENT_KEY",
    "OUTSIDE_KEY",
    "agent_merge",
    "agent_rewind",
    "agent_write",
    "main",
    "run_agent",
    "run_outside",
]

OUTSIDE_KEY = "outside_note"
AGENT_KEY = "agent_note"  # the unlocked agent's keys: agent_note_<round>


# -- the reference agent's own writes: unlocked read-modify-write ---------------------


def agent_write(path: str, record: object) -> None:
    """Write ``record`` as the reference agent does: its byte format, ``atomic_write_text``.

    ``json.dumps(ensure_ascii=False)``, UTF-8, no trailing newline, to a
    temp file renamed over the target; no lock, no fsync, no journal.
    """
    directory, name = os.path.split(path)
    temp = os.path.join(directory, f".{name}.{os.getpid()}.agent-tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False))
    os.replace(temp, path)


def agent_merge(path: str, patch: dict[str, object]) -> None:
    """The agent's ``merge_node_metadata``: read the node file, merge ``patch``, write it back."""
    with open(path, encoding="utf-8") as handle:
        record = json.load(handle)
    record["metadata"] = {**record.get("metadata", {}), **patch}
    agent_write(path, record)


def agent_rewind(session_dir: str, user_turn: str, now: float) -> list[str]:
    """The agent's ``rewind_to``: stamp the head chain back to ``user_turn``, move the head.

    Reads meta.json and every node file, stamps ``rewound``/``rewound_at`` on
    the chain from the head back to ``user_turn`` and on the sub-calls under
    it, rewrites those node files, then meta.json with the head on
    ``user_turn``'s predecessor. ValueError if ``user_turn`` is not a user
    turn on the head chain. Returns the stamped ids.
    """
    meta_path = os.path.join(session_dir, "meta.json")
    with open(meta_path, encoding="utf-8") as handle:
        meta = json.load(handle)
    history = os.path.join(session_dir, "history")
    files: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in sorted(os.listdir(history)):
        if name.endswith(".json") and not name.startswith("."):
            path = os.path.join(history, name)
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
            files[record["id"]] = (path, record)
    chain: list[str] = []
    at = meta.get("head_id")
    while isinstance(at, str) and at in files and at not in chain:
        chain.append(at)
        if at == user_turn:
            break
        at = files[at][1].get("predecessor")
    if user_turn not in chain or files[user_turn][1].get("role") != "user":
        raise ValueError(f"{user_turn} is not a user turn on the head chain")
    chosen = set(chain)
    for node_id, (_, record) in sorted(files.items(), key=lambda item: item[1][1]["seq"]):
        caller = record.get("caller")
        if caller in chosen and not record.get("metadata", {}).get("spawn_branch_root"):
            chosen.add(node_id)
            chain.append(node_id)
    for node_id in chain:
        path, record = files[node_id]
        record["metadata"] = {**record.get("metadata", {}), "rewound": True, "rewound_at": now}
        agent_write(path, record)
    predecessor = files[user_turn][1].get("predecessor")
    meta["head_id"] = predecessor if predecessor in files else None
    agent_write(meta_path, meta)
    return chain


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


def run_agent(state_dir: str, seed: int, rounds: int, sessions: list[str],
              pause: float = 0.01, rewind_share: float = 0.1) -> dict[str, list[Any]]:
    """The reference agent's unlocked merges and rewinds on ``sessions`` for ``rounds`` rounds.

    A merge adds ``agent_note_<round>`` to one of a session's 40 newest node
    files; a rewind goes back to one of the last few user turns of the head
    chain (only where the new head is a plain turn, as the agent's own
    rewind would). Returns every write, for the oracle: ``merged``
    ``[session, node, key]`` and ``rewound`` ``[session, [stamped ids], new head]``.
    """
    rng = random.Random(f"agent/{seed}")
    merged: list[list[str]] = []
    rewound: list[list[Any]] = []
    for round_number in range(rounds):
        sid = rng.choice(sessions)
        session_dir = os.path.join(state_dir, "sessions", sid)
        history = os.path.join(session_dir, "history")
        names = sorted(n for n in os.listdir(history)
                       if n.endswith(".json") and not n.startswith("."))
        if not names:
            continue
        if rng.random() < rewind_share:
            turn = _rewind_target(session_dir, rng)
            if turn is not None:
                stamped = agent_rewind(session_dir, turn, time.time())
                with open(os.path.join(session_dir, "meta.json"), encoding="utf-8") as handle:
                    rewound.append([sid, stamped, json.load(handle)["head_id"]])
        else:
            name = rng.choice(names[-40:])
            key = f"{AGENT_KEY}_{round_number}"
            agent_merge(os.path.join(history, name), {key: round_number})
            parsed = parse_filename(name)
            if parsed is not None:
                merged.append([sid, parsed[2], key])
        time.sleep(pause)
    return {"merged": merged, "rewound": rewound}


def _rewind_target(session_dir: str, rng: random.Random) -> str | None:
    """A user turn among the last six of the head chain whose predecessor is a plain turn."""
    with open(os.path.join(session_dir, "meta.json"), encoding="utf-8") as handle:
        head = json.load(handle).get("head_id")
    history = os.path.join(session_dir, "history")
    records: dict[str, dict[str, Any]] = {}
    for name in os.listdir(history):
        if name.endswith(".json") and not name.startswith("."):
            with open(os.path.join(history, name), encoding="utf-8") as handle:
                record = json.load(handle)
            records[record["id"]] = record
    chain: list[str] = []
    while isinstance(head, str) and head in records and head not in chain and len(chain) < 6:
        chain.append(head)
        head = records[head].get("predecessor")
    choices = [
        node for node in chain
        if records[node].get("role") == "user" and not records[node]["metadata"].get("rewound")
        and not records[node]["metadata"].get("spawn_branch_root")
        and records.get(str(records[node].get("predecessor")), {}).get("role") in ("user", "llm")
        and not str(records[node].get("predecessor")).startswith("summary_")
    ]
    return rng.choice(choices) if choices else None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--agent"]:
        state_dir, seed, rounds, *sessions = argv[1:]
        sys.stdin.readline()  # the harness says when: after the workload, while marking goes on
        sys.stdout.buffer.write(orjson.dumps(run_agent(state_dir, int(seed), int(rounds),
                                                       sessions)))
        return 0
    state_dir, seed, rounds, *sessions = argv
    report = run_outside(state_dir, int(seed), int(rounds), sessions)
    sys.stdout.buffer.write(orjson.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
