"""The extractive writer: subjects, citations, merging, determinism, speed."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.ledger._records import SourceMeta, SourceRecord
from memory.workspace._edits import WorkspaceSnapshot
from memory.workspace._topic_ids import normalise_topic
from memory.workspace._topics import parse_topic
from memory.workspace._transaction import Transactions
from memory.writers import _extractive
from memory.writers._extractive import (
    CONVERSATIONS,
    EVIDENCE_LIMIT,
    SHARD_BYTES,
    SHARD_LIMIT,
    ExtractiveWriter,
    extract_edits,
)
from memory.writers._sentences import carries_a_fact, speaker_name, subject_of, useful_sentences
from memory.writers._writer import Batch, Writer
from tests.fixture import FIXTURE as SAMPLE
from tests.fixture import copy_fixture

FIXTURE = SAMPLE / "memory"
HISTORY = SAMPLE / "sessions" / "demo" / "history"


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


def fixture_turns() -> dict[str, SourceRecord]:
    """The sample session's turns, by node id, as trusted records."""
    turns = {}
    for path in sorted(HISTORY.glob("*.json")):
        node = json.loads(path.read_text(encoding="utf-8"))
        turns[node["id"]] = record(node["id"], node["output"], ts=node["created_at"])
    return turns


def test_the_fixtures_short_facts_are_kept_and_its_chatter_is_not() -> None:
    kept = {node: useful_sentences(turn.content) for node, turn in fixture_turns().items()}
    assert kept == {
        "u1": ["I prefer tea."],
        "a1": [],  # Noted: tea.
        "u2": [],  # And biscuits.
        "a2": [],  # Biscuits too.
        "a2b": [],  # Retry reply.
        "sp1": [],  # do it
        "summary_cebcf71b21": ["User likes tea."],  # after "[Previous conversation summary]"
    }


def test_a_fact_needs_three_words_two_of_them_content_words() -> None:
    for fact in ("I am Anna.", "I'm vegetarian.", "We ship on Friday.", "Call me at 555 1234.",
                 "We agreed to ship.", "我喜欢喝茶。"):
        assert carries_a_fact(fact), fact
    for chatter in ("Ok.", "Thanks!", "Noted: tea.", "That's great.", "It is ok.",
                    "Thank you so much!", "Got it, thanks.", "Sounds good to me.",
                    "No problem.", "Let me check.", "谢谢你", "好的"):
        assert not carries_a_fact(chatter), chatter


def test_subjects_follow_the_keyword_rules() -> None:
    assert subject_of("We decided to use trio.")[0] == "topics/decisions.md"
    assert subject_of("I really like jazz records.")[0] == "topics/preferences.md"
    assert subject_of("My sister Anna lives in Oslo.")[0] == "topics/people.md"
    assert subject_of("The project deadline is in May.")[0] == "topics/projects.md"
    assert subject_of("The sky over Lisbon is blue.")[0] == "topics/notes.md"
    # core.md is for what stays true of someone, not for everything else
    for stable in ("I'm allergic to peanuts.", "I am Anna.",
                   "I live in Porto.", "I'm vegetarian.", "My goal is to run a marathon.",
                   "I work as a nurse."):
        assert subject_of(stable)[0] == "topics/core.md", stable
    for passing in ("I went to a support group yesterday.", "Music's amazing.",
                    "I am tired today."):
        assert subject_of(passing)[0] == "topics/notes.md", passing


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
    return copy_fixture(tmp_path / "memory", "memory")


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


def _committer(memory: Path, trust: dict[str, bool]) -> tuple[Transactions, Any]:
    """A transaction over ``memory`` whose archive holds ``trust``, and a batch writer."""
    tx = Transactions(str(memory), archived=trust.get)

    def write(records: list[SourceRecord]) -> tuple[str, ...]:
        for r in records:
            trust.setdefault(r.source_id, r.trusted)
        snapshot = tx.snapshot()
        edits = extract_edits(records, snapshot)
        result = tx.commit(edits, base_revision=snapshot.revision,
                           batch_sources={r.source_id for r in records})
        assert all(entry["status"] == "ok" for entry in result.audit), result.audit
        return result.changed_files

    return tx, write


def test_a_chatter_only_batch_changes_memory_once(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    tx, write = _committer(memory, {})
    chatter = [record("c1", "ok"), record("c2", "thanks!", ts=1_755_000_060.0),
               record("c3", "Noted: tea.", ts=1_755_000_120.0),
               record("c4", "hidden", trusted=False)]
    assert write(chatter) == (CONVERSATIONS,)
    log = parse_topic((memory / CONVERSATIONS).read_text())
    (unit,) = log.paragraphs
    assert unit.body.startswith("Conversation on 2025-08-12: nothing new to keep (3 turns).[^e-")
    (label,) = unit.citations
    assert log.footnotes[label].when == "2025-08-12"
    assert [link.label for link in log.footnotes[label].sources] == [
        "openprogram/demo/c1", "openprogram/demo/c2", "openprogram/demo/c3"]
    assert tx.all_cited([r.source_id for r in chatter if r.trusted])
    assert not tx.all_cited(["openprogram/demo/c4"])  # pending evidence is never cited
    # Re-delivered (a crash between install and mark): nothing changes, and
    # all_cited is what lets the runtime mark it.
    assert extract_edits(chatter, tx.snapshot()) == []
    assert write(chatter) == ()
    # The next batch of chatter is a unit of its own, in the same file.
    assert write([record("c5", "cool", ts=1_755_000_180.0)]) == (CONVERSATIONS,)
    bodies = [p.body.split("[^")[0] for p in parse_topic((memory / CONVERSATIONS).read_text())
              .paragraphs]
    assert bodies == ["Conversation on 2025-08-12: nothing new to keep (3 turns).",
                      "Conversation on 2025-08-12: nothing new to keep (1 turn)."]


def test_the_fixture_turns_as_one_batch_are_all_cited(tmp_path: Path) -> None:
    memory = _workspace(tmp_path)
    tx, write = _committer(memory, {})
    turns = list(fixture_turns().values())
    assert write(turns) == (CONVERSATIONS, "topics/preferences.md")
    assert tx.all_cited([turn.source_id for turn in turns])
    log = parse_topic((memory / CONVERSATIONS).read_text())
    # The spawn turn (sp1) was written in 2026, the others in 2025.
    assert [p.body.split("[^")[0] for p in log.paragraphs] == [
        "Conversation from 2025-08-12 to 2026-11-30: nothing new to keep (5 turns)."]
    assert write(turns) == ()


def test_chatter_over_several_days_cites_each_day() -> None:
    (edit,) = extract_edits([record("d1", "ok", ts=1_755_000_000.0),
                             record("d2", "ok", ts=0.0),
                             record("d3", "sure", ts=1_755_200_000.0)], empty())
    assert edit.path == CONVERSATIONS and edit.text is not None
    log = parse_topic(edit.text, edit.path, strict=False)
    (unit,) = log.paragraphs
    assert unit.body.split("[^")[0] == (
        "Conversation from 2025-08-12 to 2025-08-14: nothing new to keep (3 turns).")
    assert [log.footnotes[label].when for label in unit.citations] == [
        "2025-08-12", "undated", "2025-08-14"]


def test_the_conversation_log_is_sharded(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(_extractive, "SHARD_LIMIT", 2)
    memory = _workspace(tmp_path)
    tx, write = _committer(memory, {})
    changed = [write([record(f"s{i}", "thanks")]) for i in range(5)]
    assert changed == [(CONVERSATIONS,), (CONVERSATIONS,), ("topics/conversations-2.md",),
                       ("topics/conversations-2.md",), ("topics/conversations-3.md",)]
    assert tx.all_cited([f"openprogram/demo/s{i}" for i in range(5)])
    assert write([record(f"s{i}", "thanks") for i in range(5)]) == ()


def test_a_fact_cites_at_most_the_evidence_limit_and_later_repeats_are_logged(
        tmp_path: Path) -> None:
    """Without the limit one footnote grew with every repeat: quadratic time and memory."""
    memory = _workspace(tmp_path)
    tx, write = _committer(memory, {})
    repeats = [record(f"r{i}", "I prefer tea over coffee.") for i in range(EVIDENCE_LIMIT + 5)]
    assert write(repeats[:EVIDENCE_LIMIT]) == ("topics/preferences.md",)
    assert write(repeats[EVIDENCE_LIMIT:]) == (CONVERSATIONS,)
    preferences = parse_topic((memory / "topics/preferences.md").read_text())
    (tea,) = [p for p in preferences.paragraphs if p.body.startswith("Owner (12 August 2025): I prefer tea over")]
    assert sum(len(preferences.footnotes[label].sources) for label in tea.citations) == (
        EVIDENCE_LIMIT)
    log = parse_topic((memory / CONVERSATIONS).read_text())
    assert log.paragraphs[-1].body.startswith("Conversation on 2025-08-12: nothing new to keep "
                                              "(5 turns).")
    assert tx.all_cited([r.source_id for r in repeats])
    assert write(repeats) == ()  # delivered again: every record is cited somewhere


def test_a_shard_is_full_at_its_byte_limit(monkeypatch: Any) -> None:
    monkeypatch.setattr(_extractive, "SHARD_BYTES", 200)
    texts: dict[str, str] = {}
    for i in range(3):
        snapshot = WorkspaceSnapshot("rev", tuple(sorted(texts)), texts.__getitem__)
        (edit,) = extract_edits([record(f"n{i}", f"I prefer blend {i} of green tea.")], snapshot)
        assert edit.text is not None
        texts[edit.path] = normalise_topic(edit.path, edit.text, base=None, existing_ids=set(),
                                           used_ids=set(), used_labels=set()).text or ""
    # one paragraph with its footnote passes 200 bytes: each fact starts a new shard
    assert sorted(texts) == ["topics/preferences-2.md", "topics/preferences-3.md",
                             "topics/preferences.md"]


def test_a_broken_file_is_never_rewritten_and_its_records_go_to_the_next_shard() -> None:
    broken = "# Preferences\n\nI prefer tea.[^e1]\n\n[^e1]: Time: `2025-08-12`; Sources: x\n"
    texts = {"topics/preferences.md": broken, CONVERSATIONS: broken.replace("Pref", "Conv")}
    snapshot = WorkspaceSnapshot("rev", tuple(sorted(texts)), texts.__getitem__)
    edits = extract_edits([record("p1", "I prefer tea."), record("p2", "thanks")], snapshot)
    assert [edit.path for edit in edits] == [
        "topics/conversations-2.md", "topics/preferences-2.md"]
    for edit in edits:
        assert edit.text is not None
        (paragraph,) = parse_topic(edit.text, edit.path, strict=False).paragraphs
        assert paragraph.body.split("[^")[0] in ("Owner (12 August 2025): I prefer tea.",
                                                 "Conversation on 2025-08-12: nothing new to keep (1 turn).")


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


def test_files_stay_bounded() -> None:
    records = conversation(3000)
    texts: dict[str, str] = {}
    ids: set[str] = set()
    labels: set[str] = set()
    writer = ExtractiveWriter()
    for start in range(0, len(records), 100):
        snapshot = WorkspaceSnapshot("rev", tuple(sorted(texts)), texts.__getitem__)
        batch = Batch("demo", tuple(records[start:start + 100]), "")
        edits = anyio.run(writer.write, batch, snapshot)
        for edit in edits:
            assert edit.text is not None
            base = parse_topic(texts[edit.path], edit.path) if edit.path in texts else None
            done = normalise_topic(edit.path, edit.text, base=base, existing_ids=set(ids),
                                   used_ids=ids, used_labels=labels)
            assert done.text is not None
            texts[edit.path] = done.text
    # bench/workspace.py measures the >= 2,000 records/s target; tests time nothing.
    decisions = [parse_topic(text) for path, text in texts.items()
                 if path.startswith("topics/decisions")]
    # Every tenth turn repeated an earlier one: merged, not duplicated; files stay bounded.
    repeats = sum(1 for i in range(3000) if i % 10 == 9 and i >= 37)
    assert sum(len(topic.paragraphs) for topic in decisions) == 3000 - repeats
    assert max(len(topic.paragraphs) for topic in decisions) <= SHARD_LIMIT
    # a shard fills up to SHARD_BYTES plus at most one batch's paragraphs
    assert max(len(text.encode()) for text in texts.values()) < 1.5 * SHARD_BYTES


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


_WORDS = ["I", "we", "prefer", "tea", "decided", "ship", "ok", "thanks", "Anna", "my", "sister",
          "project", "deadline", "is", "the", "noted", "cool", "Porto", "like", "?", "!", "."]
_TURN = (
    st.lists(st.sampled_from(_WORDS), max_size=12).map(" ".join)
    | st.text(max_size=80)
    | st.sampled_from(["ok", "thanks", "Noted: tea.", "I prefer tea.", "Sure?", ""])
)
_BATCH = st.lists(st.tuples(_TURN, st.booleans(), st.sampled_from([0.0, 1_755_000_000.0,
                                                                   1_760_000_000.0])),
                  min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(st.lists(_BATCH, min_size=1, max_size=3))
def test_every_fresh_batch_changes_memory_and_cites_every_trusted_record(
    batches: list[list[tuple[str, bool, float]]],
) -> None:
    with tempfile.TemporaryDirectory() as root:
        memory = Path(root) / "memory"
        memory.mkdir()
        tx, write = _committer(memory, {})
        written = []
        for number, turns in enumerate(batches):
            records = [record(f"b{number}t{i}", text, trusted=trusted, ts=ts)
                       for i, (text, trusted, ts) in enumerate(turns)]
            trusted = [r.source_id for r in records if r.trusted]
            assert bool(write(records)) == bool(trusted)
            assert tx.all_cited(trusted)
            written.append(records)
        for records in written:  # every batch re-delivered: nothing changes
            assert write(records) == ()


# -- issue 13: what a new user saw -------------------------------------------------------

def said(node: str, content: str, speaker: str, *, role: str = "user",
         speaker_id: str | None = None, ts: float = 1_683_553_000.0) -> SourceRecord:
    """A turn of a named speaker; 1_683_553_000 is 8 May 2023, 13:36 UTC."""
    meta = SourceMeta("owner", "owner/x", "owner", "trusted")
    return SourceRecord("demo", node, role, content, ts, speaker, speaker_id=speaker_id,
                        meta=meta)


def paragraphs(records: list[SourceRecord]) -> dict[str, list[str]]:
    """Each edited file's paragraph bodies without their citations."""
    out = {}
    for edit in extract_edits(records, empty()):
        assert edit.text is not None
        topic = parse_topic(edit.text, edit.path, strict=False)
        out[edit.path] = [p.body.split("[^")[0] for p in topic.paragraphs]
    return out


def test_small_talk_of_either_side_is_not_a_fact() -> None:
    """It was kept as facts: "Nice to meet you Alice.", "Pixel sounds lovely."."""
    for small_talk in (
        "Nice to meet you Alice.", "Pixel sounds lovely.", "Wow, that's so cool, Caroline!",
        "Good to see you again!", "I'm so happy for you!", "So glad you got the support!",
        "Thanks for sharing your story!", "Let me know if you need anything else.",
        "That sounds like a great idea.", "That looks absolutely stunning.",
        "Congrats on the new job, Melanie!", "Hope you have a wonderful weekend!",
        "What a lovely name for a dog!", "Take care of yourself, my friend.",
        # seen on LoCoMo, where they crowded out the facts
        "It's inspiring to see your dedication to helping others.", "Take a look at this.",
        "You're an inspiration to us all!", "Your courage is inspiring.", "That's huge!",
        "Sounds like you and the kids had a blast.", "Oh man, sorry to hear that, Melanie.",
        "That must've been breathtaking!", "Just wanted to say hi!", "I'm so grateful.",
    ):
        assert not carries_a_fact(small_talk), small_talk
    for fact in ("I adopted a dog named Pixel.", "I am happy with my new job.",
                 "I see my therapist every week.", "My job seems hard.",
                 "The concert sounds were too loud for my son.",
                 "The studio looks amazing.", "It was amazing.", "You're allergic to peanuts.",
                 "Your sister is a doctor in Oslo.", "I'm so grateful for my family.", "Thanks to Anna I moved to Oslo."):
        assert carries_a_fact(fact), fact
    turns = [said("u1", "Hi! I'm Alice. I adopted a dog named Pixel.", "Alice"),
             said("a1", "Nice to meet you Alice. Pixel sounds lovely.", "Assistant",
                  role="assistant")]
    written = paragraphs(turns)
    assert sorted(written) == [CONVERSATIONS, "topics/core.md", "topics/people.md"]
    assert written[CONVERSATIONS] == ["Conversation on 2023-05-08: nothing new to keep (1 turn)."]
    assert written["topics/core.md"] == ["Alice (8 May 2023): I'm Alice."]
    assert written["topics/people.md"] == ["Alice (8 May 2023): I adopted a dog named Pixel."]


def test_a_statement_is_attributed_to_the_speaker_field_and_never_to_its_content() -> None:
    """First-person sentences were written without who said them ("I'm allergic to peanuts")."""
    written = paragraphs([
        said("u1", "I'm allergic to peanuts and shellfish.", "Alice (alice@example)",
             speaker_id="alice@example"),
        # The content claims another speaker: only the speaker field counts (SPEC §6.1).
        said("u2", "Bob: I'm allergic to penicillin since childhood.", "Carol"),
        said("u3", "I'm allergic to dust mites in the spring.", "user"),  # no speaker fields
        said("a1", "# I am the owner of this memory and its rules.", "[^e1]",
             role="assistant"),
    ])
    assert written["topics/core.md"] == [
        "Alice (8 May 2023): I'm allergic to peanuts and shellfish.",
        "Carol (8 May 2023): Bob: I'm allergic to penicillin since childhood.",
        "User (8 May 2023): I'm allergic to dust mites in the spring.",
    ]
    assert written["topics/notes.md"] == [
        "e1 (8 May 2023): # I am the owner of this memory and its rules."]


def test_the_same_words_from_two_speakers_are_two_facts() -> None:
    written = paragraphs([said("u1", "I prefer tea over coffee.", "Alice"),
                          said("u2", "I prefer tea over coffee.", "Bob")])
    assert written["topics/preferences.md"] == ["Alice (8 May 2023): I prefer tea over coffee.",
                                                "Bob (8 May 2023): I prefer tea over coffee."]


def test_a_message_that_begins_with_a_bracket_is_read() -> None:
    """Every sentence starting with "[" was dropped; only short markup tags are skipped."""
    written = paragraphs([
        said("u1", "[Work] I moved the standup to nine every morning.", "Alice"),
        said("u2", "[shares a photo of a golden retriever on the beach]", "Alice"),
        said("u3", "[Previous conversation summary]\nAlice likes green tea.", "Alice"),
        said("u4", "[^e1]: Time: `2023`; Sources: x is how a citation looks.", "Alice"),
        said("u5", "[image]", "Alice"),
    ])
    assert written["topics/notes.md"] == [
        "Alice (8 May 2023): I moved the standup to nine every morning.",
        "Alice (8 May 2023): [shares a photo of a golden retriever on the beach].",
        "Alice (8 May 2023): [ ^e1]: Time: `2023`; Sources: x is how a citation looks.",
    ]
    assert written["topics/preferences.md"] == ["Alice (8 May 2023): Alice likes green tea."]
    assert written[CONVERSATIONS] == [
        "Conversation on 2023-05-08: nothing new to keep (1 turn)."]


def test_relative_dates_are_resolved_against_the_turns_day_and_the_footnote_keeps_it() -> None:
    (edit,) = extract_edits([said("u1", "I went to a support group yesterday.", "Caroline")],
                            empty())
    assert edit.text is not None
    topic = parse_topic(edit.text, edit.path, strict=False)
    (unit,) = topic.paragraphs
    assert unit.body.split("[^")[0] == (
        "Caroline (8 May 2023): I went to a support group yesterday (7 May 2023).")
    assert [topic.footnotes[label].when for label in unit.citations] == ["2023-05-08"]
    # an undated turn keeps its words as they are
    (edit,) = extract_edits([said("u2", "I went to a support group yesterday.", "Caroline",
                                  ts=0.0)], empty())
    assert edit.text is not None and "yesterday." in edit.text and "(7 May" not in edit.text


def test_statements_inside_questions_and_names_with_initials_are_kept() -> None:
    """Measured on LoCoMo: answers were lost in these shapes."""
    assert useful_sentences("Sunflowers mean warmth and happiness, right?") == [
        "Sunflowers mean warmth and happiness."]
    assert useful_sentences(
        "Hey Mel, I signed up for a pottery class yesterday, have you ever tried it?") == [
        "Hey Mel, I signed up for a pottery class yesterday."]
    assert useful_sentences("The Hobbit is great, but have you read the sequel?") == [
        "The Hobbit is great."]
    assert useful_sentences("Remember that epic block in Game 7 of the '16 Finals?") == [
        "Remember that epic block in Game 7 of the '16 Finals?"]
    assert useful_sentences("J.K. Rowling is such an inspiring writer. Dr. Seuss wrote "
                            "my first books.") == [
        "J.K. Rowling is such an inspiring writer.", "Dr. Seuss wrote my first books."]
    for question in ("What do flowers mean to you?", "Hey Caroline, how are you doing?",
                     "What's up, have you been busy?", "Did you go, right?"):
        assert useful_sentences(question) == [], question


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40) | st.text(alphabet=" #[]^():e1-\n\t", max_size=20),
       st.sampled_from(["user", "assistant"]),
       st.text(alphabet=" abc.?![]^#:()yesterday", min_size=1, max_size=120))
def test_whatever_the_speaker_is_called_the_drafts_normalise(
    speaker: str, role: str, content: str,
) -> None:
    """The speaker's name opens every paragraph line: no name may break the topic grammar."""
    meta = SourceMeta("owner", "owner/x", "owner", "trusted")
    turn = SourceRecord("demo", "s1", role, f"I moved to Porto. {content}", 1_683_553_000.0,
                        speaker, meta=meta)
    edits = extract_edits([turn], empty())
    assert edits
    for edit in edits:
        assert edit.text is not None
        done = normalise_topic(edit.path, edit.text, base=None, existing_ids=set(),
                               used_ids=set(), used_labels=set())
        assert done.text is not None
        topic = parse_topic(done.text, edit.path)
        assert topic.paragraphs
        for paragraph in topic.paragraphs:
            if edit.path != CONVERSATIONS:
                assert paragraph.body.startswith(f"{speaker_name(turn)} (8 May 2023): ")
