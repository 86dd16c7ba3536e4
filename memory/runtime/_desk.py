"""The job desk: where the writer pool takes jobs, runs the write cycle and reports back.

A batch goes down once and comes back once: a worker takes a job from the
queue (:mod:`memory.runtime._jobs`), runs it through the write cycle
(:mod:`memory.runtime._write_cycle`) and reports the outcome to the
session's actor, which alone merges the markers. This object is what a
worker is given (:class:`~memory.runtime._pool.PoolHost`): the queue, the
cycle, the timers, the sessions' ledgers and their actors, not the runtime.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import anyio

from actors import ActorRef
from memory._errors import describe_error
from memory.runtime._events import EventHook
from memory.runtime._jobs import JobQueue, WriteJob
from memory.runtime._session_state import MemorySessionMessage, Reconsider, SessionLedgers
from memory.runtime._timers import Timers
from memory.runtime._write_cycle import WriteCycle
from memory.writers._cycle import WriteOutcome
from memory.writers._writer import Batch

__all__ = ["JobDesk"]


class JobDesk:
    """See the module docstring; implements :class:`~memory.runtime._pool.PoolHost`."""

    def __init__(self, jobs: JobQueue, cycle: WriteCycle, timers: Timers,
                 ledgers: SessionLedgers,
                 sessions: Callable[[str], ActorRef[MemorySessionMessage]],
                 events: EventHook) -> None:
        self.jobs = jobs
        self.cycle = cycle
        self.timers = timers
        self.ledgers = ledgers
        self.session_ref = sessions
        self.events = events

    @property
    def groups_batches(self) -> bool:
        """Whether waiting batches are committed together (an exclusive ``GroupWriter``)."""
        return self.cycle.groups_batches

    async def write_group(self, batches: Sequence[Batch]) -> list[WriteOutcome]:
        """Several batches as one transaction; each one the group does not cover, alone.

        The worker asked the writer's ``deferral`` first, so each batch is
        written ``admitted`` (the writer's ``admit``, a wait, is skipped).
        See :meth:`WriteCycle.group <memory.runtime._write_cycle.WriteCycle.group>`.
        """
        grouped = await self.cycle.group(batches)
        return [outcome if outcome is not None else await self.cycle.write(batch, admitted=True)
                for batch, outcome in zip(batches, grouped, strict=True)]

    async def deferral(self, batch: Batch) -> float:
        """Seconds the writer asks ``batch`` to wait (a spent model budget); 0 if it cannot say."""
        try:
            return await self.cycle.deferral(batch)
        except Exception as exc:  # noqa: BLE001 - the cycle meets the writer's trouble itself
            self.events.emit("deferral_unknown", session=batch.session_id,
                             error=describe_error(exc))
            return 0.0

    def record_outcome(self, job: WriteJob, outcome: WriteOutcome) -> None:
        self.jobs.record_outcome(job, outcome)

    def defer_job(self, job: WriteJob, delay: float) -> None:
        """``job`` goes back to the queue after ``delay`` seconds; it stays in flight meanwhile.

        Neither failed nor marked, and no worker waits for it. A runtime
        closing has no timers left: the job is abandoned (its session plans
        again next time; the batch stays owed).
        """
        self.events.emit("deferred", session=job.batch.session_id, job=job.id,
                         nodes=len(job.batch.node_ids), seconds=delay)
        try:
            self.timers.call_later(delay, lambda: self._offer_again(job))
        except RuntimeError:
            self.abandon_job(job)

    def _offer_again(self, job: WriteJob) -> None:
        try:
            self.jobs.offer_again(job)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.abandon_job(job)

    def abandon_job(self, job: WriteJob) -> None:
        """``job``'s outcome never reached its session: the session forgets it and plans again.

        Synchronous (it runs while a worker is cancelled). A job the session
        already finished, or replaced, is left alone.
        """
        session = job.batch.session_id
        ledger = self.ledgers.of(session)
        if ledger.in_flight is None or ledger.in_flight.id != job.id:
            return
        ledger.in_flight = None
        self.jobs.forget(job)
        self.jobs.done(job)
        self.events.emit("abandoned", session=session, job=job.id,
                         nodes=len(job.batch.node_ids))
        with contextlib.suppress(Exception):  # a runtime going down has no session to wake
            self.session_ref(session).cast_nowait(Reconsider())
