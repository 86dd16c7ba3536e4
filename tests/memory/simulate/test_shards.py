"""How a sharded run's processes look as one run on a progress display (pure)."""

from __future__ import annotations

from memory.simulate._config import Stage
from memory.simulate._shards import ShardStages
from memory.writers import Event


def _stage(what: str, unit: str, total: int | None) -> Stage:
    return Stage(at=0.0, what=what, unit=unit, total=total)


def test_a_stage_is_shown_once_every_shard_is_in_it_with_the_counts_of_that_stage() -> None:
    shown: list[Event] = []
    drawn: list[tuple[int, int]] = []
    stages = ShardStages(2, shown.append, lambda done, total: drawn.append((done, total)))
    stages.stage(0, _stage("appending turns", "turns", None))
    assert shown == []  # shard 1 has not started yet
    stages.progress(0, 4, 10)
    stages.stage(1, _stage("appending turns", "turns", None))
    assert [s.what for s in shown if isinstance(s, Stage)] == ["appending turns"]
    stages.progress(1, 3, 6)
    assert drawn[-1] == (7, 16)
    stages.progress(0, 10, 10)
    stages.stage(0, _stage("boundary round 1", "sessions", 3))  # shard 0 moves on first
    stages.progress(0, 1, 3)  # its sessions are not added to shard 1's turns
    assert drawn[-1] == (13, 16)
    stages.progress(1, 6, 6)
    assert drawn[-1] == (16, 16)
    stages.stage(1, _stage("boundary round 1", "sessions", 2))
    last = shown[-1]
    assert isinstance(last, Stage) and (last.what, last.total) == ("boundary round 1", 5)
    assert drawn[-1] == (1, 5)
