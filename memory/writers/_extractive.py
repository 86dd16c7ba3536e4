"""The built-in extractive writer: memory without a model.

The demo, the stress runs and any deployment without a model still need a
writer that turns turns into topics, and one that is cheap and predictable
enough to run thousands of times a second. This one reads no network and
calls no model: it splits each trusted record into sentences, keeps the
useful ones (statements of a few words; not questions, pleasantries or
small talk of either side), files each under one subject topic by keyword
rules, and cites it with the record's raw handle. The same batch on the
same snapshot always gives the same edits.

A paragraph says who said it and when, in the speaker's own words::

    Caroline (8 May 2023): I went to a support group yesterday (7 May 2023).[^e1]

Which sentences of a turn are facts, who said them and under which subject
they go is :mod:`memory.writers._sentences`'s (pure rules on text); this
module assembles them into edits of the topic files.

Subjects, first rule that matches wins (a subject continues in
``<subject>-2.md``, ``-3.md``... once a file holds :data:`SHARD_LIMIT`
paragraphs):

    topics/decisions.md     decided, agreed, will go with, plan to, chose...
    topics/preferences.md   prefer, like, love, hate, favourite, enjoy...
    topics/people.md        family, friends, colleagues, names
    topics/projects.md      project, repository, release, deadline, deploy...
    topics/core.md          what stays true: identity, constraints, long-term goals
                            (my name is, I live in, allergic, vegetarian, my goal...)
    topics/notes.md         everything else worth keeping (what happened, opinions)

A sentence already in the topic (same speaker and words, ignoring case,
spacing, the final punctuation and the day it was said) is merged instead
of duplicated: the new record joins the
sources of the paragraph's last footnote when that footnote has the same
date (and is not shared with another paragraph), else the paragraph gains a
new citation. A record already cited by that paragraph adds nothing, so
writing a batch twice changes nothing. A paragraph cites at most
:data:`EVIDENCE_LIMIT` sources: past that, a turn that repeats it says
nothing memory does not know, and it is logged like chatter (below).
Without the bound, a fact said in every session grew one footnote line
without end, and every batch re-parsed and re-rendered it: the cost of a
batch grew with the whole history, quadratically in time and in memory.

Every trusted record of a batch is cited. The runtime marks a batch only
when its commit changes memory (SPEC §6.4), and batches are a branch's
oldest owed turns: a batch of chatter that changed nothing would stay owed
forever and block every later turn of its branch. So the records that state
no new fact are logged as one dated unit per batch in
``topics/conversations.md`` (sharded like the subjects): "Conversation on
2026-11-30: nothing new to keep (3 turns)." citing each of them. A re-delivered batch finds them all cited and
changes nothing again.

The writer emits the draft form of SPEC §5: existing paragraphs unchanged
(their ids and links), new citations as local labels ``[^eN]`` with raw
handles; the transaction assigns every id.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import anyio.to_thread

from memory._errors import TopicError
from memory.ledger._records import SourceRecord
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._topic_ids import handle_key, is_source_handle, source_key
from memory.workspace._topics import (
    Footnote,
    Heading,
    Paragraph,
    SourceLink,
    Topic,
    parse_topic,
    render_topic,
)
from memory.workspace._transaction import TopicReader
from memory.writers._sentences import fact_key, facts_of, record_day, subject_of
from memory.writers._writer import Batch
from store.lowlevel import write_lane

__all__ = [
    "CONVERSATIONS", "EVIDENCE_LIMIT", "SHARD_BYTES", "SHARD_LIMIT", "ExtractiveWriter",
    "extract_edits", "extract_in_worker", "log_nothing_new",
]

_CONVERSATIONS = ("topics/conversations.md", "Conversations")
CONVERSATIONS = _CONVERSATIONS[0]
"""Where a batch's turns that state no fact are logged, one dated unit per batch."""

def _draft_key(target: str) -> str | None:
    return handle_key(target) if is_source_handle(target) else None


def _when(record: SourceRecord) -> str:
    """The record's UTC date as a footnote time, or ``undated``."""
    day = record_day(record)
    return "undated" if day is None else day.isoformat()


@dataclass
class _Draft:
    """One topic file being extended: its blocks, footnotes and fact index."""

    path: str
    blocks: list[Heading | Paragraph]
    footnotes: dict[str, Footnote]
    facts: dict[str, int]  # fact key -> index in blocks
    cites: dict[int, set[str]]  # block index -> source keys it cites (filled on demand)
    shared: set[str]  # footnote labels cited by more than one paragraph
    next_label: int = 1
    changed: bool = False

    @classmethod
    def open(cls, path: str, title: str, text: str | None) -> _Draft:
        topic = parse_topic(text, path) if text else Topic((Heading(1, title),), {})
        draft = cls(path, list(topic.blocks), dict(topic.footnotes), {}, {}, set())
        seen: set[str] = set()
        for index, block in enumerate(draft.blocks):
            if isinstance(block, Paragraph):
                draft.facts.setdefault(fact_key(block.body), index)
                for label in block.citations:
                    if label in seen:
                        draft.shared.add(label)
                    seen.add(label)
        return draft

    def _cited_by(self, index: int) -> set[str]:
        cites = self.cites.get(index)
        if cites is None:
            block = self.blocks[index]
            assert isinstance(block, Paragraph)
            cites = self.cites[index] = {
                key
                for label in block.citations
                for link in self.footnotes[label].sources
                if (key := source_key(self.path, link.target)) is not None
                or (key := _draft_key(link.target)) is not None
            }
        return cites

    def add(self, sentence: str, record: SourceRecord) -> bool:
        """Cite ``record`` for ``sentence``; False when the fact's evidence is full."""
        handle = record.source_id
        key = handle_key(handle)
        index = self.facts.get(fact_key(sentence))
        if index is not None:
            cited = self._cited_by(index)
            if key in cited:
                return True
            if len(cited) >= EVIDENCE_LIMIT:
                return False
        when = _when(record)
        link = SourceLink(handle, handle)
        if index is None:
            label = self._new_label()
            self.footnotes[label] = Footnote(label, when, (link,))
            self.facts[fact_key(sentence)] = len(self.blocks)
            self.cites[len(self.blocks)] = {key}
            self.blocks.append(Paragraph(f"{sentence.rstrip()}[^{label}]", ()))
        else:
            old = self.blocks[index]
            assert isinstance(old, Paragraph)
            last = old.citations[-1]
            evidence = self.footnotes[last]
            if evidence.when == when and last not in self.shared:
                # Same day: one footnote lists every turn that said it.
                self.footnotes[last] = Footnote(last, when, (*evidence.sources, link))
            else:
                label = self._new_label()
                self.footnotes[label] = Footnote(label, when, (link,))
                self.blocks[index] = Paragraph(f"{old.body}[^{label}]", old.ids)
            self._cited_by(index).add(key)
        self.changed = True
        return True

    def log(self, records: Sequence[SourceRecord]) -> None:
        """Append one conversation-log unit citing ``records``, one footnote per date."""
        days: dict[str, list[SourceLink]] = {}
        for record in records:
            handle = record.source_id
            days.setdefault(_when(record), []).append(SourceLink(handle, handle))
        labels = []
        for when, links in days.items():
            label = self._new_label()
            self.footnotes[label] = Footnote(label, when, tuple(links))
            labels.append(f"[^{label}]")
        self.blocks.append(Paragraph(_log_line(list(days), len(records)) + "".join(labels), ()))
        self.changed = True

    def _new_label(self) -> str:
        label = f"e{self.next_label}"
        self.next_label += 1
        return label

    def edit(self) -> TopicEdit:
        return TopicEdit(self.path, render_topic(Topic(tuple(self.blocks), self.footnotes)))


SHARD_LIMIT = 400
"""Paragraphs per topic file before a subject continues in ``<subject>-<n>.md``.

Edits replace whole files, so a file's size is the cost of every batch that
touches it; bounded shards keep a batch's cost independent of how much memory
has accumulated."""

SHARD_BYTES = 64 * 1024
"""A topic file this large is full too, whatever its paragraph count (log units
cite a whole batch each, so they are long)."""

EVIDENCE_LIMIT = 16
"""Sources one fact's paragraph cites at most; see the module docstring."""


class _FactIndex:
    """Fact keys per topic file, recomputed only when a file's text changes."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[str, frozenset[str], int]] = {}
        self._cites: dict[str, tuple[str, frozenset[str]]] = {}

    def facts(self, path: str, text: str) -> tuple[frozenset[str], int] | None:
        """The file's fact keys and how full it is (paragraphs, or a full shard's count)."""
        cached = self._files.get(path)
        if cached is not None and cached[0] == text:
            return cached[1], cached[2]
        try:
            topic = parse_topic(text, path)
        except TopicError:
            return None  # a broken file is left to an operator, never rewritten
        paragraphs = topic.paragraphs
        keys = frozenset(fact_key(paragraph.body) for paragraph in paragraphs)
        full = len(text.encode("utf-8")) >= SHARD_BYTES  # once per new text: cached below
        fill = SHARD_LIMIT if full else len(paragraphs)
        self._files[path] = (text, keys, fill)
        return keys, fill

    def cited(self, path: str, text: str) -> frozenset[str]:
        """The source keys ``text`` cites (empty for a file that does not parse)."""
        cached = self._cites.get(path)
        if cached is not None and cached[0] == text:
            return cached[1]
        try:
            topic = parse_topic(text, path)
        except TopicError:
            return frozenset()
        keys = frozenset(
            key for footnote in topic.footnotes.values() for link in footnote.sources
            if (key := source_key(path, link.target)) is not None
        )
        self._cites[path] = (text, keys)
        return keys


@dataclass
class _Subject:
    """The shards of one subject and where each known fact lives."""

    path: str
    title: str
    shards: list[str]
    sizes: dict[str, int]
    home: dict[str, str]  # fact key -> shard path
    broken: set[str]

    def place(self) -> str:
        """The shard a new paragraph goes to: the last one, or a new one once it is full."""
        shard = self.shards[-1] if self.shards else _shard_path(self.path, 1)
        if self.sizes.get(shard, 0) >= SHARD_LIMIT:  # a broken shard counts as full
            shard = _shard_path(self.path, len(self.shards) + 1)
        if shard not in self.sizes:
            self.shards.append(shard)
            self.sizes[shard] = 0
        self.sizes[shard] += 1
        return shard

    def title_of(self, shard: str) -> str:
        return self.title if shard == self.path else f"{self.title} ({shard[7:-3]})"


def _shard_path(subject: str, number: int) -> str:
    return subject if number == 1 else f"{subject[:-3]}-{number}.md"


def _log_line(days: list[str], turns: int) -> str:
    """``Conversation on 2026-11-30: nothing new to keep (3 turns).`` for a batch's chatter."""
    dated = sorted(day for day in days if day != "undated")
    if not dated:
        when = " (undated)"
    elif dated[0] == dated[-1]:
        when = f" on {dated[0]}"
    else:
        when = f" from {dated[0]} to {dated[-1]}"
    return f"Conversation{when}: nothing new to keep ({turns} turn{'' if turns == 1 else 's'})."


def extract_edits(
    records: Sequence[SourceRecord], workspace: WorkspaceSnapshot,
    index: _FactIndex | None = None,
) -> list[TopicEdit]:
    """The edits for ``records`` on ``workspace``: pure, deterministic.

    Every trusted record ends up cited: by the paragraph of each fact it
    states, or, when it states none, by one conversation-log unit per batch
    in :data:`CONVERSATIONS`. A file that does not parse is left to an
    operator, never rewritten: facts it holds are filed again in a new shard. A record
    already cited where it would go adds nothing, so a batch written twice
    gives no edits the second time.
    """
    index = index if index is not None else _FactIndex()
    present = set(workspace.topic_paths)
    subjects: dict[str, _Subject] = {}
    drafts: dict[str, _Draft] = {}

    def subject(path: str, title: str) -> _Subject:
        found = subjects.get(path)
        if found is None:
            found = subjects[path] = _open_subject(path, title, workspace, present, index)
        return found

    def draft_of(known: _Subject, shard: str) -> _Draft:
        draft = drafts.get(shard)
        if draft is None:
            draft = drafts[shard] = _open_draft(known, shard, workspace, present)
        return draft

    chatter: dict[str, SourceRecord] = {}
    for record in records:
        if not record.trusted:
            continue  # pending evidence is archived, never cited
        cited = False
        for sentence, fact in facts_of(record):
            known = subject(*subject_of(sentence))
            key = fact_key(fact)
            shard = known.home.get(key)
            if shard is None:
                # Never a broken shard: it counts as full, and facts are only
                # ever homed in shards that parse.
                shard = known.home[key] = known.place()
            cited = draft_of(known, shard).add(fact, record) or cited
        if not cited:
            chatter.setdefault(record.source_id, record)
    edits = [drafts[path].edit() for path in drafts if drafts[path].changed]
    edits += log_nothing_new(list(chatter.values()), workspace, index)
    return sorted(edits, key=lambda edit: edit.path)


def log_nothing_new(
    records: Sequence[SourceRecord], workspace: WorkspaceSnapshot,
    index: _FactIndex | None = None,
) -> list[TopicEdit]:
    """The edit logging ``records`` as one "nothing new to keep" unit in :data:`CONVERSATIONS`.

    A batch is marked only when its commit changes memory (SPEC §6.4), so a
    writer that finds nothing worth keeping in some turns still has to cite
    them, or their batch stays owed and blocks its branch. The unit cites
    every trusted record that no conversation-log unit cites yet; none
    left gives no edit (a re-delivered batch changes nothing). Pure and
    blocking (it reads the snapshot): the extractive writer's chatter and a
    model's empty answer both end here.
    """
    index = index if index is not None else _FactIndex()
    fresh_by_handle = {record.source_id: record for record in records if record.trusted}
    if not fresh_by_handle:
        return []
    present = set(workspace.topic_paths)
    log = _open_subject(*_CONVERSATIONS, workspace, present, index)
    logged = frozenset[str]().union(*(
        index.cited(shard, workspace.read(shard))
        for shard in log.shards if shard not in log.broken
    ))
    fresh = [record for handle, record in fresh_by_handle.items()
             if handle_key(handle) not in logged]
    if not fresh:
        return []
    shard = log.place()
    draft = _open_draft(log, shard, workspace, present)
    draft.log(fresh)
    return [draft.edit()]


def _open_subject(
    path: str, title: str, workspace: WorkspaceSnapshot, present: set[str], index: _FactIndex,
) -> _Subject:
    """A subject's shards on ``workspace``: how full each is and where each fact lives."""
    found = _Subject(path, title, [], {}, {}, set())
    number = 1
    while (shard := _shard_path(path, number)) in present:
        found.shards.append(shard)
        try:
            facts = index.facts(shard, workspace.read(shard))
        except TopicError:  # not UTF-8, or a link: routed around like a broken file
            facts = None
        if facts is None:
            found.broken.add(shard)
            found.sizes[shard] = SHARD_LIMIT
        else:
            found.sizes[shard] = facts[1]
            for key in facts[0]:
                found.home.setdefault(key, shard)
        number += 1
    return found


def _open_draft(
    known: _Subject, shard: str, workspace: WorkspaceSnapshot, present: set[str],
) -> _Draft:
    text = workspace.read(shard) if shard in present else None
    return _Draft.open(shard, known.title_of(shard), text)


# A worker process's fact indexes, one per workspace (see extract_in_worker). A cache
# whose entries are checked against the text read, so a fallback run in a thread of the
# runtime's own process may share it.
_WORKER_INDEXES: dict[str, _FactIndex] = {}


def extract_in_worker(
    memory_dir: str, revision: str, topic_paths: tuple[str, ...],
    records: tuple[SourceRecord, ...],
) -> list[tuple[str, str | None]]:
    """:func:`extract_edits` on the snapshot of ``memory_dir`` at ``revision``, as ``(path, text)``.

    What a worker process runs (:class:`~memory.writers._offload.CpuWorker`):
    the snapshot's files are read here, through the same :class:`TopicReader`,
    and the process keeps its own fact index, so each batch parses only the
    files it changes, as in the writer's thread.
    """
    index = _WORKER_INDEXES.setdefault(memory_dir, _FactIndex())
    view = WorkspaceSnapshot(revision, topic_paths, TopicReader(memory_dir))
    return [(edit.path, edit.text) for edit in extract_edits(records, view, index)]


class ExtractiveWriter:
    """The default :class:`~memory.writers._writer.Writer`: no model, no network, deterministic.

    It remembers which facts each topic file holds (keyed by the file's text),
    so a batch parses only the files it changes.

    A large batch costs a good fraction of a second of CPU, and the
    snapshot's ``read`` opens files: on the event loop's thread that would
    stall every timer and message of the process (SPEC §2). So each call is
    one worker-thread hop: the extraction and all of its snapshot reads run
    there, on the call's own records (a tuple) and the read-only snapshot. A
    cancelled call (a writer timeout, a runtime closing) abandons its thread
    at once; the thread only computes edits, so dropping its result changes
    nothing. The one state it mutates, the fact index, is held exclusively by
    a lock for the whole extraction, so an abandoned thread that still runs
    and the next call's thread never touch it at the same time, and the loop
    never reads it.

    A thread still holds the interpreter lock. When the snapshot offers a
    ``run_cpu`` and reads its files through a :class:`TopicReader` (the
    runtime's snapshots), the extraction runs there instead, in a worker
    process (:func:`extract_in_worker`, same edits); the thread only waits.
    """

    exclusive = True  # cheap and local: one batch at a time beats redoing work on conflicts

    def __init__(self) -> None:
        self._index = _FactIndex()
        self._index_lock = threading.Lock()

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        return await self._extract(batch.records, workspace)

    async def write_group(
        self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
    ) -> list[TopicEdit]:
        """Every batch's records at once: each record is cited as if written alone.

        Chatter of the group shares one log unit (a unit per call, as in
        :meth:`write`).
        """
        return await self._extract(tuple(r for batch in batches for r in batch.records),
                                   workspace)

    async def _extract(
        self, records: tuple[SourceRecord, ...], workspace: WorkspaceSnapshot
    ) -> list[TopicEdit]:
        # The write lane (store.lowlevel.write_lane): extraction never holds an append's thread.
        return await anyio.to_thread.run_sync(
            self._extract_locked, records, workspace, abandon_on_cancel=True,
            limiter=write_lane())

    def _extract_locked(
        self, records: tuple[SourceRecord, ...], workspace: WorkspaceSnapshot
    ) -> list[TopicEdit]:
        if workspace.run_cpu is not None and isinstance(workspace.read, TopicReader):
            found = workspace.run_cpu(extract_in_worker, workspace.read.memory_dir,
                                      workspace.revision, tuple(workspace.topic_paths), records)
            return [TopicEdit(path, text) for path, text in found]
        with self._index_lock:
            return extract_edits(records, workspace, self._index)
