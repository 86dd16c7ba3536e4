"""Ranking and packing: from BM25 matches to hits, and from hits to a prompt block.

BM25 finds units sharing rare words with the query; what it misses is
ruled here, each rule a factor on the BM25 relevance (pure functions):

- names: a unit whose speaker the query names counts more;
- time: a unit dated inside a time the query names counts more, one dated
  outside it less (a paragraph is dated by each of its footnotes' days, not
  by the span between them: a fact said in May and in July is not of June);
- branches: with a session, a turn on the asked branch keeps its score, a
  turn of another live branch (or another session) counts less, a turn only
  on rewound branches is left out unless asked for; a paragraph none of
  whose cited turns is on the branch counts less;
- no repeats: a paragraph and the turns it cites are never both shown,
  with one exception: a paragraph that merges turns of several times does
  not hide those of a time the query names when it also cites turns outside
  it (:func:`covered`): that turn is the evidence of the asked time, the
  paragraph is not.

Packing (:func:`pack_context`) fills a token
budget with the best hits, each labelled with its provenance and time,
and with the adjacent turns of a quoted turn when they still fit. The
budget is checked by counting the whole block with the ledger's counter
after every addition, so ``tokens <= budget`` holds for any counter.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from memory.ledger import annotate_relative_dates, describe_from
from memory.recall._query import _WORD, ParsedQuery, TimeWindow
from memory.recall._units import Unit, when_span

__all__ = [
    "BranchView",
    "Context",
    "Hit",
    "SqlBound",
    "hit_of",
    "pack_context",
    "rank_units",
    "render_time",
    "scored_hit",
    "shown_text",
    "sql_bound",
]

NAME_BOOST = 1.6
TIME_BOOST = 2.0
TIME_MISS = 0.7
OFF_BRANCH = 0.5
OTHER_SESSION = 0.5
TOPIC_WEIGHT = 0.15


@dataclass(frozen=True, slots=True)
class BranchView:
    """The branch a query is asked from: its session, the turns on it, the turns still live.

    ``on_branch`` are the node ids on the asked branch (root to tip);
    ``live`` those on any live branch of the session (so a turn of the
    session in neither was rewound away).
    """

    session: str
    tip: str
    on_branch: frozenset[str]
    live: frozenset[str]


@dataclass(frozen=True, slots=True)
class Hit:
    """One recalled unit with its provenance (SPEC-style ``(session, node_id)`` pairs)."""

    kind: str  # "topic" | "source" | "owed" (a turn not yet in memory: memory.recall._owed)
    text: str
    score: float
    time: str
    file: str
    block_id: str | None = None
    session: str | None = None
    node_id: str | None = None
    speaker: str | None = None
    sources: tuple[tuple[str, str], ...] = ()
    trust: str = "trusted"
    on_branch: bool | None = None
    seq: int = 0
    when: str = ""  # the time as the file holds it (ISO for a turn, footnote times for a topic)
    # The cited turns a paragraph stands for, which no-repeats hides (all of
    # ``sources`` unless the query's time takes some out: :func:`covered`).
    covers: tuple[tuple[str, str], ...] | None = None

    @property
    def hides(self) -> tuple[tuple[str, str], ...]:
        """The turns a shown hit makes redundant: itself, or the turns a paragraph covers."""
        if self.kind != "topic":  # a turn, archived or owed
            return ((self.session or "", self.node_id or ""),)
        return self.sources if self.covers is None else self.covers

    def as_json(self) -> dict[str, object]:
        document: dict[str, object] = {
            "kind": self.kind, "text": self.text, "score": float(f"{self.score:.6g}"),  # 6 digits: tiny on a small memory
            "time": self.time, "when": self.when, "file": self.file,
        }
        if self.kind == "topic":
            document["block_id"] = self.block_id
            document["sources"] = [list(pair) for pair in self.sources]
        else:
            document.update(session=self.session, node_id=self.node_id, speaker=self.speaker,
                            trust=self.trust)
        if self.on_branch is not None:
            document["on_branch"] = self.on_branch
        return document


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


def render_time(unit: Unit) -> str:
    """A turn's day as people write it ("8 May 2023"); a paragraph's footnote times."""
    if unit.kind == "source" and unit.start is not None:
        try:
            moment = datetime.fromisoformat(unit.when)
        except ValueError:
            moment = datetime.fromtimestamp(unit.start, UTC)
        return f"{moment.day} {moment:%B %Y}"
    return unit.when or "undated"


def hit_of(unit: Unit, score: float, cited: Mapping[str, Unit],
           view: BranchView | None) -> Hit:
    if unit.kind == "topic":
        pairs = tuple((u.session, u.node_id) for key in unit.sources
                      if (u := cited.get(key)) is not None)
        on = None if view is None else any(
            s == view.session and n in view.on_branch for s, n in pairs)
        return Hit("topic", unit.text, score, render_time(unit), unit.path,
                   block_id=unit.block_id, sources=pairs, on_branch=on, seq=unit.seq,
                   when=unit.when)
    on = None if view is None else (unit.session == view.session
                                    and unit.node_id in view.on_branch)
    return Hit("source", unit.text, score, render_time(unit), unit.path,
               session=unit.session, node_id=unit.node_id, speaker=unit.speaker,
               trust=unit.trust, on_branch=on, seq=unit.seq, when=unit.when)


def footnote_spans(unit: Unit) -> list[tuple[float, float]]:
    """A paragraph's days (one span per footnote time); a turn's own span."""
    if unit.kind == "topic":
        spans = [span for when in unit.when.split(", ") if (span := when_span(when))]
        if spans:
            return spans
    if unit.start is None:
        return []
    return [(unit.start, unit.end if unit.end is not None else unit.start)]


def in_windows(unit: Unit, windows: Sequence[TimeWindow]) -> bool | None:
    """Whether ``unit`` is of a time in ``windows`` (None: undated)."""
    spans = footnote_spans(unit)
    if not spans:
        return None
    return any(w.overlaps(start, end) for start, end in spans for w in windows)


def covered(unit: Unit, cited: Mapping[str, Unit],
            windows: Sequence[TimeWindow]) -> tuple[tuple[str, str], ...]:
    """The cited turns a paragraph hides: all, unless it merges times the query tells apart.

    When some cited turns are of a time the query names and others are not,
    the paragraph no longer stands for the former: they stay to be ranked
    (and shown) as the evidence of the asked time.
    """
    turns = [u for key in unit.sources if (u := cited.get(key)) is not None]
    pairs = tuple((u.session, u.node_id) for u in turns)
    if not windows:
        return pairs
    inside = {(u.session, u.node_id) for u in turns if in_windows(u, windows)}
    if not inside or len(inside) == len(pairs):
        return pairs
    return tuple(pair for pair in pairs if pair not in inside)


def _names_in(query: ParsedQuery, speaker: str) -> bool:
    if not speaker:
        return False
    words = {w.lower() for w in speaker.replace("(", " ").replace(")", " ").replace("/", " ")
             .split()}
    return any(term in words for term in query.terms)


def scored_hit(
    unit: Unit,
    relevance: float,
    query: ParsedQuery,
    *,
    cited: Mapping[str, Unit],
    view: BranchView | None = None,
    since: float | None = None,
    until: float | None = None,
    include_pending: bool = False,
    include_rewound: bool = False,
) -> Hit | None:
    """``unit`` as a hit scored by every rule (``relevance``: BM25, higher better); None if left out.

    Left out: a pending turn unless asked for, a unit outside
    ``[since, until)`` (an undated one whenever either is given), a turn
    only on rewound branches unless ``include_rewound``.
    """
    if unit.kind == "source" and unit.trust != "trusted" and not include_pending:
        return None
    if since is not None or until is not None:
        if unit.start is None:
            return None
        end = unit.end if unit.end is not None else unit.start
        if since is not None and end <= since:
            return None
        if until is not None and unit.start >= until:
            return None
    score = relevance * (TOPIC_WEIGHT if unit.kind == "topic" else 1.0)
    if _names_in(query, unit.speaker):
        score *= NAME_BOOST
    timely = in_windows(unit, query.windows) if query.windows else None
    if timely is not None:
        score *= TIME_BOOST if timely else TIME_MISS
    hit = hit_of(unit, score, cited, view)
    covers = covered(unit, cited, query.windows) if unit.kind == "topic" else None
    if view is not None:
        if unit.kind == "source":
            if unit.session != view.session:
                score *= OTHER_SESSION
            elif unit.node_id not in view.on_branch:
                if unit.node_id not in view.live and not include_rewound:
                    return None  # only on rewound branches
                score *= OFF_BRANCH
        elif not hit.on_branch:
            score *= OFF_BRANCH
    return dataclasses.replace(hit, score=score, covers=covers)


def rank_units(
    matches: Sequence[tuple[Unit, float]],
    query: ParsedQuery,
    *,
    cited: Mapping[str, Unit],
    view: BranchView | None = None,
    since: float | None = None,
    until: float | None = None,
    include_pending: bool = False,
    include_rewound: bool = False,
    repeats: bool = False,
) -> list[Hit]:
    """Hits for ``matches`` (unit, BM25 relevance, higher better), best first (:func:`scored_hit`).

    ``repeats`` keeps the paragraphs and turns no-repeats would drop (for
    :func:`notes_of`; :func:`without_repeats` drops them afterwards).

    ``cited`` maps the ``<sid>#source-<16hex>`` keys the paragraphs cite to
    their archived turns. ``since``/``until`` keep units whose time
    overlaps ``[since, until)`` (undated units only without them).
    """
    scored: list[tuple[float, int, Hit]] = []
    for order, (unit, relevance) in enumerate(matches):
        hit = scored_hit(unit, relevance, query, cited=cited, view=view, since=since,
                         until=until, include_pending=include_pending,
                         include_rewound=include_rewound)
        if hit is not None:
            scored.append((-hit.score, order, hit))
    scored.sort(key=lambda item: (item[0], item[1]))
    ranked = [hit for _, _, hit in scored]
    return ranked if repeats else without_repeats(ranked)


@dataclass(frozen=True, slots=True)
class SqlBound:
    """The rules as SQL over a row of ``unit`` joined to its ``fts`` match.

    ``order`` is an expression over ``fts.rank`` (BM25, lower better) and
    the unit's columns whose negation is never below the score
    :func:`scored_hit` gives that unit: the factors SQL can tell exactly
    (a paragraph's weight, another session, pending turns, ``since`` and
    ``until``, a turn's time) are exact, the others are bounded from above
    (a speaker whose name may be a query word counts as named; a paragraph
    whose footnotes' span meets a window as of it; the branch, which only
    lowers a score, as on it). ``where`` keeps the rows :func:`scored_hit`
    can keep. So reading rows in ``order`` and scoring them exactly, every
    row not read yet scores at most the bound of the last one read.
    """

    order: str
    order_params: tuple[object, ...]
    where: str
    where_params: tuple[object, ...]


def sql_bound(
    query: ParsedQuery,
    *,
    view: BranchView | None = None,
    since: float | None = None,
    until: float | None = None,
    include_pending: bool = False,
) -> SqlBound:
    """The :class:`SqlBound` of these rules (the same arguments as :func:`scored_hit`)."""
    factors = [f"(CASE WHEN unit.kind = 'topic' THEN {TOPIC_WEIGHT!r} ELSE 1.0 END)"]
    order_params: list[object] = []
    if query.terms:
        # SQLite's lower() folds ASCII only: a name with other letters counts as named.
        named = " OR ".join("instr(lower(unit.speaker), ?) > 0" for _ in query.terms)
        factors.append(f"(CASE WHEN unit.speaker = '' THEN 1.0 WHEN {named}"
                       f" OR unit.speaker GLOB '*[^ -~]*' THEN {NAME_BOOST!r} ELSE 1.0 END)")
        order_params += query.terms
    if query.windows:
        inside = " OR ".join("(unit.start < ? AND unit.finish > ?)" for _ in query.windows)
        factors.append(f"(CASE WHEN unit.start IS NULL THEN 1.0 WHEN {inside}"
                       f" THEN {TIME_BOOST!r} ELSE {TIME_MISS!r} END)")
        for window in query.windows:
            order_params += [window.end, window.start]
    if view is not None:
        factors.append(f"(CASE WHEN unit.kind = 'source' AND unit.session != ?"
                       f" THEN {OTHER_SESSION!r} ELSE 1.0 END)")
        order_params.append(view.session)
    where: list[str] = []
    where_params: list[object] = []
    if not include_pending:
        where.append("NOT (unit.kind = 'source' AND unit.trust != 'trusted')")
    if since is not None or until is not None:
        where.append("unit.start IS NOT NULL")
    if since is not None:
        where.append("coalesce(unit.finish, unit.start) > ?")
        where_params.append(since)
    if until is not None:
        where.append("unit.start < ?")
        where_params.append(until)
    return SqlBound("fts.rank * " + " * ".join(factors), tuple(order_params),
                    " AND ".join(where) or "1", tuple(where_params))


def without_repeats(hits: Iterable[Hit]) -> list[Hit]:
    """Drop a turn a better paragraph cites, and a paragraph whose turns are all shown."""
    kept: list[Hit] = []
    shown: set[tuple[str, str]] = set()
    for hit in hits:
        if _redundant(hit, shown):
            continue
        shown.update(hit.hides)
        kept.append(hit)
    return kept


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


def _redundant(hit: Hit, shown: set[tuple[str, str]]) -> bool:
    """A turn already shown (or hidden); a paragraph all of whose cited turns are."""
    if hit.kind == "source":
        return hit.hides[0] in shown
    return bool(hit.sources) and all(pair in shown for pair in hit.sources)


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
        if _redundant(hit, shown) or (hit.kind == "topic" and (hit.file, hit.block_id) in noted):
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

