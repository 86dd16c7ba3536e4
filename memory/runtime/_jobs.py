"""The job queue: write jobs from session actors to the writer pool, and how many are in flight.

One queue outlives the workers, so a worker's crash loses no queued job
(:mod:`memory.runtime._pool`). It counts the jobs in flight (``drain``
waits for none) and the outcomes by result (``statistics``), and reports
``submitted`` and ``job`` events (:mod:`memory.runtime._events`). It
keeps what :mod:`memory.runtime._backlog` needs to say how far memory is
behind: when each job in flight became due, and the sizes of the groups the
workers took (each also a ``group_taken`` event).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from dataclasses import dataclass

import anyio

from memory.runtime._backlog import MemoryLag, memory_lag
from memory.runtime._events import EventHook
from memory.writers._cycle import WriteOutcome
from memory.writers._writer import Batch

__all__ = ["JobQueue", "WriteJob"]

RECENT_GROUPS = 32  # group sizes kept for statistics()


@dataclass(frozen=True, slots=True)
class WriteJob:
    id: int
    batch: Batch
    boundary: bool


class JobQueue:
    """See the module docstring. Not thread-safe: the event loop's only."""

    def __init__(self, events: EventHook) -> None:
        self._events = events
        self._ids = itertools.count(1)
        self._submitted_at: dict[int, float] = {}
        self._due_at: dict[int, float] = {}  # wall clock, per job in flight that has one
        self.recent_groups: deque[int] = deque(maxlen=RECENT_GROUPS)
        self.in_flight = 0
        self.outcomes: Counter[str] = Counter()
        self._idle = anyio.Event()
        self._idle.set()
        # receive: the workers' end of the queue (each worker takes a clone)
        self._send, self.receive = anyio.create_memory_object_stream[WriteJob](
            max_buffer_size=math.inf)

    def submit(self, batch: Batch, *, boundary: bool, due_at: float | None = None) -> WriteJob:
        """Queue ``batch`` as a new job; it counts as in flight until :meth:`done`.

        ``due_at``: when the rules first called for it (wall clock), for the event.
        """
        job = WriteJob(next(self._ids), batch, boundary)
        if self.in_flight == 0:
            self._idle = anyio.Event()
        self.in_flight += 1
        self._submitted_at[job.id] = anyio.current_time()
        if due_at is not None:
            self._due_at[job.id] = due_at
        if self._events.enabled:
            self._events.emit("submitted", session=batch.session_id, job=job.id,
                              node_ids=list(batch.node_ids), due_at=due_at)
        self._send.send_nowait(job)
        return job

    def offer_again(self, job: WriteJob) -> None:
        """Put ``job`` back in the queue (the writer deferred it); it stayed in flight meanwhile."""
        self._send.send_nowait(job)

    def done(self, job: WriteJob) -> None:
        """``job`` no longer counts for :meth:`drain` (marked, failed, or abandoned)."""
        self._due_at.pop(job.id, None)
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    def forget(self, job: WriteJob) -> None:
        """``job``'s outcome will never be reported (abandoned): drop its start time."""
        self._submitted_at.pop(job.id, None)

    def record_outcome(self, job: WriteJob, outcome: WriteOutcome) -> None:
        """Count a reported outcome and emit its ``job`` event."""
        result = "written" if outcome.failure is None else outcome.failure.value
        self.outcomes[result] += 1
        started = self._submitted_at.pop(job.id, None)
        elapsed = None if started is None else anyio.current_time() - started
        self._events.emit(
            "job", session=job.batch.session_id, job=job.id, result=result,
            nodes=len(job.batch.node_ids), node_ids=list(job.batch.node_ids),
            files=list(outcome.changed_files), seconds=elapsed,
            error=None if outcome.error is None else str(outcome.error))

    @property
    def waiting(self) -> int:
        """Jobs queued for a worker and not taken yet (the write side's backlog)."""
        return self._send.statistics().current_buffer_used

    def lag(self) -> MemoryLag:
        """How far memory is behind now (:func:`memory.runtime._backlog.memory_lag`)."""
        return memory_lag(self._due_at.values(), self._events.now(), waiting=self.waiting,
                          in_flight=self.in_flight, recent_groups=self.recent_groups)

    def took(self, size: int) -> None:
        """A worker took ``size`` jobs as one cycle: kept for :meth:`lag`, and a ``group_taken`` event."""
        self.recent_groups.append(size)
        if self._events.enabled:
            lag = self.lag()
            self._events.emit("group_taken", size=size, waiting=lag.due_waiting,
                              oldest_due_age=lag.oldest_due_age)

    async def drain(self) -> None:
        """Wait until no job is in flight."""
        while self.in_flight:
            await self._idle.wait()
