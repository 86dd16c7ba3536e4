"""An appended turn may carry its own time (``created_at``), so imported history keeps its times.

The time travels the whole path: ``rt.sessions.append`` (SPEC §8), the
session actor's ``Append`` message, the store's node creation, the node
file's ``created_at`` (unix seconds, a float, SPEC §4). A time still to
come (beyond :data:`store.CLOCK_SKEW`) is refused with an error naming the
session and nothing is written; a repeat by id keeps working.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from actors import open_actor
from memory.runtime._runtime import RuntimeConfig, open_runtime
from store import CLOCK_SKEW, FutureTimestampError, InvalidNodeError, SessionCore, SessionOptions
from store._actor import Append, SessionActor

NOW = 1_780_000_000.0  # the wall clock of these tests
MAY_2023 = 1_683_554_160.0  # 8 May 2023, 13:56 UTC


def config() -> RuntimeConfig:
    return RuntimeConfig(clock=lambda: NOW)


def node_times(state: Path, sid: str) -> dict[str, float]:
    return {node.id: node.created_at for node in SessionCore.open(state, sid).nodes()}


async def test_created_at_reaches_the_node_file(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        first = await rt.sessions.append(sid, {"id": "u1", "role": "user", "content": "hi"},
                                         created_at=MAY_2023)
        second = await rt.sessions.append(sid, {"id": "a1", "role": "assistant",
                                                "content": "hello", "predecessor": "u1"})
        assert first["timestamp"] == MAY_2023
        assert second["timestamp"] == NOW  # default: now
        branch = await rt.sessions.get_branch(sid)
        assert [m["timestamp"] for m in branch] == [MAY_2023, NOW]
    assert node_times(tmp_path, "s1") == {"u1": MAY_2023, "a1": NOW}
    meta = SessionCore.open(tmp_path, "s1").meta()
    assert meta["updated_at"] == NOW  # the append happened now, whatever the turn's own time


async def test_created_at_wins_over_the_messages_timestamp(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        view = await rt.sessions.append(
            sid, {"id": "u1", "content": "hi", "timestamp": 5.0}, created_at=MAY_2023)
        assert view["timestamp"] == MAY_2023


async def test_a_time_in_the_future_is_refused_naming_the_session(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        # a millisecond timestamp: the usual mistake
        with pytest.raises(FutureTimestampError, match="'s1'") as caught:
            await rt.sessions.append(sid, {"id": "u1", "content": "hi"},
                                     created_at=MAY_2023 * 1000)
        assert caught.value.session == "s1" and caught.value.node == "u1"
        assert "milliseconds" in str(caught.value)
        with pytest.raises(FutureTimestampError):
            await rt.sessions.append(sid, {"id": "u1", "content": "hi"},
                                     created_at=NOW + CLOCK_SKEW + 1)
        # the same through the message's own timestamp
        with pytest.raises(FutureTimestampError):
            await rt.sessions.append(sid, {"id": "u1", "content": "hi",
                                           "timestamp": NOW + 3600})
        assert await rt.sessions.get_branch(sid) == []  # nothing was written
        # the runtime keeps running; small skew is allowed
        view = await rt.sessions.append(sid, {"id": "u1", "content": "hi"},
                                        created_at=NOW + CLOCK_SKEW)
        assert view["timestamp"] == NOW + CLOCK_SKEW
    assert list(node_times(tmp_path, "s1")) == ["u1"]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, True, "2023-05-08"])
async def test_a_time_that_is_not_finite_seconds_is_refused(tmp_path: Path, bad: object) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        with pytest.raises(InvalidNodeError, match="created_at"):
            await rt.sessions.append(sid, {"id": "u1", "content": "hi"},
                                     created_at=bad)  # type: ignore[arg-type]
        assert await rt.sessions.get_branch(sid) == []


async def test_a_repeat_by_id_returns_the_stored_turn_and_time(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        first = await rt.sessions.append(sid, {"id": "u1", "content": "hi"},
                                         created_at=MAY_2023)
        again = await rt.sessions.append(sid, {"id": "u1", "content": "hi"},
                                         created_at=MAY_2023)
        later = await rt.sessions.append(sid, {"id": "u1", "content": "hi"},
                                         created_at=MAY_2023 + 60)
        assert again == first and later["timestamp"] == MAY_2023
    assert node_times(tmp_path, "s1") == {"u1": MAY_2023}


async def test_the_session_actor_carries_created_at(tmp_path: Path) -> None:
    SessionCore.create(tmp_path, "s1", options=SessionOptions(clock=lambda: NOW))
    async with open_actor(SessionActor(tmp_path, "s1", options=SessionOptions(
        clock=lambda: NOW))) as ref:
        view = await ref.call(Append({"id": "u1", "content": "hi"}, created_at=MAY_2023))
        assert view["timestamp"] == MAY_2023
        with pytest.raises(FutureTimestampError):
            await ref.call(Append({"id": "u2", "content": "x"}, created_at=NOW + 3600))
        assert Append({"id": "u1", "content": "hi"}, created_at=MAY_2023).idempotent


def test_the_store_checks_against_its_own_clock(tmp_path: Path) -> None:
    """The bound moves with the core's clock: the check is the store's, not the caller's."""
    core = SessionCore.create(tmp_path, "s1", options=SessionOptions(clock=lambda: MAY_2023))
    with pytest.raises(FutureTimestampError):
        core.append({"id": "u1", "content": "hi"}, created_at=NOW)
    core.append({"id": "u1", "content": "hi"}, created_at=MAY_2023 - 86_400)
    assert core.node("u1").created_at == MAY_2023 - 86_400


@pytest.mark.parametrize("bad", [-1, -0.5, -MAY_2023])
async def test_a_time_before_the_epoch_is_refused_naming_the_session_and_node(
        tmp_path: Path, bad: float) -> None:
    """A negative time is no turn's time (a sign slip, a delta taken for a time): refused."""
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(session_id="s1")
        with pytest.raises(InvalidNodeError, match="created_at") as caught:
            await rt.sessions.append(sid, {"id": "u1", "content": "hi"}, created_at=bad)
        assert (caught.value.session, caught.value.node) == ("s1", "u1")
        assert "'s1'" in str(caught.value) and "'u1'" in str(caught.value)
        with pytest.raises(InvalidNodeError, match="created_at"):  # the message's own time
            await rt.sessions.append(sid, {"id": "u1", "content": "hi", "timestamp": bad})
        assert await rt.sessions.get_branch(sid) == []  # nothing was written
        view = await rt.sessions.append(sid, {"id": "u1", "content": "hi"}, created_at=0.0)
        assert view["timestamp"] == 0.0  # the epoch itself is a time
