"""The extractive writer and the snapshot's file reads run off the event loop (SPEC §2).

A large batch takes the writer a good fraction of a second of CPU and reads
topic files through the snapshot; on the loop's thread that would stall every
timer, lock wait and message of the process meanwhile. Each test starts a
timer on the loop when the writer starts and makes the writer's own code path
(the snapshot's ``read``, called from inside the writer) wait for that timer
with a :class:`threading.Event`. Off the loop, the timer fires at its
deadline (virtual time) and the batch then completes; on the loop, the timer
cannot fire while the writer waits, the bounded wait runs out and the test
fails. Nothing is timed: the bound only turns a hang into a failure.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from memory.ledger._ledger import WritePolicy
from memory.ledger._records import SourceMeta, SourceRecord
from memory.runtime._runtime import RuntimeConfig, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._transaction import Transactions
from memory.writers._extractive import ExtractiveWriter, extract_edits
from memory.writers._writer import Batch

pytestmark = pytest.mark.virtual_time

TIMER = 5.0  # virtual seconds
GATE_BOUND = 20.0  # real seconds the writer waits for the timer before it gives up


class TimedWriter(ExtractiveWriter):
    """The extractive writer, gated: its first snapshot read waits for a timer on the loop."""

    def __init__(self) -> None:
        super().__init__()
        self.fired_at: list[float] = []
        self.deadlines: list[float] = []
        self.read_threads: set[int] = set()
        self.loop_thread = threading.get_ident()

    def _gated(self, workspace: WorkspaceSnapshot, fired: threading.Event) -> WorkspaceSnapshot:
        def read(path: str) -> str:
            self.read_threads.add(threading.get_ident())
            if not fired.wait(GATE_BOUND):
                raise AssertionError("the loop's timer never fired while the batch was written")
            return workspace.read(path)

        return WorkspaceSnapshot(workspace.revision, workspace.topic_paths, read)

    async def _timer(self, fired: threading.Event) -> None:
        self.deadlines.append(anyio.current_time() + TIMER)
        await anyio.sleep(TIMER)
        self.fired_at.append(anyio.current_time())
        fired.set()

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        fired = threading.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._timer, fired)
            edits = await super().write(batch, self._gated(workspace, fired))
        return edits

    async def write_group(self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
                          ) -> list[TopicEdit]:
        fired = threading.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._timer, fired)
            edits = await super().write_group(batches, self._gated(workspace, fired))
        return edits

    def assert_on_time(self) -> None:
        assert self.fired_at and self.fired_at == self.deadlines
        assert self.loop_thread not in self.read_threads


def turns(session: str, count: int, ts: float = 1_755_000_000.0) -> list[SourceRecord]:
    meta = SourceMeta("owner", "owner/x", "owner", "trusted")
    return [SourceRecord(session, f"n{i}", "user", (
        f"I prefer blend {i} of tea with breakfast. We decided to rename module {i} next "
        f"week. My colleague Ada {i} reviews patch {i}. The office {i} is in Berlin."
    ), ts + 60 * i, "Owner", meta=meta) for i in range(count)]


def workspace_with_topics(root: Path) -> Transactions:
    """A workspace whose topic files the writer must read (one committed batch)."""
    memory = Transactions(str(root), archived=lambda source: True)
    records = turns("old", 50)
    memory.commit(extract_edits(records, memory.snapshot()),
                  base_revision=memory.snapshot().revision,
                  batch_sources=frozenset(record.source_id for record in records))
    return memory


@pytest.mark.parametrize("group", [False, True], ids=["write", "write_group"])
async def test_a_timer_fires_on_time_while_a_large_batch_is_written(
        tmp_path: Path, group: bool) -> None:
    memory = workspace_with_topics(tmp_path)
    view = memory.snapshot()
    assert view.topic_paths  # the writer reads real files through the snapshot
    writer = TimedWriter()
    if group:
        batches = [Batch(sid, tuple(turns(sid, 500)), "") for sid in ("s1", "s2")]
        edits = await writer.write_group(batches, view)
    else:
        edits = await writer.write(Batch("s1", tuple(turns("s1", 1000)), ""), view)
    writer.assert_on_time()
    assert {edit.path for edit in edits} >= {"topics/decisions.md", "topics/preferences.md"}


# A cushion, not wait_for_threads: the gated writer's thread waits for a loop timer, so
# the clock must jump while a thread runs; 50 ms lets the runtime's disk hops land first.
@pytest.mark.virtual_time(cushion=0.05)
async def test_the_runtime_keeps_its_timers_while_a_large_batch_is_written(
        tmp_path: Path) -> None:
    """The same through the runtime: pool, write cycle, the workspace actor's snapshot."""
    writer = TimedWriter()
    # No writer timeout or lock bound: on virtual time they would jump ahead of real
    # thread work (a session lock held by an fsync would read as stuck for a day).
    config = RuntimeConfig(policy=WritePolicy(threshold=32000), writer_workers=1,
                           writer_timeout=math.inf, lock_timeout=None)
    async with open_runtime(tmp_path, writer, config=config) as rt:
        sid = await rt.sessions.create()
        previous = "ROOT"
        for record in turns(sid, 100):
            await rt.sessions.append(sid, {"id": record.message_id, "role": "user",
                                           "content": record.content, "predecessor": previous})
            previous = record.message_id
        # a first write leaves topic files for the gated batch to read
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        for record in turns(sid, 100, ts=1_756_000_000.0):
            node = f"m{record.message_id}"
            await rt.sessions.append(sid, {"id": node, "role": "user",
                                           "content": record.content, "predecessor": previous})
            previous = node
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        assert await rt.pending(sid) == []
    writer.assert_on_time()


async def test_a_cancelled_write_returns_at_once_and_leaves_the_writer_whole(
        tmp_path: Path) -> None:
    """Cancelling abandons the thread (it only computes); the next write gives the same edits."""
    memory = workspace_with_topics(tmp_path)
    view = memory.snapshot()
    entered, release = threading.Event(), threading.Event()

    def read(path: str) -> str:
        entered.set()
        if not release.wait(GATE_BOUND):
            raise AssertionError("the cancelled write waited for its thread")
        return view.read(path)

    writer = ExtractiveWriter()
    batch = Batch("s1", tuple(turns("s1", 200)), "")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            async def cancel_once_reading() -> None:
                await anyio.to_thread.run_sync(entered.wait, GATE_BOUND)
                scope.cancel()

            tg.start_soon(cancel_once_reading)
            await writer.write(batch, WorkspaceSnapshot(view.revision, view.topic_paths, read))
    assert scope.cancelled_caught
    assert not release.is_set()  # it returned while its thread was still inside the snapshot
    release.set()  # the abandoned thread finishes; the next write waits for the index meanwhile
    assert await writer.write(batch, view) == extract_edits(batch.records, view)
