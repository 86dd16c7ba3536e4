"""The memory lag and the group-size rule (issue 20)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from memory.runtime import MemoryLag
from memory.runtime._backlog import GROUP_LIMIT, group_size, memory_lag
from memory.runtime._runtime import open_runtime
from memory.runtime._session_actor import Flush
from memory.workspace import WorkspaceSnapshot
from memory.writers import Batch
from memory.writers._extractive import ExtractiveWriter
from tests.memory.runtime.test_runtime import chain, config

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
