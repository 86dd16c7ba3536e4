"""WorkspaceActor: the one owner of ``<state>/memory`` inside this process.

Archive appends, transactions, ``runtime.json``, ``session-end.json`` and
the quarantine file are all read-modify-write files; two writers in one
process would race exactly like the node files of SPEC §1. So one actor
serialises them, and ``.scriptorium/write.lock`` (taken by every
transaction) covers runtimes in other processes.

Writers do **not** run here: a model writer may take minutes, and the
workspace must keep archiving other sessions' evidence meanwhile. A writer
works on a :class:`~memory.workspace._edits.WorkspaceSnapshot` and its edits come
back as one ``Commit``, checked against the snapshot's revision
(``ConcurrentUpdateError`` when another commit landed first; the caller retries).

On start it finishes or rolls back an install a crash interrupted
(``Transactions.recover``) before it serves anything. If that fails (a
full disk), it still starts: every request that reads or writes topics
tries the install again and, while it fails, gets ``InstallUnfinishedError``
naming the file and the error, instead of a crash loop that would stop
the whole runtime.

Redelivery after a crash (``actors.Idempotent``): every message but
``ReleaseQuarantine`` is delivered again to the next incarnation. Reads are
safe; an archive append skips frames already present; a commit is a
compare-and-set on its base revision (a second delivery after the first
installed is refused with ``ConcurrentUpdateError``, and the batch is then found
cited); the session-end write sets a fixed value; dropping cursors twice drops them once; a
quarantine entry already recorded is not added again. A second release
would report nothing released, so its caller gets ``ActorCrashedError`` instead.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from actors import Actor, Idempotent, Request, UnhandledMessageError
from memory._errors import InstallUnfinishedError, ScriptoriumMemoryError, WorkspaceLockTimeoutError
from memory.consolidation import PreparedPass, commit_pass
from memory.ledger._lost_markers import written_to_memory
from memory.workspace._archive import AppendResult
from memory.workspace._archive_cache import ArchiveCache
from memory.workspace._edits import CpuRunner, TopicEdit, WorkspaceSnapshot
from memory.workspace._install_journal import JOURNAL, workspace_lock
from memory.workspace._quarantine import QuarantineEntry, read_quarantine, write_quarantine
from memory.workspace._runtime_state import (
    RuntimeState,
    Tally,
    counted,
    read_runtime_state,
    read_session_end,
    update_runtime_state,
    write_session_end,
)
from memory.workspace._topic_ids import handle_key
from memory.workspace._transaction import CommitResult, Transactions
from memory.workspace._workspace_id import load_or_create_workspace_id
from memory.writers._writer import Batch
from store import LOCK_TIMEOUT, DurableFiles, UnsafeLinkError
from store.lowlevel import run_durable, write_lane

T = TypeVar("T")

__all__ = [
    "ArchiveBatches",
    "BatchesCovered",
    "CheckEdits",
    "CitedSources",
    "CommitConsolidation",
    "CommitEdits",
    "DropCursors",
    "QuarantineBatch",
    "ReadQuarantine",
    "ReadRuntimeState",
    "RecordSessionEnd",
    "ReleaseQuarantine",
    "SourcesInMemory",
    "TakeSnapshot",
    "WorkspaceActor",
]



async def _write_side(fn: Callable[..., T], *args: object) -> T:
    """One hop of this actor on the write lane (:func:`store.lowlevel.write_lane`): never an append's thread."""
    return await run_durable(fn, *args, limiter=write_lane())

@dataclass(frozen=True, slots=True)
class ArchiveBatches(Idempotent, Request[list[AppendResult]]):
    """Archive the records of every batch, in one thread hop."""

    batches: tuple[Batch, ...]


@dataclass(frozen=True, slots=True)
class TakeSnapshot(Idempotent, Request[WorkspaceSnapshot]):
    pass


@dataclass(frozen=True, slots=True)
class CommitEdits(Idempotent, Request[list[dict[str, Any]]]):
    """Commit ``edits`` made for ``batches`` (one, or a group) against ``base_revision``."""

    batches: tuple[Batch, ...]
    edits: tuple[TopicEdit, ...]
    base_revision: str


@dataclass(frozen=True, slots=True)
class CheckEdits(Idempotent, Request[Any]):
    """The audit committing ``edits`` for ``batch_sources`` would give now (installs nothing).

    With ``base_revision``, :class:`~memory._errors.ConcurrentUpdateError` once memory moved
    past it (see :meth:`~memory.workspace.Transactions.check`).
    """

    edits: tuple[TopicEdit, ...]
    batch_sources: frozenset[str]
    base_revision: str | None = None


@dataclass(frozen=True, slots=True)
class BatchesCovered(Idempotent, Request[list[bool]]):
    """Per batch: is every trusted record of it archived and already cited by a topic?"""

    batches: tuple[Batch, ...]


@dataclass(frozen=True, slots=True)
class CitedSources(Idempotent, Request[frozenset[str]]):
    """The ``<sid>#source-<16hex>`` keys every topic cites now (for backfill)."""


@dataclass(frozen=True, slots=True)
class SourcesInMemory(Idempotent, Request[tuple[frozenset[str], frozenset[str]]]):
    """Of ``sources`` (source ids): ``(archived, cited)``, the ones in the v2 archive and those
    a topic cites (for lost-marker repair, :mod:`memory.ledger._lost_markers`)."""

    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecordSessionEnd(Idempotent, Request[None]):
    session: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class QuarantineBatch(Idempotent, Request[None]):
    entry: QuarantineEntry


@dataclass(frozen=True, slots=True)
class ReleaseQuarantine(Request[list[QuarantineEntry]]):
    """Release every quarantined batch of ``session`` (all sessions if None)."""

    session: str | None = None


@dataclass(frozen=True, slots=True)
class ReadQuarantine(Idempotent, Request[list[QuarantineEntry]]):
    pass


@dataclass(frozen=True, slots=True)
class ReadRuntimeState(Idempotent, Request[RuntimeState]):
    pass


@dataclass(frozen=True, slots=True)
class CommitConsolidation(Idempotent, Request[None]):
    """Install a consolidation pass planned from a snapshot (a compare-and-set on its base:
    :class:`~memory._errors.ConcurrentUpdateError` when a write landed since, and the pass
    yields; a redelivery after it installed is refused the same way)."""

    prepared: PreparedPass
    now: float


@dataclass(frozen=True, slots=True)
class DropCursors(Idempotent, Request[None]):
    """Migration's end (SPEC §6.7): ``cursors`` leaves runtime.json, read and written under
    the lock, so counters another runtime wrote meanwhile stay (issue 23: never a stale
    overwrite)."""


# What a half-installed topic set would answer wrongly: served only once recovery ran.
_READS_TOPICS = (TakeSnapshot, CommitEdits, CheckEdits, CitedSources, BatchesCovered,
                 SourcesInMemory, CommitConsolidation)


# What the WorkspaceActor takes.
WorkspaceMessage = (
    ArchiveBatches | TakeSnapshot | CommitEdits | CheckEdits | BatchesCovered | CitedSources
    | SourcesInMemory | RecordSessionEnd | QuarantineBatch | ReleaseQuarantine | ReadQuarantine
    | ReadRuntimeState | DropCursors | CommitConsolidation
)


class WorkspaceActor(Actor[WorkspaceMessage]):
    """Owns ``<state>/memory``; see the module docstring."""

    expected_errors = (ScriptoriumMemoryError, UnsafeLinkError)

    def __init__(
        self,
        memory_dir: str,
        *,
        files: DurableFiles | None = None,
        clock: Callable[[], float] = time.time,
        lock_timeout: float | None = LOCK_TIMEOUT,
        on_change: Callable[[], object] | None = None,
        run_cpu: CpuRunner | None = None,
    ) -> None:
        self.memory_dir = memory_dir
        # Where a commit normalises its drafts (a worker process, off the interpreter
        # lock); the lock, the checks that read the disk and every durable step stay here.
        self.run_cpu = run_cpu
        # Run in a worker thread after each archive append and commit (the recall
        # index's sync); its failure never fails the write: the next query syncs.
        self.on_change = on_change
        self.files = files if files is not None else DurableFiles()
        self.clock = clock
        self.lock_timeout = lock_timeout
        self.workspace_id = ""
        self.archives = ArchiveCache(memory_dir, self.files)
        self._transactions: Transactions | None = None
        self._unfinished: InstallUnfinishedError | None = None  # recovery at start failed
        self.commits = 0

    async def on_start(self) -> None:
        def start() -> Transactions:
            self.files.make_dirs(os.path.join(self.memory_dir, ".scriptorium"))
            self.workspace_id = load_or_create_workspace_id(self.memory_dir, self.files)
            transactions = Transactions(
                self.memory_dir, archived=self.archives.archived, files=self.files,
                lock_timeout=self.lock_timeout, run_cpu=self.run_cpu,
            )
            try:
                transactions.recover()
            except WorkspaceLockTimeoutError:
                # Another process holds write.lock: start anyway, so that each
                # write reports the held lock instead of the start hanging on it;
                # every commit first recovers under the lock.
                pass
            except OSError as error:  # a crash loop would kill the runtime: refuse, retry
                self._unfinished = InstallUnfinishedError(os.path.join("memory", JOURNAL), error)
            return transactions

        self._transactions = await _write_side(start)

    def _finish_install(self) -> None:
        """Recovery again, for a request that needs the topics; InstallUnfinishedError if it fails."""
        try:
            self.transactions.recover()
        except OSError as error:
            raise InstallUnfinishedError(os.path.join("memory", JOURNAL), error) from error
        self._unfinished = None

    @property
    def transactions(self) -> Transactions:
        if self._transactions is None:
            raise RuntimeError("the workspace actor is used before on_start")
        return self._transactions

    def inspect(self) -> object:
        return {"workspace_id": self.workspace_id, "commits": self.commits,
                "archives": self.archives.statistics()}

    async def handle(self, message: WorkspaceMessage) -> object:
        if self._unfinished is not None and isinstance(message, _READS_TOPICS):
            await _write_side(self._finish_install)
        if self.on_change is not None and isinstance(message, (ArchiveBatches, CommitEdits)):
            result = await self._handle(message)
            with contextlib.suppress(Exception):
                await anyio.to_thread.run_sync(self.on_change, limiter=write_lane())
            return result
        return await self._handle(message)

    async def _handle(self, message: WorkspaceMessage) -> object:
        match message:
            case ArchiveBatches(batches):
                return await _write_side(self._archive, batches)
            case TakeSnapshot():
                return await _write_side(self.transactions.snapshot)
            case CommitEdits(batches, edits, base):
                return await _write_side(self._commit, batches, edits, base)
            case CheckEdits():
                return await _write_side(lambda: self.transactions.check(
                    message.edits, batch_sources=message.batch_sources,
                    base_revision=message.base_revision))
            case CitedSources():
                return await _write_side(self.transactions.cited_keys)
            case BatchesCovered(batches):
                return await _write_side(self._covered, batches)
            case SourcesInMemory(sources):
                return await _write_side(self._in_memory, sources)
            case RecordSessionEnd(session, updated_at):
                return await _write_side(self._record_session_end, session, updated_at)
            case QuarantineBatch(entry):
                return await _write_side(self._quarantine_add, entry)
            case ReleaseQuarantine(session):
                return await _write_side(self._quarantine_release, session)
            case ReadQuarantine():
                return await _write_side(read_quarantine, self.memory_dir)
            case ReadRuntimeState():
                return await _write_side(read_runtime_state, self.memory_dir)
            case CommitConsolidation(prepared, now):
                await _write_side(commit_pass, self.transactions, prepared, now)
                return None
            case DropCursors():
                return await _write_side(self._drop_cursors)
        raise UnhandledMessageError(self.ref.name, message)

    # -- the synchronous bodies, each one thread hop --------------------------------

    def _archive(self, batches: Sequence[Batch]) -> list[AppendResult]:
        with self._lock():  # another runtime may append to the same archive
            return self.archives.append_many(
                [(batch.session_id, batch.records) for batch in batches])

    def _commit(
        self, batches: Sequence[Batch], edits: Sequence[TopicEdit], base: str
    ) -> list[dict[str, Any]]:
        records = [record for batch in batches for record in batch.records]
        # The counters move in the commit's own install (issue 23): a kill
        # leaves both old or both new, never blocks without an order.
        result: CommitResult = self.transactions.commit(
            edits, base_revision=base, batch_sources=frozenset(r.source_id for r in records),
            update_state=counted(Tally(len(batches), sum(r.tokens for r in records))),
        )
        if result.changed_files:
            self.commits += 1
        return [dict(entry) for entry in result.audit]

    def _covered(self, batches: Sequence[Batch]) -> list[bool]:
        cited = self.transactions.cited_keys()
        return [
            all(written_to_memory(record, self._archived, lambda s: handle_key(s) in cited)
                for record in batch.records)
            for batch in batches
        ]

    def _archived(self, source: str) -> bool:
        return self.archives.archived(source) is not None

    def _in_memory(self, sources: Sequence[str]) -> tuple[frozenset[str], frozenset[str]]:
        cited = self.transactions.cited_keys()
        def is_cited(source: str) -> bool:
            try:
                return handle_key(source) in cited
            except ValueError:  # not a source handle: no topic can cite it
                return False

        return (frozenset(s for s in sources if self._archived(s)),
                frozenset(filter(is_cited, sources)))

    def _lock(self) -> AbstractContextManager[None]:
        """Read-modify-writes of shared files hold the workspace lock (other runtimes)."""
        return workspace_lock(self.memory_dir, self.files, timeout=self.lock_timeout)

    def _record_session_end(self, session: str, updated_at: float) -> None:
        with self._lock():
            entries = read_session_end(self.memory_dir)
            if entries.get(session) == updated_at:
                return
            entries[session] = updated_at
            write_session_end(self.memory_dir, entries, self.files)

    def _quarantine_add(self, entry: QuarantineEntry) -> None:
        with self._lock():
            entries = read_quarantine(self.memory_dir)
            if entry in entries:
                return  # a redelivery after the write (QuarantineBatch is idempotent)
            write_quarantine(self.memory_dir, [*entries, entry], self.files)

    def _quarantine_release(self, session: str | None) -> list[QuarantineEntry]:
        with self._lock():
            entries = read_quarantine(self.memory_dir)
            released = [e for e in entries if session is None or e.session == session]
            if released:
                kept = [e for e in entries if not (session is None or e.session == session)]
                write_quarantine(self.memory_dir, kept, self.files)
        return released

    def _drop_cursors(self) -> None:
        with self._lock():
            update_runtime_state(self.memory_dir, RuntimeState.without_cursors, self.files)
