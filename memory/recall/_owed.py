"""Owed turns as recall hits: what the session store holds and memory does not yet.

A turn reaches the recall index only once a writer has archived it, which
happens at a trigger (SPEC §6.3): right after an import, or between two
writes, the newest turns are in the session store and nowhere in memory,
so a search cannot see them. Asked for (``include_owed``), recall also
ranks the owed turns, the unmarked tails of the branches (SPEC §6.2,
:func:`~memory.ledger.unwritten_turns`), labelled ``kind="owed"``: they
are not memory yet, nothing was distilled or checked from them.

They are ranked apart from memory, by BM25 over the owed turns alone (an
in-memory FTS5 table cut as the index cuts, :data:`~memory.recall._index.TOKENIZE`)
and the same rules (:func:`~memory.recall._rank.rank_units`): their scores
order them among themselves, and are not comparable with memory's. So a
search returns up to ``k`` hits of memory, then up to ``k`` owed turns.
Pure (SQLite in memory only).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from memory.ledger import SourceRecord
from memory.recall._pack import Context
from memory.recall._query import ParsedQuery, fts_expression
from memory.recall._rank import BranchView, Hit, rank_units
from memory.recall._schema import TOKENIZE, WEIGHTS
from memory.recall._units import Unit

__all__ = ["OWED", "OWED_HEADING", "owed_units", "rank_owed", "with_owed"]

OWED = "owed"  # the kind of a hit that is a turn not yet in memory
OWED_HEADING = "Not yet in memory (turns said, not yet written):"


def owed_units(records: Sequence[SourceRecord]) -> list[Unit]:
    """The owed ``records`` as turn units; their ``path`` is the session in the store."""
    units: list[Unit] = []
    for seq, record in enumerate(records):
        when = datetime.fromtimestamp(record.timestamp, UTC).isoformat(timespec="seconds")
        units.append(Unit(
            kind="source", path=f"sessions/{record.session_id}", seq=seq, text=record.content,
            when=when, start=record.timestamp, end=record.timestamp + 1.0,
            session=record.session_id, node_id=record.message_id, speaker=record.speaker,
            trust="trusted" if record.trusted else "pending",
        ))
    return units


def rank_owed(
    records: Sequence[SourceRecord], parsed: ParsedQuery, *, k: int,
    view: BranchView | None = None, since: float | None = None, until: float | None = None,
    include_pending: bool = False, shown: Iterable[Hit] = (),
) -> list[Hit]:
    """The ``k`` best owed turns for ``parsed``, as ``owed`` hits; none a ``shown`` hit already is."""
    units = owed_units(records)
    if not units or not parsed.terms or k <= 0:
        return []
    db = sqlite3.connect(":memory:")
    try:
        db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(text, speaker, tokenize='{TOKENIZE}')")
        db.executemany("INSERT INTO fts(rowid, text, speaker) VALUES(?, ?, ?)",
                       [(i, unit.text, unit.speaker) for i, unit in enumerate(units)])
        rows = db.execute("SELECT rowid, bm25(fts, ?, ?) FROM fts WHERE fts MATCH ?",
                          (*WEIGHTS[:2], fts_expression(parsed.terms))).fetchall()
    finally:
        db.close()
    seen = {pair for hit in shown for pair in hit.hides}
    matches = [(units[rowid], -rank) for rowid, rank in rows
               if (units[rowid].session, units[rowid].node_id) not in seen]
    hits = rank_units(matches, parsed, cited={}, view=view, since=since, until=until,
                      include_pending=include_pending)
    return [dataclasses.replace(hit, kind=OWED) for hit in hits[:k]]


def with_owed(context: Context, owed: Sequence[Hit], budget_tokens: int,
              count: Callable[[str], int]) -> Context:
    """``context`` and, under :data:`OWED_HEADING`, the ``owed`` turns that still fit the budget.

    Memory's block comes first and is never cut for them; an owed turn that
    does not fit is passed over (a shorter later one may fit), as in
    :func:`~memory.recall._pack.pack_context`.
    """
    lines = [context.text] if context.text else []
    added: list[Hit] = []
    for hit in owed:
        line = (f"- [{hit.time}] {hit.speaker} ({hit.session}/{hit.node_id}): "
                f"{' '.join(hit.text.split())}")
        trial = [*lines, *([] if added else [OWED_HEADING]), line]
        if count("\n".join(trial)) <= budget_tokens:
            lines, added = trial, [*added, hit]
    if not added:
        return context
    text = "\n".join(lines)
    return dataclasses.replace(context, text=text, tokens=count(text),
                               hits=(*context.hits, *added))
