"""The built-in extractive writer: memory without a model.

The demo, the stress runs and any deployment without a model still need a
writer that turns turns into topics, and one that is cheap and predictable
enough to run thousands of times a second. This one reads no network and
calls no model: it splits each trusted record into sentences, keeps the
useful ones (statements of a few words, not questions or pleasantries),
files each under one subject topic by keyword rules, and cites it with the
record's raw handle. The same batch on the same snapshot always gives the
same edits.

Subjects, first rule that matches wins:

    topics/decisions.md     decided, agreed, will go with, plan to, chose...
    topics/preferences.md   prefer, like, love, hate, favourite, enjoy...
    topics/people.md        family, friends, colleagues, names
    topics/projects.md      project, repository, release, deadline, deploy...
    topics/core.md          everything else worth keeping (stable facts)

A sentence already in the topic (same words, ignoring case, spacing and the
final punctuation) is merged: the paragraph gains a citation of the new
record instead of a duplicate paragraph. A record already cited by that
paragraph adds nothing, so writing a batch twice changes nothing.

The writer emits the draft form of SPEC §5: existing paragraphs unchanged
(their ids and links), new citations as local labels ``[^eN]`` with raw
handles; the transaction assigns every id.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass

from memory._errors import TopicError
from memory._records import SourceRecord
from memory._topic_ids import handle_key, source_key
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
        r"planning to|chose|choose|settled on|let's|we will|we'll)\b", re.I)),
    ("topics/preferences.md", "Preferences", re.compile(
        r"\b(prefers?|preferred|likes?|loves?|hates?|dislikes?|enjoys?|favou?rite|"
        r"rather|can't stand|fond of)\b", re.I)),
    ("topics/people.md", "People", re.compile(
        r"\b(wife|husband|partner|son|daughter|mother|father|mom|dad|brother|sister|"
        r"friend|colleague|boss|manager|team ?mate|neighbou?r|named|name is)\b", re.I)),
    ("topics/projects.md", "Projects", re.compile(
        r"\b(project|repo|repository|release|deadline|deploy|milestone|sprint|"
        r"feature|bug|build|launch|roadmap)s?\b", re.I)),
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


def _fact_key(sentence: str) -> str:
    return " ".join(CITATION.sub("", sentence).lower().split()).rstrip(".!。！ ")


def _when(record: SourceRecord) -> str:
    if record.timestamp <= 0:
        return "undated"
    moment = datetime.datetime.fromtimestamp(record.timestamp, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d")


@dataclass
class _Draft:
    """One topic file being extended: its blocks, footnotes and fact index."""

    path: str
    blocks: list[Heading | Paragraph]
    footnotes: dict[str, Footnote]
    facts: dict[str, int]  # fact key -> index in blocks
    cites: dict[int, set[str]]  # block index -> source keys it cites
    next_label: int = 1
    changed: bool = False

    @classmethod
    def open(cls, path: str, title: str, text: str | None) -> _Draft:
        topic = parse_topic(text, path) if text else Topic((Heading(1, title),), {})
        draft = cls(path, list(topic.blocks), dict(topic.footnotes), {}, {})
        for index, block in enumerate(draft.blocks):
            if isinstance(block, Paragraph):
                draft.facts.setdefault(_fact_key(block.body), index)
                draft.cites[index] = {
                    key
                    for label in block.citations
                    for link in draft.footnotes[label].sources
                    if (key := source_key(path, link.target)) is not None
                }
        return draft

    def add(self, sentence: str, record: SourceRecord) -> None:
        handle = record.source_id
        key = handle_key(handle)
        index = self.facts.get(_fact_key(sentence))
        if index is not None and key in self.cites[index]:
            return
        label = f"e{self.next_label}"
        self.next_label += 1
        self.footnotes[label] = Footnote(label, _when(record), (SourceLink(handle, handle),))
        if index is None:
            self.facts[_fact_key(sentence)] = len(self.blocks)
            self.cites[len(self.blocks)] = {key}
            self.blocks.append(Paragraph(f"{sentence.rstrip()}[^{label}]", ()))
        else:
            old = self.blocks[index]
            assert isinstance(old, Paragraph)
            self.blocks[index] = Paragraph(f"{old.body}[^{label}]", old.ids)
            self.cites[index].add(key)
        self.changed = True

    def edit(self) -> TopicEdit:
        return TopicEdit(self.path, render_topic(Topic(tuple(self.blocks), self.footnotes)))


def extract_edits(
    records: Sequence[SourceRecord], workspace: WorkspaceSnapshot,
) -> list[TopicEdit]:
    """The edits for ``records`` on ``workspace``: pure, deterministic."""
    drafts: dict[str, _Draft] = {}
    present = set(workspace.topic_paths)
    for record in records:
        if not record.trusted:
            continue  # pending evidence is archived, never cited
        for sentence in useful_sentences(record.content):
            path, title = subject_of(sentence)
            draft = drafts.get(path)
            if draft is None:
                text = workspace.read(path) if path in present else None
                try:
                    draft = _Draft.open(path, title, text)
                except TopicError:
                    continue  # a broken file is left to an operator, not rewritten
                drafts[path] = draft
            draft.add(sentence, record)
    return [drafts[path].edit() for path in sorted(drafts) if drafts[path].changed]


class ExtractiveWriter:
    """The default :class:`~memory._writer.Writer`: no model, no network, deterministic."""

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        return extract_edits(batch.records, workspace)
