"""The write cycle for one batch: archive, write, commit, and only then mark.

SPEC §6.4: the order is **archive evidence -> install topics -> mark**, and a
batch is marked exactly when its transaction installed and the changed files
are non-empty. A writer that raises, is rejected, times out or changes
nothing marks nothing: the batch stays owed and is delivered again. A crash
between install and mark writes the batch twice (bounded, recoverable);
marking before install could skip it (silent, unrecoverable). So this
function never marks anything itself: it returns the node ids to mark, and
the caller merges those markers only after it has the outcome in hand.

The steps are injected so that the cycle is one readable function the lead
can wire to the workspace actor, and tests can record the call order:

* ``archive(batch)``: make the batch's evidence durable (v2 archive).
* ``snapshot()``: a read-only workspace view, taken *after* archiving
  (``workspace_revision`` covers ``sources/``, so an earlier base would
  always be a concurrent update).
* ``writer.write(batch, snapshot)``: edits, or a self-committing writer's
  :class:`CommittedWrite`, which is taken as-is.
* ``commit(batch, edits, base_revision)``: the transaction; returns the
  audit list, raises :class:`TransactionError` when refused as a whole.

:func:`run_group_cycle` runs the same steps once for several batches (group
commit, for an exclusive :class:`~memory.writers._writer.GroupWriter`); it never
fails a batch, it only hands back the ones it did not write.

A writer may define ``async admit(batch)``: it is awaited first, outside
the timeout, so a writer that must wait (a spent token budget) holds the
batch back without failing it. The runtime's pool asks the writer's
``async deferral(batch) -> seconds`` instead and puts a batch that must
wait back in the queue, so no worker waits; it then runs the cycle with
``admit=False``.

Only the writer runs under ``timeout``: archive and commit are durable
operations that a cancellation waits for anyway (``run_durable``), and
timing them out would turn an installed commit into an unmarked one.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from memory._errors import (
    ArchiveStepFailedError,
    CommitRejectedError,
    ConcurrentUpdateError,
    NothingChangedError,
    TransactionError,
    WriteCycleError,
    WriterFailedError,
    WriterTimedOutError,
    describe_error,
)
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.writers._writer import AdmittingWriter, Batch, CommittedWrite, GroupWriter, Writer

__all__ = [
    "DEFAULT_WRITER_TIMEOUT",
    "ArchiveStep",
    "CommitStep",
    "FailureKind",
    "GroupOutcome",
    "SnapshotStep",
    "WriteOutcome",
    "changed_files",
    "run_group_cycle",
    "run_write_cycle",
]

DEFAULT_WRITER_TIMEOUT = 600.0  # seconds; SPEC §7, for a model writer

ArchiveStep = Callable[[Batch], Awaitable[object]]
SnapshotStep = Callable[[], Awaitable[WorkspaceSnapshot]]
CommitStep = Callable[[Batch, Sequence[TopicEdit], str], Awaitable[Iterable[Mapping[str, Any]]]]


class FailureKind(enum.Enum):
    """Why a cycle marked nothing."""

    ARCHIVE = "archive"  # archiving the evidence raised
    SNAPSHOT = "snapshot"  # the workspace could not be read
    WRITER = "writer"  # the writer raised or returned something that is not edits
    TIMEOUT = "timeout"  # the writer ran past the timeout
    REJECTED = "rejected"  # the transaction refused the edits as a whole
    EMPTY = "empty"  # nothing was installed: no edits, or no ok commit named a file


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """The result of one cycle. ``marks`` is the batch's node ids on success, else empty."""

    marks: tuple[str, ...]
    changed_files: tuple[str, ...]
    audit: tuple[Mapping[str, Any], ...]
    failure: FailureKind | None = None
    error: WriteCycleError | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def changed_files(audit: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """SPEC §5: the sorted union of ``topic_paths`` of the ``ok`` commit entries."""
    paths: set[str] = set()
    for entry in audit:
        if entry.get("tool") == "commit" and entry.get("status") == "ok":
            paths.update(p for p in entry.get("topic_paths") or () if isinstance(p, str))
    return tuple(sorted(paths))


def _failed(
    kind: FailureKind,
    error: WriteCycleError,
    cause: BaseException | None = None,
    audit: tuple[Mapping[str, Any], ...] = (),
) -> WriteOutcome:
    error.__cause__ = cause
    return WriteOutcome((), (), audit, kind, error)


def _refused(sid: str, ids: tuple[str, ...], exc: Exception) -> CommitRejectedError:
    """The commit (or the writer's dry run of it) refused ``exc``'s way.

    Retryable unless it is a transaction's verdict on the edits themselves,
    which would refuse the same edits again; a concurrent update (another
    commit landed first) is always retried.
    """
    rejected = CommitRejectedError(sid, ids, f"the commit was refused: {describe_error(exc)}")
    rejected.retryable = isinstance(exc, ConcurrentUpdateError) or not isinstance(
        exc, TransactionError)
    return rejected


async def run_write_cycle(
    batch: Batch,
    writer: Writer,
    *,
    snapshot: SnapshotStep,
    archive: ArchiveStep,
    commit: CommitStep,
    timeout: float | None = DEFAULT_WRITER_TIMEOUT,
    admit: bool = True,
) -> WriteOutcome:
    """Run one batch through archive -> writer -> commit; see the module docstring.

    ``admit=False``: the caller already asked the writer's ``deferral``.

    Never raises for a failed step (``Exception``): the outcome says which
    step failed and carries a :class:`WriteCycleError` whose ``__cause__`` is
    the original. Cancellation propagates untouched.
    """
    sid, ids = batch.session_id, batch.node_ids
    if admit and isinstance(writer, AdmittingWriter):
        # A writer waiting for a budget (a model's daily tokens) waits here,
        # before the timeout starts: a wait is neither a failure nor a mark.
        await writer.admit(batch)
    try:
        await archive(batch)
    except Exception as exc:  # noqa: BLE001 (every failure is an outcome; nothing marked)
        return _failed(
            FailureKind.ARCHIVE, ArchiveStepFailedError(sid, ids, f"archiving raised {describe_error(exc)}"), exc
        )
    try:
        view = await snapshot()
    except Exception as exc:  # noqa: BLE001 (every failure is an outcome; nothing marked)
        return _failed(
            FailureKind.SNAPSHOT,
            WriteCycleError(sid, ids, f"reading the workspace raised {describe_error(exc)}"),
            exc,
        )
    output: object = None
    try:
        with anyio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
            output = await writer.write(batch, view)
    except ConcurrentUpdateError as exc:
        # The writer's dry run found memory moved past its snapshot: contention,
        # retried on a fresh snapshot exactly like a commit refused for it.
        return _failed(FailureKind.REJECTED, _refused(sid, ids, exc), exc)
    except Exception as exc:  # noqa: BLE001 (a writer may raise anything)
        return _failed(
            FailureKind.WRITER, WriterFailedError(sid, ids, f"the writer raised {exc!r}"), exc
        )
    if scope.cancelled_caught:
        return _failed(
            FailureKind.TIMEOUT, WriterTimedOutError(sid, ids, f"the writer ran past {timeout} s")
        )
    if isinstance(output, CommittedWrite):
        audit: tuple[Mapping[str, Any], ...] = tuple(output.audit)
        files = tuple(output.changed_files)
    else:
        edits = _edits(output)
        if edits is None:
            return _failed(
                FailureKind.WRITER,
                WriterFailedError(
                    sid,
                    ids,
                    f"the writer returned {type(output).__name__}, "
                    f"not topic edits or a CommittedWrite",
                ),
            )
        if not edits:
            return _failed(
                FailureKind.EMPTY, NothingChangedError(sid, ids, "the writer proposed no edit")
            )
        try:
            audit = tuple(await commit(batch, edits, view.revision))
        except Exception as exc:  # noqa: BLE001 (every failure is an outcome; nothing marked)
            return _failed(FailureKind.REJECTED, _refused(sid, ids, exc), exc)
        files = changed_files(audit)
    if not files:
        errors = sum(1 for entry in audit if entry.get("status") == "error")
        return _failed(
            FailureKind.EMPTY,
            NothingChangedError(sid, ids, f"no topic file changed ({errors} edit(s) rejected)"),
            audit=audit,
        )
    return WriteOutcome(ids, files, audit)


GroupArchiveStep = Callable[[Sequence[Batch]], Awaitable[object]]
GroupCommitStep = Callable[
    [Sequence[Batch], Sequence[TopicEdit], str], Awaitable[Iterable[Mapping[str, Any]]]]
CoveredStep = Callable[[Sequence[Batch]], Awaitable[Sequence[bool]]]


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """Per batch, its outcome or ``None`` (run it alone); ``fallback`` says why none were written."""

    outcomes: tuple[WriteOutcome | None, ...]
    fallback: str | None = None


async def run_group_cycle(
    batches: Sequence[Batch],
    writer: GroupWriter,
    *,
    snapshot: SnapshotStep,
    archive: GroupArchiveStep,
    commit: GroupCommitStep,
    covered: CoveredStep,
    timeout: float | None = DEFAULT_WRITER_TIMEOUT,
) -> GroupOutcome:
    """Several batches through one archive -> writer -> commit (group commit).

    The same order as :func:`run_write_cycle`, once for all of ``batches``.
    Nothing here marks or fails a batch: a step that fails sends every batch
    back to be run alone (where its failure, if it is its own, is met and
    counted), and after a commit that changed memory a batch is written only
    if every trusted record of it is archived and cited, the rule by which a
    re-delivered batch counts as written (docs/decisions.md, "Jobs, writers and
    failures").
    """
    alone = tuple(None for _ in batches)
    try:
        await archive(batches)
        view = await snapshot()
        with anyio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
            output = await writer.write_group(batches, view)
        if scope.cancelled_caught:
            return GroupOutcome(alone, f"the writer ran past {timeout} s")
        edits = _edits(output)
        if not edits:
            return GroupOutcome(alone, "the writer proposed no edit")
        audit = tuple(await commit(batches, edits, view.revision))
        files = changed_files(audit)
        if not files:
            return GroupOutcome(alone, "no topic file changed")
        verdicts = await covered(batches)
    except Exception as exc:  # noqa: BLE001 (each batch meets its own failure alone)
        return GroupOutcome(alone, repr(exc))
    return GroupOutcome(tuple(
        WriteOutcome(batch.node_ids, files, audit) if ok else None
        for batch, ok in zip(batches, verdicts, strict=True)
    ))


def _edits(output: object) -> tuple[TopicEdit, ...] | None:
    if isinstance(output, (str, bytes)) or not isinstance(output, Sequence):
        return None
    edits = tuple(output)
    return edits if all(isinstance(e, TopicEdit) for e in edits) else None
