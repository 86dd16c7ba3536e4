"""Appends never wait for memory work: the append lane and the write lane (issue 20).

Two ways memory work could hold an append, each shut and each proven on
virtual time with a disk whose writes take virtual time:

- in the session's own mailbox: the owner serialises appends and marker
  merges (the lost-marker race, SPEC §1), so a large merge is cut into
  chunks, each its own message behind the appends that arrived meanwhile
  (``memory.ledger._plan.marker_chunks``), and the plans and reports in
  front of an append only queue work;
- in the thread limiter: the workspace's archive and commit hops run on
  their own lane (``store.lowlevel.write_lane``), never on the threads an append's
  hop waits for.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from memory.ledger._ledger import WritePolicy
from memory.runtime._runtime import MemoryRuntime, open_runtime
from memory.runtime._session_state import BoundaryOutcome, BoundaryResult, Flush, Reconsider
from store import DurableFiles
from tests.memory._runtime import chain, tally, virtual_config

TURNS = 256  # one batch: far below the threshold, written at the boundary


class SlowDisk(DurableFiles):
    """Each step of a durable write under ``under`` takes ``seconds`` of (virtual) time.

    The wait is on the event loop (``anyio.from_thread.run``), so virtual
    time moves while the hop holds its thread, as a slow disk's would.
    """

    def __init__(self, seconds: float, *, under: str = "", steps: tuple[str, ...] = ("write",)):
        self.seconds = seconds
        self.under = under
        self.steps = steps

    def _step(self, step: str, path: str) -> None:
        if step in self.steps and path.startswith(self.under):
            with contextlib.suppress(RuntimeError):  # not in a worker thread: no wait
                anyio.from_thread.run(anyio.sleep, self.seconds)


def turn(node_id: str, previous: str) -> dict[str, Any]:
    return {"id": node_id, "role": "user", "content": f"And one more thing, {node_id}.",
            "predecessor": previous}


async def append_until(rt: MemoryRuntime, sid: str, previous: str, done: anyio.Event,
                       *, gap: float) -> list[float]:
    """Append a turn every ``gap`` seconds until ``done``; each append's ack time."""
    acks: list[float] = []
    while not done.is_set() and len(acks) < 1000:
        started = anyio.current_time()
        previous = (await rt.sessions.append(sid, turn(f"x{len(acks)}", previous)))["id"]
        acks.append(anyio.current_time() - started)
        await anyio.sleep(gap)
    return acks


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_an_append_is_acknowledged_while_its_owner_merges_a_large_batch_of_markers(
    tmp_path: Path,
) -> None:
    bound = 0.5  # seconds: one chunk of markers (32 node files) and the append itself
    reported, all_marked = anyio.Event(), anyio.Event()
    batch = {f"n{i}" for i in range(TURNS)}
    unmarked = set(batch)

    def watch(event: dict[str, Any]) -> None:
        if event["event"] == "job" and event.get("nodes") == TURNS:
            reported.set()  # the worker is handing the written batch to the session's owner
        if event["event"] == "marked":
            unmarked.difference_update(event["node_ids"])
            if not unmarked:
                all_marked.set()

    config = virtual_config(policy=WritePolicy(threshold=32_000), files=SlowDisk(0.01),
                            on_event=watch)
    async with open_runtime(tmp_path, config=config) as rt:
        sid = await rt.sessions.create(title="lanes", session_id="s1")
        last = await chain(rt, sid, "ROOT", sorted(batch, key=lambda n: int(n[1:])))
        owner = rt.session_ref(sid)
        boundary: BoundaryResult = await owner.call(Flush())
        with anyio.fail_after(600):
            await reported.wait()
            # In the owner's mailbox now: the report of a 256-node batch, and a
            # boundary plan behind it. Then the agent keeps talking.
            owner.cast_nowait(Reconsider())
            acks = await append_until(rt, sid, last, all_marked, gap=0.01)
            assert await boundary.wait() in (BoundaryOutcome.WRITTEN, BoundaryOutcome.ERROR)
        merges = tally(rt).latencies["marker_merge"]
    assert all_marked.is_set()
    assert max(acks) <= bound, (max(acks), acks)
    assert sum(merges) >= 4 * bound, merges  # the batch's merge, whole, would hold an append
    assert len(acks) >= 4, acks  # appends kept arriving while it was merged


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_an_append_never_waits_for_a_thread_the_write_cycle_holds(tmp_path: Path) -> None:
    """One thread for appends and reads; the workspace's writes are slow and on their own lane."""
    bound = 0.1  # the append's own hop takes no virtual time here
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = 1  # the default lane, as full as a loaded runtime makes it
    written = anyio.Event()

    def watch(event: dict[str, Any]) -> None:
        if event["event"] == "job":
            written.set()

    memory = str(tmp_path / "memory")
    files = SlowDisk(0.2, under=memory, steps=("open", "write", "rename", "fsync"))
    config = virtual_config(policy=WritePolicy(threshold=32_000), files=files, on_event=watch)
    try:
        async with open_runtime(tmp_path, config=config) as rt:
            sid = await rt.sessions.create(title="lanes", session_id="s1")
            last = await chain(rt, sid, "ROOT", [f"n{i}" for i in range(8)])
            with anyio.fail_after(600):
                boundary: BoundaryResult = await rt.session_ref(sid).call(Flush())
                acks = await append_until(rt, sid, last, written, gap=0.05)
                await boundary.wait()
            cycles = tally(rt).latencies["write_cycle"]
    finally:
        limiter.total_tokens = 40
    assert max(acks) <= bound, (max(acks), acks)
    assert cycles and cycles[0] >= 10 * bound, cycles  # the write side held its threads long
    assert len(acks) >= 5, acks  # appends kept arriving while it wrote


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_an_append_never_waits_for_a_thread_another_sessions_marker_merge_holds(
    tmp_path: Path,
) -> None:
    """One thread for appends and reads; session a's large merge runs on the marks lane."""
    bound = 0.2  # seconds: session b's append writes its own files (30 ms here), no chunk
    limiter = anyio.to_thread.current_default_thread_limiter()
    reported, all_marked = anyio.Event(), anyio.Event()
    batch = {f"n{i}" for i in range(TURNS)}
    unmarked = set(batch)

    def watch(event: dict[str, Any]) -> None:
        if event["event"] == "job" and event.get("nodes") == TURNS:
            reported.set()
        if event["event"] == "marked" and event["session"] == "a":
            unmarked.difference_update(event["node_ids"])
            if not unmarked:
                all_marked.set()

    config = virtual_config(policy=WritePolicy(threshold=32_000), files=SlowDisk(0.01),
                            on_event=watch)
    try:
        async with open_runtime(tmp_path, config=config) as rt:
            a = await rt.sessions.create(title="merging", session_id="a")
            b = await rt.sessions.create(title="talking", session_id="b")
            await chain(rt, a, "ROOT", sorted(batch, key=lambda n: int(n[1:])))
            last = await chain(rt, b, "ROOT", ["b0", "b1"])
            limiter.total_tokens = 1  # the default lane, as full as a loaded runtime makes it
            with anyio.fail_after(600):
                boundary: BoundaryResult = await rt.session_ref(a).call(Flush())
                await reported.wait()
                acks = await append_until(rt, b, last, all_marked, gap=0.01)
                await boundary.wait()
            merges = tally(rt).latencies["marker_merge"]
    finally:
        limiter.total_tokens = 40
    assert all_marked.is_set()
    assert max(acks) <= bound, (max(acks), acks)
    assert sum(merges) >= 4 * bound, merges  # a's merge held a thread that long in all
    assert len(acks) >= 4, acks  # b kept appending while a merged
