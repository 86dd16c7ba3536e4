"""The units recall finds: topic paragraphs and archived turns, cut from the files.

A topic file is parsed by the workspace's strict grammar
(:func:`~memory.workspace.parse_topic`) and an archive by its strict scanner
(:func:`~memory.workspace.parse_archive`): recall never reads the formats by
hand, so what it finds is exactly what memory says. A topic that fails the
grammar has no units (the audit reports it); an archive's units are its
valid prefix of frames.

Every unit has a time: a turn the time in its first body line, a paragraph
the span of its footnotes' ``Time:`` values (``undated`` has none).
Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from memory._errors import TopicError
from memory.workspace import (
    CITATION,
    ArchiveScan,
    Heading,
    Paragraph,
    parse_topic,
    source_key,
)

__all__ = ["Unit", "source_units", "split_turn", "topic_units", "when_span"]

_WHEN = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")
_TRAILING = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Unit:
    """One searchable unit; ``kind`` is ``"topic"`` or ``"source"``.

    ``path`` is relative to ``<state>/memory``. A topic has ``block_id``,
    ``heading`` (the heading path, `` > ``-joined) and ``sources`` (the
    ``<sid>#source-<16hex>`` keys its footnotes cite); a source has
    ``session``, ``node_id``, ``anchor``, ``speaker`` and ``trust``.
    ``start``/``end`` bound its time (``None``: undated), ``when`` is that
    time as the file writes it. ``seq`` is the unit's order in its file.
    """

    kind: str
    path: str
    seq: int
    text: str
    when: str
    start: float | None
    end: float | None
    block_id: str = ""
    heading: str = ""
    sources: tuple[str, ...] = ()
    session: str = ""
    node_id: str = ""
    anchor: str = ""
    speaker: str = ""
    trust: str = "trusted"


def when_span(when: str) -> tuple[float, float] | None:
    """``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` as ``[start, end)`` seconds (UTC); else None."""
    match = _WHEN.fullmatch(when)
    if match is None:
        return None
    year = int(match.group(1))
    try:
        if match.group(3):
            start = datetime(year, int(match.group(2)), int(match.group(3)), tzinfo=UTC)
            return start.timestamp(), start.timestamp() + 86400.0
        if match.group(2):
            month = int(match.group(2))
            start = datetime(year, month, 1, tzinfo=UTC)
            end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
            return start.timestamp(), end.timestamp()
        return datetime(year, 1, 1, tzinfo=UTC).timestamp(), datetime(
            year + 1, 1, 1, tzinfo=UTC).timestamp()
    except ValueError:
        return None


def topic_units(path: str, text: str) -> list[Unit]:
    """The paragraphs of the committed topic ``path``; none if it fails the strict grammar."""
    try:
        topic = parse_topic(text, path)
    except TopicError:
        return []
    units: list[Unit] = []
    headings: list[Heading] = []
    for block in topic.blocks:
        if isinstance(block, Heading):
            headings = [h for h in headings if h.level < block.level] + [block]
            continue
        assert isinstance(block, Paragraph)
        whens: list[str] = []
        keys: list[str] = []
        for label in block.citations:
            footnote = topic.footnotes[label]
            whens.append(footnote.when)
            keys.extend(
                key for link in footnote.sources
                if (key := source_key(path, link.target)) is not None
            )
        spans = [span for when in whens if (span := when_span(when)) is not None]
        units.append(Unit(
            kind="topic",
            path=path,
            seq=len(units),
            text=_TRAILING.sub(" ", CITATION.sub("", block.body)).strip(),
            when=", ".join(dict.fromkeys(whens)),
            start=min(s for s, _ in spans) if spans else None,
            end=max(e for _, e in spans) if spans else None,
            block_id=block.block_id or "",
            heading=" > ".join(h.text for h in headings),
            sources=tuple(dict.fromkeys(keys)),
        ))
    return units


def split_turn(body: str) -> tuple[str, str, str]:
    """``(time, speaker label, content)`` of an archived body ``[<time>] <label>: <content>``."""
    close = body.find("] ")
    time_text = body[1:close] if body.startswith("[") and close > 0 else ""
    rest = body[close + 2:] if close > 0 else body
    label, colon, content = rest.partition(": ")
    if not colon:
        return time_text, "", rest
    return time_text, label.strip(), content


def _parse_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def source_units(path: str, session: str, scan: ArchiveScan, first_seq: int = 0) -> Iterator[Unit]:
    """The frames of ``scan`` (the archive of ``session`` at ``path``) from ``first_seq`` on."""
    for seq, frame in enumerate(scan.frames[first_seq:], start=first_seq):
        time_text, label, content = split_turn(frame.text)
        moment = _parse_time(frame.timestamp or time_text)
        yield Unit(
            kind="source",
            path=path,
            seq=seq,
            text=content,
            when=frame.timestamp or time_text,
            start=moment,
            end=None if moment is None else moment + 1.0,
            session=session,
            node_id=frame.message_id,
            anchor=frame.anchor,
            speaker=label,
            trust="trusted" if frame.trusted else "pending",
        )
