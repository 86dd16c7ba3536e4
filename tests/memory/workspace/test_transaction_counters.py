"""A commit's counters move in its own install (issue 23): all old or all new, never a mix.

Before, ``runtime.json`` was written after the topics were installed, in a
second step: a kill between left block ids without an order and the batch
uncounted (``test_runtime_state_two_writers`` hits that with real
processes). Here a crash at every durable step of a counted commit leaves,
after recovery, the topics and ``runtime.json`` both old or both new.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.workspace._edits import TopicEdit
from memory.workspace._install_journal import JOURNAL
from memory.workspace._runtime_state import (
    FLOOR_PATH,
    RUNTIME_PATH,
    Floor,
    RuntimeState,
    Tally,
    counted,
    floored,
    read_floor,
    read_runtime_state,
    write_runtime_state,
)
from memory.workspace._topics import parse_topic
from memory.workspace._transaction import Transactions
from store._durable import TEMP_SUFFIX, DurableFiles
from tests.faults import FaultyFiles, SimulatedCrash, count_steps
from tests.fixture import copy_fixture

ARCHIVE = {"openprogram/demo/a2": True, "openprogram/demo/u1": True, "openprogram/demo/u2": True}
EDIT = TopicEdit("topics/core.md", "# Core\n\nCore fact.[^e1]\n\n"
                 "[^e1]: Time: `2025-08-12`; Sources: openprogram/demo/a2\n")


def archived(source: str) -> bool | None:
    return ARCHIVE.get(source)


def _commit(memory: Path, files: DurableFiles | None = None) -> None:
    tx = Transactions(str(memory), archived=archived, files=files)
    tx.commit([EDIT], base_revision=tx.revision(), batch_sources={"openprogram/demo/a2"},
              update_state=counted(Tally(batches=2, tokens=70)))


def _state(memory: Path) -> tuple[bytes | None, bytes]:
    core = memory / "topics/core.md"
    return (core.read_bytes() if core.exists() else None, (memory / RUNTIME_PATH).read_bytes())


def test_a_counted_commit_orders_its_blocks_and_counts_its_batches(tmp_path: Path) -> None:
    memory = copy_fixture(tmp_path / "memory", "memory")
    before = read_runtime_state(str(memory))
    tx = Transactions(str(memory), archived=archived)
    result = tx.commit([EDIT], base_revision=tx.revision(), batch_sources={"openprogram/demo/a2"},
                       update_state=counted(Tally(batches=2, tokens=70)))
    after = read_runtime_state(str(memory))
    assert result.changed_files == ("topics/core.md",)  # runtime.json is not a topic path
    assert result.revision == tx.revision()  # runtime.json counts, and is in the revision
    (block,) = result.created_blocks
    assert after.creation_order == {**before.creation_order, block: 2}
    assert (after.local_batches, after.local_tokens, after.write_commits_since_global) == (
        before.local_batches + 2, before.local_tokens + 70, before.write_commits_since_global + 1)
    assert read_floor(str(memory)) == Floor.of(after)
    assert parse_topic((memory / "topics/core.md").read_text()).block_ids() == [block]


def test_a_crash_at_every_step_leaves_topics_and_counters_both_old_or_both_new(
    tmp_path: Path,
) -> None:
    reference = copy_fixture(tmp_path / "reference" / "memory", "memory")
    old = _state(reference)
    _commit(reference)
    new = _state(reference)
    probe = copy_fixture(tmp_path / "probe" / "memory", "memory")
    steps = count_steps(lambda files: _commit(probe, files))
    outcomes = set()
    for k in range(steps):
        memory = copy_fixture(tmp_path / f"crash{k}" / "memory", "memory")
        with pytest.raises(SimulatedCrash):
            _commit(memory, FaultyFiles(crash_at=k))
        Transactions(str(memory), archived=archived).recover()
        after = _state(memory)
        assert after in (old, new), f"a mix after a crash at step {k}"
        outcomes.add("new" if after == new else "old")
        assert not (memory / JOURNAL).exists()
        assert not [p for p in (memory / ".scriptorium").iterdir() if p.name.endswith(TEMP_SUFFIX)]
    assert outcomes == {"old", "new"}


def test_a_stale_overwrite_is_raised_back_to_the_floor_by_the_next_commit(tmp_path: Path) -> None:
    memory = copy_fixture(tmp_path / "memory", "memory")
    write_runtime_state(str(memory), RuntimeState({"37913bbd": 0, "3216f7d0": 1, "aaaaaaaa": 2},
                                                  5, 9, 900), DurableFiles())
    (memory / RUNTIME_PATH).write_text(json.dumps({"creation_order": {}, "local_batches": 1}))
    _commit(memory)
    after = read_runtime_state(str(memory))
    # the ids the topics hold are ordered again (aaaaaaaa is in no topic: lost for good)
    assert {"37913bbd", "3216f7d0"} <= set(after.creation_order)
    assert (after.local_batches, after.local_tokens, after.write_commits_since_global) == (
        9 + 2, 900 + 70, 5 + 1)


def test_floored_numbers_missing_ids_after_the_highest_order() -> None:
    state = RuntimeState({"a": 0, "b": 7}, 1, 2, 3)
    lifted = floored(state, Floor(entries=9, write_commits_since_global=4), ["b", "c", "d", "c"])
    assert lifted.creation_order == {"a": 0, "b": 7, "c": 8, "d": 9}
    assert (lifted.write_commits_since_global, lifted.local_batches) == (4, 2)
    assert Floor(entries=4).shortfalls(lifted) == []
    assert Floor(entries=9).shortfalls(state) == [{"counter": "entries", "floor": 9, "value": 2}]


def test_recovery_sweeps_temp_files_of_the_locked_files_only(tmp_path: Path) -> None:
    memory = copy_fixture(tmp_path / "memory", "memory")
    private = memory / ".scriptorium"
    crashed = [f".runtime.json.0badc0de{TEMP_SUFFIX}", f".runtime-floor.json.1{TEMP_SUFFIX}",
               f".session-end.json.2{TEMP_SUFFIX}", f".quarantine.jsonl.3{TEMP_SUFFIX}"]
    unlocked = f".model-usage.json.4{TEMP_SUFFIX}"  # written outside the lock: not ours to sweep
    for name in [*crashed, unlocked]:
        (private / name).write_bytes(b"x" * 1000)
    Transactions(str(memory), archived=archived).recover()
    assert sorted(p.name for p in private.iterdir() if p.name.endswith(TEMP_SUFFIX)) == [unlocked]
    assert not (memory / FLOOR_PATH).exists()  # recovery writes nothing
