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
  completely, then other tips and merged heads only at the threshold; a
  job that changes nothing ends the pass with ``no progress`` instead of
  looping.

The per-session ledger state (:class:`SessionLedger`) is kept by the
runtime, not by the incarnation: a passivated or restarted actor finds its
job in flight, its failure streak and its pending boundary where it left
them.

Every message of this module is ``actors.Idempotent`` (delivered again
after a crash): ``Pending`` reads; the others only re-evaluate the ledger
(``_plan`` submits nothing while a job is in flight), and a ``JobFinished``
merges markers (fixed values) while its job is still in flight, so a
redelivery after the merge finds the job gone and only plans again.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from actors import ActorError, Idempotent
from memory._cycle import FailureKind, WriteOutcome
from memory._errors import LedgerError, MissingAuthority, ScriptoriumMemoryError
from memory._ledger import (
    NodeRecords,
    first_batch,
    should_write,
    should_write_at_boundary,
)
from memory._lost_markers import lost_markers, stranded_records
from memory._quarantine import QuarantineEntry, is_quarantined
from memory._records import MARKER_KEY, SourceRecord
from memory._workspace_actor import SourcesInMemory
from memory._writer import Batch
from store import SessionActor, StoreError, run_durable
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
    "RepairMarkers",
    "RetryDue",
    "SessionLedger",
    "WriteJob",
]


# -- messages ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pending(Idempotent):
    """The owed records of the branch ending at ``tip`` (default: head), minus those in flight."""

    tip: str | None = None


@dataclass(frozen=True, slots=True)
class Flush(Idempotent):
    """Start a session boundary now; replies with a :class:`BoundaryResult` to await."""


@dataclass(frozen=True, slots=True)
class CheckIdle(Idempotent):
    """From the idle watchdog: run the boundary if idle for ``idle_after`` and not yet processed."""

    now: float
    processed_updated_at: float | None


@dataclass(frozen=True, slots=True)
class JobFinished(Idempotent):
    job_id: int
    outcome: WriteOutcome


@dataclass(frozen=True, slots=True)
class RetryDue(Idempotent):
    """The backoff after a failed job has elapsed."""


@dataclass(frozen=True, slots=True)
class Reconsider(Idempotent):
    """Something outside changed (another process appended): evaluate the trigger again."""


@dataclass(frozen=True, slots=True)
class ClaimRecheck(Idempotent):
    """Another runtime held this session's claim a moment ago: plan again (not a failure)."""


@dataclass(frozen=True, slots=True)
class RepairMarkers(Idempotent):
    """Find this session's lost markers and set them again; replies with the node ids marked.

    Sent by the actor to itself on every activation, and by the idle
    watchdog's scan when the session's files changed (:mod:`memory._lost_markers`).
    Those background repairs report a failure as an event and leave it to
    the next scan; ``raise_errors`` hands it to the caller instead.
    ``reload`` reads every node file again first: the agent's write that
    dropped a marker may fall in the same timestamp tick as our marker
    merge, and then the index's freshness fingerprint does not move.
    """

    raise_errors: bool = False
    reload: bool = False


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

    # A branch that cannot be turned into records is the caller's to hear about.
    expected_errors: ClassVar[tuple[type[Exception], ...]] = (StoreError, LedgerError)

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
            case RepairMarkers(raise_errors, reload):
                try:
                    if reload:
                        await run_durable(self.core.reload)
                    return await self._repair_markers()
                except (ScriptoriumMemoryError, StoreError, ActorError, OSError) as error:
                    if raise_errors:
                        raise
                    self.runtime.emit("markers_repair_failed", session=self.session,
                                      error=str(error))
                    return []
        return await super().dispatch(message)

    async def on_start(self) -> None:
        await super().on_start()
        with contextlib.suppress(ActorError):  # a full mailbox: the watchdog's scan asks again
            self.ref.cast_nowait(RepairMarkers())

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
            try:
                records = self._next_batch()
            except LedgerError as error:
                await self._refuse(error)
                return
            except StoreError as error:  # e.g. an unusable head_id: the boundary hears why
                await self._finish_boundary(BoundaryOutcome.FAILED, str(error))
                return
            if records is None:
                break
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
        # ...then every other live tip, only if it owes a whole batch; and so
        # the merged heads (a sub-agent's branch attached back), never tips.
        tips = [row["head_msg_id"] for row in self.core.list_branches()]
        for tip in [*tips, *self._merged_heads()]:
            if tip == head:
                continue
            owed = self.owed(tip)
            if should_write_at_boundary(owed, head=False, policy=config.policy):
                return first_batch(owed, config.policy.threshold)
        return None

    def _merged_heads(self) -> list[str]:
        """Meta ``merged_heads`` that are nodes of this session (docs/decisions.md).

        The reference agent drops them from the tips and never writes their
        turns, so a spawned sub-agent's work would never reach memory.
        """
        merged = self.core.meta().get("merged_heads")
        if not isinstance(merged, list):
            return []
        found: list[str] = []
        for tip in dict.fromkeys(t for t in merged if isinstance(t, str)):
            try:
                self.core.node(tip)
            except StoreError:
                continue  # a merged head that is gone (or no safe id) owes nothing
            found.append(tip)
        return found

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
            # A report for a job this session no longer waits for, or this very
            # report delivered again after a crash past its merge: plan again
            # (idempotent), since the crash may have cut the planning short.
            await self._plan()
            return
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
        updated_at = self.core.meta().get("updated_at")
        entry = QuarantineEntry(
            session=self.session,
            node_ids=job.batch.node_ids,
            error=error,
            failures=self.ledger.failures,
            at=self.runtime.config.clock(),
            updated_at=updated_at if isinstance(updated_at, (int, float)) else None,
        )
        await self.runtime.quarantine(entry)
        self.ledger.failures = 0

    async def _refuse(self, error: LedgerError) -> None:
        """A branch the ledger refuses (SPEC §6.1): quarantine the session with the reason.

        Nothing can be batched until the node is repaired, and the repair is
        a change of the session only if it comes with an append; so the
        entry blocks until then or an operator's release, like a batch that
        kept failing.
        """
        updated_at = self.core.meta().get("updated_at")
        updated = updated_at if isinstance(updated_at, (int, float)) else None
        if is_quarantined(self.runtime.quarantined, self.session, updated) is None:
            node = error.node if isinstance(error, MissingAuthority) else None
            await self.runtime.quarantine(QuarantineEntry(
                session=self.session, node_ids=(node,) if node is not None else (),
                error=str(error), failures=0, at=self.runtime.config.clock(),
                updated_at=updated,
            ))
        await self._finish_boundary(BoundaryOutcome.QUARANTINED, str(error))

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

    # -- lost markers ------------------------------------------------------------------

    async def _repair_markers(self) -> list[str]:
        """Set again the markers another writer dropped (:mod:`memory._lost_markers`).

        Only records behind an own marker are candidates, found on the
        index; the workspace is asked about them only when there are any, so
        a consistent session costs one walk of its branches. The markers go
        through the same merge as a finished job's, in this mailbox; nothing
        is archived or written. A branch that cannot be walked is skipped
        (its error belongs to whoever reads it).
        """
        core = self.core
        workspace_id = self.runtime.workspace_id
        branches: list[list[SourceRecord]] = []
        for row in core.list_branches():
            try:
                nodes = core.branch_nodes(row["head_msg_id"])
                records = [r for r in map(self.records.of, nodes) if r is not None]
            except (StoreError, LedgerError):
                continue
            branches.append(records)
        candidates = sorted({record.source_id for records in branches
                             for record in stranded_records(records, workspace_id)})
        if not candidates:
            return []
        archived, cited = await self.runtime.workspace_ref.call(
            SourcesInMemory(tuple(candidates)), timeout=None)
        lost = sorted({node for b in branches
                       for node in lost_markers(b, workspace_id, archived, cited)})
        if not lost:
            return []
        started = anyio.current_time()
        await run_durable(core.merge_node_metadata_batch,
                          {node: {MARKER_KEY: workspace_id} for node in lost})
        self.runtime.record_marks(self.session, lost, anyio.current_time() - started)
        self._queue_checkpoint()
        self.runtime.emit("markers_repaired", session=self.session, nodes=lost)
        return lost


def session_factory(runtime: MemoryRuntime) -> Callable[[str], MemorySessionActor]:
    return lambda session: MemorySessionActor(runtime, session)

