"""The topic grammar: what a memory unit looks like on disk, parsed strictly.

A topic file is what memory says, and every other view (timelines, recall,
consolidation) reaches a statement through its block id and its evidence
through its footnote. A lenient reader would let a malformed file drift
silently; so the parser accepts exactly the grammar of SPEC §5 and names the
line that breaks it:

    # Heading                     1-6 '#', one space, text
    <paragraph line>              one or more lines, no blank line inside
    ...text.[^ID][^ID2] ^blk ^alias
    [^ID]: Time: `WHEN`; Sources: [label](target), [label](target)

- A paragraph ends in one or more citations and then a block id; extra
  trailing ``^id``s are aliases left by a merge. Citations may also appear
  inside the paragraph, but nothing but block ids may follow the last one.
- Every cited footnote is defined exactly once and every definition is cited.
- Block ids (with aliases) are unique in the file.
- ``WHEN`` is ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` or ``undated``.

Committed files (``strict``) use runtime ids only: block ids of 8 hex and
footnote labels ``e-`` + 10 hex. Writer drafts (``strict=False``) may omit
block ids, carry invented ones, use local labels (``[^e1]``) and cite raw
source handles instead of links; ``memory._topic_ids`` turns a draft into a
committed file.

:func:`render_topic` writes the canonical form: blocks separated by one blank
line, each footnote definition right after the paragraph that first cites it.
``render_topic(parse_topic(render_topic(t)))`` is ``render_topic(t)``.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from memory._errors import TopicError

__all__ = [
    "Heading",
    "Paragraph",
    "Footnote",
    "SourceLink",
    "Topic",
    "parse_topic",
    "render_topic",
    "render_footnote",
    "CITATION",
    "is_block_id",
    "is_footnote_id",
]

CITATION = re.compile(r"\[\^([A-Za-z0-9_-]+)\]")
_BLOCK_ID = re.compile(r"[0-9a-f]{8}")
_FOOTNOTE_ID = re.compile(r"e-[0-9a-f]{10}")
_HEADING = re.compile(r"(#{1,6}) (.*)")
_DEFINITION_START = re.compile(r"\[\^[^\]\n]*\]:")
_STRICT_DEFINITION = re.compile(
    r"\[\^(?P<label>[A-Za-z0-9_-]+)\]: Time: `(?P<when>[^`]*)`; Sources: (?P<sources>.+)"
)
# Drafts come from models: tolerate spacing and a missing pair of backticks.
_DRAFT_DEFINITION = re.compile(
    r"\[\^(?P<label>[A-Za-z0-9_-]+)\]:\s*Time:\s*(?P<tick>`?)(?P<when>[^`;]*?)(?P=tick)"
    r"\s*;\s*Sources:\s*(?P<sources>.+?)\s*"
)
_LINK = r"\[(?P<label>[^\[\]\n]+)\]\((?P<target>[^()\s]+)\)"
_STRICT_SOURCE = re.compile(_LINK + r"(?:, |$)")
_DRAFT_SOURCE = re.compile(r"\s*(?:" + _LINK + r"|(?P<handle>[^\s,\[\]()]+))\s*(?:,|$)")
_TRAILING_IDS = re.compile(r"(?:[ \t]+\^[^\s^]+)+[ \t]*$")
_ENDS_WITH_CITATION = re.compile(r"\[\^[A-Za-z0-9_-]+\]$")
_WHEN = re.compile(r"\d{4}(?:-\d{2}(?:-\d{2})?)?")


def is_block_id(value: str) -> bool:
    return _BLOCK_ID.fullmatch(value) is not None


def is_footnote_id(value: str) -> bool:
    return _FOOTNOTE_ID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Paragraph:
    """One memory unit. ``body`` ends with its last citation; ``ids[0]`` is the block id."""

    body: str
    ids: tuple[str, ...]

    @property
    def block_id(self) -> str | None:
        return self.ids[0] if self.ids else None

    @property
    def citations(self) -> tuple[str, ...]:
        """Cited footnote labels, each once, in order of first appearance."""
        return tuple(dict.fromkeys(CITATION.findall(self.body)))


@dataclass(frozen=True, slots=True)
class SourceLink:
    """``[label](target)``. In a draft, ``target`` may be a raw source handle."""

    label: str
    target: str


@dataclass(frozen=True, slots=True)
class Footnote:
    label: str
    when: str
    sources: tuple[SourceLink, ...]


@dataclass(frozen=True, slots=True)
class Topic:
    """A parsed topic file: headings and paragraphs in order, footnotes by label."""

    blocks: tuple[Heading | Paragraph, ...]
    footnotes: dict[str, Footnote]

    @property
    def paragraphs(self) -> tuple[Paragraph, ...]:
        return tuple(block for block in self.blocks if isinstance(block, Paragraph))

    def block_ids(self) -> list[str]:
        """Every block id and alias, in file order."""
        return [block_id for paragraph in self.paragraphs for block_id in paragraph.ids]


def parse_topic(text: str, path: str = "<topic>", *, strict: bool = True) -> Topic:
    """Parse a topic file (``strict``) or a writer's draft; raise :class:`TopicError`."""
    if "\r" in text:
        if strict:
            raise TopicError(path, 0, "carriage return in a topic file (topics are LF-only)")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks: list[Heading | Paragraph] = []
    footnotes: dict[str, Footnote] = {}
    where: dict[str, int] = {}
    pending: list[str] = []
    pending_start = 0

    def close_paragraph() -> None:
        if pending:
            blocks.append(_paragraph(pending, path, pending_start, strict))
            pending.clear()

    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            close_paragraph()
            continue
        heading = _HEADING.fullmatch(line)
        if heading is not None:
            close_paragraph()
            title = heading.group(2).strip()
            if not title or title != heading.group(2):
                raise TopicError(path, number, "a heading needs text without surrounding spaces")
            blocks.append(Heading(len(heading.group(1)), title))
            continue
        if _DEFINITION_START.match(line):
            close_paragraph()
            footnote = _footnote(line, path, number, strict)
            if footnote.label in footnotes:
                raise TopicError(
                    path, number,
                    f"duplicate footnote [^{footnote.label}] (first defined on line "
                    f"{where[footnote.label]})",
                )
            footnotes[footnote.label] = footnote
            where[footnote.label] = number
            continue
        if not pending:
            pending_start = number
        pending.append(line)
    close_paragraph()
    _check_references(blocks, footnotes, where, path, strict)
    return Topic(tuple(blocks), footnotes)


def _paragraph(lines: list[str], path: str, start: int, strict: bool) -> Paragraph:
    last_line = start + len(lines) - 1
    body = "\n".join(lines)
    trailing = _TRAILING_IDS.search(body)
    ids: tuple[str, ...] = ()
    if trailing is not None:
        ids = tuple(token.lstrip("^") for token in trailing.group(0).split())
        body = body[: trailing.start()]
    if strict:
        if not ids:
            raise TopicError(path, last_line, "paragraph without a block id (end it with ' ^id')")
        for block_id in ids:
            if not is_block_id(block_id):
                raise TopicError(path, last_line, f"malformed block id ^{block_id} (8 hex)")
    if not CITATION.search(body):
        raise TopicError(path, start, "paragraph without a citation (every unit cites evidence)")
    if not _ENDS_WITH_CITATION.search(body):
        raise TopicError(path, last_line, "text after the last citation")
    if strict:
        for label in CITATION.findall(body):
            if not is_footnote_id(label):
                raise TopicError(path, start, f"footnote label [^{label}] is not a runtime id")
    return Paragraph(body, ids)


def _footnote(line: str, path: str, number: int, strict: bool) -> Footnote:
    match = (_STRICT_DEFINITION if strict else _DRAFT_DEFINITION).fullmatch(line)
    if match is None:
        raise TopicError(
            path, number,
            "malformed footnote definition (expected "
            "[^ID]: Time: `YYYY-MM-DD`; Sources: [label](target), ...)",
        )
    label, when = match.group("label"), match.group("when")
    if strict and not is_footnote_id(label):
        raise TopicError(path, number, f"footnote label [^{label}] is not a runtime id")
    if not _valid_when(when):
        raise TopicError(path, number, f"invalid time {when!r} (YYYY, YYYY-MM, YYYY-MM-DD, undated)")
    sources = _sources(match.group("sources"), strict)
    if sources is None:
        raise TopicError(path, number, f"malformed sources of footnote [^{label}]")
    return Footnote(label, when, sources)


def _sources(text: str, strict: bool) -> tuple[SourceLink, ...] | None:
    pattern = _STRICT_SOURCE if strict else _DRAFT_SOURCE
    found: list[SourceLink] = []
    position = 0
    while position < len(text):
        match = pattern.match(text, position)
        if match is None or match.end() == position:
            return None
        handle = match.groupdict().get("handle")
        if handle is not None:
            found.append(SourceLink(handle, handle))
        else:
            found.append(SourceLink(match.group("label"), match.group("target")))
        position = match.end()
    if not found or (strict and text.endswith(", ")):
        return None
    return tuple(found)


def _valid_when(when: str) -> bool:
    if when == "undated":
        return True
    if _WHEN.fullmatch(when) is None:
        return False
    year, _, rest = when.partition("-")
    month, _, day = rest.partition("-")
    try:
        datetime.date(int(year), int(month or 1), int(day or 1))
    except ValueError:
        return False
    return True


def _check_references(
    blocks: list[Heading | Paragraph], footnotes: dict[str, Footnote],
    where: dict[str, int], path: str, strict: bool,
) -> None:
    cited: set[str] = set()
    seen_ids: set[str] = set()
    for block in blocks:
        if not isinstance(block, Paragraph):
            continue
        for label in block.citations:
            if label not in footnotes:
                raise TopicError(path, 0, f"citation [^{label}] has no footnote definition")
            cited.add(label)
        for block_id in block.ids if strict else ():  # drafts: the normaliser decides
            if block_id in seen_ids:
                raise TopicError(path, 0, f"duplicate block id ^{block_id}")
            seen_ids.add(block_id)
    for label, number in where.items():
        if label not in cited:
            raise TopicError(path, number, f"footnote [^{label}] is never cited")


def render_footnote(footnote: Footnote) -> str:
    sources = ", ".join(f"[{link.label}]({link.target})" for link in footnote.sources)
    return f"[^{footnote.label}]: Time: `{footnote.when}`; Sources: {sources}"


def render_topic(topic: Topic) -> str:
    """The canonical text of ``topic`` (an empty topic renders as the empty string)."""
    out: list[str] = []
    written: set[str] = set()
    for block in topic.blocks:
        if out:
            out.append("")
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
            continue
        out.append(block.body + "".join(f" ^{block_id}" for block_id in block.ids))
        for label in block.citations:
            if label not in written:
                written.add(label)
                out.append("")
                out.append(render_footnote(topic.footnotes[label]))
    return "\n".join(out) + "\n" if out else ""
