"""The write side keeps up: group size follows the backlog, and the lag it leaves is bounded.

Issue 20, item 2. The pool test runs the real :class:`WriterWorker` and
:class:`JobQueue` on virtual time, against a write cycle whose cost is a
fixed part (snapshot, render, install) plus a small part per batch, which
is what makes a group cheaper than its batches alone. Batches arrive at
four times what a cycle of one batch can serve: only growing groups keep
the lag bounded; with batching off (group size 1) the lag grows without
bound (:func:`test_without_batching_the_same_load_falls_behind`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from actors import ActorRef, open_actor
from memory.ledger import SourceRecord
from memory.runtime import MemoryLag
from memory.runtime._backlog import GROUP_LIMIT, group_size, memory_lag
from memory.runtime._events import EventHook, EventTally
from memory.runtime._jobs import JobQueue, WriteJob
from memory.runtime._pool import WriterWorker
from memory.runtime._runtime import open_runtime
from memory.runtime._session_actor import JobFinished, MemorySessionMessage
from memory.runtime._session_state import Flush
from memory.workspace import WorkspaceSnapshot
from memory.writers import Batch
from memory.writers._cycle import WriteOutcome
from memory.writers._extractive import ExtractiveWriter
from tests.memory._runtime import chain, config

FIXED = 0.2  # virtual seconds per write cycle, whatever its size
PER_BATCH = 0.01  # and per batch in it
MARK = 0.05  # a session's marker merge
LAG_BOUND = 2.0  # seconds; due -> durable at four times the capacity of single-batch cycles


# -- the pure rules ------------------------------------------------------------------


def test_a_batch_alone_is_written_alone() -> None:
    assert group_size(0) == 1


def test_the_group_takes_what_waits_up_to_the_limit() -> None:
    assert [group_size(n, limit=8) for n in (1, 3, 7, 8, 500)] == [2, 4, 8, 8, 8]
    assert group_size(10_000) == GROUP_LIMIT


def test_without_batching_every_group_is_one() -> None:
    assert group_size(500, batching=False) == 1


def test_a_limit_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one batch"):
        group_size(3, limit=0)


def test_memory_lag_is_the_age_of_the_oldest_due_batch() -> None:
    lag = memory_lag([105.0, 100.0, 130.0], 120.0, waiting=2, in_flight=3, recent_groups=[1, 4])
    assert lag == MemoryLag(oldest_due_age=20.0, due_waiting=2, in_flight=3, recent_groups=(1, 4))
    assert memory_lag([], 120.0, waiting=0, in_flight=0, recent_groups=()).oldest_due_age is None
    # a due time in the future (a clock step back) is no negative lag
    assert memory_lag([130.0], 120.0, waiting=0, in_flight=1,
                      recent_groups=()).oldest_due_age == 0.0


# -- the write side on virtual time ------------------------------------------------------


def _batch(session: str) -> Batch:
    record = SourceRecord(session, "n1", "user", "tea", 0.0, "Owner (owner/local)")
    return Batch(session, (record,), "")


class CostedHost:
    """A :class:`PoolHost` whose cycle costs ``FIXED + PER_BATCH * n`` and whose sessions mark.

    One cycle at a time, as the runtime's exclusive writer runs them.
    """

    groups_batches = True

    def __init__(self, queue: JobQueue) -> None:
        self.queue = queue
        self.jobs: dict[int, WriteJob] = {}
        self.due: dict[int, float] = {}
        self.due_to_durable: list[float] = []
        self.exclusive = anyio.Lock()

    def submit(self, session: str) -> None:
        now = anyio.current_time()
        job = self.queue.submit(_batch(session), boundary=False, due_at=now)
        self.jobs[job.id], self.due[job.id] = job, now

    async def write_group(self, batches: Sequence[Batch]) -> list[WriteOutcome]:
        async with self.exclusive:
            await anyio.sleep(FIXED + PER_BATCH * len(batches))
        return [WriteOutcome(b.node_ids, ("topics/tea.md",), ()) for b in batches]

    async def deferral(self, batch: Batch) -> float:
        return 0.0

    def defer_job(self, job: WriteJob, delay: float) -> None:
        raise AssertionError("nothing is deferred here")

    def record_outcome(self, job: WriteJob, outcome: WriteOutcome) -> None:
        pass

    def abandon_job(self, job: WriteJob) -> None:
        raise AssertionError(f"job {job.id} abandoned")

    def session_ref(self, session: str) -> ActorRef[MemorySessionMessage]:
        return cast(ActorRef[MemorySessionMessage], self)

    async def call(self, message: Any) -> None:  # the session actor: merge, then done
        assert isinstance(message, JobFinished)
        await anyio.sleep(MARK)
        self.queue.done(self.jobs[message.job_id])
        self.due_to_durable.append(anyio.current_time() - self.due.pop(message.job_id))


async def _run(limit: int) -> tuple[dict[int, int], EventTally, CostedHost]:
    """Ten batches 2 s apart (light), then 20 a second for 30 s (heavy); two workers."""
    tally = EventTally()
    queue = JobQueue(EventHook(tally, anyio.current_time))
    host = CostedHost(queue)
    slot = anyio.Lock()
    async with open_actor(WriterWorker(host, queue, slot=slot, limit=limit), name="w0"), \
            open_actor(WriterWorker(host, queue, slot=slot, limit=limit), name="w1"):
        for i in range(10):
            host.submit(f"light-{i}")
            await anyio.sleep(2.0)
        light = dict(tally.groups)
        for i in range(600):
            host.submit(f"heavy-{i}")
            await anyio.sleep(0.05)
        await queue.drain()
    return light, tally, host


@pytest.mark.virtual_time
async def test_group_size_grows_with_the_backlog_and_the_lag_stays_bounded() -> None:
    light, tally, host = await _run(GROUP_LIMIT)
    assert len(host.due_to_durable) == 610
    assert light == {1: 10}  # a light load: each batch alone...
    assert max(host.due_to_durable[:10]) == pytest.approx(FIXED + PER_BATCH + MARK)  # ...at once
    assert max(host.due_to_durable) < LAG_BOUND
    assert max(tally.latencies["memory_lag"]) < LAG_BOUND  # what statistics() saw
    assert max(tally.groups) >= 4  # heavy: the backlog is taken in groups


@pytest.mark.virtual_time
async def test_without_batching_the_same_load_falls_behind() -> None:
    """The load above is one only groups serve: one batch per cycle, the lag grows past the bound."""
    _, tally, host = await _run(1)
    assert set(tally.groups) == {1}
    assert max(host.due_to_durable) > 10 * LAG_BOUND


# -- statistics() on a running runtime -------------------------------------------------


class HeldWriter(ExtractiveWriter):
    """The extractive writer, held at the start of each write until ``go`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = anyio.Event()
        self.go = anyio.Event()

    async def write(self, batch: Batch, snapshot: WorkspaceSnapshot) -> Any:
        self.entered.set()
        await self.go.wait()
        return await super().write(batch, snapshot)


async def test_statistics_report_the_age_of_the_oldest_due_batch(tmp_path: Path) -> None:
    wall = [1_000.0]
    writer = HeldWriter()
    async with open_runtime(tmp_path, writer, config=config(clock=lambda: wall[0])) as rt:
        sid = await rt.sessions.create(title="tea")
        await chain(rt, sid, "ROOT", ["u1", "a1"])
        assert rt.statistics().lag == MemoryLag(None, 0, 0, ())
        await rt.session_ref(sid).call(Flush())  # due now (the boundary), not waited for
        await writer.entered.wait()
        wall[0] += 7.5
        assert rt.statistics().lag == MemoryLag(7.5, 0, 1, (1,))
        writer.go.set()
        await rt.drain()
        assert rt.statistics().lag == MemoryLag(None, 0, 0, (1,))


class GatedHost(CostedHost):
    """Its first write waits for ``go``; every write records the sessions of its group."""

    def __init__(self, queue: JobQueue) -> None:
        super().__init__(queue)
        self.go = anyio.Event()
        self.groups: list[list[str]] = []

    async def write_group(self, batches: Sequence[Batch]) -> list[WriteOutcome]:
        self.groups.append([b.session_id for b in batches])
        if len(self.groups) == 1:
            await self.go.wait()
        return [WriteOutcome(b.node_ids, ("topics/tea.md",), ()) for b in batches]


async def test_workers_waiting_for_the_slot_hold_no_job() -> None:
    """Four workers; while one writes, three batches come due: the next group takes all three.

    A worker that took a job before its turn at the slot would hold it out
    of the next group, which would then be written in groups of one.
    """
    queue = JobQueue(EventHook(None, anyio.current_time))
    host = GatedHost(queue)
    slot = anyio.Lock()
    async with contextlib.AsyncExitStack() as stack:
        for i in range(4):
            await stack.enter_async_context(
                open_actor(WriterWorker(host, queue, slot=slot), name=f"w{i}"))
        host.submit("a")
        await anyio.wait_all_tasks_blocked()
        assert host.groups == [["a"]]
        for session in ("b", "c", "d"):
            host.submit(session)
        await anyio.wait_all_tasks_blocked()
        host.go.set()
        await queue.drain()
    assert host.groups == [["a"], ["b", "c", "d"]]
