"""A runtime used after its ``async with`` block: one documented error, from every public method.

Before, ``rt.recall(session=...)`` after the block raised the kernel's
``RuntimeError: registry 'runtime/sessions' is shut down`` while
``rt.recall()`` without a session quietly searched a closed index.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from memory import RuntimeClosedError, ScriptoriumMemoryError, open_runtime
from memory.runtime._runtime import MemoryRuntime, Sessions

# What the runtime's own children call (SessionHost, PoolHost, WatchdogHost); not the API.
HOST_METHODS = {"quarantine", "record_session_end", "write_cycle", "write_group", "deferral"}

CALLS: dict[str, Callable[[MemoryRuntime, str, str], Awaitable[Any]]] = {
    "migrate": lambda rt, sid, node: rt.migrate(),
    "backfill": lambda rt, sid, node: rt.backfill(),
    "pending": lambda rt, sid, node: rt.pending(sid),
    "flush": lambda rt, sid, node: rt.flush(sid),
    "boundary": lambda rt, sid, node: rt.boundary(sid),
    "still_owed": lambda rt, sid, node: rt.still_owed(sid, boundary=True),
    "drain": lambda rt, sid, node: rt.drain(),
    "repair_markers": lambda rt, sid, node: rt.repair_markers(sid),
    "poll_idle": lambda rt, sid, node: rt.poll_idle(),
    "release": lambda rt, sid, node: rt.release(),
    "recall": lambda rt, sid, node: rt.recall("tea"),
    "recall with a session": lambda rt, sid, node: rt.recall("tea", session=sid),
    "context": lambda rt, sid, node: rt.context("tea"),
    "reindex": lambda rt, sid, node: rt.reindex(),
    "sessions.create": lambda rt, sid, node: rt.sessions.create(title="late"),
    "sessions.append": lambda rt, sid, node: rt.sessions.append(
        sid, {"role": "user", "content": "late", "predecessor": node}),
    "sessions.get_branch": lambda rt, sid, node: rt.sessions.get_branch(sid),
    "sessions.list_branches": lambda rt, sid, node: rt.sessions.list_branches(sid),
    "sessions.set_head": lambda rt, sid, node: rt.sessions.set_head(sid, node),
    "sessions.merge_heads": lambda rt, sid, node: rt.sessions.merge_heads(sid, [node]),
    "sessions.rewind_to": lambda rt, sid, node: rt.sessions.rewind_to(sid, node),
    "sessions.spawn_branch": lambda rt, sid, node: rt.sessions.spawn_branch(
        sid, node, "agent_spawn", "late"),
    "sessions.insert_summary": lambda rt, sid, node: rt.sessions.insert_summary(
        sid, [node], "late"),
    "sessions.merge_node_metadata_batch": lambda rt, sid, node: (
        rt.sessions.merge_node_metadata_batch(sid, {node: {"late": True}})),
}


def _public_coroutines(cls: type) -> set[str]:
    return {name for name, member in vars(cls).items()
            if not name.startswith("_") and inspect.iscoroutinefunction(member)}


def test_every_public_method_is_in_the_table() -> None:
    """A public method added later joins the table below, so it is checked too."""
    covered = {name.split(" ")[0] for name in CALLS}
    assert _public_coroutines(MemoryRuntime) - HOST_METHODS == {
        name for name in covered if not name.startswith("sessions.")}
    assert {f"sessions.{name}" for name in _public_coroutines(Sessions)} == {
        name for name in covered if name.startswith("sessions.")}


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_a_closed_runtime_raises_one_documented_error(tmp_path: Path, call: str) -> None:
    async with open_runtime(tmp_path) as rt:
        sid = await rt.sessions.create(title="closed")
        node = (await rt.sessions.append(
            sid, {"role": "user", "content": "Alice drinks tea", "predecessor": "ROOT"}))["id"]
    with pytest.raises(RuntimeClosedError) as caught:
        await CALLS[call](rt, sid, node)
    error = caught.value
    assert isinstance(error, ScriptoriumMemoryError) and isinstance(error, RuntimeError)
    assert str(tmp_path) in str(error) and "open_runtime" in str(error)
    assert error.method.startswith("rt.")


async def test_statistics_stay_readable_after_the_block(tmp_path: Path) -> None:
    """The counters of a finished run (simulate reads a dead incarnation's) are no use of it."""
    async with open_runtime(tmp_path) as rt:
        pass
    assert rt.statistics().in_flight == 0


async def test_a_call_that_fails_inside_the_block_is_not_closed(tmp_path: Path) -> None:
    async with open_runtime(tmp_path) as rt:
        assert await rt.recall("tea") == []
        assert not rt.closed
    assert rt.closed
