"""The writer pool: K supervised workers running write cycles.

Sessions submit jobs to one shared queue that outlives the workers, so a
worker's crash loses no queued job. Each worker takes one job at a time
and runs the write cycle (``memory.writers._cycle``): archive through the workspace
actor, the writer on a snapshot, the commit through the workspace actor.
It then reports the outcome to the session actor, which alone marks.

With an exclusive :class:`~memory.writers._writer.GroupWriter` (the built-in
extractive writer) a worker also takes the jobs already waiting, up to
:data:`GROUP_LIMIT`, and commits them as one transaction (group commit):
batches queue up exactly when commits are the bottleneck, and then one
snapshot, one render of each touched topic file and one install serve them
all. A job is never held back waiting for company.

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
from its runtime is :class:`PoolHost`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Never, Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from actors import Actor, ActorRef, UnhandledMessageError
from memory._errors import WriteCycleError
from memory.runtime._jobs import WriteJob
from memory.runtime._session_actor import JobFinished, MemorySessionMessage
from memory.writers._cycle import FailureKind, WriteOutcome
from memory.writers._writer import Batch

__all__ = ["GROUP_LIMIT", "PoolHost", "WriterCrashedError", "WriterWorker"]

GROUP_LIMIT = 32  # batches per group commit; bounds one commit's size and latency


class PoolHost(Protocol):
    """What a :class:`WriterWorker` uses of its runtime, and nothing else."""

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
    """Pulls jobs from the runtime's queue in its lifespan; see the module docstring."""

    def __init__(
        self,
        runtime: PoolHost,
        jobs: MemoryObjectReceiveStream[WriteJob],
    ) -> None:
        self.runtime = runtime
        self.jobs = jobs
        self.current: tuple[WriteJob, ...] = ()
        self.done = 0

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Take jobs in a task beside the mailbox; a job's crash ends the incarnation."""
        crash: Exception | None = None

        async def pull() -> None:
            nonlocal crash
            try:
                async with self.jobs.clone() as jobs:
                    async for job in jobs:
                        group = [job]
                        while self.runtime.groups_batches and len(group) < GROUP_LIMIT:
                            try:
                                group.append(jobs.receive_nowait())
                            except anyio.WouldBlock:
                                break
                        await self.run_jobs(group)
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

    async def run_jobs(self, jobs: list[WriteJob]) -> None:
        """Write ``jobs`` (one, or a group), report every outcome, then crash if a writer failed.

        A job whose outcome does not reach its session (this worker is
        cancelled, or the session actor cannot take the report) is abandoned:
        its session forgets it and plans again, so no session waits forever
        on a job nobody holds. Its batch stays owed; if it was written, the
        next delivery finds it cited and only marks it.
        """
        self.current = tuple(jobs)
        unreported = list(jobs)
        failure: Exception | None = None
        try:
            ready = []
            for job in jobs:
                delay = await self.runtime.deferral(job.batch)
                if delay > 0:  # offered again later; this worker goes on
                    self.runtime.defer_job(job, delay)
                    unreported.remove(job)
                else:
                    ready.append(job)
            jobs = ready
            if not jobs:
                return
            try:
                outcomes = await self.runtime.write_group([job.batch for job in jobs])
            except Exception as exc:  # noqa: BLE001 - reported for every job, then re-raised
                failure = exc
                outcomes = [
                    WriteOutcome((), (), (), FailureKind.WRITER, WriteCycleError(
                        job.batch.session_id, job.batch.node_ids, repr(exc)))
                    for job in jobs
                ]
            crash: WriterCrashedError | None = None
            for job, outcome in zip(jobs, outcomes, strict=True):
                # Each report is shielded so it is never torn; a cancelled
                # worker must not start the next one (its runtime is going).
                await anyio.lowlevel.checkpoint_if_cancelled()
                await self.report(job, outcome)
                unreported.remove(job)
                self.done += 1
                if outcome.failure in (FailureKind.WRITER, FailureKind.TIMEOUT) and crash is None:
                    crash = WriterCrashedError(job, outcome.failure)
                    crash.__cause__ = outcome.error
        finally:
            self.current = ()
            for job in unreported:
                self.runtime.abandon_job(job)
        if failure is not None:
            raise failure
        if crash is not None:
            raise crash

    async def report(self, job: WriteJob, outcome: WriteOutcome) -> None:
        self.runtime.record_outcome(job, outcome)
        ref = self.runtime.session_ref(job.batch.session_id)
        with anyio.CancelScope(shield=True):
            await ref.call(JobFinished(job.id, outcome))


def worker_factory(
    runtime: PoolHost, jobs: MemoryObjectReceiveStream[WriteJob]
) -> Callable[[], WriterWorker]:
    return lambda: WriterWorker(runtime, jobs)

