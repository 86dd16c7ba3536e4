"""The write cycle as the runtime runs it: one batch, or a group, through the workspace actor.

SPEC §6.4's steps (archive → writer on a snapshot → commit) are
:mod:`memory.writers._cycle`; this object binds them to the workspace
actor's messages and adds the runtime's two rules (docs/decisions.md,
"Jobs, writers and failures"): a concurrent update (another commit landed
first) is retried at once on a fresh snapshot, as contention, not failure;
a batch that changed nothing but whose every trusted record is archived
and already cited counts as written. An exclusive writer (``Writer.exclusive``) runs
one cycle at a time. Each snapshot offers the runtime's ``run_cpu`` (a
worker process, :class:`~memory.writers._offload.CpuWorker`), where a writer
runs its pure CPU work off the interpreter lock.

Sharded runtimes (``RuntimeConfig.shard``: one run's processes on one state)
take turns: each cycle holds the workspace's cycle lock
(:func:`taking_turns`) from its snapshot to its commit. Without it the
shards' cycles refuse each other's commits, and every refused cycle runs its
writer again on a fresh snapshot: measured, two shards spent more CPU on the
write side than one process did (docs/decisions.md, "Both cores").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio

from actors import ActorRef
from memory._errors import ConcurrentUpdateError
from memory.runtime._events import EventHook, GroupWritten
from memory.runtime._workspace_actor import (
    ArchiveBatches,
    BatchesCovered,
    CheckEdits,
    CommitEdits,
    TakeSnapshot,
    WorkspaceMessage,
)
from memory.workspace._edits import CpuRunner, TopicEdit, WorkspaceSnapshot
from memory.writers._cycle import FailureKind, WriteOutcome, run_group_cycle, run_write_cycle
from memory.writers._writer import Batch, DeferringWriter, GroupWriter, Writer, is_exclusive

__all__ = ["CONCURRENT_RETRIES", "CYCLE_LOCK", "WriteCycle", "taking_turns"]

CONCURRENT_RETRIES = 8
CYCLE_LOCK = os.path.join(".scriptorium", "cycle.lock")  # in the memory directory
TURN_POLL = (0.002, 0.05)  # seconds between two looks at a held cycle lock: first, at most


@contextlib.asynccontextmanager
async def taking_turns(memory_dir: str | None) -> AsyncIterator[None]:
    """Hold ``memory_dir``'s cycle lock for one write cycle (None: no lock, no wait).

    Polled with a non-blocking ``flock`` on the event loop, a syscall that
    never waits: the wait is cancellable, holds no worker thread and can
    never leave a lock taken behind a cancelled caller. The kernel releases
    it when its holder's process dies. It guards no file (the commit's own
    ``write.lock`` does): it only keeps sharded runtimes from throwing away
    each other's cycles.
    """
    if memory_dir is None:
        yield
        return
    os.makedirs(os.path.join(memory_dir, ".scriptorium"), exist_ok=True)
    fd = os.open(os.path.join(memory_dir, CYCLE_LOCK), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC,
                 0o600)
    try:
        delay = TURN_POLL[0]
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            await anyio.sleep(delay)
            delay = min(2 * delay, TURN_POLL[1])
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class WorkspaceSteps:
    """The write cycle's steps as calls to the workspace actor."""

    workspace: ActorRef[WorkspaceMessage]
    run_cpu: CpuRunner | None = None

    async def archive(self, batches: Sequence[Batch]) -> object:
        return await self.workspace.call(ArchiveBatches(tuple(batches)))

    async def snapshot(self) -> WorkspaceSnapshot:
        view: WorkspaceSnapshot = await self.workspace.call(TakeSnapshot())
        base = view.revision

        async def check(edits: Sequence[TopicEdit], sources: frozenset[str]) -> Any:
            # Bound to the snapshot: a dry run after another commit raises
            # ConcurrentUpdateError rather than refusing the writer's edits.
            return await self.workspace.call(CheckEdits(tuple(edits), sources, base))

        return replace(view, check=check, run_cpu=self.run_cpu)

    async def commit(self, batches: Sequence[Batch], edits: Sequence[TopicEdit], base: str) -> Any:
        return await self.workspace.call(
            CommitEdits(tuple(batches), tuple(edits), base))

    async def covered(self, batches: Sequence[Batch]) -> list[bool]:
        verdicts: list[bool] = await self.workspace.call(
            BatchesCovered(tuple(batches)))
        return verdicts


class WriteCycle:
    """See the module docstring.

    ``writer`` and ``workspace`` are read at each cycle: the runtime's
    writer may be replaced while it runs, and the workspace actor's
    reference is known once the tree is up. ``turns``: the memory directory
    of a sharded runtime, whose cycles take turns (:func:`taking_turns`).
    """

    def __init__(self, writer: Callable[[], Writer], workspace: Callable[[], ActorRef[WorkspaceMessage]],
                 events: EventHook, *, writer_timeout: float,
                 run_cpu: CpuRunner | None = None, turns: str | None = None) -> None:
        self._writer = writer
        self._turns = turns  # the memory directory whose cycle lock a shard takes turns on
        self._run_cpu = run_cpu
        self._workspace = workspace
        self._events = events
        self._timeout = None if math.isinf(writer_timeout) else writer_timeout
        self._exclusive = anyio.Lock()  # see ExclusiveWriter

    @property
    def groups_batches(self) -> bool:
        """Whether waiting batches are committed together (an exclusive :class:`GroupWriter`)."""
        writer = self._writer()
        return is_exclusive(writer) and isinstance(writer, GroupWriter)

    async def deferral(self, batch: Batch) -> float:
        """Seconds the writer asks ``batch`` to wait (a :class:`DeferringWriter`'s; 0: now)."""
        writer = self._writer()
        return float(await writer.deferral(batch)) if isinstance(writer, DeferringWriter) else 0.0

    async def write(self, batch: Batch, *, admitted: bool = False) -> WriteOutcome:
        """One batch through archive → writer → commit (SPEC §6.4).

        ``admitted``: the pool asked :meth:`deferral` already, so the writer's
        ``admit`` (a wait) is skipped.
        """
        writer = self._writer()
        steps = WorkspaceSteps(self._workspace(), self._run_cpu)

        async def archive(batch: Batch) -> object:
            return await steps.archive((batch,))

        async def commit(batch: Batch, edits: Sequence[TopicEdit], base: str) -> Any:
            return await steps.commit((batch,), edits, base)

        exclusive = self._exclusive if is_exclusive(writer) else None
        async with exclusive or contextlib.nullcontext(), taking_turns(self._turns):
            for _ in range(1 + CONCURRENT_RETRIES):
                outcome = await run_write_cycle(
                    batch, writer, snapshot=steps.snapshot, archive=archive, commit=commit,
                    timeout=self._timeout, admit=not admitted)
                if not (outcome.failure is FailureKind.REJECTED and outcome.error is not None
                        and isinstance(outcome.error.__cause__, ConcurrentUpdateError)):
                    break
            if outcome.failure is FailureKind.EMPTY and (await steps.covered((batch,)))[0]:
                outcome = replace(outcome, marks=batch.node_ids, failure=None, error=None)
        return outcome

    async def group(self, batches: Sequence[Batch]) -> list[WriteOutcome | None]:
        """Several batches as one transaction; None for each batch the group leaves to a cycle alone.

        See :class:`~memory.writers._writer.GroupWriter`; without one (or for
        a single batch) every entry is None.
        """
        writer = self._writer()
        if len(batches) < 2 or not self.groups_batches or not isinstance(writer, GroupWriter):
            return [None] * len(batches)
        steps = WorkspaceSteps(self._workspace(), self._run_cpu)
        async with self._exclusive, taking_turns(self._turns):
            group = await run_group_cycle(
                batches, writer, snapshot=steps.snapshot, archive=steps.archive,
                commit=steps.commit, covered=steps.covered, timeout=self._timeout)
        written = sum(outcome is not None for outcome in group.outcomes)
        self._events.emit(GroupWritten(batches=len(batches), written=written,
                                       fallback=group.fallback))
        return list(group.outcomes)
