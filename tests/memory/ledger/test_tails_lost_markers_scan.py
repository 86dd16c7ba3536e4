"""The lost-marker scan skips its walk only when no lost marker can have appeared.

After a scan that found no stranded record, the session actor keeps a
:class:`ConsistentSince` and, while only nodes were added since, checks the
added nodes instead of walking every branch again. Random sessions (forks,
marker merges, rewinds, head moves, ``merged_heads`` written by the agent,
turns appended to hidden and merged branches, outside writes, reloads) are
driven through a real :class:`SessionCore`; whenever the check says
"still consistent", a walk from scratch must find no stranded record. The
planted faults (trusting any added node, ignoring ``merged_heads``) fail it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from memory.ledger._lost_markers import stranded_records
from memory.ledger._records import MARKER_KEY
from memory.ledger._tails import ConsistentSince, NodeRecords, listed_branches
from store import SessionCore

OURS, THEIRS = "ws-ours", "ws-theirs"


def stranded(core: SessionCore) -> list[str]:
    branches, _ = listed_branches(core, NodeRecords(core.session))
    return sorted({r.message_id for records in branches
                   for r in stranded_records(records, OURS)})


def write_merged_heads(state: Path, heads: list[str]) -> None:
    """The agent rewrites meta.json (unlocked), naming merged heads."""
    path = state / "sessions" / "s" / "meta.json"
    meta = json.loads(path.read_bytes())
    meta["merged_heads"] = heads
    temp = path.with_suffix(".agent")
    temp.write_text(json.dumps(meta))
    os.replace(temp, path)


def step(rng: random.Random, state: Path, core: SessionCore, other: SessionCore,
         serial: int) -> None:
    ids = [node.id for node in core.nodes()]
    choice = rng.random()
    if not ids or choice < 0.6:
        owner = other if rng.random() < 0.1 else core
        message: dict[str, object] = {"id": f"n{serial}",
                                      "role": rng.choice(["user", "assistant"]),
                                      "content": rng.choice(["words", "more words", ""])}
        if ids:
            message["predecessor"] = (owner.head if rng.random() < 0.5 and owner.head
                                      else rng.choice(ids))
        if rng.random() < 0.04:
            message["rewound"] = True
        owner.append(message)
    elif choice < 0.78:
        owner = other if rng.random() < 0.3 else core
        chosen = rng.sample(ids, k=min(len(ids), rng.randint(1, 2)))
        workspace = OURS if rng.random() < 0.85 else THEIRS
        owner.merge_node_metadata_batch({node: {MARKER_KEY: workspace} for node in chosen})
    elif choice < 0.84:
        users = [n.id for n in core.branch_nodes() if n.role == "user"]
        if users:
            core.rewind_to(rng.choice(users))
    elif choice < 0.9:
        write_merged_heads(state, rng.sample(ids, k=min(len(ids), rng.randint(0, 2))))
    elif choice < 0.95:
        core.set_head(rng.choice([n.id for n in core.nodes() if not n.is_summary]))
    else:
        core.reload()


@pytest.mark.parametrize("seed", range(10))
def test_still_consistent_means_a_walk_finds_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    core = SessionCore.create(tmp_path, "s")
    other = SessionCore.open(tmp_path, "s")
    consistent: ConsistentSince | None = None
    skipped = 0
    for serial in range(150):
        step(rng, tmp_path, core, other, serial)
        if consistent is not None and consistent.still(core, OURS):
            skipped += 1
            assert stranded(core) == [], (seed, serial)
            continue
        consistent = None
        version, merged = core.index_version, core.meta().get("merged_heads")
        branches, walked = listed_branches(core, NodeRecords("s"))
        if not any(stranded_records(records, OURS) for records in branches):
            consistent = ConsistentSince(version, merged, walked)
    assert skipped > 0  # the check was trusted, not only the walk


def consistent_with_a_hidden_stranded_record(state: Path) -> tuple[SessionCore, ConsistentSince]:
    """u1 -> a1 (the head) and u1 -> a2, a2 marked and a merged head: u1 is stranded unseen."""
    core = SessionCore.create(state, "s")
    core.append({"id": "u1", "role": "user", "content": "a question"})
    core.append({"id": "a1", "role": "assistant", "content": "an answer", "predecessor": "u1"})
    core.append({"id": "a2", "role": "assistant", "content": "a retry", "predecessor": "u1"})
    core.merge_node_metadata_batch({"a2": {MARKER_KEY: OURS}})
    write_merged_heads(state, ["a2"])
    assert stranded(core) == []  # a2's branch is not listed
    _, walked = listed_branches(core, NodeRecords("s"))
    assert walked == {"u1", "a1"}
    return core, ConsistentSince(core.index_version, core.meta().get("merged_heads"), walked)


def test_a_turn_continuing_a_merged_head_means_walking_again(tmp_path: Path) -> None:
    core, consistent = consistent_with_a_hidden_stranded_record(tmp_path)
    core.append({"id": "u2", "role": "user", "content": "go on", "predecessor": "a2"})
    assert stranded(core) == ["u1"]
    assert not consistent.still(core, OURS)


def test_merged_heads_rewritten_means_walking_again(tmp_path: Path) -> None:
    core, consistent = consistent_with_a_hidden_stranded_record(tmp_path)
    write_merged_heads(tmp_path, [])  # the same nodes: the reload keeps the index
    core.reload()
    assert core.index_version == consistent.version
    assert stranded(core) == ["u1"]
    assert not consistent.still(core, OURS)


def test_turns_appended_after_covered_nodes_keep_it_consistent(tmp_path: Path) -> None:
    core, consistent = consistent_with_a_hidden_stranded_record(tmp_path)
    core.append({"id": "u2", "role": "user", "content": "go on", "predecessor": "a1"})
    core.append({"id": "a3", "role": "assistant", "content": "sure", "predecessor": "u2"})
    core.reload()  # the watchdog's scan: every file read again, nothing else changed
    assert consistent.still(core, OURS) and stranded(core) == []
    assert consistent.version == core.index_version
