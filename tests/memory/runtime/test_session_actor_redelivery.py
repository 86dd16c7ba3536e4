"""A crash after a durable effect never repeats it (issue 10, item 1).

The reproduction: a memory session actor whose ``tip_moved`` raises
``OSError`` once (the claim file hits ENOSPC while planning, after the
append was journaled and installed), under the runtime's supervisor; two
appends. The kernel used to deliver the crashed ``Append`` again, and the
next incarnation appended the same turn under a new id: "I prefer tea."
twice. Now an append with its own id is redelivered and finds its turn
(the caller gets the node), and one without is not redelivered (the caller
gets ``ActorCrashedError`` with the OSError as cause). Either way, one copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

import memory.runtime._runtime
from actors import ActorCrashedError, open_actor
from memory._errors import BoundaryError
from memory.runtime._runtime import open_runtime
from memory.runtime._session_actor import MemorySessionActor
from memory.runtime._session_state import BoundaryOutcome, SessionParts
from memory.runtime._workspace_actor import QuarantineBatch, ReadQuarantine, WorkspaceActor
from memory.workspace._quarantine import QuarantineEntry
from store import SessionCore
from store._actor import TipMoved
from tests.memory._runtime import chain, config, virtual_config

TEA = "I prefer tea."


class FullDiskOnce(MemorySessionActor):
    """``tip_moved`` raises ENOSPC the first time any incarnation reaches it."""

    crashes: ClassVar[list[TipMoved]] = []

    async def tip_moved(self, event: TipMoved) -> None:
        if not FullDiskOnce.crashes:
            FullDiskOnce.crashes.append(event)
            raise OSError(28, "No space left on device", ".claim")
        await super().tip_moved(event)


@pytest.fixture
def full_disk_once(monkeypatch: pytest.MonkeyPatch) -> list[TipMoved]:
    FullDiskOnce.crashes = []

    def factory(parts: SessionParts) -> Any:
        return lambda session: FullDiskOnce(parts, session)

    monkeypatch.setattr(memory.runtime._runtime, "session_factory", factory)
    return FullDiskOnce.crashes


def contents(state: Path, sid: str) -> list[Any]:
    return [node.output for node in SessionCore.open(state, sid).nodes()]


async def two_appends(state: Path, first: dict[str, Any], second: dict[str, Any]) -> Any:
    """Append ``first`` (it crashes the actor once) and ``second``; the first call's outcome."""
    async with open_runtime(state, config=config()) as rt:
        sid = await rt.sessions.create(title="tea", session_id="s1")
        outcome: Any
        try:
            outcome = await rt.sessions.append(sid, first)
        except ActorCrashedError as exc:
            outcome = exc
        await rt.sessions.append(sid, second)
        branch = await rt.sessions.get_branch(sid)
        assert [m["content"] for m in branch] == [TEA, second["content"]]
        await rt.drain()
    return outcome


async def test_an_append_without_an_id_crashed_after_its_write_is_written_once(
    tmp_path: Path, full_disk_once: list[TipMoved]
) -> None:
    outcome = await two_appends(
        tmp_path, {"role": "user", "content": TEA},
        {"role": "assistant", "content": "Noted: tea."})
    assert full_disk_once, "the fault did not fire"
    assert isinstance(outcome, ActorCrashedError), outcome
    assert isinstance(outcome.__cause__, OSError) and outcome.__cause__.errno == 28
    assert "not idempotent" in str(outcome)
    assert contents(tmp_path, "s1").count(TEA) == 1


async def test_an_append_with_its_own_id_crashed_after_its_write_returns_the_node_once(
    tmp_path: Path, full_disk_once: list[TipMoved]
) -> None:
    outcome = await two_appends(
        tmp_path, {"id": "u1", "role": "user", "content": TEA},
        {"id": "a1", "role": "assistant", "content": "Noted: tea."})
    assert full_disk_once, "the fault did not fire"
    assert isinstance(outcome, dict) and (outcome["id"], outcome["content"]) == ("u1", TEA)
    assert contents(tmp_path, "s1") == [TEA, "Noted: tea."]


class PlanningFailsAfterTheMarks(MemorySessionActor):
    """The planning that follows a job's marker merge raises once (the claim file, say)."""

    crashed: ClassVar[list[int]] = []

    async def _plan(self) -> None:
        ledger = self.ledger
        if (not PlanningFailsAfterTheMarks.crashed and ledger.boundary is not None
                and ledger.boundary.batches == 1 and ledger.in_flight is None):
            PlanningFailsAfterTheMarks.crashed.append(1)
            raise OSError(28, "No space left on device", ".claim")
        await super()._plan()


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_boundary_ends_when_the_planning_after_its_marks_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    PlanningFailsAfterTheMarks.crashed = []
    monkeypatch.setattr(memory.runtime._runtime, "session_factory", lambda runtime: (
        lambda session: PlanningFailsAfterTheMarks(runtime, session)))
    async with open_runtime(tmp_path, config=virtual_config()) as rt:
        sid = await rt.sessions.create(title="tea", session_id="s1")
        await chain(rt, sid, "ROOT", ["u1", "a1"])
        with anyio.fail_after(60):  # virtual: the crash ends the boundary, with its reason
            with pytest.raises(BoundaryError, match="its actor crashed"):
                await rt.flush(sid)
        assert PlanningFailsAfterTheMarks.crashed, "the fault did not fire"
        with anyio.fail_after(60):  # the restarted actor found the marks: nothing owed
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        assert await rt.pending(sid) == []


async def test_a_quarantine_entry_delivered_twice_is_recorded_once(tmp_path: Path) -> None:
    entry = QuarantineEntry(session="s1", node_ids=("u1",), error="boom", failures=5, at=1.0,
                            updated_at=1.0)
    memory_dir = tmp_path / "memory"
    async with open_actor(WorkspaceActor(str(memory_dir)), name="workspace") as ref:
        await ref.call(QuarantineBatch(entry))
        await ref.call(QuarantineBatch(entry))  # what a redelivery after the write does
        assert len(await ref.call(ReadQuarantine())) == 1
