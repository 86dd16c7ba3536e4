"""The runtime's parts seen from outside: statistics as a value, instruments as events."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from memory.runtime import MemoryLag, RuntimeStatistics
from memory.runtime._events import EventTally
from memory.runtime._runtime import open_runtime
from memory.runtime._session_state import BoundaryOutcome
from tests.memory._runtime import chain, config

TURNS = ["u1", "a1", "u2", "a2"]


async def test_statistics_is_a_frozen_snapshot(tmp_path: Path) -> None:
    async with open_runtime(tmp_path, config=config()) as rt:
        sid = await rt.sessions.create(title="tea")
        await chain(rt, sid, "ROOT", TURNS)
        before = rt.statistics()
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        after = rt.statistics()
    assert isinstance(after, RuntimeStatistics)
    assert after == RuntimeStatistics(in_flight=0, outcomes={"written": 1}, quarantined=0,
                                      sessions_active=1, writer={},
                                      lag=MemoryLag(None, 0, 0, (1,)))
    assert before.outcomes == {}  # a snapshot: later jobs do not change it
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.in_flight = 3  # type: ignore[misc]


async def test_the_instruments_are_the_event_stream(tmp_path: Path) -> None:
    """Deliveries, written batches, markers and latencies come from events, not runtime members."""
    events: list[dict[str, Any]] = []
    tally = EventTally(events.append)
    async with open_runtime(tmp_path, config=config(on_event=tally)) as rt:
        sid = await rt.sessions.create(title="tea")
        await chain(rt, sid, "ROOT", TURNS)
        assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
        await rt.drain()
        for member in ("deliveries", "written_batches", "marked", "latencies", "outcomes"):
            assert not hasattr(rt, member), f"MemoryRuntime.{member}: an instrument, not the runtime's"
    assert tally.deliveries == {(sid, node): 1 for node in TURNS}
    assert tally.written_batches == [(sid, tuple(TURNS))]
    assert tally.marked == {(sid, node) for node in TURNS}
    assert [len(tally.latencies[name]) for name in ("write_cycle", "marker_merge")] == [1, 1]
    kinds = [e["event"] for e in events if e["event"] in ("submitted", "job", "marked")]
    assert kinds == ["submitted", "job", "marked"]  # forwarded, in the order they happened
    [job] = [e for e in events if e["event"] == "job"]
    assert job["node_ids"] == TURNS and job["nodes"] == len(TURNS) and job["result"] == "written"
