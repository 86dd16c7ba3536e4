"""Sharded runtimes (issue 20, both cores): each one's scans take its own sessions, and
their write cycles take turns on the workspace's cycle lock."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import anyio
import pytest

from memory.runtime._config import Shard, held_by
from memory.runtime._runtime import open_runtime
from memory.runtime._write_cycle import CYCLE_LOCK, taking_turns
from tests.memory._runtime import build_session, config

SESSIONS = [f"s{index}" for index in range(8)]  # s0-s3 hash to shard 0 of 2, s4-s7 to 1


def test_every_session_is_held_by_exactly_one_shard_by_a_stable_hash() -> None:
    ids = [f"sim-{index:05d}" for index in range(200)] + SESSIONS
    for count in (1, 2, 3, 5):
        shards = [Shard(index, count) for index in range(count)]
        assert all(sum(shard.holds(sid) for shard in shards) == 1 for sid in ids)
    # CRC-32, not hash(): every process of a run (each with its own salt) agrees.
    assert [Shard(0, 2).holds(sid) for sid in SESSIONS] == [True] * 4 + [False] * 4
    assert Shard(1, 2).holds("sim-00000") == (zlib.crc32(b"sim-00000") % 2 == 1)
    assert held_by(None) is None


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1", "a/b", "0/0", "", "1/2/3"])
def test_a_shard_is_k_of_n(text: str) -> None:
    with pytest.raises(ValueError, match="K/N"):
        Shard.parse(text)
    assert Shard.parse("1/3") == Shard(1, 3)


async def test_a_sharded_watchdog_polls_only_the_sessions_its_shard_holds(tmp_path: Path) -> None:
    for sid in SESSIONS:
        build_session(tmp_path, sid, ["u1", "a1"])
    async with open_runtime(tmp_path, config=config(shard=Shard(1, 2))) as rt:
        await rt.poll_idle()  # the first scan asks every session it polls to look at its markers
        watchdog = rt._watchdog
        assert watchdog is not None
        assert watchdog.repairs == 4
        assert rt.statistics().sessions_active == 4
    async with open_runtime(tmp_path, config=config()) as rt:  # unsharded: every session
        await rt.poll_idle()
        assert rt._watchdog is not None and rt._watchdog.repairs == len(SESSIONS)


async def test_one_cycle_at_a_time_holds_the_cycle_lock(tmp_path: Path) -> None:
    (tmp_path / ".scriptorium").mkdir()
    order: list[str] = []
    first_in = anyio.Event()
    release = anyio.Event()

    async def first() -> None:
        async with taking_turns(str(tmp_path)):
            order.append("first in")
            first_in.set()
            await release.wait()
            order.append("first out")

    async def second() -> None:
        await first_in.wait()
        async with taking_turns(str(tmp_path)):
            order.append("second in")

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        tg.start_soon(second)
        await first_in.wait()
        await anyio.sleep(0.3)  # the second cycle polls the held lock meanwhile
        assert order == ["first in"]
        release.set()
    assert order == ["first in", "first out", "second in"]
    assert os.path.exists(tmp_path / CYCLE_LOCK)


async def test_a_cancelled_wait_for_the_cycle_lock_leaves_no_lock_taken(tmp_path: Path) -> None:
    async with taking_turns(str(tmp_path)):
        with anyio.move_on_after(0.2) as waited:
            async with taking_turns(str(tmp_path)):
                pytest.fail("the cycle lock was taken twice")
        assert waited.cancelled_caught
    with anyio.fail_after(5):
        async with taking_turns(str(tmp_path)):
            pass  # free again: the cancelled waiter holds nothing


async def test_only_a_sharded_runtime_takes_turns_on_the_cycle_lock(tmp_path: Path) -> None:
    lock = tmp_path / "memory" / CYCLE_LOCK
    build_session(tmp_path, "s0", ["u1", "a1"])
    async with open_runtime(tmp_path, config=config()) as rt:
        await rt.flush("s0")
    assert not lock.exists()  # an unsharded runtime shares its state with any writer
    build_session(tmp_path, "s1", ["u1", "a1"])
    async with open_runtime(tmp_path, config=config(shard=Shard(0, 2))) as rt:
        await rt.flush("s1")
    assert lock.exists()
