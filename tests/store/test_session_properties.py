"""Properties of random operation sequences on one session.

Whatever the sequence of appends (continuations, forks, tool calls),
rewinds, summaries, spawns, head moves and merges: every file parses, the
head is never a summary, ``updated_at`` moves exactly on appends, every
listed tip walks, and the index the core kept current by its own writes
equals the one rebuilt from disk by a fresh owner.
"""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from store import SessionOptions
from store._errors import InvalidRequestError
from store._session import SessionCore

operations = st.lists(
    st.tuples(
        st.sampled_from(["continue", "fork", "tool", "rewind", "summary", "spawn", "head",
                         "merge", "retire"]),
        st.integers(0, 10_000),
    ),
    min_size=1,
    max_size=25,
)


def _apply(core: SessionCore, op: str, pick: int, counter: list[int]) -> bool:
    """Run one operation; True if it is an append (moves updated_at)."""
    nodes = core.nodes()
    chosen = nodes[pick % len(nodes)] if nodes else None
    counter[0] += 1
    new_id = f"x{counter[0]}"
    if op == "continue" or chosen is None:
        role = "assistant" if core.head and core.node(core.head).role == "user" else "user"
        core.append({"id": new_id, "role": role, "content": new_id})
        return True
    if op == "fork":
        if not chosen.is_conversational or chosen.is_summary:
            return False
        core.append({"id": new_id, "role": "user", "content": new_id, "predecessor": chosen.id})
        return True
    if op == "tool":
        core.append({"id": new_id, "role": "tool", "content": "t", "predecessor": chosen.id,
                     "caller": chosen.id})
        return True
    if op == "rewind":
        if core.head is None:
            return False
        users = [n.id for n in core.branch_nodes() if n.role == "user"]
        if users:
            core.rewind_to(users[pick % len(users)])
        return False
    if op == "summary":
        branch = [n.id for n in core.branch_nodes()]
        if len(branch) < 2:
            return False
        core.insert_summary(branch[:2], "summary")
        return True
    if op == "spawn":
        core.spawn_branch(chosen.id, "agent_spawn", "go")
        return True
    if op == "head":
        try:
            core.set_head(chosen.id)
        except InvalidRequestError:
            assert chosen.is_summary
        return False
    if op == "merge":
        targets = {n.id: {f"memory_written_w{pick % 3}": f"v{counter[0]}"} for n in nodes[:3]}
        core.merge_node_metadata_batch(targets)
        return False
    core.retire_journals()
    return False


def _view(core: SessionCore) -> tuple[Any, ...]:
    return (
        [(n.id, n.seq, n.predecessor, n.caller, n.metadata) for n in core.nodes()],
        core.head,
        core.list_branches(),
        core.meta()["updated_at"],
    )


@settings(max_examples=40, deadline=None)
@given(operations)
def test_random_operation_sequences_keep_every_invariant(ops: list[tuple[str, int]]) -> None:
    ticks = iter(range(1, 10_000))
    with tempfile.TemporaryDirectory() as state:
        core = SessionCore.create(state, "p", options=SessionOptions(
            clock=lambda: float(next(ticks))))
        counter = [0]
        for op, pick in ops:
            before = core.meta()["updated_at"]
            appended = _apply(core, op, pick, counter)
            assert (core.meta()["updated_at"] != before) == appended, op
            assert core.problems == []
            head = core.head
            assert head is None or not core.node(head).is_summary
            for row in core.list_branches():
                core.get_branch(row["head_msg_id"])
            kept = _view(core)
            if pick % 2:  # else a second owner replays our outstanding journals
                core.retire_journals()
            assert _view(SessionCore.open(state, "p")) == kept
        # a second owner's replay may make it reload; its own writes never do
        assert core.statistics().index_rebuilds <= 1 + sum(pick % 2 == 0 for _, pick in ops)
        core.close()
