"""Thread hops and their lanes (store/_threads.py)."""

from __future__ import annotations

import threading

import anyio
import anyio.from_thread
import anyio.to_thread

from store._threads import MARK_LANE_THREADS, WRITE_LANE_THREADS
from store.lowlevel import mark_lane, run_durable, write_lane


async def test_each_lane_is_its_own_limiter_one_per_event_loop() -> None:
    default = anyio.to_thread.current_default_thread_limiter()
    assert write_lane() is write_lane() and mark_lane() is mark_lane()
    assert len({id(default), id(write_lane()), id(mark_lane())}) == 3
    assert write_lane().total_tokens == WRITE_LANE_THREADS
    assert mark_lane().total_tokens == MARK_LANE_THREADS


async def test_a_hop_on_a_full_lane_does_not_wait_for_the_default_one() -> None:
    """All of the write lane's threads busy: a default hop and a mark hop still run at once."""
    release = threading.Event()
    all_started = anyio.Event()
    started = 0
    lock = threading.Lock()

    def hold() -> None:
        nonlocal started
        with lock:
            started += 1
            if started == WRITE_LANE_THREADS:
                anyio.from_thread.run_sync(all_started.set)
        release.wait(10)

    async with anyio.create_task_group() as tg:
        for _ in range(WRITE_LANE_THREADS):
            tg.start_soon(lambda: run_durable(hold, limiter=write_lane()))
        with anyio.fail_after(10):
            await all_started.wait()
            assert write_lane().available_tokens == 0
            assert await run_durable(lambda: "appended") == "appended"  # the default lane
            assert await run_durable(lambda: "marked", limiter=mark_lane()) == "marked"
        release.set()


async def test_a_hop_on_the_write_lane_does_not_wait_for_a_full_default_lane() -> None:
    """The reverse: every default thread busy (an append's hop, shrunk to one), a write still runs."""
    default = anyio.to_thread.current_default_thread_limiter()
    tokens = default.total_tokens
    default.total_tokens = 1
    release = threading.Event()
    holding = anyio.Event()

    def hold() -> None:
        anyio.from_thread.run_sync(holding.set)
        release.wait(10)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: run_durable(hold))
            with anyio.fail_after(10):
                await holding.wait()
                assert default.available_tokens == 0
                assert await run_durable(lambda: "written", limiter=write_lane()) == "written"
            release.set()
    finally:
        default.total_tokens = tokens
