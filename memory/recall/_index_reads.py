"""The recall index's queries: what recall reads from the tables a sync keeps.

:class:`~memory.recall._index.RecallIndex` is one object (one connection,
one lock in :class:`~memory.recall._recall.Recall`), but two jobs: keeping
the tables current with the files, and answering queries on them. The
queries are here, as the base class :class:`IndexReads`, so each job reads
on its own; a query sees the tables, never the files.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from memory.recall._embedding import Embedder, unit_vector, unpack_vector
from memory.recall._rank import SqlBound
from memory.recall._schema import unit_from_row
from memory.recall._units import Unit

__all__ = ["IndexReads"]


class IndexReads:
    """The queries of :class:`~memory.recall._index.RecallIndex` (its base class)."""

    embedder: Embedder | None
    rows_read: int  # unit rows a ranked query read (tests look at it)
    _total: tuple[str, int] | None  # (revision, units) of the last count
    _common: dict[tuple[str, int], bool]  # (term, bound) -> common (per revision)

    @property
    def db(self) -> sqlite3.Connection:
        """The open connection (the subclass opens it)."""
        raise NotImplementedError

    def common_terms(self, expressions: Sequence[str], fraction: float,
                     floor: int = 0) -> set[str]:
        """Those of ``expressions`` (one quoted term each) matching over ``fraction`` of the units.

        And over ``floor`` units: a term in fewer costs little to score.

        Counted with a ``LIMIT`` inside the subquery, so a term costs at most
        that many postings to read, not its whole doclist (fts5vocab's ``doc``
        reads the whole doclist, as an unlimited ``count(*)`` does); and once
        per revision of the index: the words a workspace is asked about
        recur (a name, "near" in every question), and a common one costs
        the most to count.
        """
        total = self.total()
        bound = max(int(total * fraction), floor, 1)
        if total < bound:
            return set()
        known = self._common
        if len(known) > 10_000:  # a long quiet spell of ever new words
            known.clear()
        for expression in expressions:
            if (expression, bound) not in known:
                known[expression, bound] = self.db.execute(
                    "SELECT count(*) FROM (SELECT rowid FROM fts WHERE fts MATCH ? LIMIT ?)",
                    (expression, bound)).fetchone()[0] >= bound
        return {expression for expression in expressions if known[expression, bound]}

    def total(self) -> int:
        """How many units the index holds (counted once per revision)."""
        row = self.db.execute("SELECT value FROM meta WHERE key='revision'").fetchone()
        revision = "" if row is None else str(row[0])
        if self._total is None or self._total[0] != revision:
            self._total = (revision, self.count())
            self._common = {}
        return self._total[1]

    def search(self, expression: str, limit: int) -> list[tuple[int, float]]:
        """``(row id, bm25 score)`` of the best ``limit`` matches (lower score is better)."""
        return list(self.db.execute(
            "SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
            (expression, limit)))

    def bounded(self, expression: str, bound: SqlBound) -> Iterator[tuple[Unit, float, float]]:
        """``(unit, bm25 score, bound)`` of every match, best ``bound`` first (both lower better).

        Lazy: SQLite scores and sorts the matches once, and a unit's row is
        read only when the caller takes it, so a caller that stops early
        reads few rows.
        """
        # Only the id and the numbers go through the sort; a unit's row is
        # read when the caller takes it.
        cursor = self.db.execute(
            f"SELECT fts.rowid, fts.rank, {bound.order} AS bound FROM fts"
            f" JOIN unit ON unit.id = fts.rowid WHERE fts MATCH ? AND {bound.where}"
            " ORDER BY bound", (*bound.order_params, expression, *bound.where_params))
        while batch := cursor.fetchmany(16):
            units = self.units([row[0] for row in batch])
            self.rows_read += len(batch)
            for ident, rank, order_value in batch:
                yield units[ident], float(rank), float(order_value)

    def search_within(self, expression: str, start: float, end: float,
                      limit: int) -> list[tuple[int, float]]:
        """:meth:`search` among the units whose time overlaps ``[start, end)``."""
        return list(self.db.execute(
            "SELECT fts.rowid, fts.rank FROM fts JOIN unit ON unit.id = fts.rowid"
            " WHERE fts MATCH ? AND unit.start < ? AND unit.finish > ?"
            " ORDER BY fts.rank LIMIT ?", (expression, end, start, limit)))

    def nearest(self, text: str, limit: int) -> list[int]:
        """The ids of the ``limit`` units nearest ``text`` by the embedder (none without one).

        A scan of every vector: the backend is for workspaces an agent can
        read, not a vector database.
        """
        if self.embedder is None:
            return []
        query = unit_vector(self.embedder.embed([text])[0])
        scored: list[tuple[float, int]] = []
        for ident, blob in self.db.execute("SELECT id, v FROM vector"):
            vector = unpack_vector(blob)
            if len(vector) == len(query):
                scored.append((-sum(a * b for a, b in zip(query, vector, strict=True)), ident))
        scored.sort()
        return [ident for _, ident in scored[:limit]]

    def units(self, ids: Sequence[int]) -> dict[int, Unit]:
        found: dict[int, Unit] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            marks = ",".join("?" * len(chunk))
            for row in self.db.execute(f"SELECT * FROM unit WHERE id IN ({marks})", chunk):
                found[row[0]] = unit_from_row(row)
        return found

    def neighbours(self, path: str, seq: int, reach: int = 1) -> list[Unit]:
        """The turns of the same archive within ``reach`` frames of ``seq`` (itself left out)."""
        return [unit_from_row(row) for row in self.db.execute(
            "SELECT * FROM unit WHERE path=? AND seq BETWEEN ? AND ? AND seq != ? ORDER BY seq",
            (path, seq - reach, seq + reach, seq))]

    def by_anchor(self, keys: Iterable[str]) -> dict[str, Unit]:
        """The archived turns behind ``<sid>#source-<16hex>`` keys (those that exist)."""
        by_session: dict[str, list[str]] = {}
        for key in keys:
            session, _, anchor = key.partition("#")
            by_session.setdefault(session, []).append(anchor)
        found: dict[str, Unit] = {}
        for session, anchors in by_session.items():
            for start in range(0, len(anchors), 500):
                chunk = anchors[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for row in self.db.execute(
                        f"SELECT * FROM unit WHERE session=? AND anchor IN ({marks})"
                        " ORDER BY id DESC", (session, *chunk)):
                    found[f"{session}#{row[13]}"] = unit_from_row(row)  # the first row wins
        return found

    def dump(self) -> list[tuple[object, ...]]:
        """Every unit and its indexed words without the row id, sorted (to compare indexes)."""
        return sorted(row[1:] for row in self.db.execute(
            "SELECT unit.*, fts.text, fts.speaker, fts.heading, fts.around"
            " FROM unit JOIN fts ON fts.rowid = unit.id"))

    def count(self) -> int:
        row = self.db.execute("SELECT count(*) FROM unit").fetchone()
        return int(row[0])

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: everything read inside sees one state of the index."""
        db = self.db
        db.execute("BEGIN")
        try:
            yield
        finally:
            db.execute("COMMIT")
