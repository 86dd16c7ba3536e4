"""The recall index is derived: after any commits and crashed syncs it equals a rebuild.

Also: a sync during a commit waits for the install (one consistent state);
a damaged index is rebuilt; the budget is never exceeded; a recall never
blocks the event loop (a timer fires on time while one runs).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.ledger import SourceRecord, estimate_tokens, source_anchor
from memory.recall import Hit, Recall, RecallIndex, pack_context
from memory.workspace import append_records, workspace_lock
from store import DurableFiles
from tests.faults import SimulatedCrash

WORDS = ["tea", "lake", "boat", "saffron", "Alice", "Berlin", "key", "flowerpot", "sencha"]


def frame(session: str, node: str, text: str) -> SourceRecord:
    return SourceRecord(session_id=session, message_id=node, role="user", content=text,
                        timestamp=1_700_000_000.0 + len(node), speaker="Owner")


def topic_text(number: int, sentences: list[str]) -> str:
    """A committed topic file (strict grammar) whose paragraphs cite archive links."""
    parts = [f"# Topic {number}", ""]
    for index, sentence in enumerate(sentences):
        block = hashlib.sha256(f"{number}/{index}".encode()).hexdigest()[:8]
        label = "e-" + hashlib.sha256(f"f{number}/{index}".encode()).hexdigest()[:10]
        anchor = source_anchor(f"openprogram/s1/n{index}")
        parts += [f"{sentence}.[^{label}] ^{block}", "",
                  (f"[^{label}]: Time: `2023-05`; Sources: "
                   f"[n{index}](../sources/openprogram/_v2/s1.md#{anchor})"), ""]
    return "\n".join(parts)


def apply(memory: Path, operation: tuple[str, int, list[str]]) -> None:
    kind, number, words = operation
    topic = memory / "topics" / f"t{number}.md"
    if kind == "topic":
        topic.parent.mkdir(parents=True, exist_ok=True)
        topic.write_text(topic_text(number, [" ".join(words)] * (1 + number % 2)))
    elif kind == "delete":
        topic.unlink(missing_ok=True)
    else:
        session = f"s{number % 2 + 1}"
        nodes = [frame(session, f"n{number}-{i}-{'-'.join(words)[:20]}", " ".join(words))
                 for i in range(1 + number % 3)]
        append_records(str(memory), session, nodes, DurableFiles())


operations = st.lists(st.tuples(
    st.sampled_from(["topic", "delete", "archive"]), st.integers(0, 3),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
), min_size=1, max_size=8)


class Crashes:
    """A sync step hook that dies at its ``at``-th call (then lets everything through)."""

    def __init__(self, at: int | None) -> None:
        self.at, self.calls = at, 0

    def __call__(self, name: str) -> None:
        self.calls += 1
        if self.at is not None and self.calls == self.at:
            raise SimulatedCrash(f"crash at step {self.calls} ({name})")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=st.lists(st.tuples(operations, st.one_of(st.none(), st.integers(1, 6))),
                       min_size=1, max_size=4))
def test_after_commits_and_crashed_syncs_the_index_answers_as_a_rebuild(
    rounds: list[tuple[list[tuple[str, int, list[str]]], int | None]],
) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        memory = root / "memory"
        memory.mkdir()
        index = RecallIndex(str(memory))
        for ops, crash_at in rounds:
            for operation in ops:
                apply(memory, operation)
            index.step = Crashes(crash_at)
            try:
                index.sync()
            except SimulatedCrash:
                index.close()  # the process died: the next one opens the file again
                index = RecallIndex(str(memory))
        index.step = Crashes(None)
        index.sync()
        fresh = RecallIndex(str(memory))
        fresh.path = str(root / "fresh.sqlite")
        fresh.rebuild()
        assert index.dump() == fresh.dump()
        for word in WORDS:
            expression = f'"{word.lower()}"'
            mine = [index.units([i])[i] for i, _ in index.search(expression, 50)]
            theirs = [fresh.units([i])[i] for i, _ in fresh.search(expression, 50)]
            assert sorted(map(repr, mine)) == sorted(map(repr, theirs))
        index.close()
        fresh.close()
    finally:
        shutil.rmtree(root)


def test_a_crash_inside_a_sync_leaves_the_index_as_before_it(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    index = RecallIndex(str(memory))
    apply(memory, ("archive", 0, ["tea"]))
    index.sync()
    before = index.dump()
    apply(memory, ("archive", 0, ["lake"]))
    apply(memory, ("topic", 1, ["boat"]))
    index.step = Crashes(2)  # after the archive's new frames, before the topic
    with pytest.raises(SimulatedCrash):
        index.sync()
    assert index.dump() == before
    index.step = Crashes(None)
    assert index.sync().files == 2 and index.count() == len(before) + 3  # 1 frame, 2 paragraphs


def test_a_damaged_or_old_index_is_rebuilt_not_fatal(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    apply(memory, ("archive", 0, ["tea", "lake"]))
    index = RecallIndex(str(memory))
    index.sync()
    expected = index.dump()
    index.close()
    Path(index.path).write_bytes(b"garbage" * 100)
    for suffix in ("-wal", "-shm"):
        Path(index.path + suffix).unlink(missing_ok=True)
    again = RecallIndex(str(memory))
    again.sync()
    assert again.dump() == expected
    again.db.execute("UPDATE meta SET value='0' WHERE key='schema'")
    again.close()
    third = RecallIndex(str(memory))
    assert third.count() == 0  # an old schema is dropped ...
    third.sync()
    assert third.dump() == expected  # ... and made again from the files
    third.close()


def test_a_sync_during_a_commit_sees_the_commit_whole(tmp_path: Path) -> None:
    """Two files of one install: a query while it is half done waits for write.lock."""
    memory = tmp_path / "memory"
    memory.mkdir()
    apply(memory, ("topic", 0, ["tea"]))
    apply(memory, ("topic", 1, ["tea"]))
    index = RecallIndex(str(memory), lock_timeout=30.0)
    index.sync()
    done = threading.Event()
    with workspace_lock(str(memory), DurableFiles()):
        apply(memory, ("topic", 0, ["lake"]))  # half of the install
        def sync_then_say_so() -> None:
            index.sync()
            done.set()

        worker = threading.Thread(target=sync_then_say_so)
        worker.start()
        # the sync must be waiting for the lock, not reading the half-done install
        assert not done.wait(0.3)
        apply(memory, ("topic", 1, ["lake"]))
    worker.join(10)
    assert done.is_set()
    assert {row[3] for row in index.dump()} == {"lake."}  # both files new, no "tea." left


hit_texts = st.lists(st.text(min_size=1, max_size=200), min_size=0, max_size=30)


@settings(max_examples=200, deadline=None)
@given(texts=hit_texts, budget=st.integers(-5, 400),
       counter=st.sampled_from(["estimate", "words", "chars"]))
def test_the_block_never_exceeds_its_budget(texts: list[str], budget: int, counter: str) -> None:
    count = {"estimate": estimate_tokens, "words": lambda t: len(t.split()),
             "chars": len}[counter]
    hits = [Hit("source", text, 1.0, "8 May 2023", "sources/openprogram/_v2/s.md",
                session="s", node_id=f"n{i}", speaker="Owner", seq=i)
            for i, text in enumerate(texts)]

    def neighbours(hit: Hit) -> list[Hit]:
        return [h for h in hits if abs(h.seq - hit.seq) == 1]

    context = pack_context(hits, budget, count, neighbours=neighbours)
    assert context.tokens <= max(budget, 0)
    assert context.tokens == (count(context.text) if context.text else 0)
    assert len(set(context.quoted)) == len(context.quoted)



@pytest.mark.virtual_time
async def test_a_timer_fires_on_time_while_a_recall_runs(tmp_path: Path) -> None:
    """The index's sync waits (in its thread) for a loop timer: on the loop it would hang."""
    memory = tmp_path / "memory"
    memory.mkdir()
    apply(memory, ("archive", 0, ["tea", "lake"]))
    fired = threading.Event()
    loop_thread = threading.get_ident()
    threads: set[int] = set()

    def gate(name: str) -> None:
        threads.add(threading.get_ident())
        if not fired.wait(20.0):
            raise AssertionError("the loop's timer never fired while the recall ran")

    recall = Recall(str(memory), counter=estimate_tokens, step=gate)
    deadline = anyio.current_time() + 5.0
    fired_at: list[float] = []

    async def timer() -> None:
        await anyio.sleep(5.0)
        fired_at.append(anyio.current_time())
        fired.set()

    async with anyio.create_task_group() as group:
        group.start_soon(timer)
        context = await recall.context("lake", budget_tokens=100)
    assert fired_at and fired_at[0] == pytest.approx(deadline, abs=0.5)
    assert context.quoted and loop_thread not in threads
    recall.close()


def test_the_index_lives_where_the_issue_says_in_wal_mode(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    index = RecallIndex(str(memory))
    index.sync()
    assert index.path == os.path.join(str(memory), ".scriptorium", "recall.sqlite")
    assert index.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    for suffix in ("", "-wal", "-shm"):  # owner-only, like everything in <state> (SPEC §3)
        assert stat.S_IMODE(os.stat(index.path + suffix).st_mode) == 0o600, suffix
    index.close()


def test_a_word_in_most_units_is_left_out_of_the_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FTS5 would score every row holding it; past half the units its idf is clamped to nothing."""
    import memory.recall._recall as recall_module

    memory = tmp_path / "memory"
    memory.mkdir()
    append_records(str(memory), "s1", [frame("s1", f"n{i}", f"a common plain note {i}")
                                       for i in range(20)], DurableFiles())
    append_records(str(memory), "s2", [frame("s2", f"r{i}", "a common rare note")
                                       for i in range(2)], DurableFiles())
    recall = Recall(str(memory), counter=estimate_tokens)
    recall.sync_blocking()
    assert recall.index.common_terms(['"common"', '"rare"'], 0.5) == {'"common"'}
    monkeypatch.setattr(recall_module, "COMMON_FLOOR", 0)
    found = {(h.session, h.node_id) for h in recall.recall_blocking(
        "common rare", k=50, view=None, since=None, until=None, include_pending=False)}
    assert found == {("s2", "r0"), ("s2", "r1")}
    # a query of common words only still searches for them
    assert len(recall.recall_blocking("common note", k=50, view=None, since=None, until=None,
                                      include_pending=False)) == 22
    # below the floor (a small workspace) every word is searched: the rules may lift any unit
    monkeypatch.setattr(recall_module, "COMMON_FLOOR", 5_000)
    assert len(recall.recall_blocking("common rare", k=50, view=None, since=None, until=None,
                                      include_pending=False)) == 22
    recall.close()


def test_surroundings_follow_the_dag_and_stop_at_a_fork() -> None:
    from memory.recall._surroundings import surroundings

    # archive order: u1 a1 u2 a2 (rewound later) u2b a2b; t1 is a tool call the archive skips
    turns = [(0, "u1", "w-u1"), (1, "a1", "w-a1"), (2, "u2", "w-u2"), (3, "a2", "w-a2"),
             (4, "u2b", "w-u2b"), (5, "a2b", "w-a2b")]
    links = {"u1": "ROOT", "a1": "u1", "u2": "a1", "a2": "u2", "t1": "a1", "u2b": "t1",
             "a2b": "u2b"}
    around = surroundings(turns, links, range(6))
    assert around[4] == "w-u1 w-a1 w-a2b"  # past the tool call; no rewound sibling
    assert around[1] == "w-u1"  # a1 forks: below it, which branch follows is not known
    assert around[0] == "w-a1"
    assert around[2] == "w-u1 w-a1 w-a2"
    # a turn the store does not know is surrounded in the archive's order
    assert surroundings(turns, {}, [2])[2] == "w-u1 w-a1 w-a2 w-u2b w-a2b"
    # a new turn moves the surroundings of its ancestors: a fork appears above it
    before = surroundings(turns[:4], links, range(4))
    assert before[0] == "w-a1 w-u2 w-a2"
    after = surroundings(turns, links, [4, 5])
    assert after[0] == "w-a1" and after[1] == "w-u1"
