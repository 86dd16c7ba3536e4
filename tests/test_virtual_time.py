"""The virtual clock itself: a long timeout elapses without real waiting."""

import time

import anyio
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
