"""Every session boundary ends with an outcome and a reason (issue 10, "Hangs").

``rt.flush()``, ``memory write --force`` and ``run --once`` used to wait
forever when a session's branch was broken, its directory refused writes,
the disk was full, or another process held its lock: the error stayed inside
the session actor and the boundary's waiter never heard it. Each test here
wraps the wait in a virtual-time ``fail_after``, so a hang fails fast.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from memory._errors import BoundaryError
from memory.ledger._ledger import WritePolicy
from memory.runtime._runtime import open_runtime
from memory.runtime._session_state import BoundaryOutcome
from store import (
    BrokenChainError,
    HeadFieldError,
    NodeNotFoundError,
    SessionLockTimeoutError,
)
from tests.faults import FaultyWriter, RefusingFiles, hold_flock, let_go
from tests.memory._runtime import HANG, build_session, lock_config, marked, tally, virtual_config


def node_file(state: Path, sid: str, node_id: str) -> Path:
    [path] = (state / "sessions" / sid / "history").glob(f"*-{node_id}.json")
    return path


def break_branch(state: Path, how: str) -> str:
    """Break session ``bad``'s head branch; returns what the reason must name."""
    if how == "invalid-json":
        path = node_file(state, "bad", "b2")
        path.write_text("{not json")
        return f"sessions/bad/history/{path.name}"
    if how == "cycle":
        path = node_file(state, "bad", "b1")
        node = json.loads(path.read_bytes())
        node["predecessor"] = "b4"
        path.write_text(json.dumps(node))
        return "loops back"
    meta = state / "sessions" / "bad" / "meta.json"
    document = json.loads(meta.read_bytes())
    document["head_id"] = "nowhere"
    meta.write_text(json.dumps(document))
    return "'nowhere'"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    build_session(tmp_path, "bad", ["b1", "b2", "b3", "b4"])
    build_session(tmp_path, "good", ["g1", "g2"])
    return tmp_path


@pytest.mark.virtual_time(wait_for_threads=True)
@pytest.mark.parametrize("how", ["invalid-json", "cycle", "head-nowhere"])
async def test_a_broken_branch_ends_the_boundary_with_an_error_naming_it(
    state: Path, how: str
) -> None:
    names = break_branch(state, how)
    events: list[dict[str, Any]] = []
    async with open_runtime(state, config=virtual_config(on_event=events.append)) as rt:
        with anyio.fail_after(HANG):
            with pytest.raises(BoundaryError) as raised:
                await rt.flush("bad")
            assert raised.value.session == "bad" and names in raised.value.reason
            report = await rt.boundary("bad")
            assert report.outcome is BoundaryOutcome.ERROR
            assert "'bad'" in report.reason and names in report.reason
            assert isinstance(report.cause, (BrokenChainError, NodeNotFoundError, HeadFieldError))
            # the runtime keeps serving the other session
            assert await rt.flush("good") is BoundaryOutcome.WRITTEN
            await rt.drain()
    assert marked(state, "good") == {"g1", "g2"}
    assert marked(state, "bad") == set()
    assert [e["session"] for e in events if e["event"] == "skipped"] == ["bad"]  # logged once


@pytest.mark.virtual_time(wait_for_threads=True)
@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS, errno.EACCES])
async def test_a_session_directory_that_refuses_writes_ends_the_boundary(
    state: Path, error: int
) -> None:
    files = RefusingFiles(under=f"{os.sep}sessions{os.sep}bad{os.sep}")
    async with open_runtime(state, config=virtual_config(files=files)) as rt:
        files.error = error  # full, read-only, or no permission from now on
        with anyio.fail_after(HANG):
            with pytest.raises(BoundaryError) as raised:
                await rt.flush("bad")
            reason = raised.value.reason
            assert "'bad'" in reason and os.strerror(error) in reason
            assert f"sessions{os.sep}bad{os.sep}" in reason  # the file it could not write
            assert isinstance(raised.value.cause, OSError)
            assert await rt.flush("good") is BoundaryOutcome.WRITTEN  # others go on
            files.error = None  # repaired: the next boundary just works
            assert await rt.flush("bad") is BoundaryOutcome.WRITTEN
            await rt.drain()
    assert marked(state, "bad") == {"b1", "b2", "b3", "b4"}


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_markers_that_cannot_be_saved_end_the_boundary_and_only_they_are_retried(
    state: Path,
) -> None:
    files = RefusingFiles(under=f"{os.sep}sessions{os.sep}bad{os.sep}.journal")
    async with open_runtime(state, config=virtual_config(files=files)) as rt:
        files.error = errno.ENOSPC  # the claim still lands, the marker journal does not
        with anyio.fail_after(HANG):
            with pytest.raises(BoundaryError) as raised:
                await rt.flush("bad")
            reason = raised.value.reason
            assert "written to memory but its markers could not be saved" in reason
            assert "No space left on device" in reason and ".journal" in reason
            await rt.drain()  # the unmarked job does not hold drain (run --once drains)
            assert marked(state, "bad") == set()
            files.error = None
            assert await rt.flush("bad") is BoundaryOutcome.WRITTEN
            await rt.drain()
        assert max(tally(rt).deliveries.values()) == 1  # marked again, not written again
        assert rt.statistics().outcomes == {"written": 1}
    assert marked(state, "bad") == {"b1", "b2", "b3", "b4"}


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_full_workspace_disk_fails_the_cycle_with_the_disk_error_as_reason(
    state: Path,
) -> None:
    files = RefusingFiles(under=f"{os.sep}memory{os.sep}")
    async with open_runtime(state, config=virtual_config(files=files)) as rt:
        files.error = errno.ENOSPC
        with anyio.fail_after(HANG):
            report = await rt.boundary("good")
            assert report.outcome is BoundaryOutcome.FAILED
            assert "No space left on device" in report.reason
            assert "PoisonMessageError" not in report.reason and "crashed actor" not in report.reason
            files.error = None
            assert await rt.flush("good") is BoundaryOutcome.WRITTEN
            await rt.drain()
    assert marked(state, "good") == {"g1", "g2"}


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_an_unreadable_meta_json_is_an_error_naming_it_not_a_stopped_actor(
    state: Path,
) -> None:
    (state / "sessions" / "bad" / "meta.json").write_text("{not json")
    async with open_runtime(state, config=virtual_config()) as rt:
        with anyio.fail_after(HANG):
            report = await rt.boundary("bad")
            assert report.outcome is BoundaryOutcome.ERROR
            assert "sessions/bad/meta.json" in report.reason
            assert "stopped" not in report.reason
            assert await rt.flush("good") is BoundaryOutcome.WRITTEN
            await rt.drain()


# -- the session lock held by a stuck process ------------------------------------------


@pytest.fixture
def stuck_holder(state: Path) -> Iterator[subprocess.Popen[str]]:
    """A real second process holding ``sessions/bad/.lock`` until told to let go."""
    holder = hold_flock(state / "sessions" / "bad" / ".lock")
    yield holder
    holder.kill()
    holder.wait()


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_session_lock_held_by_a_stuck_process_ends_in_an_error_naming_it(
    state: Path, stuck_holder: subprocess.Popen[str]
) -> None:
    async with open_runtime(state, config=lock_config()) as rt:
        started = anyio.current_time()
        with anyio.fail_after(HANG):
            report = await rt.boundary("bad")
            waited = anyio.current_time() - started
            assert report.outcome is BoundaryOutcome.ERROR
            assert isinstance(report.cause, SessionLockTimeoutError)
            assert report.cause.holder == stuck_holder.pid
            assert "sessions/bad/.lock" in report.reason and f"process {stuck_holder.pid}" in (
                report.reason)
            assert 5.0 <= waited < 10.0  # the bound, once, on the loop's (virtual) clock
            with pytest.raises(SessionLockTimeoutError):
                await rt.sessions.append("bad", {"role": "user", "content": "more tea",
                                                 "predecessor": "b4"})
            assert await rt.flush("good") is BoundaryOutcome.WRITTEN  # others go on
            let_go(stuck_holder)  # the session works again
            assert await rt.flush("bad") is BoundaryOutcome.WRITTEN
            await rt.drain()
    assert marked(state, "bad") == {"b1", "b2", "b3", "b4"}


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_the_commands_report_a_failed_job_with_its_reason_not_as_written(
    tmp_path: Path,
) -> None:
    from memory.runtime._headless import run_once, run_triggers
    build_session(tmp_path, "bad", [f"b{i}" for i in range(4)])
    build_session(tmp_path, "good", ["g1", "g2"])
    async with open_runtime(tmp_path, FaultyWriter("raise", session="bad"),
                            config=virtual_config(policy=WritePolicy(threshold=8000),
                                                  session_idle=0.0)) as rt:
        with anyio.fail_after(HANG):
            triggered = await run_triggers(rt, ["bad", "good"])
            forced = await run_once(rt, ["bad"])
    assert (triggered["bad"].outcome, triggered["good"].outcome) == ("failed", "written")
    assert "model endpoint returned 500" in triggered["bad"].reason
    assert triggered["bad"].owed == ("b0", "b1", "b2", "b3") and not triggered["bad"].ok
    assert forced["bad"].outcome == "failed" and "model endpoint returned 500" in (
        forced["bad"].reason)
    assert triggered["good"].ok and triggered["good"].owed == ()
