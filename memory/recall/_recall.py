"""Recall: the read side of memory, off the event loop.

:class:`Recall` owns one :class:`~memory.recall._index.RecallIndex` and runs
everything that touches SQLite or the files (sync, search, neighbours) in
one worker-thread hop per query (``anyio.to_thread``), serialised by a
thread lock: a timer on the loop fires on time while a recall runs. The
rules (query parsing, ranking, packing) are the pure functions of
:mod:`memory.recall._query`, :mod:`memory.recall._rank` and :mod:`memory.recall._pack`.

Branches need the session store, which this folder cannot reach: the
runtime walks the branch and passes a :class:`~memory.recall._rank.BranchView`.

Each query first syncs the index with the files (a no-op at the same
``workspace_revision``), then reads it inside one read transaction, so it
sees one consistent state even while a commit is being installed.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime

import anyio

from memory._errors import RecallIndexError, WorkspaceLockTimeoutError
from memory.ledger import SourceRecord, TokenCounter, default_counter
from memory.recall._arguments import check_context_arguments, check_recall_arguments
from memory.recall._embedding import Embedder, fuse_rrf
from memory.recall._index import RecallIndex, SyncReport
from memory.recall._owed import rank_owed
from memory.recall._pack import Context, known_words_text, notes_of, pack_context
from memory.recall._query import ParsedQuery, fts_expression, parse_query
from memory.recall._rank import (
    BranchView,
    Hit,
    hit_of,
    rank_units,
    scored_hit,
    sql_bound,
    without_repeats,
)
from memory.recall._units import Unit
from store import DurableFiles

__all__ = ["CANDIDATES", "Recall", "TimeBound"]

CANDIDATES = 200  # BM25 matches ranked further, per query
# A word in more than this share of the units is left out of the MATCH (unless
# every word is): FTS5 would score and sort every row holding it, while its idf
# (log 4 at a fifth, clamped to nothing past half) decides nothing among the
# candidates the rarer words bring (a word in under 2% of units: idf above 4).
COMMON = 0.2
COMMON_FLOOR = 5_000  # ...and in more units than this: below it, scoring them all is cheap
TimeBound = float | datetime | None


def _seconds(value: TimeBound) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    return value.timestamp()


class Recall:
    """Recall over one ``<state>/memory``; see the module docstring."""

    def __init__(
        self,
        memory_dir: str,
        *,
        counter: TokenCounter | None = None,
        files: DurableFiles | None = None,
        lock_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        step: Callable[[str], None] | None = None,
        embedder: Embedder | None = None,
        read_only: bool = False,
    ) -> None:
        # read_only: the index in memory, nothing written to the state (memory.recall._private).
        self.index = RecallIndex(memory_dir, files=files, lock_timeout=lock_timeout, step=step,
                                 embedder=embedder, read_only=read_only)
        self.count = counter or default_counter()
        self.clock = clock
        self._lock = threading.Lock()

    # -- blocking bodies (worker threads) -------------------------------------------

    def sync_blocking(self) -> SyncReport:
        with self._lock, _naming(self.index.path):
            return self.index.sync()

    def sync_after_write(self) -> SyncReport | None:
        """The workspace actor's hook: sync now if nobody holds the index or write.lock.

        Never waits: a query in progress or another process's transaction
        means the next query syncs instead (every query syncs first), so the
        workspace actor is never held up behind the read side. An index no
        query has opened yet is left alone: the first query catches up (as
        it must anyway after a start), so a runtime nobody asks costs nothing.
        """
        if not self.index.opened or not self._lock.acquire(blocking=False):
            return None
        try:
            return self.index.sync(lock_timeout=0.0, full=True)
        except WorkspaceLockTimeoutError:
            return None
        finally:
            self._lock.release()

    def rebuild_blocking(self, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        with self._lock, _naming(self.index.path):
            return self.index.rebuild(progress)

    def close(self) -> None:
        with self._lock:
            self.index.close()

    def _ranked(
        self, parsed: ParsedQuery, view: BranchView | None, since: float | None,
        until: float | None, include_pending: bool, repeats: bool = False,
        want: int | None = None,
    ) -> list[Hit]:
        """Under the lock, inside the read snapshot: match and rank.

        Without an embedder, SQLite ranks (:meth:`_ranked_in_sql`); with one,
        the two rankings' candidates are fused first (:meth:`_fused`).
        """
        expression = _expression(parsed, self.index)
        if self.index.embedder is None:
            return self._ranked_in_sql(expression, parsed, view, since, until,
                                       include_pending, repeats, want)
        return self._fused(expression, parsed, view, since, until, include_pending, repeats)

    def _ranked_in_sql(
        self, expression: str, parsed: ParsedQuery, view: BranchView | None,
        since: float | None, until: float | None, include_pending: bool, repeats: bool,
        want: int | None,
    ) -> list[Hit]:
        """The best hits, reading matches in the order of an SQL bound of their score.

        SQLite orders every match by :func:`~memory.recall._rank.sql_bound`
        (BM25 times the rules it can tell, never below the exact score), and
        rows are read and scored exactly (:func:`~memory.recall._rank.scored_hit`)
        in that order. No row left unread scores above the bound of the last
        one read, so the hits scoring at least that are the exact head of the
        ranking of every match: with ``want`` (a recall of ``k``), reading
        stops once that head holds ``want`` hits after no-repeats. Without
        (what a context block is packed from): the :data:`CANDIDATES` best
        matches by the bound, ranked.
        """
        rows = self.index.bounded(expression, sql_bound(
            parsed, view=view, since=since, until=until, include_pending=include_pending))
        cited: dict[str, Unit] = {}
        scored: list[tuple[float, int, Hit]] = []
        chunk = CANDIDATES if want is None else max(2 * want, 8)
        while True:
            taken = list(itertools.islice(rows, chunk))
            keys = {key for unit, _, _ in taken if unit.kind == "topic"
                    for key in unit.sources if key not in cited}
            cited.update(self.index.by_anchor(keys))
            for unit, rank, _ in taken:
                hit = scored_hit(unit, -rank, parsed, cited=cited, view=view, since=since,
                                 until=until, include_pending=include_pending)
                if hit is not None:
                    scored.append((-hit.score, len(scored), hit))
            scored.sort(key=lambda item: (item[0], item[1]))
            if want is None:
                ranked = [hit for _, _, hit in scored]
                return ranked if repeats else without_repeats(ranked)
            left = len(taken) == chunk  # rows may be left, none scoring above the last bound
            ceiling = -taken[-1][2] if left else float("-inf")
            head = without_repeats(hit for _, _, hit in scored if hit.score >= ceiling)
            if len(head) >= want or not left:
                return head[:want]
            chunk *= 2

    def _fused(
        self, expression: str, parsed: ParsedQuery, view: BranchView | None,
        since: float | None, until: float | None, include_pending: bool, repeats: bool,
    ) -> list[Hit]:
        """BM25's candidates and the embedder's nearest units fused by RRF, then ranked."""
        index = self.index
        matches = index.search(expression, CANDIDATES)
        # A time the query names: its units are candidates even if BM25 alone
        # ranks them below the cut (a name that matches half the session).
        for window in parsed.windows:
            matches += index.search_within(expression, window.start, window.end, CANDIDATES)
        first: dict[int, float] = {}
        for ident, rank in matches:
            first.setdefault(ident, rank)
        matches = list(first.items())
        semantic = index.nearest(parsed.text, CANDIDATES)
        if semantic:
            # RRF of the two rankings; scaled so the rules' factors act as on BM25.
            fused = fuse_rrf([[ident for ident, _ in matches], semantic])
            matches = [(ident, -100.0 * score) for ident, score in fused]
        units = index.units([ident for ident, _ in matches])
        found = [(ident, units[ident], -rank) for ident, rank in matches if ident in units]
        cited = index.by_anchor({key for _, unit, _ in found if unit.kind == "topic"
                                 for key in unit.sources})
        return rank_units([(unit, relevance) for _, unit, relevance in found], parsed,
                          cited=cited, view=view, since=since, until=until,
                          include_pending=include_pending, repeats=repeats)

    def recall_blocking(
        self, query: str, *, k: int, view: BranchView | None, since: TimeBound,
        until: TimeBound, include_pending: bool, as_of: float | None = None,
    ) -> list[Hit]:
        parsed = parse_query(query, as_of=self.clock() if as_of is None else as_of)
        with self._lock, _naming(self.index.path):
            self.index.sync()
            with self.index.snapshot():
                hits = self._ranked(parsed, view, _seconds(since), _seconds(until),
                                    include_pending, want=max(k, 0))
        return hits[:max(k, 0)]

    def context_blocking(
        self, query: str, *, budget_tokens: int, view: BranchView | None,
        as_of: TimeBound = None,
    ) -> Context:
        moment = _seconds(as_of)
        parsed = parse_query(query, as_of=self.clock() if moment is None else moment)
        with self._lock, _naming(self.index.path):
            self.index.sync()
            with self.index.snapshot():
                ranked = self._ranked(parsed, view, None, None, False, repeats=True)
                hits = without_repeats(ranked)
                turns = {(h.session or "", h.node_id or ""): known_words_text(h)
                         for h in ranked if h.kind == "source"}
                notes = notes_of(ranked, turns)

                def neighbours(hit: Hit) -> list[Hit]:
                    return [hit_of(unit, 0.0, {}, view)
                            for unit in self.index.neighbours(hit.file, hit.seq)
                            if unit.trust == "trusted" and _fits_view(unit, view)]

                return pack_context(hits, budget_tokens, self.count, neighbours=neighbours,
                                    session=None if view is None else view.session,
                                    notes=notes)

    # -- the async face ------------------------------------------------------------

    async def sync(self) -> SyncReport:
        return await anyio.to_thread.run_sync(self.sync_blocking)

    async def reindex(self, progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Rebuild the index; ``progress(done, total)`` files is called from the worker thread."""
        return await anyio.to_thread.run_sync(self.rebuild_blocking, progress)

    async def recall(
        self, query: str, *, k: int = 8, view: BranchView | None = None,
        since: TimeBound = None, until: TimeBound = None, include_pending: bool = False,
    ) -> list[Hit]:
        check_recall_arguments(k, since, until)
        return await anyio.to_thread.run_sync(lambda: self.recall_blocking(
            query, k=k, view=view, since=since, until=until, include_pending=include_pending))

    async def recall_owed(
        self, query: str, records: Sequence[SourceRecord], *, k: int = 8,
        view: BranchView | None = None, since: TimeBound = None, until: TimeBound = None,
        include_pending: bool = False, shown: Sequence[Hit] = (),
    ) -> list[Hit]:
        """The ``k`` best of the owed ``records`` for ``query``, as ``owed`` hits (:mod:`._owed`)."""
        parsed = parse_query(query, as_of=self.clock())
        return await anyio.to_thread.run_sync(lambda: rank_owed(
            records, parsed, k=k, view=view, since=_seconds(since), until=_seconds(until),
            include_pending=include_pending, shown=shown))

    async def context(
        self, query: str, *, budget_tokens: int = 500, view: BranchView | None = None,
        as_of: TimeBound = None,
    ) -> Context:
        check_context_arguments(budget_tokens, as_of)
        return await anyio.to_thread.run_sync(lambda: self.context_blocking(
            query, budget_tokens=budget_tokens, view=view, as_of=as_of))


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
    """An SQLite error on the index becomes :class:`RecallIndexError` naming its file."""
    try:
        yield
    except sqlite3.Error as error:
        raise RecallIndexError(path, error) from error


def _expression(parsed: ParsedQuery, index: RecallIndex) -> str:
    """The MATCH expression of the query's words, the common ones left out (:data:`COMMON`)."""
    if len(parsed.terms) < 2:
        return fts_expression(parsed.terms)
    quoted = {term: fts_expression((term,)) for term in parsed.terms}
    common = index.common_terms(list(quoted.values()), COMMON, COMMON_FLOOR)
    kept = tuple(term for term in parsed.terms if quoted[term] not in common)
    return fts_expression(kept or parsed.terms)


def _fits_view(unit: Unit, view: BranchView | None) -> bool:
    """A neighbour is shown only if it is on the asked branch (any turn without a branch)."""
    if view is None or unit.session != view.session:
        return view is None
    return unit.node_id in view.on_branch
