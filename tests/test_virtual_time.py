"""The virtual clock itself: a long timeout elapses without real waiting."""

import time

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest


@pytest.mark.virtual_time
async def test_long_sleep_takes_no_real_time() -> None:
    real_start = time.monotonic()
    virtual_start = anyio.current_time()
    with anyio.move_on_after(3600):
        await anyio.sleep(7200)
    assert anyio.current_time() - virtual_start == pytest.approx(3600)
    assert time.monotonic() - real_start < 5


@pytest.mark.virtual_time(cushion=0.05)
async def test_thread_work_finishes_before_a_jump_with_a_cushion() -> None:
    def thread_work() -> int:
        time.sleep(0.001)  # real work in a worker thread: what the cushion is for
        return 42

    with anyio.fail_after(60):
        result = await anyio.to_thread.run_sync(thread_work)
    assert result == 42


def _slow_disk() -> str:
    time.sleep(0.2)  # real work in a worker thread, far longer than any cushion
    return "written"


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_clock_stands_still_while_a_worker_thread_works() -> None:
    started = anyio.current_time()
    with anyio.fail_after(0.001):  # virtual: only a jump during the thread could reach it
        assert await anyio.to_thread.run_sync(_slow_disk) == "written"
    assert anyio.current_time() == started
    with anyio.move_on_after(3600):  # and with no thread in flight it jumps again
        await anyio.sleep(7200)
    assert anyio.current_time() - started == pytest.approx(3600)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_thread_waiting_on_the_loop_lets_the_clock_jump() -> None:
    # The session lock's poll: a worker thread sleeps on the loop's clock.
    def poll() -> float:
        anyio.from_thread.run(anyio.sleep, 30.0)
        return anyio.from_thread.run_sync(anyio.current_time)

    with anyio.fail_after(60):
        assert await anyio.to_thread.run_sync(poll) == pytest.approx(30.0)


@pytest.mark.virtual_time
async def test_without_waiting_for_threads_the_clock_jumps_during_thread_work() -> None:
    # The case wait_for_threads exists for, and what a timer test during thread work wants.
    started = anyio.current_time()
    with anyio.move_on_after(5.0):
        await anyio.to_thread.run_sync(_slow_disk)
        jumped = anyio.current_time() - started
    assert jumped == pytest.approx(5.0)
