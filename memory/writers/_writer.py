"""What a writer is: the one pluggable step between evidence and memory.

SPEC §8: a writer receives a batch (the records, the session id, the rendered
prompt) and a read-only snapshot of the workspace, and returns edits, or,
for a writer that commits through its own tools, an audit and the changed
files. The runtime does everything else: it archives the evidence first,
commits the edits as one transaction, and marks the batch only when that
transaction changed files (SPEC §6.4).

Writers never write ids. They write ``[^e1]``-style local footnote labels and
raw source handles (``openprogram/<sid>/<node-id>``); the transaction assigns
block and footnote ids and expands handles into links (SPEC §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from memory.ledger._records import SourceRecord
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot

__all__ = ["AdmittingWriter", "Batch", "CommittedWrite", "DeferringWriter", "ExclusiveWriter",
           "GroupWriter", "ReportingWriter", "Writer", "WriterOutput", "is_exclusive"]


@dataclass(frozen=True, slots=True)
class Batch:
    """The oldest owed records of one branch, handed to a writer as one unit."""

    session_id: str
    records: tuple[SourceRecord, ...]
    prompt: str

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(record.message_id for record in self.records)


@dataclass(frozen=True, slots=True)
class CommittedWrite:
    """What a self-committing writer returns: the audit list and the changed files."""

    audit: tuple[dict[str, Any], ...]
    changed_files: tuple[str, ...]


WriterOutput = Sequence[TopicEdit] | CommittedWrite


@runtime_checkable
class Writer(Protocol):
    """Turns a batch into topic edits. Must not mutate the workspace itself.

    What else a writer may offer, the runtime finds by the optional hooks
    below (:class:`ExclusiveWriter`, :class:`DeferringWriter`,
    :class:`AdmittingWriter`, :class:`ReportingWriter`); a writer that has
    none of them is written one batch at a time, concurrently, at once.
    """

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> WriterOutput: ...


@runtime_checkable
class GroupWriter(Writer, Protocol):
    """An exclusive writer that can also take several batches in one call.

    ``write_group`` returns one set of edits for all of ``batches`` (different
    sessions, one snapshot). The runtime then commits the batches waiting in
    the queue as one transaction (group commit): one snapshot, one parse and
    render of each touched topic file, one install. A batch counts as written
    when, after that commit changed memory, every trusted record of it is
    archived and cited; any other batch of the group, and every batch of a
    group whose call or commit failed, runs alone through :meth:`write`, so
    one bad batch never fails its neighbours.
    """

    async def write_group(
        self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
    ) -> Sequence[TopicEdit]: ...


# -- optional hooks: a writer implements those it needs ----------------------------------


@runtime_checkable
class ExclusiveWriter(Protocol):
    """A writer that says whether its cycles must run one at a time.

    ``exclusive = True`` when it is cheap and local (no model, no network):
    the runtime then runs snapshot → write → commit for one batch at a time,
    so workers never redo a writer run because another commit landed first.
    A slow writer (a model) says False (or leaves it out), and the runtime
    commits optimistically, retrying on ``ConcurrentUpdateError``.
    """

    exclusive: bool


@runtime_checkable
class DeferringWriter(Protocol):
    """A writer that may ask a batch to wait before it is written (a spent model budget).

    The writer pool asks before it hands a batch to a worker: a positive
    number of seconds puts the batch back in the queue that long, holding no
    worker and neither failing nor marking it.
    """

    async def deferral(self, batch: Batch) -> float: ...


@runtime_checkable
class AdmittingWriter(Protocol):
    """A writer that waits, before its write starts, until it may take ``batch``.

    For a cycle run without the pool (backfill): awaited before the write's
    timeout starts, so a wait is neither a failure nor a mark.
    """

    async def admit(self, batch: Batch) -> None: ...


@runtime_checkable
class ReportingWriter(Protocol):
    """A writer with usage to report (a model writer's tokens, calls, retries).

    ``MemoryRuntime.statistics().writer`` is what this returns.
    """

    def statistics(self) -> dict[str, Any]: ...


def is_exclusive(writer: object) -> bool:
    """Whether ``writer`` asks for its cycles one at a time (:class:`ExclusiveWriter`)."""
    return isinstance(writer, ExclusiveWriter) and bool(writer.exclusive)
