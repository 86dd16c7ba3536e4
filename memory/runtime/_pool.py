"""The writer pool: K supervised workers running write cycles.

Sessions submit jobs to one shared queue that outlives the workers, so a
worker's crash loses no queued job. Each worker takes one job at a time
and runs the write cycle (``memory.writers._cycle``): archive through the workspace
actor, the writer on a snapshot, the commit through the workspace actor.
It then reports the outcome to the session actor, which alone marks.

With an exclusive :class:`~memory.writers._writer.GroupWriter` (the built-in
extractive writer) a worker also takes the jobs already waiting and commits
them as one transaction (group commit; :func:`~memory.runtime._backlog.group_size`):
batches queue up exactly when commits are the bottleneck, and then one
snapshot, one render of each touched topic file and one install serve them
all. A job is never held back waiting for company. The workers take turns
at a *commit slot*: a worker takes a job only once it holds the slot (so
the workers waiting for it hold none), and then every job waiting: the
group is what piled up during the previous commit and grows with the
backlog (issue 20). It leaves the slot as soon as its group is written,
before the sessions merge the markers, so the next group's archive and
extraction overlap this group's marks.

Failure policy (SPEC §7; the choice is recorded in docs/decisions.md):

- A writer that raised or ran past its timeout crashes the worker after
  the job is reported failed: the supervisor restarts it with backoff, so
  a failing model endpoint is not hammered.
- A rejected commit or an empty change is the writer's answer, not a
  crash: reported, the worker goes on.
- A batch the writer cannot take yet (a model's daily budget is spent:
  ``deferral``) is neither run nor reported: it goes back to the queue to
  be offered again when the writer can take it, and the worker takes the
  next job. A wait of hours holds no worker.

The cycle itself (:mod:`memory.runtime._write_cycle`) retries a concurrent
update and counts an already-cited batch as written. What a worker needs
(the runtime's :class:`~memory.runtime._desk.JobDesk`) is :class:`PoolHost`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Never, Protocol

import anyio

from actors import Actor, ActorRef, UnhandledMessageError
from memory._errors import WriteCycleError
from memory.runtime._backlog import GROUP_LIMIT, group_size
from memory.runtime._jobs import JobQueue, WriteJob
from memory.runtime._session_actor import JobFinished, MemorySessionMessage
from memory.writers._cycle import FailureKind, WriteOutcome
from memory.writers._writer import Batch

__all__ = ["PoolHost", "WriterCrashedError", "WriterWorker", "worker_factory"]


class PoolHost(Protocol):
    """What a :class:`WriterWorker` uses of the job desk, and nothing else."""

    @property
    def groups_batches(self) -> bool:
        """Whether a worker takes the jobs already waiting as one group."""

    async def write_group(self, batches: Sequence[Batch]) -> list[WriteOutcome]:
        """The write cycle for ``batches``, one outcome each (one transaction when it can)."""

    async def deferral(self, batch: Batch) -> float:
        """Seconds the writer asks ``batch`` to wait before it is written (0: now)."""

    def defer_job(self, job: WriteJob, delay: float) -> None:
        """Offer ``job`` to the workers again after ``delay`` seconds; it stays in flight."""

    def record_outcome(self, job: WriteJob, outcome: WriteOutcome) -> None:
        """Count ``job``'s outcome (statistics, the ``job`` event) before it is reported."""

    def abandon_job(self, job: WriteJob) -> None:
        """``job``'s outcome will never reach its session: it forgets the job and plans again."""

    def session_ref(self, session: str) -> ActorRef[MemorySessionMessage]:
        """The session's actor, to report to."""


class WriterCrashedError(Exception):
    """The writer raised or hung on a job; the worker restarts (cause in ``__cause__``)."""

    def __init__(self, job: WriteJob, kind: FailureKind) -> None:
        super().__init__(
            f"writer failed ({kind.value}) on session {job.batch.session_id!r}, nodes "
            f"{list(job.batch.node_ids)}; the worker restarts with backoff and the batch stays owed"
        )


class WriterWorker(Actor[Never]):
    """Pulls jobs from the runtime's queue in its lifespan; see the module docstring.

    ``slot``: the commit slot the pool's workers share (one group gathered
    and written at a time); ``limit``: the most batches in one group.
    """

    def __init__(self, desk: PoolHost, queue: JobQueue, *, slot: anyio.Lock | None = None,
                 limit: int = GROUP_LIMIT) -> None:
        self.desk = desk
        self.queue = queue
        self.slot = slot if slot is not None else anyio.Lock()
        self.limit = limit
        self.current: tuple[WriteJob, ...] = ()
        self.done = 0

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Take jobs in a task beside the mailbox; a job's crash ends the incarnation."""
        crash: Exception | None = None

        async def pull() -> None:
            nonlocal crash
            try:
                async with self.queue.receive.clone() as jobs:
                    while True:
                        # The slot first, then a job: a worker waiting for its turn
                        # holds no job, so the whole backlog goes to the next group.
                        grouping = self.desk.groups_batches
                        async with self.slot if grouping else contextlib.nullcontext():
                            try:
                                group = [await jobs.receive()]
                            except anyio.EndOfStream:
                                return
                            for _ in range(group_size(self.queue.waiting, limit=self.limit,
                                                      batching=grouping) - 1):
                                try:
                                    group.append(jobs.receive_nowait())
                                except anyio.WouldBlock:
                                    break
                            self.queue.took(len(group))
                            written = await self.write_jobs(group)
                        await self.report_jobs(*written)
            except Exception as exc:  # noqa: BLE001 - re-raised out of the lifespan
                crash = exc
                tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pull)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
        if crash is not None:
            raise crash

    def inspect(self) -> object:
        return {"current": [job.id for job in self.current], "done": self.done}

    async def handle(self, message: Never) -> object:
        raise UnhandledMessageError(self.ref.name, message,
                               "a writer worker takes jobs from the queue, not messages")

    async def write_jobs(
        self, jobs: list[WriteJob]
    ) -> tuple[list[tuple[WriteJob, WriteOutcome]], Exception | None]:
        """Write the jobs the writer can take now; the outcomes, and the write's own failure.

        A job the writer defers goes back to the queue. If this worker is
        cancelled before the outcomes are in hand, every job it holds is
        abandoned (see :meth:`report_jobs`).
        """
        self.current = tuple(jobs)
        held = list(jobs)
        try:
            for job in jobs:
                delay = await self.desk.deferral(job.batch)
                if delay > 0:  # offered again later; this worker goes on
                    self.desk.defer_job(job, delay)
                    held.remove(job)
            if not held:
                return [], None
            try:
                return list(zip(held, await self.desk.write_group(
                    [job.batch for job in held]), strict=True)), None
            except Exception as exc:  # noqa: BLE001 - reported for every job, then re-raised
                return [(job, WriteOutcome((), (), (), FailureKind.WRITER, WriteCycleError(
                    job.batch.session_id, job.batch.node_ids, repr(exc)))) for job in held], exc
        except BaseException:
            for job in held:
                self.desk.abandon_job(job)
            raise
        finally:
            self.current = ()

    async def report_jobs(self, results: list[tuple[WriteJob, WriteOutcome]],
                          failure: Exception | None) -> None:
        """Report every outcome to its session, one after another; then crash if a writer failed.

        One at a time: each report is a marker merge in a worker thread, and
        a group's merges all at once would take the threads the sessions'
        appends need (issue 20: appends must not queue behind write-side
        I/O); the next group is being written meanwhile. A job whose outcome does not reach its session (this worker is
        cancelled, or the session actor cannot take the report) is abandoned:
        its session forgets it and plans again, so no session waits forever
        on a job nobody holds. Its batch stays owed; if it was written, the
        next delivery finds it cited and only marks it.
        """
        self.current = tuple(job for job, _ in results)
        unreported = {job.id: job for job, _ in results}
        try:
            for job, outcome in results:
                # Each report is shielded so it is never torn; a cancelled
                # worker must not start the next one (its runtime is going).
                await anyio.lowlevel.checkpoint_if_cancelled()
                await self.report(job, outcome)
                del unreported[job.id]
                self.done += 1
        finally:
            self.current = ()
            for job in unreported.values():
                self.desk.abandon_job(job)
        if failure is not None:
            raise failure
        for job, outcome in results:
            if outcome.failure in (FailureKind.WRITER, FailureKind.TIMEOUT):
                crash = WriterCrashedError(job, outcome.failure)
                crash.__cause__ = outcome.error
                raise crash

    async def report(self, job: WriteJob, outcome: WriteOutcome) -> None:
        self.desk.record_outcome(job, outcome)
        ref = self.desk.session_ref(job.batch.session_id)
        with anyio.CancelScope(shield=True):
            await ref.call(JobFinished(job.id, outcome))


def worker_factory(desk: PoolHost, queue: JobQueue) -> Callable[[], WriterWorker]:
    """The pool's workers, sharing one commit slot (see the module docstring)."""
    slot = anyio.Lock()
    return lambda: WriterWorker(desk, queue, slot=slot)

