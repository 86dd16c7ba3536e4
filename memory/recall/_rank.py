"""Ranking: from BM25 matches to hits, each BM25 score times the rules a reader expects.

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

Packing the hits into a prompt block is :mod:`memory.recall._pack`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from memory.recall._query import ParsedQuery, TimeWindow
from memory.recall._units import Unit, when_span

__all__ = [
    "BranchView",
    "Hit",
    "SqlBound",
    "hit_of",
    "rank_units",
    "redundant",
    "render_time",
    "scored_hit",
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
        if redundant(hit, shown):
            continue
        shown.update(hit.hides)
        kept.append(hit)
    return kept


def redundant(hit: Hit, shown: set[tuple[str, str]]) -> bool:
    """A turn already shown (or hidden); a paragraph all of whose cited turns are."""
    if hit.kind == "source":
        return hit.hides[0] in shown
    return bool(hit.sources) and all(pair in shown for pair in hit.sources)
