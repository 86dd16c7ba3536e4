"""Every error the memory side raises, in one tree.

    ScriptoriumMemoryError                 root: catch this to catch them all
    ├── ArchiveError                       a source archive cannot be read or appended to
    │   └── IncompleteArchive              appending after a scan that stopped early (SPEC §5)
    ├── TopicError                         a topic file fails the strict grammar
    ├── TransactionError                   a commit was refused as a whole
    │   └── ConcurrentUpdate               workspace_revision moved since the base (retryable)
    └── WriteCycleError                    one batch's write cycle failed; nothing was marked

Messages name the session, node or file (relative to the state directory)
and say what to do next.
"""

from __future__ import annotations

__all__ = [
    "ScriptoriumMemoryError",
    "ArchiveError",
    "IncompleteArchive",
    "TopicError",
    "TransactionError",
    "ConcurrentUpdate",
    "WriteCycleError",
]


class ScriptoriumMemoryError(Exception):
    """Root of the memory package's errors (never named ``MemoryError``: that is Python's)."""


# -- archives (sources/) ---------------------------------------------------


class ArchiveError(ScriptoriumMemoryError):
    """A source archive cannot be read or appended to."""


class IncompleteArchive(ArchiveError):
    """The archive's scan stopped before its end; evidence is never written after garbage."""


# -- topics and transactions ------------------------------------------------


class TopicError(ScriptoriumMemoryError):
    """A topic file does not follow the strict paragraph/footnote/block-id grammar."""


class TransactionError(ScriptoriumMemoryError):
    """A commit was refused as a whole; the workspace is unchanged."""


class ConcurrentUpdate(TransactionError):
    """``workspace_revision`` changed since the edits' base; retry on a fresh snapshot."""


# -- the write cycle ----------------------------------------------------------


class WriteCycleError(ScriptoriumMemoryError):
    """One batch's write cycle failed before marking; the batch stays owed."""
