"""A pass through the topic transactions: whole or not at all, recorded, counters reset."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from memory._errors import ConcurrentUpdateError, ConsolidationRefusedError
from memory.consolidation._offline import consolidate_offline
from memory.consolidation._pass import (
    commit_pass,
    consolidate_workspace,
    prepare_pass,
    read_history,
)
from memory.consolidation._plan import Plan
from memory.workspace._edits import TopicEdit
from memory.workspace._install_journal import JOURNAL
from memory.workspace._runtime_state import (
    RECORDS_DIR,
    RuntimeState,
    read_floor,
    read_runtime_state,
    write_runtime_state,
)
from memory.workspace._topics import Topic, parse_topic
from memory.workspace._transaction import Transactions
from store._durable import DurableFiles
from tests.faults import FaultyFiles, SimulatedCrash, count_steps
from tests.fixture import copy_fixture

ARCHIVE = {"openprogram/demo/u1": True, "openprogram/demo/u2": True, "openprogram/demo/a2": True}
NOW = 1_800_000_000.0


def _draft(body: str, source: str, when: str) -> str:
    return f"{body}[^e1]\n\n[^e1]: Time: `{when}`; Sources: {source}\n"


def _workspace(root: Path) -> Path:
    """The fixture plus a fact told twice (two files) and a preference that changed."""
    memory = copy_fixture(root / "memory", "memory")
    tx = Transactions(str(memory), archived=ARCHIVE.get)
    tx.commit([
        TopicEdit("topics/a.md", "# A\n\n" + _draft("User (1 May 2025): My usual drink is green tea.",
                                                   "openprogram/demo/u1", "2025-05-01")),
        TopicEdit("topics/sub/b.md", "# B\n\n" + _draft(
            "User (3 June 2025): My usual drink is coffee.", "openprogram/demo/u2", "2025-06-03")
            + "\nUser (2 May 2025): My usual drink is green tea![^e2]\n\n"
              "[^e2]: Time: `2025-05-02`; Sources: openprogram/demo/a2\n"),
    ], base_revision=tx.revision(), batch_sources=set(ARCHIVE))
    write_runtime_state(str(memory), RuntimeState(read_runtime_state(str(memory)).creation_order,
                                                  7, 5, 41_000), DurableFiles())
    return memory


def _topics(memory: Path) -> dict[str, bytes]:
    return {p.relative_to(memory).as_posix(): p.read_bytes()
            for p in sorted((memory / "topics").rglob("*.md"))}


def _history(memory: Path) -> list[str]:
    directory = memory / RECORDS_DIR
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_a_pass_installs_its_plan_its_record_and_resets_the_counters(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    prepared = consolidate_workspace(str(memory), consolidate_offline, scope="global", now=NOW)
    assert [a["kind"] for a in prepared.record["actions"]] == ["supersede", "compact"]
    assert sorted(_topics(memory)) == ["topics/a.md", "topics/people/owner.md"]  # b.md emptied
    text = (memory / "topics/a.md").read_text()
    assert parse_topic(text, "topics/a.md").paragraphs[0].body.startswith(
        "User (3 June 2025): My usual drink is coffee.")
    (record,) = read_history(str(memory))
    assert record["pass"] == prepared.record["pass"] and record["scope"] == "global"
    state = read_runtime_state(str(memory))
    assert (state.local_batches, state.local_tokens, state.write_commits_since_global) == (0, 0, 0)
    assert state.last_global_at == "2027-01-15T08:00:00+00:00"
    assert read_floor(str(memory)).local_tokens == 0  # lowered with the reset: no false alarm
    again = consolidate_workspace(str(memory), consolidate_offline, scope="local", now=NOW + 1)
    assert again.edits == () and len(read_history(str(memory))) == 1


def test_a_dry_run_prints_a_diff_and_changes_nothing(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    before = _topics(memory), (memory / ".scriptorium/runtime.json").read_bytes()
    prepared = consolidate_workspace(str(memory), consolidate_offline, scope="local", now=NOW,
                                     dry_run=True)
    assert "+User (3 June 2025): My usual drink is coffee." in prepared.diff
    assert "--- a/topics/sub/b.md" in prepared.diff
    assert (_topics(memory), (memory / ".scriptorium/runtime.json").read_bytes()) == before
    assert _history(memory) == []


def _dropping(topics: Mapping[str, Topic]) -> Plan:
    """A planted consolidator: a correct pass, plus one paragraph of owner.md dropped."""
    plan = consolidate_offline(topics)
    owner = topics["topics/people/owner.md"]
    kept = tuple(b for b in owner.blocks if b is not owner.paragraphs[0])
    return Plan({**plan.topics, "topics/people/owner.md": Topic(kept, owner.footnotes)},
                plan.actions)


def test_a_pass_that_would_drop_a_paragraph_is_refused_whole(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    before = _topics(memory), (memory / ".scriptorium/runtime.json").read_bytes()
    with pytest.raises(ConsolidationRefusedError, match=r"would no longer resolve: \^37913bbd"):
        consolidate_workspace(str(memory), _dropping, scope="local", now=NOW)
    assert (_topics(memory), (memory / ".scriptorium/runtime.json").read_bytes()) == before
    assert _history(memory) == []


def test_a_write_that_lands_meanwhile_refuses_the_pass_which_yields(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    tx = Transactions(str(memory), archived=ARCHIVE.get)
    prepared = prepare_pass(tx.snapshot(), consolidate_offline, scope="local", now=NOW)
    tx.commit([TopicEdit("topics/c.md", _draft("Another fact.", "openprogram/demo/a2",
                                               "2025-07-01"))],
              base_revision=tx.revision(), batch_sources=set(ARCHIVE))
    before = _topics(memory)
    with pytest.raises(ConcurrentUpdateError):
        commit_pass(tx, prepared, NOW)
    assert _topics(memory) == before


def test_a_crash_at_every_step_of_a_pass_leaves_the_old_or_the_new_topics(
    tmp_path: Path,
) -> None:
    reference = _workspace(tmp_path / "reference")
    old = _topics(reference), read_runtime_state(str(reference))
    consolidate_workspace(str(reference), consolidate_offline, scope="local", now=NOW)
    new = _topics(reference), read_runtime_state(str(reference))
    probe = _workspace(tmp_path / "probe")
    steps = count_steps(lambda files: consolidate_workspace(
        str(probe), consolidate_offline, scope="local", now=NOW, files=files))
    outcomes = set()
    for k in range(steps):
        memory = _workspace(tmp_path / f"crash{k}")
        with pytest.raises(SimulatedCrash):
            consolidate_workspace(str(memory), consolidate_offline, scope="local", now=NOW,
                                  files=FaultyFiles(crash_at=k))
        Transactions(str(memory), archived=ARCHIVE.get).recover()
        after = _topics(memory), read_runtime_state(str(memory))
        assert after in (old, new), f"a mix after a crash at step {k}"
        # the record is installed with the topics: there exactly when they are new
        assert (len(_history(memory)) == 1) == (after == new), f"record at step {k}"
        assert not (memory / JOURNAL).exists()
        outcomes.add("new" if after == new else "old")
    assert outcomes == {"old", "new"}


def test_each_record_says_what_was_merged_with_before_and_after(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    consolidate_workspace(str(memory), consolidate_offline, scope="local", now=NOW)
    (name,) = _history(memory)
    record = json.loads((memory / RECORDS_DIR / name).read_bytes())
    action, compact = record["actions"]
    assert compact["kind"] == "compact" and "every source still cited" in compact["reason"]
    assert action["kind"] == "supersede" and len(action["before"]) == 3
    assert action["after"].count("\n") == 1 and "Previously (2025-05-02)" in action["after"]
    assert sorted([action["block"], *action["absorbed"]]) == sorted(
        parse_topic((memory / "topics/a.md").read_text(), "topics/a.md").block_ids())


def test_a_pass_with_nothing_to_change_keeps_the_counters_of_a_write_that_landed_meanwhile(
    tmp_path: Path,
) -> None:
    memory = _workspace(tmp_path)
    consolidate_workspace(str(memory), consolidate_offline, scope="global", now=NOW)
    tx = Transactions(str(memory), archived=ARCHIVE.get)
    prepared = prepare_pass(tx.snapshot(), consolidate_offline, scope="local", now=NOW + 1)
    assert prepared.edits == ()
    tx.commit([TopicEdit("topics/c.md", _draft("Another fact.", "openprogram/demo/a2",
                                               "2025-07-01"))],
              base_revision=tx.revision(), batch_sources=set(ARCHIVE),
              update_state=lambda state, created: dataclasses.replace(
                  state, local_batches=state.local_batches + 1))
    with pytest.raises(ConcurrentUpdateError):
        commit_pass(tx, prepared, NOW + 2)
    assert read_runtime_state(str(memory)).local_batches == 1  # the write's count, kept
