"""Scriptorium `memory.recall`: the read side of memory: a derived FTS5 index, ranking, a prompt block.

Layout (see docs/architecture.md): ``_embedding`` (the optional
embedding backend's protocol and RRF fusion; pure), ``_query`` (query words, the FTS5
expression, time expressions; pure), ``_arguments`` (the arguments a caller
can get wrong; pure), ``_units`` (topic paragraphs and
archived turns cut from the files; pure), ``_rank`` (the ranking rules,
fusion; pure), ``_pack`` (hits packed into a block within a token budget;
pure), ``_schema`` (the index's tables), ``_index`` (the SQLite index and
its incremental sync), ``_index_reads`` (its queries), ``_surroundings`` (a
turn's neighbours in its DAG), ``_recall`` (:class:`Recall`: the index off the
event loop), ``_private`` (the index in memory for a state that cannot be
written), ``_owed`` (turns not yet in memory, ranked apart, for ``include_owed``).
"""

from memory.recall._embedding import Embedder as Embedder
from memory.recall._embedding import fuse_rrf as fuse_rrf
from memory.recall._index import RecallIndex as RecallIndex
from memory.recall._index import SyncReport as SyncReport
from memory.recall._owed import OWED as OWED
from memory.recall._owed import with_owed as with_owed
from memory.recall._pack import Context as Context
from memory.recall._pack import pack_context as pack_context
from memory.recall._query import MAX_QUERY_CHARS as MAX_QUERY_CHARS
from memory.recall._query import ParsedQuery as ParsedQuery
from memory.recall._query import TimeWindow as TimeWindow
from memory.recall._query import fts_expression as fts_expression
from memory.recall._query import parse_query as parse_query
from memory.recall._query import time_windows as time_windows
from memory.recall._rank import BranchView as BranchView
from memory.recall._rank import Hit as Hit
from memory.recall._rank import rank_units as rank_units
from memory.recall._recall import Recall as Recall
from memory.recall._recall import TimeBound as TimeBound
from memory.recall._schema import INDEX_PATH as INDEX_PATH
from memory.recall._units import Unit as Unit
from memory.recall._units import source_units as source_units
from memory.recall._units import topic_units as topic_units

__all__ = [
    "INDEX_PATH",
    "MAX_QUERY_CHARS",
    "OWED",
    "BranchView",
    "Context",
    "Embedder",
    "Hit",
    "ParsedQuery",
    "Recall",
    "RecallIndex",
    "SyncReport",
    "TimeBound",
    "TimeWindow",
    "Unit",
    "fts_expression",
    "fuse_rrf",
    "pack_context",
    "parse_query",
    "rank_units",
    "source_units",
    "time_windows",
    "topic_units",
    "with_owed",
]
