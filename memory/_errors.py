"""Every error the memory side raises, in one tree.

    ScriptoriumMemoryError                 root: catch this to catch them all
    ├── ArchiveError                       a source archive cannot be read or appended to
    │   ├── IncompleteArchiveError         appending after a scan that stopped early (SPEC §5)
    │   ├── UnframeableRecordError         a record the v2 frame grammar cannot hold
    │   └── CorruptWorkspaceIdError        .scriptorium/workspace-id exists but is not w-XXXXXXXX
    ├── TopicError                         a topic file fails the strict grammar
    ├── TransactionError                   a commit was refused as a whole
    │   ├── ConcurrentUpdateError          workspace_revision moved since the base (retryable)
    │   ├── EditRejectedError              one edit broke a rule; recorded in the audit, never raised out
    │   ├── InstallJournalCorruptError     the install journal cannot be read; recovery stopped
    │   ├── ConsolidationRefusedError      a consolidation pass would lose a fact; refused whole
    │   └── WorkspaceLockTimeoutError      another process held write.lock past the bound
    ├── ProposalError                      a model's consolidation proposal cannot be applied
    ├── InstallUnfinishedError             finishing an interrupted install failed (a full disk; retryable)
    ├── WriteCycleError                    one batch's write cycle failed; nothing was marked
    │   ├── ArchiveStepFailedError         archiving the batch's evidence raised
    │   ├── WriterFailedError              the writer raised
    │   ├── WriterTimedOutError            the writer ran past its timeout
    │   ├── CommitRejectedError            the transaction refused the edits as a whole
    │   └── NothingChangedError            the cycle ended with no changed topic file
    ├── SettingsError                      a timing or threshold that cannot be used (scriptorium.toml, flags)
    ├── LedgerError                        a branch cannot be turned into records
    │   ├── UnidentifiedMessageError            a recordable message has no id (SPEC §6.1)
    │   ├── UncitableIdError                    a turn whose session or node id a source handle cannot carry
    │   ├── MissingAuthorityError               a turn stamped authority_schema lacks its authority (SPEC §6.1)
    │   └── InvalidThresholdError               a batch threshold that is no positive integer
    ├── BoundaryError                      a session boundary stopped on an error (``rt.flush``)
    ├── RuntimeClosedError                 a MemoryRuntime used after its ``async with`` block ended
    ├── RecallError                        a recall query that cannot be answered
    │   ├── EmptyQueryError                     a query with no word to search for
    │   └── RecallArgumentError                 k, since, until, as_of or budget_tokens out of range
    ├── RecallIndexError                   SQLite failed on the recall index file (a full disk)
    ├── ModelWriterFailedError             the model gave no acceptable edits for a batch
    ├── ModelCallFailedError               a call to the model endpoint failed for good
    │   ├── EndpointRefusedError                a 4xx other than 429 (never retried)
    │   └── EndpointUnavailableError            429, 5xx or connection errors on every attempt
    │       └── EndpointUnreachableError        nothing listens at the base URL
    └── HistoryImportError                 an import refused or not finished
        ├── ImportLineError                     a line cannot be imported; nothing was
        ├── ImportInterruptedError              stopped part way; running it again completes it
        └── ImportFailedError                   a new session's import failed: no session made

Outside the tree, a warning: ``ReferenceThresholdWarning``.

Messages name the session, node or file (relative to the state directory)
and say what to do next.
"""

from __future__ import annotations

import errno

from actors import ActorError

__all__ = [
    "ArchiveError", "ArchiveStepFailedError", "BoundaryError", "CommitRejectedError",
    "ConcurrentUpdateError", "ConsolidationRefusedError", "CorruptWorkspaceIdError",
    "EditRejectedError", "EmptyQueryError", "EndpointRefusedError", "EndpointUnavailableError",
    "EndpointUnreachableError", "HistoryImportError", "ImportInterruptedError",
    "ImportLineError", "IncompleteArchiveError", "InstallJournalCorruptError",
    "InstallUnfinishedError", "InvalidThresholdError", "LedgerError", "MissingAuthorityError",
    "ModelCallFailedError", "ModelWriterFailedError", "NothingChangedError", "ProposalError",
    "RecallArgumentError", "RecallError", "ReferenceThresholdWarning", "RuntimeClosedError",
    "ScriptoriumMemoryError", "SettingsError", "TopicError", "TransactionError",
    "UncitableIdError", "UnframeableRecordError", "UnidentifiedMessageError",
    "WorkspaceLockTimeoutError", "WriteCycleError", "WriterFailedError", "WriterTimedOutError",
    "describe_error",
]


class ScriptoriumMemoryError(Exception):
    """Root of the memory package's errors (never named ``MemoryError``: that is Python's)."""


# -- archives (sources/) ---------------------------------------------------


class ArchiveError(ScriptoriumMemoryError):
    """A source archive cannot be read or appended to."""


class IncompleteArchiveError(ArchiveError):
    """The archive's scan stopped before its end; evidence is never written after garbage."""

    def __init__(self, path: str, reason: str, valid_frames: int) -> None:
        self.path, self.reason, self.valid_frames = path, reason, valid_frames
        super().__init__(
            f"refusing to append to {path}: its scan stopped after {valid_frames} valid "
            f"frame(s) ({reason}); evidence is never written after garbage. Move the file "
            f"aside or truncate it to its valid prefix, then archive the batch again."
        )


class UnframeableRecordError(ArchiveError):
    """A record that the v2 frame grammar cannot hold; archiving it would corrupt the file."""

    def __init__(self, source: str, reason: str) -> None:
        self.source, self.reason = source, reason
        super().__init__(
            f"cannot archive {source}: {reason}; fix the record (or its session) before "
            f"archiving it"
        )


class CorruptWorkspaceIdError(ArchiveError):
    """``.scriptorium/workspace-id`` is not ``w-`` + 8 lowercase hex; never replaced by itself:
    every marker in every session names this id, a new one would make all history owed."""

    def __init__(self, path: str, found: bytes) -> None:
        self.path, self.found = path, found
        super().__init__(
            f"{path} holds {found[:40]!r}, not a workspace id (w- and 8 lowercase hex); "
            f"restore it from a backup, or delete it to start a new workspace whose "
            f"markers do not match any existing ones (everything is written again)"
        )


# -- topics and transactions ------------------------------------------------


class TopicError(ScriptoriumMemoryError):
    """A topic file does not follow the strict paragraph/footnote/block-id grammar."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path, self.line, self.reason = path, line, reason
        where = f"{path}:{line}" if line else path
        super().__init__(
            f"{where}: {reason}; the file is left untouched: fix the topic text "
            "(or the writer that produced it) and commit again"
        )


class TransactionError(ScriptoriumMemoryError):
    """A commit was refused as a whole; the workspace is unchanged."""


class ConcurrentUpdateError(TransactionError):
    """``workspace_revision`` changed since the edits' base; retry on a fresh snapshot."""

    def __init__(self, base: str, current: str) -> None:
        self.base, self.current = base, current
        super().__init__(
            f"memory changed since the edits were made (base revision {base}, now {current}); "
            "nothing was installed: take a fresh snapshot and run the writer again"
        )


class EditRejectedError(TransactionError):
    """One edit broke a transaction rule; the transaction records it and drops the edit."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"edit of {path} rejected: {reason}")


class ConsolidationRefusedError(TransactionError):
    """A consolidation pass would lose a cited source or a block id (``problems``); refused
    whole, never installed in part (issue 23)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            "consolidation refused, nothing was changed: " + "; ".join(problems)
            + " (a consolidator may merge, supersede and rewrite, never drop a fact; a removal "
            "needs a recorded reason)"
        )


class ProposalError(ScriptoriumMemoryError, ValueError):
    """A model's consolidation proposal cannot be applied (unreadable, or naming an unknown
    block); the pass is refused whole (:class:`ConsolidationRefusedError`)."""


class InstallJournalCorruptError(TransactionError):
    """The install journal exists but cannot be read, so recovery cannot finish the install."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        super().__init__(
            f"{path} cannot be read ({detail}); no topic file was touched by recovery: "
            "inspect the journal, then delete it to keep the topics as they are"
        )


class InstallUnfinishedError(ScriptoriumMemoryError):
    """An interrupted install could not be finished (ENOSPC, EROFS...); memory is not served.

    The workspace actor answers every topic request with it, trying the install again each
    time. Not a :class:`TransactionError`: the same edits can succeed once there is room.
    """

    def __init__(self, path: str, error: OSError) -> None:
        self.path, self.error = path, error
        code = errno.errorcode.get(error.errno or 0)
        cause = f"{error.strerror} ({code})" if error.strerror and code else str(error)
        where = f" writing {error.filename}" if error.filename else ""
        super().__init__(
            f"{path}: finishing the interrupted install failed{where}: {cause}; "
            "free space (or make it writable) and write again: the install completes first"
        )


class WorkspaceLockTimeoutError(TransactionError):
    """Another process held the workspace lock longer than the bound: stuck, or the bound is too short."""

    def __init__(self, path: str, waited: float, holder: int | None) -> None:
        self.path, self.waited, self.holder = path, waited, holder
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(
            f"the workspace is locked: {who} has held {path} for more than {waited:.3g} s, "
            "so nothing was changed. If that process is stuck, stop it; otherwise retry, or "
            "raise the lock timeout."
        )


# -- the write cycle ----------------------------------------------------------


class WriteCycleError(ScriptoriumMemoryError):
    """One batch's write cycle failed before marking; the batch stays owed."""

    #: Whether running the same batch again later can succeed.
    retryable: bool = True

    def __init__(self, session_id: str, node_ids: tuple[str, ...], what: str) -> None:
        self.session_id, self.node_ids = session_id, node_ids
        span = f"{node_ids[0]}..{node_ids[-1]}" if node_ids else "(empty)"
        super().__init__(
            f"write cycle for session {session_id!r}, batch {span} ({len(node_ids)} "
            f"turn(s)): {what}; nothing was marked, the batch stays owed"
        )


class ArchiveStepFailedError(WriteCycleError):
    """Archiving the batch's evidence raised (the original is ``__cause__``)."""


class WriterFailedError(WriteCycleError):
    """The writer raised (the original is ``__cause__``)."""


class WriterTimedOutError(WriteCycleError):
    """The writer did not return within the cycle's timeout."""


class CommitRejectedError(WriteCycleError):
    """The transaction refused the edits as a whole (the original is ``__cause__``)."""


class NothingChangedError(WriteCycleError):
    """The cycle installed nothing: no ``ok`` commit named a topic file."""


# -- settings ---------------------------------------------------------------------


class SettingsError(ScriptoriumMemoryError, ValueError):
    """A timing or threshold that cannot be used; ``where`` names scriptorium.toml or the flag."""

    def __init__(self, where: str, reason: str) -> None:
        self.where, self.reason = where, reason
        super().__init__(f"{where}: {reason}")


# -- the ledger -------------------------------------------------------------------


class LedgerError(ScriptoriumMemoryError):
    """A branch cannot be turned into records."""


class UnidentifiedMessageError(LedgerError):
    """A message that would be recorded has no id, so it could never be marked (SPEC §6.1)."""

    def __init__(self, session_id: str, position: int) -> None:
        self.session_id, self.position = session_id, position
        super().__init__(
            f"session {session_id!r}: message at branch position {position} would be "
            f"recorded but has no id, so it could never be marked; repair the node file"
        )


class UncitableIdError(LedgerError):
    """A turn on disk whose session or node id memory cannot cite (the id rule, store._ids);
    the reference agent may write such ids: the batch is quarantined, never retried hot."""

    def __init__(self, session_id: str, node_id: str | None, reason: str) -> None:
        self.session_id, self.node_id, self.reason = session_id, node_id, reason
        what = (f"session id {session_id!r}" if node_id is None
                else f"node {node_id!r} of session {session_id!r}")
        super().__init__(
            f"{what} cannot be cited in memory: {reason}; its turns are not written. "
            "Copy the session under a citable id (see 'id rule' in docs/decisions.md)"
        )


class MissingAuthorityError(LedgerError):
    """A turn stamped with ``authority_schema`` lacks complete speaker authority (SPEC §6.1).

    The missing fields are damage, not legacy history (such builds always stamp authority):
    skipping the turn would drop it silently, recording it would trust an unvouched speaker.
    """

    def __init__(self, session_id: str, node: str, detail: str) -> None:
        self.session_id, self.node, self.detail = session_id, node, detail
        super().__init__(
            f"session {session_id!r}, node {node!r}: stamped with authority_schema but "
            f"{detail}; its branch is refused until the node's speaker fields are repaired"
        )


class InvalidThresholdError(LedgerError, ValueError):
    """A batch threshold that is no positive number of tokens (SPEC §6.3); one outside the
    reference agent's 8,000 / 16,000 / 32,000 is allowed, with a warning."""

    def __init__(self, value: object, allowed: tuple[int, ...]) -> None:
        self.value = value
        super().__init__(
            f"token threshold {value!r} is not a positive integer; the reference agent's "
            "are " + ", ".join(str(a) for a in allowed)
        )


# -- boundaries -------------------------------------------------------------------


class BoundaryError(ScriptoriumMemoryError):
    """A session boundary stopped on an error outside the writer; the error is ``cause``.

    ``reason`` names the session and the node or file (a broken branch, an unreadable file, a
    full disk, a lock held too long); nothing was marked that was not written.
    """

    def __init__(self, session: str, reason: str, cause: BaseException | None) -> None:
        self.session, self.reason, self.cause = session, reason, cause
        super().__init__(reason)


class RuntimeClosedError(ScriptoriumMemoryError, RuntimeError):
    """*Your* code used a runtime whose ``async with open_runtime(...)`` block has ended.

    Its actors, pool and index are gone (trio's ``ClosedResourceError``, for a runtime). A
    ``RuntimeError`` too: what a closed runtime raised before it had a name.
    """

    def __init__(self, state_dir: str, method: str) -> None:
        self.state_dir, self.method = state_dir, method
        super().__init__(
            f"the memory runtime of {state_dir} was used ({method}) after its "
            "'async with open_runtime(...)' block ended; use it inside the block, "
            "or open the runtime again")


# -- recall ------------------------------------------------------------------------


class RecallError(ScriptoriumMemoryError, ValueError):
    """A recall query that cannot be answered as asked (``rt.recall``, ``rt.context``)."""


class EmptyQueryError(RecallError):
    """The query holds no word to search for."""


class RecallArgumentError(RecallError):
    """An argument of ``rt.recall`` / ``rt.context`` that asks for nothing (``k=0``, ``since=nan``):
    answering it with nothing would look like "memory holds no match"."""

    def __init__(self, argument: str, value: object, expected: str) -> None:
        self.argument, self.value = argument, value
        super().__init__(f"{argument}={value!r} cannot be used: {argument} must be {expected}")


class RecallIndexError(ScriptoriumMemoryError):
    """SQLite failed on the recall index (derived data: nothing of memory is lost, a query is)."""

    def __init__(self, path: str, cause: Exception) -> None:
        self.path = path
        full = "full" in str(cause)  # SQLITE_FULL: "database or disk is full"
        advice = ("free disk space, then run the command again" if full else
                  "run 'scriptorium memory reindex' to make it again from memory's files")
        super().__init__(f"{path}: {cause} (the recall index); {advice}")


# -- the model writer -------------------------------------------------------------


class ModelWriterFailedError(ScriptoriumMemoryError):
    """The model gave no acceptable edits for the batch; the message says why (never a key)."""


class ModelCallFailedError(ScriptoriumMemoryError):
    """A call to the model endpoint failed for good; the message names the endpoint, never the key."""

    retries = 0  # the attempts it made after the first (the usage counts them)


class EndpointRefusedError(ModelCallFailedError):
    """A 4xx other than 429: the request itself is wrong (never retried)."""

    def __init__(self, what: str, status: int, body: str = "") -> None:
        super().__init__(what)
        self.status, self.body = status, body  # body: the refusal's start, redacted


class EndpointUnavailableError(ModelCallFailedError):
    """429, 5xx or connection errors on every attempt."""


class EndpointUnreachableError(EndpointUnavailableError):
    """Nothing accepts a connection at the base URL's host and port (see :func:`probe_endpoint`)."""


# -- importing history ------------------------------------------------------------


class HistoryImportError(ScriptoriumMemoryError):
    """An import that was refused or did not finish; the message says what to do."""


class ImportLineError(HistoryImportError):
    """A line of the file cannot be imported; nothing of the file was."""

    def __init__(self, file: str, line: int, problem: str) -> None:
        self.file, self.line, self.problem = file, line, problem
        super().__init__(
            f"{file}:{line}: {problem}; nothing of the file was imported: fix that line "
            "and run the import again"
        )


class ImportInterruptedError(HistoryImportError):
    """Appending a checked file failed part way; running it again completes it."""

    def __init__(self, file: str, line: int, session: str, appended: int,
                 cause: BaseException) -> None:
        self.file, self.line, self.session, self.appended = file, line, session, appended
        super().__init__(
            f"{file}:{line}: the import into session {session!r} stopped ({cause}); "
            f"{appended} turn(s) before that line are in the session: run the same import "
            "again to finish it (turns already there are skipped)"
        )


class ImportFailedError(HistoryImportError):
    """Importing into a new session failed: no session was made (or, ``installed``, a whole one)."""

    def __init__(self, file: str, session: str, cause: BaseException, *,
                 installed: bool = False) -> None:
        self.file, self.session, self.installed = file, session, installed
        super().__init__(
            f"{file}: the import into new session {session!r} failed after the whole session "
            f"was moved into place ({cause}); it may not be on the disk yet: run the same "
            "import again (turns already there are skipped)" if installed else
            f"{file}: the import into new session {session!r} failed ({cause}); nothing of "
            "the file was imported and no session was made: fix the cause and run the same "
            "import again")


# -- warnings (outside the tree) --------------------------------------------------


class ReferenceThresholdWarning(UserWarning):
    """A token threshold outside 8,000 / 16,000 / 32,000: fine here, refused by the reference."""


def describe_error(error: BaseException) -> str:
    """One line for a person: the error that matters, not the actor kernel's wrapper of it.

    A crashed or poisoned actor's ``ActorError`` is unwrapped to its ``__cause__``, the real
    failure (an ``OSError`` naming the file, a store error naming the node).
    """
    seen: set[int] = set()
    while isinstance(error, ActorError) and error.__cause__ is not None and id(error) not in seen:
        seen.add(id(error))
        error = error.__cause__
    if isinstance(error, OSError):
        return str(error) if error.strerror else f"{type(error).__name__}: {error}"
    text = str(error)
    return text if text else type(error).__name__
