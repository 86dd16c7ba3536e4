"""The workspace lock held by a stuck process: a bounded wait, then an error naming it.

``memory/.scriptorium/write.lock`` used to be taken by a blocking ``flock``
in a worker thread, so one stopped process holding it made every write
(and ``memory write --force``) wait forever. It now waits ``lock_timeout``
on the loop's clock (virtual here) like the session lock.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from memory._errors import WorkspaceLockTimeoutError
from memory.runtime._runtime import open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._install_journal import workspace_lock
from store import DurableFiles
from tests.faults import hold_flock, let_go
from tests.memory._runtime import HANG, build_session, lock_config, marked


@pytest.mark.virtual_time(wait_for_threads=True)
@pytest.mark.parametrize("since", ["before-start", "after-start"])
async def test_a_workspace_lock_held_by_a_stuck_process_fails_the_batch_naming_it(
    tmp_path: Path, since: str
) -> None:
    """Held before the start too: the start's recovery must not wait for it either."""
    build_session(tmp_path, "s1", ["u1", "a1", "u2", "a2"])
    lock = tmp_path / "memory" / ".scriptorium" / "write.lock"
    lock.parent.mkdir(parents=True)
    holders = [hold_flock(lock)] if since == "before-start" else []
    try:
        # Virtual seconds; far more than this test needs, and a start that
        # waits for the holder (retrying its recovery) reaches it soon.
        with anyio.fail_after(120.0):
            async with open_runtime(tmp_path, config=lock_config()) as rt:
                if not holders:  # after the start's recovery, which takes the lock too
                    holders.append(hold_flock(lock))
                holder = holders[0]
                started = anyio.current_time()
                report = await rt.boundary("s1")
                waited = anyio.current_time() - started
                # The write cycle failed (retryable, backed off), nothing was marked.
                assert report.outcome is BoundaryOutcome.FAILED, report
                assert str(lock) in report.reason and f"process {holder.pid}" in report.reason
                assert "nothing was marked" in report.reason
                assert 5.0 <= waited < 10.0  # the bound, once, on the loop's (virtual) clock
                assert [r.message_id for r in await rt.pending("s1")] == ["u1", "a1", "u2", "a2"]
                let_go(holder)  # writes work again
                assert await rt.flush("s1") is BoundaryOutcome.WRITTEN
                await rt.drain()
    finally:
        for process in holders:
            process.kill()
            process.wait()
    assert marked(tmp_path, "s1") == {"u1", "a1", "u2", "a2"}


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_workspace_lock_wait_is_bounded_and_names_the_file_and_holder(
    tmp_path: Path,
) -> None:
    lock = tmp_path / "memory" / ".scriptorium" / "write.lock"
    lock.parent.mkdir(parents=True)
    holder = hold_flock(lock)
    try:
        def take() -> None:
            with workspace_lock(str(tmp_path / "memory"), DurableFiles(), timeout=2.5):
                raise AssertionError("the lock was taken while another process held it")

        started = anyio.current_time()
        with anyio.fail_after(HANG), pytest.raises(WorkspaceLockTimeoutError) as raised:
            await anyio.to_thread.run_sync(take, abandon_on_cancel=True)  # red, not hung, if unbounded
        assert 2.5 <= anyio.current_time() - started < 5.0
        error = raised.value
        assert (error.path, error.holder) == (str(lock), holder.pid) and error.waited >= 2.5
        assert str(lock) in str(error) and f"process {holder.pid}" in str(error)
    finally:
        holder.kill()
        holder.wait()
    with workspace_lock(str(tmp_path / "memory"), DurableFiles(), timeout=0.0):
        pass  # free again: taken at once
