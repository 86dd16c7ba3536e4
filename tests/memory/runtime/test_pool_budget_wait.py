"""A batch waiting for a writer's budget holds no worker (on virtual time, both backends).

A model writer past its daily token budget used to wait for the next UTC
day inside the write cycle (``admit``), so each waiting batch held a writer
worker for up to a day: with K workers, K waiting batches stopped the pool.
Now the pool asks the writer's ``deferral(batch)`` first and puts a batch
that must wait back in the queue, to be offered again when the writer can
take it: neither failed nor marked, still in flight, and the worker goes on
with the next job.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import pytest

from actors import ActorRef
from memory.runtime._runtime import MemoryRuntime, open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace import TopicEdit, WorkspaceSnapshot
from memory.writers import Batch
from memory.writers._extractive import ExtractiveWriter
from memory.writers.model import ModelSettings, ModelWriter, UsageFile
from supervisors import SupervisorMessage, get_child
from tests.memory._runtime import chain, marked, virtual_config
from tests.model_server import completion_body, first_user_text, good_actions

HOUR = 3600.0


class BudgetedWriter:
    """The extractive writer's edits, but one session's batches must wait until ``until``.

    It speaks both forms of the wait: ``deferral`` (the pool puts the batch
    back) and ``admit`` (a wait inside the cycle, as the model writer did).
    """

    exclusive = False

    def __init__(self, waits: str, until: float) -> None:
        self.inner = ExtractiveWriter()
        self.waits, self.until = waits, until
        self.written: dict[str, float] = {}

    def _wait(self, batch: Batch) -> float:
        if batch.session_id != self.waits:
            return 0.0
        return max(0.0, self.until - anyio.current_time())

    async def deferral(self, batch: Batch) -> float:
        return self._wait(batch)

    async def admit(self, batch: Batch) -> None:
        if (wait := self._wait(batch)) > 0:
            await anyio.sleep(wait)

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> Sequence[TopicEdit]:
        self.written[batch.session_id] = anyio.current_time()
        return await self.inner.write(batch, workspace)


async def worker_current(rt: MemoryRuntime) -> object:
    """What the pool's one worker is doing now (its ``inspect``: the job ids it holds)."""
    assert rt.root is not None
    pool = cast("ActorRef[SupervisorMessage]", await get_child(rt.root, "writers"))
    worker = await get_child(pool, "writer-0")
    snapshot = await worker.inspect()
    assert isinstance(snapshot, dict)
    return snapshot["current"]


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_waiting_batch_does_not_hold_the_only_worker(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    submitted = anyio.Event()

    def on_event(event: dict[str, Any]) -> None:
        events.append({**event, "t": anyio.current_time()})
        if event["event"] == "submitted" and event["session"] == "waits":
            submitted.set()

    writer = BudgetedWriter("waits", until=5 * HOUR)
    async with open_runtime(tmp_path, writer, config=virtual_config(
            writer_workers=1, on_event=on_event)) as rt:
        for sid in ("waits", "goes"):
            await rt.sessions.create(session_id=sid)
            await chain(rt, sid, "ROOT", [f"{sid}1", f"{sid}2"])
        outcomes: dict[str, BoundaryOutcome] = {}

        async def flush(sid: str) -> None:
            outcomes[sid] = await rt.flush(sid)

        async with anyio.create_task_group() as tg:
            tg.start_soon(flush, "waits")
            await submitted.wait()  # the waiting batch is first in the queue
            await flush("goes")
            # The worker wrote the other session at once: the wait held no worker.
            assert writer.written["goes"] < HOUR and "waits" not in writer.written
            assert marked(tmp_path, "waits") == set() and rt.statistics().in_flight == 1
    assert outcomes == {"waits": BoundaryOutcome.WRITTEN, "goes": BoundaryOutcome.WRITTEN}
    assert writer.written["waits"] >= 5 * HOUR  # offered again once the writer could take it
    assert sorted(marked(tmp_path, "waits")) == ["waits1", "waits2"]
    jobs = [e for e in events if e["event"] == "job"]
    assert [(j["session"], j["result"]) for j in jobs] == [("goes", "written"),
                                                           ("waits", "written")]
    [deferred] = [e for e in events if e["event"] == "deferred"]
    assert deferred["session"] == "waits" and deferred["seconds"] > 4 * HOUR


NOON = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC).timestamp()
MIDNIGHT = 12 * HOUR  # after NOON, on the virtual clock


def virtual_noon() -> float:
    try:
        return NOON + anyio.current_time()
    except anyio.NoEventLoopError:
        return NOON + anyio.from_thread.run_sync(anyio.current_time)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_spent_daily_budget_puts_the_batch_back_until_the_next_utc_day(
    tmp_path: Path,
) -> None:
    """The model writer's daily budget: the batch waits (not failed, not marked) off the pool."""
    calls: list[float] = []
    deferred = anyio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(anyio.current_time())
        body = json.loads(request.content)
        answer = good_actions(first_user_text(body))
        return httpx.Response(200, json=completion_body("openai", body, answer))

    events: list[dict[str, Any]] = []

    def on_event(event: dict[str, Any]) -> None:
        events.append(event)
        if event["event"] == "deferred":
            deferred.set()

    writer = ModelWriter(
        ModelSettings(base_url="http://model.test/v1", model="mock-1", daily_tokens=10),
        transport=httpx.MockTransport(handler), clock=virtual_noon, on_event=on_event,
        usage_file=UsageFile(str(tmp_path / "memory")))
    try:
        async with open_runtime(tmp_path, writer, config=virtual_config(
                writer_workers=1, on_event=on_event)) as rt:
            for sid in ("s1", "s2"):
                await rt.sessions.create(session_id=sid)
                await chain(rt, sid, "ROOT", [f"{sid}a", f"{sid}b"])
            assert await rt.flush("s1") is BoundaryOutcome.WRITTEN  # spends the day's budget
            async with anyio.create_task_group() as tg:
                result: list[BoundaryOutcome] = []

                async def flush() -> None:
                    result.append(await rt.flush("s2"))

                tg.start_soon(flush)
                with anyio.fail_after(HOUR):  # the old wait held the worker till midnight
                    await deferred.wait()
                assert anyio.current_time() < MIDNIGHT and len(calls) == 1
                assert await worker_current(rt) == []  # the wait holds no worker
                assert marked(tmp_path, "s2") == set() and rt.statistics().in_flight == 1
        assert result == [BoundaryOutcome.WRITTEN]
    finally:
        await writer.aclose()
    assert len(calls) == 2 and MIDNIGHT <= calls[1] < MIDNIGHT + HOUR
    assert sorted(marked(tmp_path, "s2")) == ["s2a", "s2b"]
    waits = [e for e in events if e["event"] == "model_budget_wait"]
    assert waits and waits[0]["session"] == "s2"
    assert all(e["result"] == "written" for e in events if e["event"] == "job")
