"""Id normalisation: from a writer's draft to a committed topic file.

Writers are bad at ids: a model invents them, copies them, renumbers them.
So writers never write ids (SPEC §5). They write ``[^e1]``-style local
labels and raw source handles (``openprogram/<sid>/<node-id>``); this module
makes every id from content, so the same statement with the same evidence
gets the same id on every machine:

- footnote label = ``e-`` + first 10 hex of
  ``sha256("evidence|<when>|<targets>|<counter>")``, ``<targets>`` being the
  footnote's raw handles (or kept link targets) joined by ``", "``;
- block id = first 8 hex of
  ``sha256("block|<file name>|<normalised body>|<counter>")``, the body with
  its citations renumbered ``[^e1]``, ``[^e2]``... in order of appearance,
  without its block ids, whitespace runs collapsed to one space;
- ``<counter>`` starts at 0 and counts up past ids already used anywhere in
  the workspace (or earlier in the same commit).

What is kept: a footnote whose label and definition equal the base file's;
a trailing ``^id`` that already exists in the workspace (a merge may move
one, aliases included); the id of a paragraph whose normalised body equals a
base paragraph's. Everything else is invented and stripped. Raw handles
become relative links to the v2 archive (``source_anchor`` fragment). A file
left with no memory unit is pruned (``text`` is ``None``).

Pure functions: no I/O; the transaction hands in what the workspace holds.
"""

from __future__ import annotations

import functools
import hashlib
import posixpath
import re
from collections.abc import Collection
from dataclasses import dataclass, field

from memory._errors import TopicError
from memory.ledger._records import source_anchor
from memory.workspace._topics import (
    CITATION,
    Footnote,
    Heading,
    Paragraph,
    SourceLink,
    Topic,
    parse_topic,
    render_topic,
)

__all__ = [
    "NormalisedTopic",
    "block_id_for",
    "footnote_id_for",
    "handle_key",
    "is_source_handle",
    "normalise_topic",
    "normalised_body",
    "source_key",
    "source_link_target",
]

_HANDLE = re.compile(r"openprogram/([^/\s,()\[\]#]+)/([^/\s,()\[\]#]+)")
_ARCHIVE_PATH = re.compile(r"sources/openprogram/(?:_v2/)?([^/]+)\.md")
_ANCHOR = re.compile(r"source-[0-9a-f]{16}")


def is_source_handle(value: str) -> bool:
    return _HANDLE.fullmatch(value) is not None


def handle_key(handle: str) -> str:
    """``<sid>#source-<16hex>``: the identity a citation of ``handle`` has in any archive link."""
    match = _HANDLE.fullmatch(handle)
    if match is None:
        raise ValueError(f"not a source handle: {handle!r}")
    return f"{match.group(1)}#{source_anchor(handle)}"


@functools.lru_cache(maxsize=65536)
def source_key(topic_path: str, target: str) -> str | None:
    """The ``<sid>#source-<16hex>`` a committed link points at, or None if not an archive link."""
    file_part, hash_mark, fragment = target.partition("#")
    if not hash_mark or _ANCHOR.fullmatch(fragment) is None or target.startswith("/"):
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(topic_path), file_part))
    match = _ARCHIVE_PATH.fullmatch(resolved)
    return f"{match.group(1)}#{fragment}" if match else None


def source_link_target(topic_path: str, handle: str) -> str:
    """The relative link from ``topic_path`` to ``handle``'s frame in the v2 archive."""
    match = _HANDLE.fullmatch(handle)
    if match is None:
        raise ValueError(f"not a source handle: {handle!r}")
    return f"{_archive_link(posixpath.dirname(topic_path), match.group(1))}#{source_anchor(handle)}"


@functools.lru_cache(maxsize=4096)
def _archive_link(topic_dir: str, session: str) -> str:
    return posixpath.relpath(f"sources/openprogram/_v2/{session}.md", topic_dir or ".")


def normalised_body(body: str) -> str:
    """The body as hashed for a block id: citations renumbered, whitespace collapsed."""
    numbers: dict[str, str] = {}

    def renumber(match: re.Match[str]) -> str:
        label = numbers.setdefault(match.group(1), f"e{len(numbers) + 1}")
        return f"[^{label}]"

    return " ".join(CITATION.sub(renumber, body).split())


def _first_free(seed: str, length: int, used: Collection[str], prefix: str = "") -> str:
    counter = 0
    while True:
        digest = hashlib.sha256(f"{seed}|{counter}".encode()).hexdigest()
        value = prefix + digest[:length]
        if value not in used:
            return value
        counter += 1


def block_id_for(file_name: str, body: str, used: Collection[str]) -> str:
    return _first_free(f"block|{file_name}|{normalised_body(body)}", 8, used)


def footnote_id_for(when: str, targets: list[str], used: Collection[str]) -> str:
    return _first_free(f"evidence|{when}|{', '.join(targets)}", 10, used, prefix="e-")


@dataclass(frozen=True, slots=True)
class NormalisedTopic:
    """A draft made committable. ``text`` is None when the file is pruned."""

    path: str
    text: str | None
    block_ids: frozenset[str]  # ids and aliases in the result
    kept_ids: frozenset[str]  # of those, ids that existed before
    handles: frozenset[str]  # raw handles this draft cites (now links)
    linked: frozenset[str]  # source keys cited through links kept from the base
    new_ids: tuple[str, ...] = ()  # block ids assigned here, in file order
    # What ``text`` parses to (strictly), so a commit need not parse what it wrote.
    topic: Topic | None = field(default=None, compare=False, repr=False)


def normalise_topic(
    path: str,
    draft: str,
    *,
    base: Topic | None,
    existing_ids: Collection[str],
    used_ids: set[str],
    used_labels: set[str],
) -> NormalisedTopic:
    """Normalise one draft of ``path`` (relative to ``<state>/memory``).

    ``existing_ids`` are the block ids in the workspace before the commit;
    ``used_ids``/``used_labels`` are every id taken so far (workspace plus
    this commit) and gain the ids assigned here. Raises :class:`TopicError`.
    """
    topic = parse_topic(draft, path, strict=False)
    file_name = posixpath.basename(path)
    labels, kept_labels, handles, linked = _bind_footnotes(path, topic, base, used_labels)

    # Ids the draft keeps explicitly, across the whole file, before any reuse.
    kept: set[str] = set()
    explicit: list[tuple[str, ...]] = []
    for paragraph in topic.paragraphs:
        ids = tuple(dict.fromkeys(i for i in paragraph.ids if i in existing_ids))
        for block_id in ids:
            if block_id in kept:
                raise TopicError(path, 0, f"block id ^{block_id} kept on two paragraphs")
            kept.add(block_id)
        explicit.append(ids)
    # Only base paragraphs whose ids the draft did not keep can be matched by body.
    reusable: dict[str, tuple[str, ...]] = {}
    if base is not None and any(not ids for ids in explicit):
        for old in base.paragraphs:
            if not kept.intersection(old.ids):
                reusable.setdefault(normalised_body(old.body), old.ids)

    blocks: list[Heading | Paragraph] = []
    footnotes: dict[str, Footnote] = {}
    result_ids: set[str] = set()
    new_ids: list[str] = []
    paragraphs = iter(explicit)
    for block in topic.blocks:
        if isinstance(block, Heading):
            blocks.append(block)
            continue
        ids = next(paragraphs)
        if all(labels[label] == label for label in block.citations):
            body = block.body
        else:
            body = CITATION.sub(lambda m: f"[^{labels[m.group(1)]}]", block.body)
        if not ids:
            previous = reusable.get(normalised_body(block.body), ())
            if previous and not (set(previous) & (kept | result_ids)):
                ids = previous
            else:
                ids = (block_id_for(file_name, block.body, used_ids),)
                used_ids.add(ids[0])
                new_ids.append(ids[0])
        result_ids.update(ids)
        blocks.append(block if body is block.body and ids == block.ids else Paragraph(body, ids))
        for label in block.citations:
            footnote = labels[label]
            if footnote not in footnotes:
                draft_footnote = topic.footnotes[label]
                footnotes[footnote] = (
                    draft_footnote if label in kept_labels
                    else _bound_footnote(path, draft_footnote, footnote)
                )

    if not any(isinstance(block, Paragraph) for block in blocks):
        return NormalisedTopic(path, None, frozenset(), frozenset(), handles, linked)
    committed = Topic(tuple(blocks), footnotes)
    return NormalisedTopic(
        path, render_topic(committed), frozenset(result_ids),
        frozenset(result_ids & set(existing_ids)), handles, linked, tuple(new_ids), committed,
    )


def _bind_footnotes(
    path: str, topic: Topic, base: Topic | None, used_labels: set[str],
) -> tuple[dict[str, str], set[str], frozenset[str], frozenset[str]]:
    """Map each draft label to its committed label; collect what new footnotes cite."""
    labels: dict[str, str] = {}
    kept: set[str] = set()
    handles: set[str] = set()
    linked: set[str] = set()
    for paragraph in topic.paragraphs:
        for label in paragraph.citations:
            if label in labels:
                continue
            footnote = topic.footnotes[label]
            if base is not None:
                old = base.footnotes.get(label)
                if old is footnote or old == footnote:
                    labels[label] = label  # unchanged evidence, already cited by the base
                    kept.add(label)
                    continue
            targets: list[str] = []
            for link in footnote.sources:
                if is_source_handle(link.target):
                    handles.add(link.target)
                    targets.append(link.target)
                    continue
                key = source_key(path, link.target)
                if key is None:
                    raise TopicError(
                        path, 0,
                        f"footnote [^{label}] cites {link.target!r}: cite a raw source handle "
                        "(openprogram/<session>/<node>) or keep an existing archive link",
                    )
                linked.add(key)
                targets.append(link.target)
            labels[label] = footnote_id_for(footnote.when, targets, used_labels)
            used_labels.add(labels[label])
    return labels, kept, frozenset(handles), frozenset(linked)


def _bound_footnote(path: str, footnote: Footnote, label: str) -> Footnote:
    sources = tuple(
        SourceLink(link.label, source_link_target(path, link.target))
        if is_source_handle(link.target)
        else link
        for link in footnote.sources
    )
    return Footnote(label, footnote.when, sources)
