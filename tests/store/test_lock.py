"""The session lock's bound: a stuck holder ends in SessionLockTimeoutError, not a hang.

The holder is a real second process with an ``flock`` on ``<sid>/.lock``.
The wait runs in the worker thread of ``run_durable`` and sleeps on the
event loop's clock, so these run on virtual time (both backends).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from store import SessionCore, SessionLockTimeoutError, SessionOptions
from store.lowlevel import run_durable
from tests.faults import hold_flock, let_go

TURN = {"role": "user", "content": "I prefer tea.", "predecessor": "ROOT"}


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    SessionCore.create(tmp_path, "s1").close()
    process = hold_flock(tmp_path / "sessions" / "s1" / ".lock")
    yield process
    process.kill()
    process.wait()


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_stuck_holder_ends_the_wait_after_the_bound_naming_session_file_and_pid(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    core = SessionCore(tmp_path, "s1", options=SessionOptions(lock_timeout=5.0))
    started = anyio.current_time()
    with anyio.fail_after(3600), pytest.raises(SessionLockTimeoutError) as raised:
        await run_durable(core.append, TURN)
    assert 5.0 <= anyio.current_time() - started < 6.0
    error = raised.value
    assert (error.session, error.path, error.holder) == ("s1", "sessions/s1/.lock", holder.pid)
    assert "sessions/s1/.lock" in str(error) and str(holder.pid) in str(error)
    let_go(holder)
    assert (await run_durable(core.append, TURN))["content"] == "I prefer tea."  # nothing broke


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_wait_ends_as_soon_as_the_holder_lets_go(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    core = SessionCore(tmp_path, "s1", options=SessionOptions(lock_timeout=600.0))
    appended: list[str] = []

    async def append() -> None:
        appended.append((await run_durable(core.append, TURN))["id"])

    with anyio.fail_after(3600):
        async with anyio.create_task_group() as tg:
            tg.start_soon(append)
            await anyio.sleep(5.0)  # virtual: the append is polling the lock meanwhile
            assert appended == []
            let_go(holder)
    assert len(appended) == 1
    assert anyio.current_time() < 600.0


def test_without_an_event_loop_the_wait_is_bounded_too(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    core = SessionCore(tmp_path, "s1", options=SessionOptions(
        lock_timeout=0.05))  # the command line's own calls
    with pytest.raises(SessionLockTimeoutError):
        core.append(TURN)
