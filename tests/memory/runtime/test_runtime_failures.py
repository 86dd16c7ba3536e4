"""Writers that fail (SPEC §7): nothing is marked, the batch comes back, bad sessions park.

All on virtual time: retry backoff, worker restart backoff and the writer
timeout elapse without real waiting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from actors import ActorRef
from memory.runtime._runtime import MemoryRuntime, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._quarantine import read_quarantine
from memory.writers._extractive import ExtractiveWriter
from supervisors import (
    SupervisorMessage,
    SupervisorStatistics,
    get_child,
    restart_child,
    terminate_child,
)
from tests.faults import FaultyWriter, WriterFault
from tests.memory._runtime import chain, marked, tally, virtual_config


async def pool_restarts(rt: MemoryRuntime) -> int:
    assert rt.root is not None
    pool = await get_child(rt.root, "writers")
    stats = await pool.inspect()
    assert isinstance(stats, SupervisorStatistics)
    return stats.restarts


@pytest.mark.virtual_time(wait_for_threads=True)
@pytest.mark.parametrize("how", ["raise", "hang", "reject", "empty"])
async def test_a_failing_writer_marks_nothing_retries_then_quarantines(
    tmp_path: Path, how: WriterFault
) -> None:
    async with open_runtime(tmp_path, config=virtual_config()) as rt:
        bad = await rt.sessions.create(title="bad")
        good = await rt.sessions.create(title="good")
        writer = FaultyWriter(how, session=bad)
        rt.writer = writer
        await chain(rt, bad, "ROOT", ["b1", "b2"])
        await chain(rt, good, "ROOT", ["g1", "g2"])
        outcomes = []
        for _ in range(3):
            outcomes.append(await rt.flush(bad))
            assert marked(tmp_path, bad) == set()  # nothing marked, ever
        # the same batch was delivered again after each backoff, then parked
        assert writer.calls == 3
        assert outcomes[-1] is BoundaryOutcome.QUARANTINED
        assert all(o is not BoundaryOutcome.WRITTEN for o in outcomes)
        entries = read_quarantine(str(tmp_path / "memory"))
        assert [e.node_ids for e in entries] == [("b1", "b2")]
        assert await rt.flush(bad) is BoundaryOutcome.QUARANTINED  # skipped, not retried hot
        assert writer.calls == 3
        # the other session never waited on the bad one
        assert await rt.flush(good) is BoundaryOutcome.WRITTEN
        assert sorted(marked(tmp_path, good)) == ["g1", "g2"]
        if how in ("raise", "hang"):
            assert await pool_restarts(rt) >= 3  # the worker crashed and was restarted
        # the session changing releases the batch (SPEC §7)
        rt.writer = ExtractiveWriter()
        await chain(rt, bad, "b2", ["b3"])
        assert await rt.flush(bad) is BoundaryOutcome.WRITTEN
        await rt.drain()
    assert sorted(marked(tmp_path, bad)) == ["b1", "b2", "b3"]


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_an_operator_release_unparks_the_batch(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=virtual_config(max_failures=1)) as rt:
        sid = await rt.sessions.create()
        rt.writer = FaultyWriter("raise", session=sid)
        await chain(rt, sid, "ROOT", ["u1"])
        assert await rt.flush(sid) is BoundaryOutcome.QUARANTINED
        rt.writer = ExtractiveWriter()
        released = await rt.release(sid)
        assert [e.node_ids for e in released] == [("u1",)]
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
    assert read_quarantine(str(tmp_path / "memory")) == []
    assert marked(tmp_path, sid) == {"u1"}


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_idle_watchdog_writes_an_idle_session_once(tmp_path: Path) -> None:
    ended: list[float] = []
    written = anyio.Event()

    def on_event(event: dict[str, Any]) -> None:
        if event["event"] == "boundary":
            ended.append(anyio.current_time())
            written.set()

    cfg = virtual_config(session_idle=1800.0, watchdog_poll=300.0, on_event=on_event)
    async with open_runtime(tmp_path, config=cfg) as rt:
        sid = await rt.sessions.create()
        await chain(rt, sid, "ROOT", ["u1", "a1"])
        await anyio.sleep(1700)
        assert marked(tmp_path, sid) == set() and ended == []  # not idle yet
        with anyio.fail_after(200):  # the deadline reported by the append falls due
            await written.wait()
        assert sorted(marked(tmp_path, sid)) == ["a1", "u1"]
        jobs = sum(rt.statistics().outcomes.values())
        await anyio.sleep(3 * 300)  # later polls see session-end.json and do nothing
        assert sum(rt.statistics().outcomes.values()) == jobs
        assert max(tally(rt).deliveries.values()) == 1


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_job_whose_worker_is_stopped_is_abandoned_and_written_again(
        tmp_path: Path) -> None:
    """Its session must not wait forever on a job nobody holds (the simulate hang)."""
    writer = FaultyWriter("hang", fail_calls={1})
    events: list[dict[str, Any]] = []
    async with open_runtime(tmp_path, writer, config=virtual_config(
            writer_workers=1, on_event=events.append)) as rt:
        sid = await rt.sessions.create()
        await chain(rt, sid, "ROOT", ["u1", "a1"])
        assert rt.root is not None
        pool = cast("ActorRef[SupervisorMessage]", await get_child(rt.root, "writers"))
        with anyio.fail_after(60):  # without the abandon, the boundary never ends
            async with anyio.create_task_group() as tg:
                tg.start_soon(rt.flush, sid)
                await writer.entered.wait()
                await terminate_child(pool, "writer-0")  # cancels the worker mid-job
                await restart_child(pool, "writer-0")
            await rt.drain()
        assert await rt.pending(sid) == []
        assert [e["job"] for e in events if e["event"] == "abandoned"] == [1]
        assert writer.calls == 2
