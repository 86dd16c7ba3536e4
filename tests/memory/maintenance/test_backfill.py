"""Backfill (SPEC §6.8) through the real write cycle, transactions and extractive writer."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memory.ledger._records import SourceMeta, SourceRecord, source_anchor
from memory.maintenance._audit import topic_citations
from memory.maintenance._audit_inputs import read_topics
from memory.maintenance._backfill import BackfillReport, backfill, backfill_batches, frame_record
from memory.workspace._archive import parse_archive, render_frame
from memory.workspace._archive_cache import ArchiveCache
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._transaction import Transactions
from memory.writers._cycle import WriteOutcome, run_write_cycle
from memory.writers._extractive import ExtractiveWriter
from memory.writers._writer import Batch, Writer, WriterOutput
from tests.faults import ENDPOINT_ERROR, FaultyWriter
from tests.fixture import copy_fixture

OWNER = SourceMeta("owner", "owner/local", "owner", "trusted")
GUEST = SourceMeta(None, "guest/1", "guest", "pending")
SAID = [
    "I prefer green tea in the morning.",
    "My sister Anna lives in Lisbon.",
    "thanks",
    "The release deadline for the atlas project is Friday.",
    "I love hiking in the Alps.",
    "ok",
]


def rec(n: int, text: str, meta: SourceMeta | None = OWNER) -> SourceRecord:
    return SourceRecord(
        "s1",
        f"m{n}",
        "user",
        text,
        1755000000.0 + 60 * n,
        "Owner (owner/local)",
        "owner/local",
        meta,
    )


class Workspace:
    def __init__(self, memory: str, writer: Writer | None = None) -> None:
        self.memory = memory
        self.cache = ArchiveCache(memory, tz=UTC)
        self.tx = Transactions(memory, archived=self.cache.archived)
        self.writer = writer or ExtractiveWriter()
        self.batches: list[Batch] = []
        self._cited: set[str] = set()

    def cited(self) -> set[str]:
        citations, _ = topic_citations(read_topics(self.memory))
        return {c.key for c in citations if c.key is not None}

    def is_cited(self, source: str) -> bool:
        sid = source.split("/")[1]
        return f"{sid}#{source_anchor(source)}" in self._cited

    async def write_batch(self, batch: Batch) -> WriteOutcome:
        self.batches.append(batch)

        async def archive(b: Batch) -> object:
            return self.cache.append(b.session_id, b.records)

        async def snapshot() -> WorkspaceSnapshot:
            topics = read_topics(self.memory)
            return WorkspaceSnapshot(self.tx.revision(), tuple(sorted(topics)), topics.__getitem__)

        async def commit(
            b: Batch, edits: Sequence[TopicEdit], base: str
        ) -> list[dict[str, object]]:
            result = self.tx.commit(
                edits, base_revision=base, batch_sources={r.source_id for r in b.records}
            )
            return list(result.audit)

        return await run_write_cycle(
            batch, self.writer, snapshot=snapshot, archive=archive, commit=commit, timeout=None
        )

    async def revision(self) -> str:
        return self.tx.revision()

    async def run(
        self, progress: list[tuple[int, int]] | None = None, **kwargs: Any
    ) -> BackfillReport:
        self._cited = self.cited()
        return await backfill(
            self.memory,
            write_batch=self.write_batch,
            cited=self.is_cited,
            revision=self.revision,
            progress=None if progress is None else (lambda d, t: progress.append((d, t))),
            **kwargs,
        )


def seeded(tmp_path: Path) -> Workspace:
    memory = str(tmp_path / "memory")
    os.makedirs(memory)
    ws = Workspace(memory)
    records = [rec(i, text) for i, text in enumerate(SAID)]
    records.append(rec(9, "I prefer coffee at night.", GUEST))
    ws.cache.append("s1", records)
    return ws


def archive_bytes(ws: Workspace) -> bytes:
    return Path(ws.memory, "sources/openprogram/_v2/s1.md").read_bytes()


async def test_every_trusted_uncited_source_is_written(tmp_path: Path) -> None:
    ws = seeded(tmp_path)
    before = archive_bytes(ws)
    progress: list[tuple[int, int]] = []
    report = await ws.run(progress)
    assert report.as_json() == {
        "status": "ok",
        "candidates": 6,
        "processed": 6,
        "remaining": 0,
        "revision": ws.tx.revision(),
    }
    assert progress == [(0, 6), (6, 6)]
    cited = ws.cited()
    for n, text in enumerate(SAID):
        key = f"s1#{source_anchor(f'openprogram/s1/m{n}')}"
        assert key in cited, text  # facts in their subjects, chatter as a conversation unit
    assert f"s1#{source_anchor('openprogram/s1/m9')}" not in cited  # pending: never cited
    assert archive_bytes(ws) == before  # re-archiving the batch changed no byte
    assert not Path(ws.memory).parent.joinpath("sessions").exists()  # no marker touched


async def test_running_again_changes_nothing(tmp_path: Path) -> None:
    ws = seeded(tmp_path)
    first = await ws.run()
    topics = read_topics(ws.memory)
    second = await ws.run()
    assert second.ok and second.revision == first.revision
    assert second.candidates == 0  # every trusted source is cited after the first run
    assert read_topics(ws.memory) == topics


def _tokens_one(_: str) -> int:
    return 1


async def test_a_failed_batch_stays_remaining_and_the_rest_still_runs(tmp_path: Path) -> None:
    ws = seeded(tmp_path)
    ws.writer = FaultyWriter("raise", fail_calls={2})
    progress: list[tuple[int, int]] = []
    # threshold 2 with one token per source: batches of two sources.
    report = await ws.run(progress, threshold=2, counter=_tokens_one)
    assert [len(b.records) for b in ws.batches] == [2, 2, 2]
    assert report.as_json()["status"] == "incomplete"
    assert (report.candidates, report.processed, report.remaining) == (6, 4, 2)
    assert ENDPOINT_ERROR in report.errors[0]
    assert progress == [(0, 6), (2, 6), (4, 6), (6, 6)]
    ws.writer = ExtractiveWriter()
    again = await ws.run()
    assert again.ok and again.candidates == 2  # exactly the failed batch's two sources


async def test_a_writer_whose_edits_are_all_rejected_is_not_settled(tmp_path: Path) -> None:
    class Uncited:
        async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> WriterOutput:
            return [
                TopicEdit(
                    "topics/x.md",
                    "# X\n\nA claim.[^e1]\n\n"
                    "[^e1]: Time: `undated`; Sources: openprogram/s1/nosuch\n",
                )
            ]

    ws = seeded(tmp_path)
    ws.writer = Uncited()
    report = await ws.run()
    assert report.remaining == 6 and not report.ok


async def test_sources_cited_already_are_not_candidates(tmp_path: Path) -> None:
    state = copy_fixture(tmp_path / "state")
    ws = Workspace(str(state / "memory"))
    archive = parse_archive(archive_bytes_of(state), "demo")
    ws._cited = ws.cited()
    batches = backfill_batches({"demo": archive}, ws.is_cited)
    uncited = [
        f.message_id for f in archive.frames if f"demo#{f.anchor}" not in ws._cited and f.trusted
    ]
    assert [r.message_id for _, records in batches for r in records] == uncited
    assert len(uncited) == 1  # three frames, two cited by topics/people/owner.md


def archive_bytes_of(state: Path) -> bytes:
    return (state / "memory/sources/openprogram/_v2/demo.md").read_bytes()


@given(
    st.text(min_size=1).filter(lambda t: t.strip() == t and "\r" not in t),
    st.sampled_from(["Owner (owner/local)", "assistant", "user", "A: B"]),
    st.integers(0, 2_000_000_000),
)
def test_a_frame_gives_back_its_record(text: str, label: str, when: int) -> None:
    record = SourceRecord("s", "n1", "user", text, float(when), label, None, OWNER)
    data = b"<!-- openprogram-source-archive:v2 -->\n\n" + render_frame(record, tz=UTC).encode()
    [frame] = parse_archive(data, "s").frames
    back = frame_record("s", frame)
    assert back.source_id == record.source_id and back.meta == OWNER
    assert back.timestamp == record.timestamp
    if ": " not in label:  # a label holding ": " cannot be told from the content
        assert (back.speaker, back.content) == (label, text)
    assert back.role == ("assistant" if label == "assistant" else "user")
