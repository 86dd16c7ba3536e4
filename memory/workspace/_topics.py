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
source handles instead of links; ``memory.workspace._topic_ids`` turns a draft into a
committed file.

:func:`render_topic` writes the canonical form: blocks separated by one blank
line, each footnote definition right after the paragraph that first cites it.
``render_topic(parse_topic(render_topic(t)))`` is ``render_topic(t)``.
"""

from __future__ import annotations

import datetime
import functools
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from memory._errors import TopicError

__all__ = [
    "CITATION",
    "Footnote",
    "Heading",
    "Paragraph",
    "SourceLink",
    "Topic",
    "decode_topic",
    "is_block_id",
    "is_footnote_id",
    "parse_topic",
    "render_footnote",
    "render_topic",
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
_STRICT_SOURCES = re.compile(r"(?:\[[^\[\]\n]+\]\([^()\s]+\), )*\[[^\[\]\n]+\]\([^()\s]+\)")
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
    # Cited footnote labels, each once, in order of first appearance.
    citations: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "citations", tuple(dict.fromkeys(CITATION.findall(self.body))))

    @property
    def block_id(self) -> str | None:
        return self.ids[0] if self.ids else None


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


def decode_topic(raw: bytes, path: str) -> str:
    """A topic file's bytes as text, or :class:`TopicError` naming the first bad byte.

    A file that is not UTF-8 is treated like any file that fails the strict
    parse: left untouched, its edits refused, routed around by the writers.
    Decoding with replacement instead would hand the parser (and the audit)
    a different text than the one on disk.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise TopicError(
            path, line,
            f"not UTF-8: byte {error.start} (0x{raw[error.start]:02x}) {error.reason}",
        ) from None


_CACHE_SIZE = 64
_parsed: OrderedDict[tuple[str, str, bool], Topic] = OrderedDict()
_parsed_lock = threading.Lock()  # commits run in worker threads, writers in the loop


def parse_topic(text: str, path: str = "<topic>", *, strict: bool = True) -> Topic:
    """Parse a topic file (``strict``) or a writer's draft; raise :class:`TopicError`.

    The same text is parsed again and again (by the transaction's index, the
    writer, the normaliser), so the last few results are remembered; a
    :class:`Topic` is immutable in use (never mutate its ``footnotes``).
    """
    key = (path, text, strict)
    with _parsed_lock:
        topic = _parsed.get(key)
        if topic is not None:
            _parsed.move_to_end(key)
            return topic
    topic = _parse(text, path, strict)
    with _parsed_lock:
        _parsed[key] = topic
        while len(_parsed) > _CACHE_SIZE:
            _parsed.popitem(last=False)
    return topic


_Item = tuple[Heading | Paragraph | Footnote, int]  # element, line within its chunk
# Bounded by text held, not by entries: a chunk can be one line or a whole
# paragraph with its evidence, and the parsed form weighs several times its text.
_CHUNK_CACHE_BYTES = 8 * 1024 * 1024
_chunks: dict[tuple[str, bool], tuple[_Item, ...]] = {}
_chunk_bytes = 0


def _parse(text: str, path: str, strict: bool) -> Topic:
    if "\r" in text:
        if strict:
            raise TopicError(path, 0, "carriage return in a topic file (topics are LF-only)")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    # Blank lines end every construct, so the runs between them parse
    # independently: a file that grew by one paragraph re-parses one chunk.
    chunks = text.split("\n\n")
    blocks: list[Heading | Paragraph] = []
    footnotes: dict[str, Footnote] = {}
    where: dict[str, tuple[int, int]] = {}  # label -> (chunk, line in chunk)
    for index, chunk in enumerate(chunks):
        key = (chunk, strict)
        # A chunk valid in a committed file means the same in a draft: share it,
        # so a draft's unchanged paragraphs are the base's very objects.
        items = _chunks.get(key) if strict else _chunks.get((chunk, True)) or _chunks.get(key)
        if items is None:
            try:
                items = _parse_chunk(chunk, strict)
            except TopicError as error:
                raise TopicError(path, error.line + _line_of(chunks, index), error.reason) from None
            _remember_chunk(key, items)
        for element, line in items:
            if isinstance(element, Footnote):
                if element.label in footnotes:
                    raise TopicError(
                        path, line + _line_of(chunks, index),
                        f"duplicate footnote [^{element.label}] (first defined on line "
                        f"{_absolute(chunks, where[element.label])})",
                    )
                footnotes[element.label] = element
                where[element.label] = (index, line)
            else:
                blocks.append(element)
    unused = _check_references(blocks, footnotes, path, strict)
    if unused is not None:
        raise TopicError(
            path, _absolute(chunks, where[unused]), f"footnote [^{unused}] is never cited",
        )
    return Topic(tuple(blocks), footnotes)


def _remember_chunk(key: tuple[str, bool], items: tuple[_Item, ...]) -> None:
    global _chunk_bytes
    if _chunk_bytes + len(key[0]) > _CHUNK_CACHE_BYTES:
        _chunks.clear()  # cheaper than LRU bookkeeping on every hit; refills from live files
        _chunk_bytes = 0
    _chunks[key] = items
    _chunk_bytes += len(key[0])


def _absolute(chunks: list[str], position: tuple[int, int]) -> int:
    return _line_of(chunks, position[0]) + position[1]


def _line_of(chunks: list[str], index: int) -> int:
    """Lines before chunk ``index`` (each split point removed two newlines)."""
    return sum(chunk.count("\n") + 2 for chunk in chunks[:index])


def _parse_chunk(chunk: str, strict: bool) -> tuple[_Item, ...]:
    """Parse one run of text; line numbers are relative (the caller adds the offset)."""
    items: list[_Item] = []
    pending: list[str] = []
    pending_start = 0

    def close_paragraph() -> None:
        if pending:
            items.append((_paragraph(pending, "", pending_start, strict), pending_start))
            pending.clear()

    for number, line in enumerate(chunk.split("\n"), start=1):
        if not line.strip():
            close_paragraph()
            continue
        first = line[0]
        heading = _HEADING.fullmatch(line) if first == "#" else None
        if heading is not None:
            close_paragraph()
            title = heading.group(2).strip()
            if not title or title != heading.group(2):
                raise TopicError("", number, "a heading needs text without surrounding spaces")
            items.append((Heading(len(heading.group(1)), title), number))
            continue
        if first == "[" and _DEFINITION_START.match(line):
            close_paragraph()
            items.append((_footnote(line, "", number, strict), number))
            continue
        if not pending:
            pending_start = number
        pending.append(line)
    close_paragraph()
    return tuple(items)


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
        raise TopicError(
            path, number, f"invalid time {when!r} (YYYY, YYYY-MM, YYYY-MM-DD, undated)",
        )
    sources = _sources(match.group("sources"), strict)
    if sources is None:
        raise TopicError(path, number, f"malformed sources of footnote [^{label}]")
    return Footnote(label, when, sources)


def _sources(text: str, strict: bool) -> tuple[SourceLink, ...] | None:
    if strict:
        if _STRICT_SOURCES.fullmatch(text) is None:
            return None
        return tuple(
            SourceLink(match.group("label"), match.group("target"))
            for match in _STRICT_SOURCE.finditer(text)
        )
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


@functools.lru_cache(maxsize=4096)
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
    blocks: list[Heading | Paragraph], footnotes: dict[str, Footnote], path: str, strict: bool,
) -> str | None:
    """Raise on a dangling citation or a duplicate id; return a never-cited label, if any."""
    cited: set[str] = set()
    seen_ids: set[str] = set()
    for block in blocks:
        if not isinstance(block, Paragraph):
            continue
        for label in block.citations:
            if label not in footnotes:
                raise TopicError(path, 0, f"citation [^{label}] has no footnote definition")
            cited.add(label)
        if strict:  # in drafts the normaliser decides what a repeated id means
            for block_id in block.ids:
                if block_id in seen_ids:
                    raise TopicError(path, 0, f"duplicate block id ^{block_id}")
                seen_ids.add(block_id)
    if len(cited) == len(footnotes):
        return None
    return next(label for label in footnotes if label not in cited)


def render_footnote(footnote: Footnote) -> str:
    sources = ", ".join(f"[{link.label}]({link.target})" for link in footnote.sources)
    return f"[^{footnote.label}]: Time: `{footnote.when}`; Sources: {sources}"


def render_topic(topic: Topic) -> str:
    """The canonical text of ``topic`` (an empty topic renders as the empty string)."""
    out: list[str] = []
    written: set[str] = set()
    footnotes = topic.footnotes
    for block in topic.blocks:
        if type(block) is Heading:
            out.append("#" * block.level + " " + block.text)
            continue
        assert isinstance(block, Paragraph)
        ids = block.ids
        out.append(f"{block.body} ^{ids[0]}" if len(ids) == 1 else
                   block.body + "".join(f" ^{block_id}" for block_id in ids))
        for label in block.citations:
            if label not in written:
                written.add(label)
                out.append(render_footnote(footnotes[label]))
    return "\n\n".join(out) + "\n" if out else ""
