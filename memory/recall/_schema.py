"""The recall index's tables, and how a unit's row reads back.

Apart from :mod:`memory.recall._index` (opening and syncing) and
:mod:`memory.recall._index_reads` (the queries) because both need them,
and :mod:`memory.recall._owed` cuts owed turns with the same tokenizer and
weights. A change to the tables is a new :data:`SCHEMA_VERSION`: an index
of another version is deleted and rebuilt from the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from memory.recall._units import Unit

__all__ = ["INDEX_PATH", "SCHEMA", "SCHEMA_VERSION", "TOKENIZE", "WEIGHTS", "IndexedUnit",
           "unit_from_row"]

INDEX_PATH = ".scriptorium/recall.sqlite"
SCHEMA_VERSION = "5"  # 5: a turn's surroundings from the DAG
# bm25 weights of the FTS columns: the words, the speaker, the heading path, and
# the words of the adjacent turns (an answer rarely repeats the question's words).
WEIGHTS = (1.0, 0.6, 0.4, 0.5)
# How the words of a unit are cut (memory.recall._owed ranks owed turns the same way).
TOKENIZE = "porter unicode61 remove_diacritics 2"
SCHEMA = (
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ("CREATE TABLE files(path TEXT PRIMARY KEY, kind TEXT NOT NULL, signature TEXT NOT NULL,"
     " digest TEXT NOT NULL, size INTEGER NOT NULL, frames INTEGER NOT NULL,"
     " complete INTEGER NOT NULL)"),
    ("CREATE TABLE unit(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, path TEXT NOT NULL,"
     " seq INTEGER NOT NULL, text TEXT NOT NULL, when_text TEXT NOT NULL, start REAL,"
     " finish REAL, block_id TEXT NOT NULL, heading TEXT NOT NULL, sources TEXT NOT NULL,"
     " session TEXT NOT NULL, node_id TEXT NOT NULL, anchor TEXT NOT NULL,"
     " speaker TEXT NOT NULL, trust TEXT NOT NULL)"),
    "CREATE INDEX unit_by_path ON unit(path, seq)",
    "CREATE INDEX unit_by_anchor ON unit(session, anchor)",
    f"CREATE VIRTUAL TABLE fts USING fts5(text, speaker, heading, around, tokenize='{TOKENIZE}')",
    "INSERT INTO fts(fts, rank) VALUES('rank', 'bm25({}, {}, {}, {})')".format(*WEIGHTS),
    "CREATE TABLE vector(id INTEGER PRIMARY KEY, v BLOB NOT NULL)",
)


@dataclass(frozen=True, slots=True)
class IndexedUnit:
    """A unit as the index holds it, with its row id."""

    id: int
    unit: Unit


def unit_from_row(row: tuple[object, ...]) -> Unit:
    (_, kind, path, seq, text, when, start, finish, block_id, heading, sources, session,
     node_id, anchor, speaker, trust) = row
    return Unit(
        kind=str(kind), path=str(path), seq=int(str(seq)), text=str(text), when=str(when),
        start=None if start is None else float(str(start)),
        end=None if finish is None else float(str(finish)),
        block_id=str(block_id), heading=str(heading),
        sources=tuple(json.loads(str(sources))), session=str(session), node_id=str(node_id),
        anchor=str(anchor), speaker=str(speaker), trust=str(trust),
    )
