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
    """All of the write lane's threads busy: a default hop still runs at once, and the reverse."""
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
