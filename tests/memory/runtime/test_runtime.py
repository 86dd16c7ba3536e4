"""The runtime end to end: what reaches memory, what is marked, and only once.

Every test counts deliveries (an :class:`EventTally` on the runtime's events):
how many times each node was handed to the writer. The ledger's promise (SPEC §1) is that no
recordable turn of a written branch is omitted and, without a crash, none
is delivered twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from memory.ledger._records import MARKER_KEY
from memory.runtime._runtime import MemoryRuntime, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._topics import parse_topic
from memory.workspace._transaction import Transactions
from memory.writers._extractive import ExtractiveWriter
from memory.writers._writer import Batch
from store import DurableFiles, SessionNotFoundError, UnsafeIdError
from tests.faults import SimulatedCrash
from tests.memory._runtime import chain, config, markers, tally


async def test_the_measured_fork_case_of_spec_1(tmp_path: Path) -> None:
    """Cursor 9, fork at m3, branches of 5 and 11 rows: 2 and 8 own turns, prefix once."""
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="measured")
        trunk = [f"m{i}" for i in range(10)]
        await chain(rt, sid, "ROOT", trunk)
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN  # the trunk: "written up to 9"
        short_tip = await chain(rt, sid, "m2", ["s0", "s1"])  # 3 + 2 = 5 rows
        long_tip = await chain(rt, sid, "m2", [f"l{i}" for i in range(8)])  # 3 + 8 = 11 rows
        assert [r.message_id for r in await rt.pending(sid, short_tip)] == ["s0", "s1"]
        assert [r.message_id for r in await rt.pending(sid, long_tip)] == [
            f"l{i}" for i in range(8)]
        for tip in (short_tip, long_tip):
            await rt.sessions.set_head(sid, tip)
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
            assert await rt.pending(sid, tip) == []
        await rt.drain()
        expected = set(trunk) | {"s0", "s1"} | {f"l{i}" for i in range(8)}
        assert {node for (_, node) in tally(rt).deliveries} == expected
        assert max(tally(rt).deliveries.values()) == 1  # the shared prefix m0..m2 exactly once
        workspace = rt.workspace_id
    assert markers(tmp_path, sid, workspace) == expected


async def test_forks_retries_rewinds_summaries_and_spawns(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="dag")
        await chain(rt, sid, "ROOT", ["u1", "a1", "u2", "a2"])
        # a retry sibling of a2 (does not move the head), then the user continues from it
        await rt.sessions.append(sid, {"id": "a2b", "role": "assistant",
                                       "content": "A retry: I love hiking.", "predecessor": "u2"})
        await rt.sessions.set_head(sid, "a2b")
        await chain(rt, sid, "a2b", ["u3", "a3", "u4", "a4"])
        # rewind the last exchange, re-ask from a3
        await rt.sessions.rewind_to(sid, "u4")
        await chain(rt, sid, "a3", ["u4b", "a4b"])
        # a tool call row and a spawned sub-agent branch
        await rt.sessions.append(sid, {"id": "t1", "role": "tool", "content": "ls output",
                                       "predecessor": "a4b", "caller": "a4b"})
        spawn = await rt.sessions.spawn_branch(sid, "a3", "agent_spawn", "Sub-agent: check Berlin.")
        await chain(rt, sid, spawn["id"], ["sa1"])
        await rt.sessions.insert_summary(sid, ["u1", "a1"], "The user likes tea.")
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        head_branch = await rt.sessions.get_branch(sid)
        recordable = {m["id"] for m in head_branch if m["role"] in ("user", "assistant")}
        workspace = rt.workspace_id
        for row in await rt.sessions.list_branches(sid):
            owed = await rt.pending(sid, row["head_msg_id"])
            assert sum(r.tokens for r in owed) < 8000
        assert max(tally(rt).deliveries.values()) == 1
        delivered = {node for (_, node) in tally(rt).deliveries}
    marked = markers(tmp_path, sid, workspace)
    assert recordable <= marked
    assert marked == delivered
    assert not {"u4", "a4", "t1"} & delivered  # rewound turns and tool rows never reach memory
    for topic in (tmp_path / "memory" / "topics").rglob("*.md"):
        parse_topic(topic.read_text(encoding="utf-8"))  # every topic parses strictly


async def test_bad_session_ids_are_typed_errors_and_nothing_stops(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        with pytest.raises(UnsafeIdError):
            await rt.sessions.append("../x", {"role": "user", "content": "hi"})
        with pytest.raises(SessionNotFoundError):
            await rt.pending("missing")
        sid = await rt.sessions.create()
        await chain(rt, sid, "ROOT", ["u1"])
        assert [r.message_id for r in await rt.pending(sid)] == ["u1"]


async def test_two_sessions_write_concurrently_and_each_turn_once(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config(writer_workers=3)) as rt:
        sids = [await rt.sessions.create(title=f"s{i}") for i in range(6)]

        async def converse(sid: str) -> None:
            await chain(rt, sid, "ROOT", [f"{sid}-{i}" for i in range(8)])
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN

        async with anyio.create_task_group() as tg:
            for sid in sids:
                tg.start_soon(converse, sid)
        await rt.drain()
        assert len(tally(rt).deliveries) == 6 * 8
        assert max(tally(rt).deliveries.values()) == 1
        workspace = rt.workspace_id
    for sid in sids:
        assert len(markers(tmp_path, sid, workspace)) == 8


class CrashBeforeMarking(DurableFiles):
    """Dies (SimulatedCrash) when a session's marker journal is first written: after install."""

    def __init__(self) -> None:
        self.armed = False

    def _step(self, step: str, path: str) -> None:
        if self.armed and step == "open" and "/sessions/" in path and path.endswith("/.journal"):
            self.armed = False
            raise SimulatedCrash(f"crash before marking: {path}")


async def test_a_crash_between_install_and_mark_rewrites_one_batch_once(tmp_path: Path) -> None:
    files = CrashBeforeMarking()
    with pytest.raises(BaseException) as crash:
        async with open_runtime(tmp_path, config=config(files=files)) as rt:
            sid = await rt.sessions.create(title="crash")
            await chain(rt, sid, "ROOT", ["u1", "a1", "u2", "a2"])
            files.armed = True  # the next session journal record is the marker batch
            await rt.flush(sid)
    assert crash.group_contains(SimulatedCrash) if isinstance(crash.value, BaseExceptionGroup) \
        else isinstance(crash.value, SimulatedCrash)
    assert not files.armed
    topics = {p: p.read_bytes() for p in (tmp_path / "memory" / "topics").rglob("*.md")}
    assert topics  # the install happened before the crash
    assert not markers(tmp_path, sid, (tmp_path / "memory/.scriptorium/workspace-id")
                       .read_text().strip())
    async with open_runtime(tmp_path, config=config()) as rt:
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN  # the batch is delivered again...
        await rt.drain()
        assert set(tally(rt).deliveries) == {(sid, n) for n in ["u1", "a1", "u2", "a2"]}
        workspace = rt.workspace_id
    assert markers(tmp_path, sid, workspace) == {"u1", "a1", "u2", "a2"}  # ...and marked
    # the extractive writer merged the repeated facts: memory is byte-identical
    assert {p: p.read_bytes() for p in (tmp_path / "memory" / "topics").rglob("*.md")} == topics


class CountingWriter(ExtractiveWriter):
    def __init__(self, exclusive: bool) -> None:
        super().__init__()
        self.exclusive = exclusive
        self.runs = 0

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        self.runs += 1
        # Let every other worker take its snapshot (or queue for the lock) first,
        # the interleaving under which optimistic commits collide.
        await anyio.wait_all_tasks_blocked()
        return await super().write(batch, workspace)

    async def write_group(self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
                          ) -> list[TopicEdit]:
        self.runs += len(batches)
        await anyio.wait_all_tasks_blocked()
        return await super().write_group(batches, workspace)


async def flush_all(rt: MemoryRuntime, sids: list[str]) -> None:
    """Four turns in each session, every boundary at once, then drain."""
    for sid in sids:
        await chain(rt, sid, "ROOT", [f"{sid}-{i}" for i in range(4)])
    async with anyio.create_task_group() as tg:
        for sid in sids:
            tg.start_soon(rt.flush, sid)
    await rt.drain()


@pytest.mark.parametrize("exclusive", [True, False])
async def test_an_exclusive_writer_never_redoes_a_batch(tmp_path: Path, exclusive: bool) -> None:
    """With 4 workers, optimistic commits collide and redo writer runs; exclusive ones never."""
    writer = CountingWriter(exclusive)
    async with open_runtime(tmp_path, writer, config=config(writer_workers=4)) as rt:
        sids = [await rt.sessions.create() for _ in range(8)]
        await flush_all(rt, sids)
        assert rt.statistics().outcomes == {"written": 8}
        for sid in sids:
            assert await rt.pending(sid) == []
    if exclusive:
        assert writer.runs == 8
    else:
        assert writer.runs > 8  # the contention the exclusive mode removes


class LeavesOneOut(ExtractiveWriter):
    """Group-writes every batch but ``skipped``'s, which must then be run alone."""

    def __init__(self, skipped: str) -> None:
        super().__init__()
        self.skipped = skipped
        self.alone: list[str] = []

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        self.alone.append(batch.session_id)
        return await super().write(batch, workspace)

    async def write_group(self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
                          ) -> list[TopicEdit]:
        await anyio.wait_all_tasks_blocked()  # let the other sessions' jobs queue up
        kept = [batch for batch in batches if batch.session_id != self.skipped]
        return await super().write_group(kept, workspace)


async def test_waiting_batches_commit_as_one_group_and_an_uncovered_one_runs_alone(
        tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    async with open_runtime(tmp_path, config=config(writer_workers=1,
                                                    on_event=events.append)) as rt:
        sids = [await rt.sessions.create() for _ in range(6)]
        rt.writer = writer = LeavesOneOut(sids[3])
        await flush_all(rt, sids)
        assert rt.statistics().outcomes == {"written": 6}
        workspace = rt.workspace_id
    groups = [e for e in events if e["event"] == "group"]
    assert groups and max(g["batches"] for g in groups) > 1
    assert sids[3] in writer.alone  # not covered by its group: written alone, not marked blind
    memory = Transactions(str(tmp_path / "memory"), archived=lambda source: True)
    for sid in sids:
        assert markers(tmp_path, sid, workspace) == {f"{sid}-{i}" for i in range(4)}
        assert memory.all_cited([f"openprogram/{sid}/{sid}-{i}" for i in range(4)])


class FailFirstMarking(DurableFiles):
    """The first session journal record that carries markers fails with an I/O error."""

    def __init__(self) -> None:
        self.failed = 0

    def append_synced(self, path: str, data: bytes) -> int:
        if not self.failed and path.endswith("/.journal") and MARKER_KEY.encode() in data:
            self.failed += 1
            raise OSError(5, "injected I/O error while marking")
        return super().append_synced(path, data)


async def test_a_session_actor_crash_while_marking_merges_again_not_rewrites(
    tmp_path: Path,
) -> None:
    files = FailFirstMarking()
    async with open_runtime(tmp_path, config=config(files=files)) as rt:
        sid = await rt.sessions.create()
        await chain(rt, sid, "ROOT", ["u1", "a1", "u2", "a2"])
        with anyio.fail_after(60):  # a dropped report leaves the boundary waiting forever
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
            await rt.drain()
        assert files.failed == 1  # the actor crashed once, mid-marking
        assert max(tally(rt).deliveries.values()) == 1  # redelivered report, not a second write
        assert rt.statistics().outcomes == {"written": 1}
        workspace = rt.workspace_id
    assert markers(tmp_path, sid, workspace) == {"u1", "a1", "u2", "a2"}
