"""Packing: from ranked hits to a block for a prompt, within a token budget.

Ranking (:mod:`memory.recall._rank`) says which units matter; this says how
they are shown: :func:`pack_context` fills a token budget with the best
hits, each labelled with its provenance and time, and with the adjacent
turns of a quoted turn when they still fit; a paragraph that says more
than a turn it cites is shown next to it (:func:`notes_of`), and a turn's
relative dates are resolved from the day it was said (:func:`shown_text`).
The budget is checked by counting the whole block with the ledger's counter
after every addition, so ``tokens <= budget`` holds for any counter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memory.ledger import annotate_relative_dates, describe_from
from memory.recall._query import _WORD
from memory.recall._rank import Hit, redundant

__all__ = ["Context", "known_words_text", "notes_of", "pack_context", "shown_text"]


@dataclass(frozen=True, slots=True)
class Context:
    """A block ready for a prompt: ``text`` within ``tokens`` <= the budget asked for."""

    text: str
    tokens: int
    quoted: tuple[tuple[str, str], ...]
    cited: tuple[tuple[str, str], ...]
    hits: tuple[Hit, ...] = field(default=())

    def as_json(self) -> dict[str, object]:
        return {"text": self.text, "tokens": self.tokens,
                "quoted": [list(p) for p in self.quoted], "cited": [list(p) for p in self.cited],
                "hits": [hit.as_json() for hit in self.hits]}


def _words(text: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(text)}


def notes_of(hits: Sequence[Hit], turns: Mapping[tuple[str, str], str]
             ) -> dict[tuple[str, str], list[Hit]]:
    """The paragraphs among ``hits`` that say more than a turn they cite, by that turn.

    ``turns`` maps a turn to its text. A paragraph "says more" when it holds
    words that neither the turn nor the turn's label (its speaker, its day)
    holds: a relative date resolved against the turn's time ("last year
    (2022)"), a fact merged from another day. Shown next to the quoted turn,
    it adds what the turn alone does not say, and the turn stays quoted.
    """
    notes: dict[tuple[str, str], list[Hit]] = {}
    for hit in hits:
        if hit.kind != "topic":
            continue
        said = _words(hit.text)
        for pair in hit.sources:
            text = turns.get(pair)
            if text is None:
                continue
            if said - _words(text) - _label_words(hit, pair):
                notes.setdefault(pair, []).append(hit)
    return notes


def _label_words(hit: Hit, pair: tuple[str, str]) -> set[str]:
    """What a turn's label already says: the paragraph's own prefix (speaker, day)."""
    head, colon, _ = hit.text.partition(": ")
    return _words(head) if colon and len(head) < 80 else set()


def _label(hit: Hit, session: str | None = None) -> str:
    if hit.kind == "source":
        pending = " (pending)" if hit.trust != "trusted" else ""
        where = hit.node_id if hit.session == session else f"{hit.session}/{hit.node_id}"
        return f"[{hit.time}] {hit.speaker}{pending} ({where})"
    return f"[{hit.time}] memory ({hit.file} ^{hit.block_id})"


def shown_text(hit: Hit) -> str:
    """What a block shows of a hit: a turn's relative dates resolved from the day it was said.

    "I went hiking last week", said on 25 August 2023 and read months
    later, is shown "I went hiking last week (the week before 25 August
    2023)" (:func:`memory.ledger.describe_from`, the same resolution the
    writer applies to its paragraphs); the words said stay as they were. A
    paragraph's text is the writer's, dates already resolved.
    """
    if hit.kind != "source" or not hit.when:
        return hit.text
    return _resolved(hit.text, hit.when, False)


def known_words_text(hit: Hit) -> str:
    """What a turn shown in a block already tells, for :func:`notes_of`.

    The writer's paragraph of a turn resolves its dates too ("last week (the
    week of 14 August 2023)"); next to the turn shown with its dates
    resolved, a paragraph that adds only those adds nothing. So: the shown
    text, and the turn with its dates as the writer writes them.
    """
    if hit.kind != "source" or not hit.when:
        return hit.text
    return _resolved(hit.text, hit.when, False) + " " + _resolved(hit.text, hit.when, True)


@functools.lru_cache(maxsize=8192)
def _resolved(text: str, when: str, as_writer: bool) -> str:
    """``text`` said at ``when`` (ISO) with its relative dates resolved (memoised: a turn
    is shown again and again)."""
    try:
        said = datetime.fromisoformat(when).date()
    except ValueError:
        return text
    if as_writer:
        return annotate_relative_dates(text, said, lambda date: date.span.describe())
    return annotate_relative_dates(text, said, lambda date: describe_from(date, said))


def _item(hit: Hit, session: str | None = None, text: str | None = None) -> str:
    return f"- {_label(hit, session)}: {' '.join((hit.text if text is None else text).split())}"


def _heading(session: str) -> str:
    return f"Session {session}, its turns by node id:"


def pack_context(
    hits: Sequence[Hit],
    budget_tokens: int,
    count: Callable[[str], int],
    *,
    neighbours: Callable[[Hit], Sequence[Hit]] | None = None,
    session: str | None = None,
    notes: Mapping[tuple[str, str], Sequence[Hit]] | None = None,
) -> Context:
    """The best ``hits`` that fit ``budget_tokens`` (whole block counted by ``count``).

    With ``session`` (the session asked from) and two or more of its turns in
    the block, each is labelled by its node id alone under one heading line
    naming the session: the session id repeated on every line cost a tenth
    of a block's tokens.

    A hit that does not fit is passed over (a shorter later one may fit).
    Then, while room is left, each quoted turn brings its adjacent turns
    (``neighbours``), placed next to it; a turn already shown is never
    shown again. Items keep the hits' order.
    """
    if budget_tokens <= 0:
        return Context("", 0, (), (), ())
    groups: list[list[Hit]] = []
    shown: set[tuple[str, str]] = set()
    placed: list[Hit] = []
    noted: set[tuple[str, str | None]] = set()

    # Each hit's line, made once per label form: by id(hit), the hit kept so its id stays its own.
    lines: dict[tuple[int, str | None], tuple[Hit, str]] = {}

    def line(hit: Hit, short: str | None) -> str:
        known = lines.get((id(hit), short))
        if known is None:
            known = lines[id(hit), short] = (hit, _item(hit, short, shown_text(hit)))
        return known[1]

    def text_of(candidate: list[list[Hit]]) -> str:
        own = sum(hit.kind == "source" and hit.session == session
                  for group in candidate for hit in group)
        short = session if session is not None and own > 1 else None
        items = [line(hit, short) for group in candidate for hit in group]
        if short is not None:
            items.insert(0, _heading(short))
        return "\n".join(items)

    def fits(candidate: list[list[Hit]]) -> bool:
        return count(text_of(candidate)) <= budget_tokens

    def add_neighbours(index: int) -> None:
        nonlocal groups
        assert neighbours is not None
        for extra in neighbours(groups[index][0]):
            pair = (extra.session or "", extra.node_id or "")
            if pair in shown:
                continue
            merged = sorted([*groups[index], extra], key=lambda h: (h.kind != "source", h.seq))
            trial = [*groups[:index], merged, *groups[index + 1:]]
            if fits(trial):
                groups = trial
                shown.add(pair)

    for hit in hits:
        if redundant(hit, shown) or (hit.kind == "topic" and (hit.file, hit.block_id) in noted):
            continue
        trial = [*groups, [hit]]
        if fits(trial):
            groups = trial
            shown.update(hit.hides)
            placed.append(hit)
            # A paragraph that says more than the quoted turn goes right after it.
            for note in (notes or {}).get(hit.hides[0], ()) if hit.kind == "source" else ():
                if (note.file, note.block_id) in noted:
                    continue
                trial = [*groups[:-1], [*groups[-1], note]]
                if fits(trial):
                    groups = trial
                    noted.add((note.file, note.block_id))
                    shown.update(note.hides)
    if neighbours is not None:
        for index in range(len(groups)):
            if groups[index][0].kind == "source":
                add_neighbours(index)
    text = text_of(groups)
    quoted = tuple(dict.fromkeys(
        (h.session or "", h.node_id or "") for g in groups for h in g if h.kind == "source"))
    cited = tuple(dict.fromkeys(
        pair for g in groups for h in g if h.kind == "topic" for pair in h.sources))
    return Context(text, count(text) if text else 0, quoted, cited,
                   tuple(h for g in groups for h in g))
