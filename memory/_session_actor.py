"""The memory side of a session actor: what the session owes, and one job at a time.

The store's :class:`~store.SessionActor` owns a session's files; this
subclass adds the ledger (SPEC §6) to the same mailbox, so computing what a
branch owes, merging the markers of a finished job and the idle check can
never interleave with an append or a rewind of the same session.

Rules it keeps:

- **At most one job per session in flight** (SPEC §2): a batch is always
  the oldest owed records of its branch, so markers fill a branch from its
  oldest end and the owed tail stays contiguous. Across runtimes (two
  processes on one state directory) the same holds through a leased claim
  in ``<sid>/.claim`` (:mod:`store._claim`): plan a batch, claim it under
  the session lock, confirm it on the index the claim refreshed, and only
  then submit; a session whose claim another runtime holds waits and looks
  again (``ClaimRecheck``), and a boundary stays open meanwhile.
- **Marks only for a finished job, only its nodes** (SPEC §6.4): the writer
  worker reports a ``JobFinished``; the markers are merged here.
- **Failures back off, then quarantine** (SPEC §7): consecutive failures
  of a session delay its next job exponentially (with jitter); after
  ``max_failures`` the batch is quarantined until the session changes or an
  operator releases it.
- **The session boundary** (SPEC §6.6): the head branch first and
  completely, then other tips only at the threshold; a job that changes
  nothing ends the pass with ``no progress`` instead of looping.

The per-session ledger state (:class:`SessionLedger`) is kept by the
runtime, not by the incarnation: a passivated or restarted actor finds its
job in flight, its failure streak and its pending boundary where it left
them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from memory._cycle import FailureKind, WriteOutcome
from memory._ledger import (
    NodeRecords,
    first_batch,
    should_write,
    should_write_at_boundary,
    uncitable,
)
from memory._quarantine import QuarantineEntry, is_quarantined
from memory._records import MARKER_KEY, SourceRecord
from memory._writer import Batch
from store import SessionActor, run_durable
from store._actor import TipMoved
from store._claim import Claim

if TYPE_CHECKING:
    from memory._runtime import MemoryRuntime

__all__ = [
    "BoundaryOutcome",
    "BoundaryResult",
    "CheckIdle",
    "ClaimRecheck",
    "Flush",
    "JobFinished",
    "MemorySessionActor",
    "Pending",
    "Reconsider",
    "RetryDue",
    "SessionLedger",
    "WriteJob",
]


# -- messages ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pending:
    """The owed records of the branch ending at ``tip`` (default: head), minus those in flight."""

    tip: str | None = None


@dataclass(frozen=True, slots=True)
class Flush:
    """Start a session boundary now; replies with a :class:`BoundaryResult` to await."""


@dataclass(frozen=True, slots=True)
class CheckIdle:
    """From the idle watchdog: run the boundary if idle for ``idle_after`` and not yet processed."""

    now: float
    processed_updated_at: float | None


@dataclass(frozen=True, slots=True)
class JobFinished:
    job_id: int
    outcome: WriteOutcome


@dataclass(frozen=True, slots=True)
class RetryDue:
    """The backoff after a failed job has elapsed."""


@dataclass(frozen=True, slots=True)
class Reconsider:
    """Something outside changed (another process appended): evaluate the trigger again."""


@dataclass(frozen=True, slots=True)
class ClaimRecheck:
    """Another runtime held this session's claim a moment ago: plan again (not a failure)."""


# -- state kept across incarnations ---------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteJob:
    id: int
    batch: Batch
    boundary: bool


class BoundaryOutcome(enum.Enum):
    WRITTEN = "written"  # every branch the rules cover is written
    NO_PROGRESS = "no progress"  # a job changed nothing: terminal, not a loop
    QUARANTINED = "quarantined"  # terminal until the session changes or a release
    FAILED = "failed"  # retryable: the watchdog tries again at its next poll

    @property
    def terminal(self) -> bool:
        return self is not BoundaryOutcome.FAILED


@dataclass
class BoundaryResult:
    """Completion of one session boundary; ``await result.wait()`` outside the actor."""

    updated_at: float | None
    from_watchdog: bool
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: BoundaryOutcome | None = None
    error: str | None = None
    batches: int = 0

    async def wait(self) -> BoundaryOutcome:
        await self.done.wait()
        assert self.outcome is not None
        return self.outcome


@dataclass
class SessionLedger:
    """What the runtime remembers about one session's memory between incarnations."""

    in_flight: WriteJob | None = None
    failures: int = 0
    retry_pending: bool = False
    boundary: BoundaryResult | None = None
    waiters: list[BoundaryResult] = field(default_factory=list)
    recheck_pending: bool = False  # blocked by another runtime's claim; a ClaimRecheck is due
    rechecks: int = 0  # consecutive blocked plans (the recheck delay backs off)


# Plan, claim, confirm: when the batch planned before the claim differs from
# the one confirmed after it (another runtime wrote meanwhile), claim again,
# this many times at most before looking again later.
CLAIM_ATTEMPTS = 3


# -- the actor --------------------------------------------------------------------


class MemorySessionActor(SessionActor):
    """A session actor that also keeps the session's memory ledger."""

    def __init__(self, runtime: MemoryRuntime, session: str) -> None:
        super().__init__(
            runtime.state_dir, session, files=runtime.config.files, clock=runtime.config.clock
        )
        self.runtime = runtime
        self.ledger = runtime.ledger(session)
        self.records = NodeRecords(session, counter=runtime.config.counter)

    # -- reading what is owed ---------------------------------------------------

    def owed(self, tip: str | None) -> list[SourceRecord]:
        """SPEC §6.2 on the branch at ``tip``, minus the jobs in flight (their nodes are owed too).

        In flight: this runtime's job, and the batch another runtime's live
        claim names (read without the lock: a hint, see :mod:`store._claim`).

        Walks back from the tip and stops at the newest own marker, so the cost
        follows the backlog; a branch with no own marker is read whole.
        """
        core = self.core
        owed = self.records.owed(core.nodes_back(tip), lambda: core.branch_nodes(tip),
                                 self.runtime.workspace_id)
        busy: set[str] = set()
        job = self.ledger.in_flight
        if job is not None:
            busy.update(job.batch.node_ids)
        holder = self._claim_holder()
        if holder is not None:
            busy.update(holder.nodes)
        if busy:
            owed = [record for record in owed if record.message_id not in busy]
        return owed

    def _claim_holder(self) -> Claim | None:
        return self.core.claim_holder(self.runtime.instance_id, self.runtime.config.clock())

    # -- messages -----------------------------------------------------------------

    async def dispatch(self, message: Any) -> Any:
        match message:
            case Pending(tip):
                return self.owed(tip)
            case Flush():
                return self._start_boundary(from_watchdog=False)
            case CheckIdle(now, processed):
                meta = self.core.meta()
                updated_at = meta.get("updated_at")
                if not isinstance(updated_at, (int, float)) or updated_at == processed:
                    return None
                if now - updated_at < self.runtime.config.session_idle:
                    return None
                return self._start_boundary(from_watchdog=True)
            case JobFinished(job_id, outcome):
                await self._job_finished(job_id, outcome)
                return None
            case RetryDue():
                self.ledger.retry_pending = False
                await self._plan()
                return None
            case Reconsider():
                await self._plan()
                return None
            case ClaimRecheck():
                self.ledger.recheck_pending = False
                await self._plan()
                return None
        return await super().dispatch(message)

    async def tip_moved(self, event: TipMoved) -> None:
        self.runtime.watchdog_touch(self.session, self.core.meta().get("updated_at"))
        if event.head_moved or self.ledger.boundary is not None:
            await self._plan()

    # -- the planner --------------------------------------------------------------

    def _start_boundary(self, *, from_watchdog: bool) -> BoundaryResult:
        updated_at = self.core.meta().get("updated_at")
        result = BoundaryResult(
            updated_at if isinstance(updated_at, (int, float)) else None, from_watchdog
        )
        if self.ledger.boundary is None:
            self.ledger.boundary = result
        self.ledger.waiters.append(result)
        self.ref.cast_nowait(Reconsider())
        return result

    async def _plan(self) -> None:
        """Submit the next job if the rules call for one; finish the boundary if done.

        Plan, claim, confirm: the batch chosen on the current index is
        claimed under the session lock (which also brings the index up to
        date), chosen again on that index and submitted only if it is the
        same. Another runtime's live claim means its job is in flight: wait
        for it (a boundary stays open; the job may still fail).
        """
        ledger = self.ledger
        if ledger.in_flight is not None or ledger.retry_pending or ledger.recheck_pending:
            return
        updated_at = self.core.meta().get("updated_at")
        blocked = is_quarantined(
            self.runtime.quarantined, self.session,
            updated_at if isinstance(updated_at, (int, float)) else None,
        )
        if blocked is not None:
            await self._finish_boundary(BoundaryOutcome.QUARANTINED, blocked.error)
            return
        claimed: tuple[str, ...] | None = None
        records: list[SourceRecord] | None = None
        for _ in range(CLAIM_ATTEMPTS):
            records = self._next_batch()
            if records is None:
                break
            refused = uncitable(self.session, records)
            if refused is not None:  # an id written before the entry rule: never retried hot
                await self._quarantine_batch(tuple(r.message_id for r in records), str(refused),
                                             failures=0)
                if claimed is not None:
                    await self._release_claim()
                await self._finish_boundary(BoundaryOutcome.QUARANTINED, str(refused))
                return
            node_ids = tuple(record.message_id for record in records)
            if node_ids == claimed:
                ledger.rechecks = 0
                self._submit(records, boundary=ledger.boundary is not None)
                return
            if self._claim_holder() is not None or not await self._claim(node_ids):
                break  # another runtime's job is in flight
            claimed = node_ids
        if claimed is not None:
            await self._release_claim()
        if records is not None or (ledger.boundary is not None
                                   and self._claim_holder() is not None):
            self._recheck_later()  # blocked, or the disk kept moving under the confirmation
            return
        ledger.rechecks = 0
        await self._finish_boundary(BoundaryOutcome.WRITTEN, None)

    def _next_batch(self) -> list[SourceRecord] | None:
        """The batch the rules call for on the current index (SPEC §6.3, §6.6), if any."""
        config = self.runtime.config
        head = self.core.head
        if self.ledger.boundary is None:
            if head is None:
                return None
            owed = self.owed(head)
            if should_write(owed, config.clock(), config.policy):
                return first_batch(owed, config.policy.threshold)
            return None
        # Session boundary: the head branch first and completely...
        if head is not None:
            owed = self.owed(head)
            if owed:
                return first_batch(owed, config.policy.threshold)
        # ...then every other live tip, only if it owes a whole batch.
        for row in self.core.list_branches():
            tip = row["head_msg_id"]
            if tip == head:
                continue
            owed = self.owed(tip)
            if should_write_at_boundary(owed, head=False, policy=config.policy):
                return first_batch(owed, config.policy.threshold)
        return None

    async def _claim(self, node_ids: tuple[str, ...]) -> bool:
        runtime = self.runtime
        taken = await run_durable(self.core.claim_batch, node_ids, runtime.instance_id,
                                  runtime.config.clock(), runtime.claim_lease)
        if taken:
            runtime.claim_taken(self.session)
        return taken

    async def _release_claim(self) -> None:
        await run_durable(self.core.release_claim, self.runtime.instance_id)
        self.runtime.claim_released(self.session)

    def _recheck_later(self) -> None:
        ledger = self.ledger
        if ledger.recheck_pending:
            return
        ledger.recheck_pending = True
        ledger.rechecks += 1
        self.runtime.schedule_claim_recheck(self.session, ledger.rechecks)

    def _submit(self, records: list[SourceRecord], *, boundary: bool) -> None:
        job = WriteJob(
            self.runtime.next_job_id(),
            Batch(self.session, tuple(records), self.runtime.render_prompt(records)),
            boundary,
        )
        self.ledger.in_flight = job
        self.runtime.submit(job)

    async def _job_finished(self, job_id: int, outcome: WriteOutcome) -> None:
        ledger = self.ledger
        job = ledger.in_flight
        if job is None or job.id != job_id:
            return  # a report for a job this session no longer waits for
        if outcome.failure is None:
            marks = {node_id: {MARKER_KEY: self.runtime.workspace_id} for node_id in outcome.marks}
            started = anyio.current_time()
            # The job stays in flight until its markers are durable: if this
            # incarnation crashes mid-merge, the redelivered report finds it and
            # merges again (idempotent) instead of the batch being written twice.
            await run_durable(self._mark_and_release, marks)
            ledger.in_flight = None
            self.runtime.job_done(job)
            self.runtime.record_marks(self.session, outcome.marks, anyio.current_time() - started)
            self.runtime.claim_released(self.session)
            self._queue_checkpoint()
            ledger.failures = 0
            if ledger.boundary is not None:
                ledger.boundary.batches += 1
            await self._plan()
            return
        ledger.in_flight = None
        self.runtime.job_done(job)
        await self._release_claim()
        ledger.failures += 1
        error = str(outcome.error) if outcome.error is not None else outcome.failure.value
        if ledger.failures >= self.runtime.config.max_failures:
            await self._quarantine(job, error)
            await self._finish_boundary(BoundaryOutcome.QUARANTINED, error)
            return
        if outcome.failure is FailureKind.EMPTY and ledger.boundary is not None:
            await self._finish_boundary(BoundaryOutcome.NO_PROGRESS, error)
        elif ledger.boundary is not None:
            await self._finish_boundary(BoundaryOutcome.FAILED, error)
        ledger.retry_pending = True
        self.runtime.schedule_retry(self.session, ledger.failures)

    def _mark_and_release(self, marks: dict[str, dict[str, str]]) -> None:
        """One thread hop: the markers first, then the claim (a reader after it sees them)."""
        self.core.merge_node_metadata_batch(marks)
        self.core.release_claim(self.runtime.instance_id)

    async def _quarantine(self, job: WriteJob, error: str) -> None:
        await self._quarantine_batch(job.batch.node_ids, error, self.ledger.failures)

    async def _quarantine_batch(self, node_ids: tuple[str, ...], error: str,
                                failures: int) -> None:
        updated_at = self.core.meta().get("updated_at")
        entry = QuarantineEntry(
            session=self.session,
            node_ids=node_ids,
            error=error,
            failures=failures,
            at=self.runtime.config.clock(),
            updated_at=updated_at if isinstance(updated_at, (int, float)) else None,
        )
        await self.runtime.quarantine(entry)
        self.ledger.failures = 0

    async def _finish_boundary(self, outcome: BoundaryOutcome, error: str | None) -> None:
        ledger = self.ledger
        if ledger.boundary is None:
            return
        waiters, ledger.waiters, ledger.boundary = ledger.waiters, [], None
        record = outcome.terminal and any(w.updated_at is not None for w in waiters)
        for waiter in waiters:
            waiter.outcome = outcome
            waiter.error = error
            waiter.done.set()
        if record:
            updated_at = next(w.updated_at for w in waiters if w.updated_at is not None)
            await self.runtime.record_session_end(self.session, updated_at)


def session_factory(runtime: MemoryRuntime) -> Callable[[str], MemorySessionActor]:
    return lambda session: MemorySessionActor(runtime, session)

