"""The extractive writer: subjects, citations, merging, determinism, speed."""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memory._extractive import (
    SHARD_LIMIT,
    ExtractiveWriter,
    extract_edits,
    subject_of,
    useful_sentences,
)
from memory._records import SourceMeta, SourceRecord
from memory._topic_ids import normalise_topic
from memory._topics import parse_topic
from memory._transaction import Transactions
from memory._writer import Batch, TopicEdit, WorkspaceSnapshot, Writer
from tests.fixture import FIXTURE as SAMPLE

FIXTURE = SAMPLE / "memory"


def record(node: str, content: str, *, trusted: bool = True, ts: float = 1_755_000_000.0,
           session: str = "demo") -> SourceRecord:
    meta = SourceMeta("owner", "owner/x", "owner", "trusted" if trusted else "pending")
    return SourceRecord(session, node, "user", content, ts, "Owner", meta=meta)


def snapshot_of(root: Path) -> WorkspaceSnapshot:
    paths = tuple(sorted(
        str(p.relative_to(root)) for p in (root / "topics").rglob("*.md")
    )) if (root / "topics").exists() else ()
    return WorkspaceSnapshot("rev", paths, lambda path: (root / path).read_text())


def empty() -> WorkspaceSnapshot:
    return WorkspaceSnapshot("rev", (), lambda path: "")


def test_useful_sentences_drop_questions_and_pleasantries() -> None:
    text = ("Thanks! Can you help me? I prefer green tea in the morning.\n"
            "Ok. We decided to ship on Friday")
    assert useful_sentences(text) == [
        "I prefer green tea in the morning.", "We decided to ship on Friday.",
    ]


def test_subjects_follow_the_keyword_rules() -> None:
    assert subject_of("We decided to use trio.")[0] == "topics/decisions.md"
    assert subject_of("I really like jazz records.")[0] == "topics/preferences.md"
    assert subject_of("My sister Anna lives in Oslo.")[0] == "topics/people.md"
    assert subject_of("The project deadline is in May.")[0] == "topics/projects.md"
    assert subject_of("The sky over Lisbon is blue.")[0] == "topics/core.md"


def test_every_paragraph_cites_its_record_by_raw_handle() -> None:
    edits = extract_edits([record("u9", "I prefer tea over coffee. We decided to move to Porto.")],
                          empty())
    assert [edit.path for edit in edits] == ["topics/decisions.md", "topics/preferences.md"]
    for edit in edits:
        assert edit.text is not None
        topic = parse_topic(edit.text, edit.path, strict=False)
        assert topic.paragraphs
        for paragraph in topic.paragraphs:
            for label in paragraph.citations:
                assert topic.footnotes[label].sources[0].target == "openprogram/demo/u9"
                assert topic.footnotes[label].when == "2025-08-12"


def test_a_record_without_a_usable_time_is_undated() -> None:
    for ts in (0.0, -5.0, 1e20, float("nan")):
        (edit,) = extract_edits([record("u9", "I prefer tea over coffee.", ts=ts)], empty())
        assert edit.text is not None and "Time: `undated`" in edit.text


def test_pending_records_are_never_cited() -> None:
    assert extract_edits([record("u9", "I prefer tea over coffee.", trusted=False)], empty()) == []


def _workspace(tmp_path: Path) -> Path:
    memory = tmp_path / "memory"
    shutil.copytree(FIXTURE, memory)
    for directory, _, files in os.walk(memory):
        os.chmod(directory, 0o700)
        for name in files:
            os.chmod(os.path.join(directory, name), stat.S_IRUSR | stat.S_IWUSR)
    return memory


def test_written_through_a_transaction_a_repeated_fact_merges(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    trusted = {"openprogram/demo/n1", "openprogram/demo/n2"}
    tx = Transactions(str(memory), archived=lambda s: True if s in trusted else None)

    def write(records: list[SourceRecord]) -> tuple[str, ...]:
        edits = extract_edits(records, snapshot_of(memory))
        result = tx.commit(edits, base_revision=tx.revision(),
                           batch_sources={r.source_id for r in records})
        assert all(entry["status"] == "ok" for entry in result.audit)
        return result.changed_files

    assert write([record("n1", "I prefer tea over coffee.")]) == ("topics/preferences.md",)
    first = parse_topic((memory / "topics/preferences.md").read_text())
    block = first.paragraphs[0].block_id
    # The same fact from another turn the same day: one paragraph, same id,
    # one footnote naming both turns.
    assert write([record("n2", "i prefer tea over  coffee")]) == ("topics/preferences.md",)
    merged = parse_topic((memory / "topics/preferences.md").read_text())
    assert len(merged.paragraphs) == 1
    assert merged.paragraphs[0].block_id == block
    (label,) = merged.paragraphs[0].citations
    assert [link.label for link in merged.footnotes[label].sources] == [
        "openprogram/demo/n1", "openprogram/demo/n2"]
    # Another day: a second citation on the same paragraph.
    trusted.add("openprogram/demo/n3")
    assert write([record("n3", "I prefer tea over coffee.", ts=1_760_000_000.0)]) == (
        "topics/preferences.md",)
    again = parse_topic((memory / "topics/preferences.md").read_text())
    assert len(again.paragraphs) == 1 and len(again.paragraphs[0].citations) == 2
    # Writing the same turn again changes nothing.
    assert write([record("n2", "I prefer tea over coffee.")]) == ()


def test_the_same_batch_gives_the_same_edits() -> None:
    records = [record(f"n{i}", f"I like item number {i} a lot. Fact {i} is stable here.")
               for i in range(20)]
    assert extract_edits(records, empty()) == extract_edits(records, empty())


async def test_it_is_a_writer() -> None:
    writer = ExtractiveWriter()
    assert isinstance(writer, Writer)
    batch = Batch("demo", (record("u9", "We decided to use anyio for everything."),), "")
    edits = await writer.write(batch, empty())
    assert [edit.path for edit in edits] == ["topics/decisions.md"]


def conversation(count: int) -> list[SourceRecord]:
    """Turns with mostly new facts, every tenth one repeating an earlier turn."""
    names = ["Ada", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus"]
    records = []
    for i in range(count):
        n = i - 37 if i % 10 == 9 and i >= 37 else i
        records.append(record(f"n{i}", (
            f"I prefer blend {n} of tea with breakfast. We decided to rename module {n} "
            f"next week. My colleague {names[n % 7]} {n} reviews patch {n}. Anything else?"
        ), ts=1_755_000_000.0 + 60 * i))
    return records


def test_it_is_fast_and_keeps_files_bounded() -> None:
    records = conversation(3000)
    texts: dict[str, str] = {}
    ids: set[str] = set()
    labels: set[str] = set()
    writer = ExtractiveWriter()
    writing = 0.0
    for start in range(0, len(records), 100):
        snapshot = WorkspaceSnapshot("rev", tuple(sorted(texts)), texts.__getitem__)
        batch = Batch("demo", tuple(records[start:start + 100]), "")
        started = time.perf_counter()
        edits = _run(writer.write(batch, snapshot))
        writing += time.perf_counter() - started
        for edit in edits:
            assert edit.text is not None
            base = parse_topic(texts[edit.path], edit.path) if edit.path in texts else None
            done = normalise_topic(edit.path, edit.text, base=base, existing_ids=set(ids),
                                   used_ids=ids, used_labels=labels)
            assert done.text is not None
            texts[edit.path] = done.text
    # bench/workspace.py measures the >= 2,000 records/s target (and the whole
    # pipeline); on a shared machine a test keeps only a gross regression guard.
    rate = len(records) / writing
    assert rate > 500, f"{rate:.0f} records/s"
    decisions = [parse_topic(text) for path, text in texts.items()
                 if path.startswith("topics/decisions")]
    # Every tenth turn repeated an earlier one: merged, not duplicated; files stay bounded.
    repeats = sum(1 for i in range(3000) if i % 10 == 9 and i >= 37)
    assert sum(len(topic.paragraphs) for topic in decisions) == 3000 - repeats
    assert max(len(topic.paragraphs) for topic in decisions) == SHARD_LIMIT


def _run(coroutine: Coroutine[Any, Any, list[TopicEdit]]) -> list[TopicEdit]:
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError("the extractive writer never awaits")


@settings(max_examples=150, deadline=None)
@given(st.lists(
    st.text(min_size=1, max_size=200)
    | st.text(alphabet=" \t\r\n abcdefgh.?!#[]^`:;()-e0123456789", min_size=1, max_size=200),
    min_size=1, max_size=5,
))
def test_whatever_the_turns_say_the_drafts_normalise(contents: list[str]) -> None:
    records = [record(f"h{i}", content) for i, content in enumerate(contents)]
    for edit in extract_edits(records, empty()):
        assert edit.text is not None
        done = normalise_topic(edit.path, edit.text, base=None, existing_ids=set(),
                               used_ids=set(), used_labels=set())
        assert done.text is not None
        assert parse_topic(done.text, edit.path).paragraphs
