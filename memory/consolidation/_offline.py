"""The offline consolidator: no model, deterministic, so tests can state exact results.

Memory only grows: the same fact restated in ten sessions is ten
paragraphs, and a changed preference sits beside the old one. One pass
(:func:`consolidate_offline`) over every topic, in path then file order:

1. **merge**: paragraphs stating the same fact (:func:`~._facts.same_fact`,
   exact or near, in any file) become one, at the place of the first; it
   cites every source they cited and keeps every id they had (the first's
   block id, then the others as aliases);
2. **supersede**: of statements giving different values in one frame
   (:func:`~._facts.superseding_frame`) with comparable dates, the latest is
   the paragraph's current line and each older one becomes a
   ``Previously (<date>): ...`` line under it, still cited;
3. **fold**: within a file, under each heading, paragraphs about the same
   subject are moved next to the first of them (stable; ids unchanged);
4. **compact**: within a file, footnotes that say the same thing (one date,
   the same links) become one that every paragraph citing them shares, and a
   link labelled with its whole source handle (``openprogram/<sid>/<node>``,
   the built-in writer's label) is labelled with its node id. Measured on
   LoCoMo: footnotes are most of a topic's bytes, and one turn is often cited
   by several paragraphs.

Nothing is ever dropped here; :func:`~._plan.losses` proves it for every
pass anyway (the same check guards the model consolidator).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from memory.consolidation._facts import (
    HISTORY_PREFIX,
    SUBJECT,
    later_when,
    paragraph_when,
    same_fact,
    statement,
    subject,
    superseding_frame,
    words,
)
from memory.consolidation._plan import Action, Plan
from memory.workspace._topic_ids import footnote_id_for
from memory.workspace._topics import CITATION, Footnote, Heading, Paragraph, SourceLink, Topic

__all__ = ["consolidate_offline"]


@dataclass(frozen=True, slots=True)
class _Item:
    order: int
    path: str
    paragraph: Paragraph
    words: tuple[str, ...]
    when: str | None


class _Groups:
    """Union-find over item orders; the root is always the smallest order (the first)."""

    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def consolidate_offline(topics: Mapping[str, Topic]) -> Plan:
    """The pass over ``topics`` (path -> strictly parsed topic); see the module docstring."""
    items: list[_Item] = []
    for path in sorted(topics):
        topic = topics[path]
        for paragraph in topic.paragraphs:
            items.append(_Item(len(items), path, paragraph, words(statement(paragraph)),
                               paragraph_when(paragraph, topic.footnotes)))
    facts, frames = _Groups(len(items)), _Groups(len(items))
    for bucket in _buckets(items):
        for i, a in enumerate(bucket):
            for b in bucket[i + 1:]:
                if same_fact(a.words, b.words):
                    facts.union(a.order, b.order)
                    frames.union(a.order, b.order)
                elif superseding_frame(a.words, b.words) and later_when(a.when, b.when):
                    frames.union(a.order, b.order)
    groups: dict[int, list[_Item]] = {}
    for item in items:
        groups.setdefault(frames.find(item.order), []).append(item)
    edited = {path: list(topic.blocks) for path, topic in topics.items()}
    footnotes = {path: dict(topic.footnotes) for path, topic in topics.items()}
    actions: list[Action] = []
    for root in sorted(groups):
        members = groups[root]
        if len(members) > 1:
            actions.append(_combine(members, facts, topics, edited, footnotes))
    for path in sorted(topics):
        actions.extend(_fold(path, edited))
        actions.extend(_compact(path, edited, footnotes))
    changed = sorted({a.path for a in actions} | {
        p for p in topics if edited[p] != list(topics[p].blocks)})
    return Plan({path: _prune(Topic(tuple(edited[path]), footnotes[path])) for path in changed},
                tuple(actions))


_BUCKET = 300  # pairs compared per subject at most ~45,000: a pass stays near linear


def _buckets(items: list[_Item]) -> list[list[_Item]]:
    """Items grouped by subject; a crowded subject is split by one more word, then by the
    whole statement (exact duplicates only), so pairwise comparison stays bounded."""
    out: list[list[_Item]] = []
    pending: list[tuple[int, list[_Item]]] = [(SUBJECT, [i for i in items if i.words])]
    while pending:
        width, group = pending.pop()
        keyed: dict[tuple[str, ...], list[_Item]] = {}
        for item in group:
            keyed.setdefault(item.words[:width], []).append(item)
        for bucket in keyed.values():
            if len(bucket) <= _BUCKET or width > 64:
                out.append(bucket)
            else:
                pending.append((width + 1 if width < 8 else 65, bucket))
    return out


def _combine(
    members: list[_Item], facts: _Groups, topics: Mapping[str, Topic],
    edited: dict[str, list[Heading | Paragraph]], footnotes: dict[str, dict[str, Footnote]],
) -> Action:
    """One paragraph from ``members`` (a merge and/or supersede group), at the first's place."""
    first = members[0]
    clusters: dict[int, list[_Item]] = {}
    for item in members:
        clusters.setdefault(facts.find(item.order), []).append(item)
    # Latest dated cluster first; undated and ties keep file order (merges only then).
    ranked = sorted(clusters.values(), key=lambda c: (max((i.when or "") for i in c), -c[0].order),
                    reverse=True)
    current = ranked[0]
    dest = first.path
    lines = [_line(current, dest, topics, footnotes)]
    for cluster in ranked[1:]:
        when = max((i.when or "undated") for i in cluster)
        lines.append(f"{HISTORY_PREFIX} ({when}): " + _line(cluster, dest, topics, footnotes))
    for item in sorted(members, key=lambda i: i.order):
        for extra in item.paragraph.body.split("\n")[1:]:  # history an earlier pass kept
            line = _relabel(extra, item.path, dest, topics, footnotes)
            if line not in lines:
                lines.append(line)
    ids = tuple(dict.fromkeys([current[0].paragraph.ids[0],
                               *(i for m in members for i in m.paragraph.ids)]))
    merged = Paragraph("\n".join(lines), ids)
    for item in members:
        blocks = edited[item.path]
        index = blocks.index(item.paragraph)
        if item is first:
            blocks[index] = merged
        else:
            del blocks[index]
    kind = "supersede" if len(clusters) > 1 else "merge"
    reason = ("the same fact, stated again" if kind == "merge" else
              f"a newer value ({max(i.when or '' for i in current)}) of the same thing; the "
              "older kept as history")
    return Action(kind, dest, ids[0], reason, absorbed=ids[1:],
                  before=tuple(m.paragraph.body for m in members), after=merged.body)


def _line(cluster: list[_Item], dest: str, topics: Mapping[str, Topic],
          footnotes: dict[str, dict[str, Footnote]]) -> str:
    """The cluster's first statement line, citing every source any member's line cites."""
    head = cluster[0].paragraph.body.split("\n", 1)[0]
    text = CITATION.sub("", head).rstrip()
    labels: list[str] = []
    for item in cluster:
        line = _relabel(item.paragraph.body.split("\n", 1)[0], item.path, dest, topics, footnotes)
        labels.extend(CITATION.findall(line))
    return text + "".join(f"[^{label}]" for label in dict.fromkeys(labels))


def _relabel(line: str, source: str, dest: str, topics: Mapping[str, Topic],
             footnotes: dict[str, dict[str, Footnote]]) -> str:
    """``line`` of ``source`` with its footnotes copied into ``dest`` (links re-pointed)."""
    if source == dest:
        return line
    mapping: dict[str, str] = {}
    for label in dict.fromkeys(CITATION.findall(line)):
        footnote = topics[source].footnotes[label]
        moved = Footnote(label, footnote.when, tuple(
            SourceLink(link.label, _repoint(source, dest, link.target))
            for link in footnote.sources))
        here = footnotes[dest]
        if label in here and here[label] != moved:
            targets = [link.target for link in moved.sources]
            new = footnote_id_for(moved.when, targets, set(here))
            moved = Footnote(new, moved.when, moved.sources)
        here[moved.label] = moved
        mapping[label] = moved.label
    return CITATION.sub(lambda m: f"[^{mapping.get(m.group(1), m.group(1))}]", line)


def _repoint(source: str, dest: str, target: str) -> str:
    """``target``, relative to ``source``'s directory, as seen from ``dest``'s."""
    if target.startswith("/") or "://" in target or posixpath.dirname(source) == posixpath.dirname(
            dest):
        return target
    file_part, hash_mark, fragment = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), file_part))
    return posixpath.relpath(resolved, posixpath.dirname(dest)) + hash_mark + fragment


def _fold(path: str, edited: dict[str, list[Heading | Paragraph]]) -> list[Action]:
    """Under each heading, paragraphs about one subject move next to the first of them."""
    blocks = edited[path]
    out: list[Heading | Paragraph] = []
    moved: list[Action] = []
    section: list[Paragraph] = []

    def flush() -> None:
        order: dict[tuple[str, ...], list[Paragraph]] = {}
        for paragraph in section:
            order.setdefault(subject(statement(paragraph)) or (paragraph.ids[0],), []
                             ).append(paragraph)
        folded = [p for group in order.values() for p in group]
        for group in order.values():
            if len(group) > 1 and folded != section:
                positions = [section.index(p) for p in group]
                if positions != list(range(positions[0], positions[0] + len(group))):
                    moved.append(Action("fold", path, group[0].ids[0],
                                        "facts about one subject kept together",
                                        absorbed=(), before=tuple(p.ids[0] for p in group)))
        out.extend(folded)
        section.clear()

    for block in blocks:
        if isinstance(block, Heading):
            flush()
            out.append(block)
        else:
            section.append(block)
    flush()
    edited[path] = out
    return moved


def _compact(path: str, edited: dict[str, list[Heading | Paragraph]],
             footnotes: dict[str, dict[str, Footnote]]) -> list[Action]:
    """Share footnotes that say the same thing; label handle-labelled links by their node."""
    here = footnotes[path]
    cited = [label for block in edited[path] if isinstance(block, Paragraph)
             for label in block.citations]
    canonical: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
    rename: dict[str, str] = {}
    relabelled = 0
    for label in dict.fromkeys(cited):
        footnote = here[label]
        links = tuple(SourceLink(_short(link.label), link.target) for link in footnote.sources)
        if links != footnote.sources:
            relabelled += 1
            here[label] = Footnote(label, footnote.when, links)
        key = (footnote.when, tuple((link.label, link.target) for link in links))
        rename[label] = canonical.setdefault(key, label)
    shared = sum(1 for old, new in rename.items() if old != new)
    if not shared and not relabelled:
        return []
    blocks = edited[path]
    for index, block in enumerate(blocks):
        if isinstance(block, Paragraph) and any(rename[c] != c for c in block.citations):
            body = CITATION.sub(lambda m: f"[^{rename[m.group(1)]}]", block.body)
            blocks[index] = Paragraph(_dedupe_citations(body), block.ids)
    return [Action("compact", path, "", f"{shared} footnote(s) shared, {relabelled} "
                   "relabelled by node id; every source still cited")]


def _short(label: str) -> str:
    parts = label.split("/")
    return parts[2] if len(parts) == 3 and parts[0] == "openprogram" and parts[2] else label


def _dedupe_citations(body: str) -> str:
    """A label cited twice in a row (after sharing) is cited once."""
    previous = None
    while previous != body:
        previous = body
        body = re.sub(r"(\[\^[A-Za-z0-9_-]+\])\1", r"\1", body)
    return body


def _prune(topic: Topic) -> Topic:
    """Footnotes no paragraph cites any more are dropped (the strict grammar forbids them)."""
    cited = {label for p in topic.paragraphs for label in p.citations}
    return Topic(topic.blocks, {k: v for k, v in topic.footnotes.items() if k in cited})
