"""Ranking in SQL gives the exact ranking while reading few rows; a quiet workspace is not scanned.

The exact ranking is :func:`rank_units` over every match (the rules in
Python); a recall of ``k`` must return its first ``k`` hits, having read
only the rows it needed. A sync whose directories say nothing changed does
not scan the files, and still sees every replaced file at once and a file
written in place within :data:`FULL_SCAN_EVERY`.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memory.recall._index as index_module
import memory.recall._index_reads as index_reads
from memory.ledger import SourceMeta, SourceRecord, estimate_tokens, source_anchor
from memory.recall import BranchView, Recall, parse_query, rank_units
from memory.recall._index import FULL_SCAN_EVERY
from memory.recall._recall import _expression
from memory.recall._schema import unit_from_row
from memory.workspace import append_records
from store import DurableFiles

WORDS = ["tea", "lake", "boat", "saffron", "key", "flowerpot", "sencha", "kiln", "harbour",
         "violin", "maple", "ferry"]
SPEAKERS = ["Alice", "Bob", "Carol (user-7)", "Zoë", ""]
DAYS = [datetime(2023, 5, 8, 14, tzinfo=UTC), datetime(2023, 7, 20, 9, tzinfo=UTC),
        datetime(2022, 12, 1, 18, tzinfo=UTC)]
AS_OF = datetime(2023, 12, 1, tzinfo=UTC).timestamp()


def _topic(memory: Path, name: str, paragraphs: list[tuple[str, list[tuple[str, str]], str]]
           ) -> None:
    """A committed topic file: each paragraph cites archived turns, dated by its footnote."""
    parts = [f"# {name.title()}", ""]
    for number, (text, cited, when) in enumerate(paragraphs):
        links = ", ".join(
            f"[{node}](../sources/openprogram/_v2/{session}.md"
            f"#{source_anchor(f'openprogram/{session}/{node}')})" for session, node in cited)
        block = hashlib.sha256(f"{name}/{number}".encode()).hexdigest()
        parts += [f"{text}.[^e-{block[8:18]}] ^{block[:8]}", "",
                  f"[^e-{block[8:18]}]: Time: `{when}`; Sources: {links}", ""]
    path = memory / "topics" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text("\n".join(parts))
    os.replace(temporary, path)


def workspace(memory: Path, seed: int) -> None:
    """Three sessions of turns (speakers, days, pending ones) and paragraphs citing some."""
    rng = random.Random(seed)
    cited: list[tuple[str, str]] = []
    for session in ("s1", "s2", "s3"):
        records = []
        for number in range(40):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
            day = rng.choice(DAYS).timestamp() + number * 60
            pending = rng.random() < 0.1
            records.append(SourceRecord(
                session_id=session, message_id=f"{session}n{number}",
                role="user" if number % 2 == 0 else "assistant",
                content=f"We talked about {words}.", timestamp=day,
                speaker=rng.choice(SPEAKERS) or "User", tokens=8,
                meta=None if not pending else _pending_meta()))
            if rng.random() < 0.3:
                cited.append((session, f"{session}n{number}"))
        append_records(str(memory), session, records, DurableFiles())
    paragraphs = []
    for at in range(0, len(cited), 2):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        when = rng.choice(["2023-05-08", "2023-07-20", "2022-12", "2023"])
        paragraphs.append((f"Notes on {words}", cited[at:at + 2], when))
    _topic(memory, "notes", paragraphs)


def _pending_meta() -> SourceMeta:
    return SourceMeta(authority_tier=None, principal_id="unknown", speaker_kind="unknown",
                      trust_state="pending")


def exact(recall: Recall, query: str, view: BranchView | None, include_pending: bool,
          since: float | None) -> list[tuple[float, str]]:
    """rank_units over every match: the ranking the SQL order must reproduce."""
    index = recall.index
    parsed = parse_query(query, as_of=AS_OF)
    matches = index.search(_expression(parsed, index), 1_000_000)
    units = index.units([ident for ident, _ in matches])
    found = [(units[ident], -rank) for ident, rank in matches]
    cited = index.by_anchor({key for unit, _ in found for key in unit.sources})
    hits = rank_units(found, parsed, cited=cited, view=view, since=since,
                      include_pending=include_pending)
    return [(round(hit.score, 9), hit.node_id or hit.block_id or "") for hit in hits]


queries = st.tuples(
    st.lists(st.sampled_from(WORDS + 3 * ["alice", "carol", "zoë"]
                             + ["July 2023", "8 May 2023", "2022", "last year"]),
             min_size=1, max_size=4),
    st.integers(1, 12), st.booleans(), st.sampled_from([None, "s1", "s2"]),
    st.sampled_from([None, DAYS[0].timestamp()]),
)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Recall:
    memory = tmp_path_factory.mktemp("sql-rank") / "memory"
    memory.mkdir()
    workspace(memory, 13)
    recall = Recall(str(memory), counter=estimate_tokens, clock=lambda: AS_OF)
    recall.sync_blocking()
    return recall


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(asked=queries)
def test_a_recall_of_k_is_the_head_of_the_exact_ranking(
    seeded: Recall, asked: tuple[list[str], int, bool, str | None, float | None],
) -> None:
    words, k, include_pending, session, since = asked
    query = " ".join(words)
    view = None
    if session is not None:
        on = frozenset(f"{session}n{n}" for n in range(0, 40, 3))
        view = BranchView(session, f"{session}n39", on, on | {f"{session}n{n}"
                                                               for n in range(1, 40, 3)})
    hits = seeded.recall_blocking(query, k=k, view=view, since=since, until=None,
                                  include_pending=include_pending, as_of=AS_OF)
    expected = exact(seeded, query, view, include_pending, since)[:k]
    got = [(round(hit.score, 9), hit.node_id or hit.block_id or "") for hit in hits]
    assert [score for score, _ in got] == [score for score, _ in expected]
    # the same units, wherever two scores differ (ties may come in either order)
    last = expected[-1][0] if expected else None
    assert ({unit for score, unit in got if score != last}
            == {unit for score, unit in expected if score != last})


def test_a_recall_of_k_reads_few_rows_of_many_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three hundred turns hold the words: a recall of 8 reads tens of rows, not hundreds."""
    memory = tmp_path / "memory"
    memory.mkdir()
    records = [SourceRecord(session_id="s", message_id=f"n{number}", role="user",
                            content=f"The ferry {'harbour ' * (number % 7)}left at dawn.",
                            timestamp=DAYS[0].timestamp() + number, speaker="Alice", tokens=8)
               for number in range(300)]
    append_records(str(memory), "s", records, DurableFiles())
    recall = Recall(str(memory), counter=estimate_tokens)
    recall.sync_blocking()
    read: list[int] = []
    unit_of = unit_from_row

    def counted(row: tuple[object, ...]) -> object:
        read.append(1)
        return unit_of(row)

    monkeypatch.setattr(index_reads, "unit_from_row", counted)
    hits = recall.recall_blocking("ferry harbour", k=8, view=None, since=None, until=None,
                                  include_pending=False)
    assert len(hits) == 8
    assert len(read) <= 40, len(read)
    recall.close()


class Clock:
    """Wall-clock nanoseconds, moved by the test (the racy rule compares directory stamps)."""

    def __init__(self) -> None:
        self.now = time.time_ns() + 10 * 10**9  # every directory already older than RACY_NS

    def __call__(self) -> int:
        return self.now


def test_a_quiet_workspace_is_not_scanned_and_a_change_is_still_seen(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    workspace(memory, 7)
    clock = Clock()
    recall = Recall(str(memory), counter=estimate_tokens)
    recall.index = index_module.RecallIndex(str(memory), clock=clock)
    scans: list[int] = []
    revision = recall.index.revisions.revision

    def counted_revision(**options: object) -> str:
        scans.append(1)
        return revision()

    recall.index.revisions.revision = counted_revision  # type: ignore[method-assign]
    ask = {"k": 50, "view": None, "since": None, "until": None, "include_pending": False}
    recall.recall_blocking("violin", **ask)  # type: ignore[arg-type]
    assert len(scans) == 1
    for _ in range(5):
        recall.recall_blocking("violin", **ask)  # type: ignore[arg-type]
    assert len(scans) == 1  # nothing changed: a few directory stats, no scan

    # a commit replaces a file (temp + rename): seen by the very next query
    _topic(memory, "extra", [("Zanzibar is where the violin went", [("s1", "s1n0")], "2023")])
    clock.now += 1  # no time passes that would force a scan
    texts = [h.text for h in recall.recall_blocking("zanzibar", **ask)]  # type: ignore[arg-type]
    assert texts and "Zanzibar" in texts[0] and len(scans) == 2

    # an outside write in place moves no directory: seen once FULL_SCAN_EVERY has passed
    clock.now += 10 * 10**9  # the new topic's directory is settled again
    recall.recall_blocking("zanzibar", **ask)  # type: ignore[arg-type]
    path = memory / "topics" / "extra.md"
    with path.open("r+") as handle:
        text = handle.read().replace("Zanzibar", "Quillfeather")
        handle.seek(0)
        handle.write(text)
        handle.truncate()
    scanned = len(scans)
    recall.recall_blocking("quillfeather", **ask)  # type: ignore[arg-type]
    assert len(scans) == scanned  # within the interval: the cheap check is trusted
    clock.now += int(FULL_SCAN_EVERY * 1e9) + 1
    texts = [h.text for h in recall.recall_blocking(
        "quillfeather", **ask)]  # type: ignore[arg-type]
    assert texts and "Quillfeather" in texts[0] and len(scans) == scanned + 1
    recall.close()
