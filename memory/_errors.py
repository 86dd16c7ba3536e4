"""Every error the memory side raises, in one tree.

    ScriptoriumMemoryError                 root: catch this to catch them all
    ├── ArchiveError                       a source archive cannot be read or appended to
    │   └── IncompleteArchive              appending after a scan that stopped early (SPEC §5)
    ├── TopicError                         a topic file fails the strict grammar
    ├── TransactionError                   a commit was refused as a whole
    │   ├── ConcurrentUpdate               workspace_revision moved since the base (retryable)
    │   ├── EditRejected                   one edit broke a rule; recorded in the audit, never raised out
    │   └── InstallJournalCorrupt          the install journal cannot be read; recovery stopped
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
    "EditRejected",
    "InstallJournalCorrupt",
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

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        where = f"{path}:{line}" if line else path
        super().__init__(
            f"{where}: {reason}; the file is left untouched: fix the topic text "
            "(or the writer that produced it) and commit again"
        )


class TransactionError(ScriptoriumMemoryError):
    """A commit was refused as a whole; the workspace is unchanged."""


class ConcurrentUpdate(TransactionError):
    """``workspace_revision`` changed since the edits' base; retry on a fresh snapshot."""

    def __init__(self, base: str, current: str) -> None:
        self.base = base
        self.current = current
        super().__init__(
            f"memory changed since the edits were made (base revision {base}, now {current}); "
            "nothing was installed: take a fresh snapshot and run the writer again"
        )


class EditRejected(TransactionError):
    """One edit broke a transaction rule; the transaction records it and drops the edit."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"edit of {path} rejected: {reason}")


class InstallJournalCorrupt(TransactionError):
    """The install journal exists but cannot be read, so recovery cannot finish the install."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(
            f"{path} cannot be read ({detail}); no topic file was touched by recovery: "
            "inspect the journal, then delete it to keep the topics as they are"
        )


# -- the write cycle ----------------------------------------------------------


class WriteCycleError(ScriptoriumMemoryError):
    """One batch's write cycle failed before marking; the batch stays owed."""
