"""The built-in extractive writer: memory without a model.

The demo, the stress runs and any deployment without a model still need a
writer that turns turns into topics, and one that is cheap and predictable
enough to run thousands of times a second. This one reads no network and
calls no model: it splits each trusted record into sentences, keeps the
useful ones (statements of a few words, not questions or pleasantries),
files each under one subject topic by keyword rules, and cites it with the
record's raw handle. The same batch on the same snapshot always gives the
same edits.

Subjects, first rule that matches wins (a subject continues in
``<subject>-2.md``, ``-3.md``... once a file holds :data:`SHARD_LIMIT`
paragraphs):

    topics/decisions.md     decided, agreed, will go with, plan to, chose...
    topics/preferences.md   prefer, like, love, hate, favourite, enjoy...
    topics/people.md        family, friends, colleagues, names
    topics/projects.md      project, repository, release, deadline, deploy...
    topics/core.md          everything else worth keeping (stable facts)

A sentence already in the topic (same words, ignoring case, spacing and the
final punctuation) is merged instead of duplicated: the new record joins the
sources of the paragraph's last footnote when that footnote has the same
date (and is not shared with another paragraph), else the paragraph gains a
new citation. A record already cited by that paragraph adds nothing, so
writing a batch twice changes nothing.

The writer emits the draft form of SPEC §5: existing paragraphs unchanged
(their ids and links), new citations as local labels ``[^eN]`` with raw
handles; the transaction assigns every id.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from memory._errors import TopicError
from memory._records import SourceRecord
from memory._topic_ids import handle_key, is_source_handle, source_key
from memory._topics import (
    CITATION,
    Footnote,
    Heading,
    Paragraph,
    SourceLink,
    Topic,
    parse_topic,
    render_topic,
)
from memory._writer import Batch, TopicEdit, WorkspaceSnapshot

__all__ = ["ExtractiveWriter", "extract_edits", "subject_of", "useful_sentences"]

_SUBJECTS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("topics/decisions.md", "Decisions", re.compile(
        r"\b(decided|decide|decision|agreed|agree to|will go with|going with|plan to|"
        r"planning to|chose|choose|settled on|let's|we will|we'll)\b", re.IGNORECASE)),
    ("topics/preferences.md", "Preferences", re.compile(
        r"\b(prefers?|preferred|likes?|loves?|hates?|dislikes?|enjoys?|favou?rite|"
        r"rather|can't stand|fond of)\b", re.IGNORECASE)),
    ("topics/people.md", "People", re.compile(
        r"\b(wife|husband|partner|son|daughter|mother|father|mom|dad|brother|sister|"
        r"friend|colleague|boss|manager|team ?mate|neighbou?r|named|name is)\b", re.IGNORECASE)),
    ("topics/projects.md", "Projects", re.compile(
        r"\b(project|repo|repository|release|deadline|deploy|milestone|sprint|"
        r"feature|bug|build|launch|roadmap)s?\b", re.IGNORECASE)),
)
_CORE = ("topics/core.md", "Core")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"[^\W\d_]{2,}")
_PLEASANTRIES = frozenset({
    "ok", "okay", "thanks", "thank you", "thank you very much", "sure", "yes", "no",
    "hello", "hi", "hey", "got it", "sounds good", "great", "cool", "bye", "good night",
})
_MAX_SENTENCE = 600


def useful_sentences(text: str) -> list[str]:
    """The sentences of ``text`` worth remembering, in order, each once."""
    kept: dict[str, str] = {}
    for raw in _SENTENCE_END.split(text):
        sentence = " ".join(raw.split())
        if not sentence or sentence.endswith(("?", "？")) or len(sentence) > _MAX_SENTENCE:
            continue
        if "[^" in sentence or sentence.startswith(("#", "[")):
            continue  # would break the topic grammar
        if len(_WORD.findall(sentence)) < 3 or _fact_key(sentence) in _PLEASANTRIES:
            continue
        if sentence[-1] not in ".!。！":
            sentence += "."
        kept.setdefault(_fact_key(sentence), sentence)
    return list(kept.values())


def subject_of(sentence: str) -> tuple[str, str]:
    """``(topic path, title)`` for ``sentence``."""
    for path, title, pattern in _SUBJECTS:
        if pattern.search(sentence):
            return path, title
    return _CORE


@functools.lru_cache(maxsize=65536)
def _fact_key(sentence: str) -> str:
    return " ".join(CITATION.sub("", sentence).lower().split()).rstrip(".!。！ ")


def _draft_key(target: str) -> str | None:
    return handle_key(target) if is_source_handle(target) else None


def _when(record: SourceRecord) -> str:
    """The record's UTC date, or ``undated`` when it has none the grammar can hold."""
    try:
        moment = datetime.datetime.fromtimestamp(record.timestamp, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return "undated"
    if record.timestamp <= 0 or moment.year < 1000:
        return "undated"
    return moment.strftime("%Y-%m-%d")


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
                draft.facts.setdefault(_fact_key(block.body), index)
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

    def add(self, sentence: str, record: SourceRecord) -> None:
        handle = record.source_id
        key = handle_key(handle)
        index = self.facts.get(_fact_key(sentence))
        if index is not None and key in self._cited_by(index):
            return
        when = _when(record)
        link = SourceLink(handle, handle)
        if index is None:
            label = self._new_label()
            self.footnotes[label] = Footnote(label, when, (link,))
            self.facts[_fact_key(sentence)] = len(self.blocks)
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


class _FactIndex:
    """Fact keys per topic file, recomputed only when a file's text changes."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[str, frozenset[str], int]] = {}

    def facts(self, path: str, text: str) -> tuple[frozenset[str], int] | None:
        cached = self._files.get(path)
        if cached is not None and cached[0] == text:
            return cached[1], cached[2]
        try:
            topic = parse_topic(text, path)
        except TopicError:
            return None  # a broken file is left to an operator, never rewritten
        paragraphs = topic.paragraphs
        keys = frozenset(_fact_key(paragraph.body) for paragraph in paragraphs)
        self._files[path] = (text, keys, len(paragraphs))
        return keys, len(paragraphs)


@dataclass
class _Subject:
    """The shards of one subject and where each known fact lives."""

    title: str
    shards: list[str]
    sizes: dict[str, int]
    home: dict[str, str]  # fact key -> shard path
    broken: set[str]


def _shard_path(subject: str, number: int) -> str:
    return subject if number == 1 else f"{subject[:-3]}-{number}.md"


def extract_edits(
    records: Sequence[SourceRecord], workspace: WorkspaceSnapshot,
    index: _FactIndex | None = None,
) -> list[TopicEdit]:
    """The edits for ``records`` on ``workspace``: pure, deterministic."""
    index = index if index is not None else _FactIndex()
    present = set(workspace.topic_paths)
    subjects: dict[str, _Subject] = {}
    drafts: dict[str, _Draft] = {}

    def subject(path: str, title: str) -> _Subject:
        found = subjects.get(path)
        if found is None:
            found = subjects[path] = _Subject(title, [], {}, {}, set())
            number = 1
            while (shard := _shard_path(path, number)) in present:
                found.shards.append(shard)
                facts = index.facts(shard, workspace.read(shard))
                if facts is None:
                    found.broken.add(shard)
                    found.sizes[shard] = SHARD_LIMIT
                else:
                    found.sizes[shard] = facts[1]
                    for key in facts[0]:
                        found.home.setdefault(key, shard)
                number += 1
        return found

    for record in records:
        if not record.trusted:
            continue  # pending evidence is archived, never cited
        for sentence in useful_sentences(record.content):
            path, title = subject_of(sentence)
            known = subject(path, title)
            key = _fact_key(sentence)
            shard = known.home.get(key)
            if shard is None:
                shard = known.shards[-1] if known.shards else _shard_path(path, 1)
                if known.sizes.get(shard, 0) >= SHARD_LIMIT:
                    shard = _shard_path(path, len(known.shards) + 1)
                if shard not in known.sizes:
                    known.shards.append(shard)
                    known.sizes[shard] = 0
                known.home[key] = shard
                known.sizes[shard] += 1
            if shard in known.broken:
                continue
            draft = drafts.get(shard)
            if draft is None:
                text = workspace.read(shard) if shard in present else None
                title = known.title if shard == path else f"{known.title} ({shard[7:-3]})"
                draft = drafts[shard] = _Draft.open(shard, title, text)
            draft.add(sentence, record)
    return [drafts[path].edit() for path in sorted(drafts) if drafts[path].changed]


class ExtractiveWriter:
    """The default :class:`~memory._writer.Writer`: no model, no network, deterministic.

    It remembers which facts each topic file holds (keyed by the file's text),
    so a batch parses only the files it changes.
    """

    def __init__(self) -> None:
        self._index = _FactIndex()

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        return extract_edits(batch.records, workspace, self._index)
