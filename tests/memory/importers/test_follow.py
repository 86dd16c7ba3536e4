"""``--follow`` on virtual time: appended lines within a bound, half lines wait, crashes restart.

The follower polls here (``watch=False``): the poll is what bounds the delay
either way (a watcher only wakes it sooner), and it runs on the virtual clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from memory.importers import ImportPass, LogImporter, follow_logs, watcher_available
from memory.runtime import MemoryRuntime, open_runtime
from store import SessionCore
from tests.memory._runtime import virtual_config
from tests.memory.importers._logs import append_line, claude_code_session, codex_rollouts, iso

POLL = 1.0
BOUND = 2 * POLL  # a change is imported by the first pass after it, at most one poll away
virtual_time = pytest.mark.virtual_time(wait_for_threads=True)

CODEX_SESSION = "codex-aaaaaaaa-0000-4000-8000-000000000001"
LATE = {"timestamp": "2026-02-02T10:00:40.000Z", "type": "event_msg",
        "payload": {"type": "agent_message", "message": "A late answer."}}


async def wait_for(check: Callable[[], bool], bound: float) -> float:
    """Virtual seconds until ``check()`` holds; fails past ``bound``."""
    start = anyio.current_time()
    with anyio.fail_after(bound):
        while not check():
            await anyio.sleep(0.05)
    return anyio.current_time() - start


def held(state: Path, session: str) -> set[str]:
    core = SessionCore.open(state, session)
    try:
        return {n.id for n in core.nodes()}
    finally:
        core.close()


async def following(rt: MemoryRuntime, importer: LogImporter,
                    passes: list[ImportPass], task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    await follow_logs(rt, importer, poll=POLL, watch=False, on_pass=passes.append)


async def start(tg: anyio.abc.TaskGroup, rt: MemoryRuntime, agent: str,
                logs: Path) -> list[ImportPass]:
    """Follow ``logs`` in ``tg``; the passes so far, once the first one is done."""
    passes: list[ImportPass] = []
    await tg.start(following, rt, LogImporter(agent, [logs]), passes)
    await wait_for(lambda: len(passes) >= 1, BOUND)
    return passes


@virtual_time
async def test_an_appended_line_is_imported_within_one_poll(tmp_path: Path) -> None:
    files = codex_rollouts(tmp_path / "logs")
    state, session = tmp_path / "state", CODEX_SESSION
    async with open_runtime(state, config=virtual_config()) as rt, anyio.create_task_group() as tg:
        await start(tg, rt, "codex", tmp_path / "logs")
        before = held(state, session)
        append_line(files[0], LATE)
        await wait_for(lambda: len(held(state, session)) > len(before), BOUND)
        tg.cancel_scope.cancel()
    assert held(state, session) - before == {f"{session.removeprefix('codex-')}.13"}


@virtual_time
async def test_a_half_written_last_line_waits_and_is_imported_once_complete(
        tmp_path: Path) -> None:
    files = codex_rollouts(tmp_path / "logs")
    state, session = tmp_path / "state", CODEX_SESSION
    line = json.dumps(LATE) + "\n"
    async with open_runtime(state, config=virtual_config()) as rt, anyio.create_task_group() as tg:
        passes = await start(tg, rt, "codex", tmp_path / "logs")
        before = held(state, session)
        append_line(files[0], line[:30])
        seen = len(passes)
        await wait_for(lambda: len(passes) >= seen + 3, 4 * BOUND)
        assert held(state, session) == before  # three passes later: still waiting
        assert passes[-1].waiting == [str(files[0])]
        append_line(files[0], line[30:])
        await wait_for(lambda: len(held(state, session)) > len(before), BOUND)
        tg.cancel_scope.cancel()


@virtual_time
async def test_a_response_written_over_several_lines_is_one_turn_while_following(
        tmp_path: Path) -> None:
    logs = claude_code_session(tmp_path / "logs")
    state = tmp_path / "state"
    session = "claude-code-cc-1"
    base = {"parentUuid": "a6", "isSidechain": False, "sessionId": "cc-1",
            "timestamp": iso(40), "type": "assistant"}
    first = {**base, "uuid": "z1", "message": {"id": "mz", "role": "assistant",
                                               "content": [{"type": "text", "text": "Part one."}]}}
    second = {**base, "uuid": "z2", "parentUuid": "z1",
              "message": {"id": "mz", "role": "assistant",
                          "content": [{"type": "text", "text": "Part two."}]}}
    async with open_runtime(state, config=virtual_config()) as rt, anyio.create_task_group() as tg:
        passes = await start(tg, rt, "claude-code", tmp_path / "logs")
        append_line(logs / "cc-1.jsonl", first)
        seen = len(passes)
        await wait_for(lambda: len(passes) >= seen + 1, BOUND)
        assert "z1" not in held(state, session)  # held back: more of the response may come
        append_line(logs / "cc-1.jsonl", second)  # the same response's next block
        await wait_for(lambda: "z1" in held(state, session), 2 * BOUND)
        tg.cancel_scope.cancel()
    core = SessionCore.open(state, session)
    try:
        assert core.node("z1").output == "Part one.\nPart two."
        assert "z2" not in {n.id for n in core.nodes()}
        assert core.head == "z1"
    finally:
        core.close()


class _CrashingOnce(LogImporter):
    """An importer whose first pass fails, as a full disk would make it."""

    crashed = 0

    async def run(self, rt: MemoryRuntime, *, dry_run: bool = False,
                  hold_fresh_tails: bool = False) -> ImportPass:
        if not self.crashed:
            self.crashed += 1
            raise OSError(28, "No space left on device")
        return await super().run(rt, dry_run=dry_run, hold_fresh_tails=hold_fresh_tails)


@virtual_time
async def test_a_crashed_pass_is_restarted_by_the_supervisor(tmp_path: Path) -> None:
    codex_rollouts(tmp_path / "logs")
    state = tmp_path / "state"
    importer = _CrashingOnce("codex", [tmp_path / "logs"])
    passes: list[ImportPass] = []
    async with open_runtime(state, config=virtual_config()) as rt, anyio.create_task_group() as tg:
        tg.start_soon(partial(follow_logs, rt, importer, poll=POLL, watch=False,
                              on_pass=passes.append))
        await wait_for(lambda: bool(passes) and passes[0].imported > 0, 30.0)
        tg.cancel_scope.cancel()
    assert importer.crashed == 1


@pytest.mark.skipif(not watcher_available(), reason="watchfiles (the follow extra) is absent")
async def test_with_watchfiles_a_file_event_wakes_the_follower_before_its_poll(
        tmp_path: Path) -> None:
    """Real time, bounded by an event: the poll (an hour) cannot be what imports the line."""
    files = codex_rollouts(tmp_path / "logs")
    state = tmp_path / "state"
    session = "codex-aaaaaaaa-0000-4000-8000-000000000001"
    passes: list[ImportPass] = []
    async with open_runtime(state) as rt, anyio.create_task_group() as tg:
        tg.start_soon(partial(follow_logs, rt, LogImporter("codex", [tmp_path / "logs"]),
                              poll=3600.0, watch=True, on_pass=passes.append))
        with anyio.fail_after(30):
            while not passes:
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)  # the watcher starts after the first pass
        before = held(state, session)
        append_line(files[0], LATE)
        with anyio.fail_after(30):
            while len(held(state, session)) == len(before):
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
