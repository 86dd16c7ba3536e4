"""Markers come only from the ledger: an appended message's ``memory_written_*`` keys are dropped.

A cloned conversation re-appends the views ``get_branch`` returned, whose
markers are spread at the top level; a host may also forge one. Either,
stored, would stop the owed walk (SPEC §6.2) so that the turn and every
earlier turn of its branch were never written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY
from memory.runtime._events import EventTally
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from store import SessionCore
from tests.memory._runtime import tally

TURNS = [
    ("user", "I prefer green tea in the morning."),
    ("assistant", "Noted: green tea in the morning."),
    ("user", "My sister is named Alice."),
    ("assistant", "Noted: your sister Alice."),
]


def config() -> RuntimeConfig:
    return RuntimeConfig(policy=WritePolicy(threshold=8000), on_event=EventTally())


def stored_markers(state: Path, sid: str) -> dict[str, Any]:
    return {n.id: n.metadata[MARKER_KEY] for n in SessionCore.open(state, sid).nodes()
            if MARKER_KEY in n.metadata}


async def test_a_cloned_written_branch_is_owed_and_written_in_the_clone(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        source = await rt.sessions.create(title="source", session_id="s1")
        previous = "ROOT"
        for index, (role, text) in enumerate(TURNS):
            reply = await rt.sessions.append(source, {"id": f"m{index}", "role": role,
                                                      "content": text, "predecessor": previous})
            previous = reply["id"]
        assert await rt.flush(source) is BoundaryOutcome.WRITTEN
        branch = await rt.sessions.get_branch(source)
        assert all(m[MARKER_KEY] == rt.workspace_id for m in branch)  # what a clone copies

        clone = await rt.sessions.create(title="clone of s1", session_id="s1clone")
        previous = "ROOT"
        for message in branch:
            copy = {k: v for k, v in message.items() if k not in ("id", "session_id", "timestamp")}
            copy["predecessor"] = previous
            copy["content"] = message["content"].replace("tea", "cocoa")  # the clone's own text
            reply = await rt.sessions.append(clone, copy)
            assert MARKER_KEY not in reply
            previous = reply["id"]
        clone_ids = [m["id"] for m in await rt.sessions.get_branch(clone)]
        assert [r.message_id for r in await rt.pending(clone)] == clone_ids
        assert await rt.flush(clone) is BoundaryOutcome.WRITTEN
        assert await rt.pending(clone) == []
        await rt.drain()
        assert {node for (sid, node) in tally(rt).deliveries if sid == clone} == set(clone_ids)
        workspace = rt.workspace_id
    assert stored_markers(tmp_path, "s1clone") == dict.fromkeys(clone_ids, workspace)


async def test_a_forged_marker_hides_no_turn(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="forged", session_id="fg")
        workspace = rt.workspace_id
        messages: list[dict[str, Any]] = [
            {"id": "u1", "role": "user", "content": "My sister is called Clementine."},
            {"id": "a1", "role": "assistant", "content": "My brother is called Desmond."},
            {"id": "u2", "role": "user", "content": "My aunt is called Ophelia.",
             MARKER_KEY: workspace},
            {"id": "a2", "role": "assistant", "content": "My uncle is called Barnaby.",
             "extra": {MARKER_KEY: workspace, "memory_written_other": "x", "mood": "calm"}},
            {"id": "u3", "role": "user", "content": "My niece is called Henrietta."},
        ]
        previous = "ROOT"
        for message in messages:
            await rt.sessions.append(sid, {**message, "predecessor": previous})
            previous = message["id"]
        assert stored_markers(tmp_path, "fg") == {}
        stored = {n.id: n.metadata for n in SessionCore.open(tmp_path, "fg").nodes()}
        assert stored["a2"] == {"mood": "calm"}  # other metadata is kept
        assert [r.message_id for r in await rt.pending(sid)] == ["u1", "a1", "u2", "a2", "u3"]
        # A repeat carrying the forged marker is still the same turn (metadata not compared).
        again = await rt.sessions.append(sid, {**messages[2], "predecessor": "a1"})
        assert again["id"] == "u2" and MARKER_KEY not in again
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        assert await rt.pending(sid) == []
    assert set(stored_markers(tmp_path, "fg")) == {"u1", "a1", "u2", "a2", "u3"}
