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
  in ``<sid>/.claim`` (:mod:`memory.runtime._claims`): plan a batch, claim it under
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
  completely, then other tips only at the threshold, and merged heads (a
  sub-agent's branch attached back) completely; a job that changes nothing
  ends the pass with ``no progress`` instead of looping.
- **Every boundary ends, with a reason** (docs/decisions.md, "Boundaries
  end"): an error while planning, walking, claiming or marking (a broken
  branch, an unreadable file, a disk that refuses writes, a session lock
  held too long) ends the open boundary with ``error`` and a reason naming
  the session and the node or file, is reported once as a ``skipped``
  event, and leaves the actor running; a crash of the actor ends it too.

The per-session ledger state (:class:`SessionLedger`) is kept by the
runtime, not by the incarnation: a passivated or restarted actor finds its
job in flight, its failure streak and its pending boundary where it left
them. What the actor is given is :class:`SessionParts`: the job queue, the
timers, the claims, the quarantine, the ledgers, no more; never the runtime.

Every message of this module is ``actors.Idempotent`` (delivered again
after a crash): ``Pending`` reads; the others only re-evaluate the ledger
(``_plan`` submits nothing while a job is in flight), and a ``JobFinished``
merges markers (fixed values) while its job is still in flight, so a
redelivery after the merge finds the job gone and only plans again.
"""


from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import anyio

from actors import ActorError, StopReason
from memory._errors import (
    LedgerError,
    MissingAuthorityError,
    ScriptoriumMemoryError,
    describe_error,
)
from memory.ledger._claim import Claim
from memory.ledger._ledger import batch_due_at, uncitable
from memory.ledger._lost_markers import lost_markers, stranded_records
from memory.ledger._plan import (
    MARKER_CHUNK,
    Hold,
    SessionView,
    after_failure,
    covered,
    hold,
    marker_chunks,
    next_batch,
    not_busy,
    span,
)
from memory.ledger._records import MARKER_KEY, SourceRecord
from memory.ledger._tails import ConsistentSince, NodeRecords, OwedTails, listed_branches
from memory.runtime._claims import SessionClaims
from memory.runtime._jobs import WriteJob
from memory.runtime._session_state import (
    SESSION_ERRORS,
    BoundaryOutcome,
    BoundaryResult,
    CheckIdle,
    ClaimRecheck,
    Flush,
    JobFinished,
    MarkNext,
    Pending,
    Reconsider,
    RepairMarkers,
    RetryDue,
    SessionParts,
    StillOwed,
)
from memory.runtime._workspace_actor import RecordSessionEnd, SourcesInMemory
from memory.workspace._quarantine import QuarantineEntry, is_quarantined
from memory.writers._cycle import FailureKind, WriteOutcome
from memory.writers._prompt import render_prompt
from memory.writers._writer import Batch
from store import SessionActor, StoreError, TipMoved, run_durable

__all__ = ["JobFinished", "MemorySessionActor", "session_factory"]



# Plan, claim, confirm: when the batch planned before the claim differs from
# the one confirmed after it (another runtime wrote meanwhile), claim again,
# this many times at most before looking again later.
CLAIM_ATTEMPTS = 3


# -- the actor --------------------------------------------------------------------


class MemorySessionActor(SessionActor):
    """A session actor that also keeps the session's memory ledger."""

    # A branch that cannot be turned into records is the caller's to hear about.
    expected_errors: ClassVar[tuple[type[Exception], ...]] = (StoreError, LedgerError)

    def __init__(self, parts: SessionParts, session: str) -> None:
        config = parts.config
        super().__init__(
            parts.state_dir, session, files=config.files, clock=config.clock,
            lock_timeout=config.lock_timeout, log=parts.runtime_log,
        )
        self.parts = parts
        self.ledger = parts.ledgers.of(session)
        self.records = NodeRecords(session, counter=config.counter)
        self.tails = OwedTails(self.records, parts.workspace_id())
        self._consistent: ConsistentSince | None = None  # see _repair_markers
        self._doing = ""  # the planning step under way, for an error's reason
        self._claims: SessionClaims | None = None
        # Another runtime's claim as read in this message (see _claim_holder).
        self._holder: Claim | None = None
        self._holder_read = False

    @property
    def claims(self) -> SessionClaims:
        """This session's claim file, decided under the lock of the current incarnation's core."""
        core = self.core
        if self._claims is None or self._claims.core is not core:
            self._claims = SessionClaims(core, self.parts.config.files)
        return self._claims

    # -- reading what is owed ---------------------------------------------------

    def owed(self, tip: str | None) -> list[SourceRecord]:
        """SPEC §6.2 on the branch at ``tip``, minus the jobs in flight (their nodes are owed too).

        In flight: this runtime's job, and the batch another runtime's live
        claim names (read without the lock: a hint, see :mod:`memory.ledger._claim`).

        Walks back from the tip and stops at the newest own marker, so the cost
        follows the backlog; a branch with no own marker is read whole.
        """
        return not_busy(self._owed_tail(tip), self._busy())

    def _owed_tail(self, tip: str | None) -> list[SourceRecord]:
        """SPEC §6.2 on the branch at ``tip``, jobs in flight included."""
        return self.tails.of(self.core, tip)

    def _busy(self) -> set[str]:
        """The node ids a job holds: this runtime's in flight, another runtime's claim."""
        busy: set[str] = set()
        job = self.ledger.in_flight
        if job is not None:
            busy.update(job.batch.node_ids)
        holder = self._claim_holder()
        if holder is not None:
            busy.update(holder.nodes)
        return busy

    def _claim_holder(self) -> Claim | None:
        """Another runtime's live claim: a hint read without the lock, once per message.

        The stat behind it is a syscall on the event loop's thread; one per
        message is as fresh as one per read (a claim written during the
        message is ordered after it), and the decision itself is always
        taken under the session lock (``claim_batch`` reads the file
        again). A claim or release of ours (a thread hop) forgets it.
        """
        if not self._holder_read:
            self._holder = self.claims.holder(self.parts.claims.instance_id,
                                              self.parts.config.clock())
            self._holder_read = True
        return self._holder

    def _forget_holder(self) -> None:
        self._holder, self._holder_read = None, False

    # -- messages -----------------------------------------------------------------

    async def dispatch(self, message: Any) -> Any:
        match message:
            case Pending(tip):
                return self.owed(tip)
            case StillOwed(boundary):
                return self._still_owed(boundary=boundary)
            case Flush():
                return await self._start_boundary(from_watchdog=False)
            case CheckIdle(now, processed):
                meta = self.core.meta()
                updated_at = meta.get("updated_at")
                if not isinstance(updated_at, (int, float)) or updated_at == processed:
                    return None
                if now - updated_at < self.parts.config.session_idle:
                    return None
                return await self._start_boundary(from_watchdog=True)
            case JobFinished(job_id, outcome):
                await self._job_finished(job_id, outcome)
                return None
            case MarkNext():
                await self._mark_next()
                return None
            case RetryDue():
                self.ledger.retry_pending = False
                await self._plan()
                return None
            case Reconsider():
                return await self._plan()
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
                    self.parts.events.emit("markers_repair_failed", session=self.session,
                                      error=str(error))
                    return []
        return await super().dispatch(message)

    async def on_start(self) -> None:
        await super().on_start()
        ledger = self.ledger
        ledger.mark_queued = False  # a crash may have set the queued one aside
        if ledger.unmarked is not None and not ledger.merge_failed:
            self._mark_later()
        with contextlib.suppress(ActorError):  # a full mailbox: the watchdog's scan asks again
            self.ref.cast_nowait(RepairMarkers())

    async def handle(self, message: Any) -> Any:
        self._forget_holder()
        try:
            core = self._core
            if isinstance(message, RepairMarkers) and message.reload and core is not None:
                # It reads every file in its first thread hop: the freshness
                # check (two stats on the event loop) would decide nothing.
                with core.trusting_index():
                    return await self.dispatch(message)
            return await super().handle(message)
        except SESSION_ERRORS as exc:
            if self._core is None:  # the session cannot be opened: no boundary waits on it
                await self._session_error("opening it", exc)
            raise

    async def tip_moved(self, event: TipMoved) -> None:
        self.parts.touch(self.session, self.core.meta().get("updated_at"))
        if event.head_moved or self.ledger.boundary is not None:
            await self._plan()

    async def on_stop(self, reason: StopReason) -> None:
        if (crash := reason.crash) is not None:  # whoever waits on the boundary hears it now
            with contextlib.suppress(Exception):
                await self._finish_boundary(
                    BoundaryOutcome.ERROR,
                    f"session {self.session!r}: its actor crashed ({describe_error(crash)}); "
                    "it restarts and the turns stay owed", crash)
        await super().on_stop(reason)

    # -- the planner --------------------------------------------------------------

    async def _start_boundary(self, *, from_watchdog: bool) -> BoundaryResult:
        updated_at = self.core.meta().get("updated_at")
        result = BoundaryResult(
            updated_at if isinstance(updated_at, (int, float)) else None, from_watchdog,
            requested_at=self.parts.config.clock(),
        )
        if self.ledger.boundary is None:
            self.ledger.boundary = result
        self.ledger.waiters.append(result)
        try:
            self.ref.cast_nowait(Reconsider())  # reply first, plan next
        except ActorError:  # a full mailbox: plan now rather than never
            await self._plan()
        return result

    async def _plan(self) -> str | None:
        """Submit the next job if the rules call for one; finish the boundary if done.

        Plan, claim, confirm: the batch chosen on the current index is
        claimed under the session lock (which also brings the index up to
        date), chosen again on that index and submitted only if it is the
        same. Another runtime's live claim means its job is in flight: wait
        for it (a boundary stays open; the job may still fail).

        Never raises for :data:`SESSION_ERRORS`: the error ends the boundary
        (see :meth:`_session_error`) and its reason is returned (None when
        planning went through). Anything else is a bug: the boundary ends
        with it, then the actor crashes.
        """
        try:
            self._doing = "walking its branches"
            await self._plan_next()
        except SESSION_ERRORS as exc:
            return await self._session_error(self._doing, exc)
        except Exception as exc:
            await self._session_error(self._doing, exc)
            raise
        return None

    async def _session_error(self, doing: str, error: BaseException) -> str:
        """End the open boundary with ERROR; log the skipped session once per distinct reason."""
        reason = f"session {self.session!r}: {doing} failed: {describe_error(error)}"
        if isinstance(error, StoreError) and self._core is not None:
            with contextlib.suppress(Exception):  # a broken chain often comes from these
                unreadable = [problem.path for problem in self._core.problems]
                if unreadable:
                    reason += f" (unreadable, skipped: {', '.join(unreadable)})"
        ledger = self.ledger
        ledger.last_reason = reason
        if ledger.reported_error != reason:
            ledger.reported_error = reason
            self.parts.events.emit("skipped", session=self.session, reason=reason)
        await self._finish_boundary(BoundaryOutcome.ERROR, reason, error)
        return reason

    async def _plan_next(self) -> None:
        ledger = self.ledger
        job = ledger.in_flight
        updated_at = self.core.meta().get("updated_at")
        blocked = is_quarantined(
            self.parts.quarantine.entries, self.session,
            updated_at if isinstance(updated_at, (int, float)) else None,
        )
        match hold(marks_owed=ledger.unmarked is not None, in_flight=job is not None,
                   retry_pending=ledger.retry_pending, recheck_pending=ledger.recheck_pending,
                   quarantined=blocked is not None):
            case Hold.MARKS_OWED:  # merged a chunk at a time, behind the appends
                if not ledger.retry_pending:  # a refused merge waits for its backoff
                    self._mark_later()
                return
            case Hold.WAITING:
                return
            case Hold.QUARANTINED:
                assert blocked is not None
                await self._finish_boundary(BoundaryOutcome.QUARANTINED, blocked.error)
                return
        claimed: tuple[str, ...] | None = None
        records: list[SourceRecord] | None = None
        try:
            for _ in range(CLAIM_ATTEMPTS):
                self._doing = "walking its branches"
                try:
                    records = self._next_batch()
                except LedgerError as error:  # a refused branch (SPEC §6.1): quarantined
                    if claimed is not None:
                        await self._release_claim()
                    await self._refuse(error)
                    return
                if records is None:
                    break
                refused = uncitable(self.session, records)
                if refused is not None:  # an id written before the entry rule: never retried hot
                    await self._quarantine_batch(tuple(r.message_id for r in records),
                                                 str(refused), failures=0)
                    if claimed is not None:
                        await self._release_claim()
                    await self._finish_boundary(BoundaryOutcome.QUARANTINED, str(refused))
                    return
                node_ids = tuple(record.message_id for record in records)
                if node_ids == claimed:
                    ledger.rechecks = 0
                    ledger.reported_error = None
                    self._submit(records, boundary=ledger.boundary is not None)
                    return
                self._doing = f"claiming batch {span(node_ids)}"
                if self._claim_holder() is not None or not await self._claim(node_ids):
                    break  # another runtime's job is in flight
                claimed = node_ids
        except BaseException:
            if claimed is not None:  # a hint: if giving it back fails too, its lease ends it
                with contextlib.suppress(Exception):
                    await self._release_claim()
            raise
        if claimed is not None:
            self._doing = f"releasing the claim on batch {span(claimed)}"
            await self._release_claim()
        if records is not None or (ledger.boundary is not None
                                   and self._claim_holder() is not None):
            self._recheck_later()  # blocked, or the disk kept moving under the confirmation
            return
        ledger.rechecks = 0
        ledger.reported_error = None
        await self._finish_boundary(BoundaryOutcome.WRITTEN, None)

    def _view(self) -> SessionView:
        """What the planner (:mod:`memory.ledger._plan`) reads of this session now."""
        return SessionView(
            head=self.core.head,
            tips=lambda: [row["head_msg_id"] for row in self.core.list_branches()],
            merged_heads=self._merged_heads,
            owed=self._owed_tail,
            busy=self._busy,
        )

    def _still_owed(self, *, boundary: bool) -> list[tuple[str, list[str]]]:
        """See :class:`StillOwed`: what the rules cover and is not marked yet, in flight or not."""
        config = self.parts.config
        return covered(self._view(), boundary=boundary, now=config.clock(), policy=config.policy)

    def _next_batch(self) -> list[SourceRecord] | None:
        """The batch the rules call for on the current index (SPEC §6.3, §6.6), if any."""
        config = self.parts.config
        return next_batch(self._view(), boundary=self.ledger.boundary is not None,
                          now=config.clock(), policy=config.policy)

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
        claims = self.parts.claims
        self._forget_holder()
        taken = await run_durable(self.claims.claim_batch, node_ids, claims.instance_id,
                                  self.parts.config.clock(), claims.lease)
        if taken:
            claims.taken(self.session)
        return taken

    async def _release_claim(self) -> None:
        self._forget_holder()
        await run_durable(self.claims.release, self.parts.claims.instance_id)
        self.parts.claims.released(self.session)

    def _recheck_later(self) -> None:
        ledger = self.ledger
        if ledger.recheck_pending:
            return
        ledger.recheck_pending = True
        ledger.rechecks += 1
        self.parts.timers.recheck(self.session, ledger.rechecks)

    def _submit(self, records: list[SourceRecord], *, boundary: bool) -> None:
        batch = Batch(self.session, tuple(records), render_prompt(records, ()))
        opened = self.ledger.boundary
        due_at = batch_due_at(records, self.parts.config.policy,
                              None if opened is None else opened.requested_at)
        self.ledger.in_flight = self.parts.jobs.submit(batch, boundary=boundary, due_at=due_at)

    async def _job_finished(self, job_id: int, outcome: WriteOutcome) -> None:
        ledger = self.ledger
        job = ledger.in_flight
        if job is None or job.id != job_id:
            # A report for a job this session no longer waits for, or this very
            # report delivered again after a crash past its merge: plan again
            # (idempotent), since the crash may have cut the planning short.
            await self._plan()
            return
        if ledger.unmarked is not None:  # delivered again: its markers are being merged
            self._mark_later()
            return
        ledger.jobs += 1
        if outcome.failure is None:
            # The job stays in flight until its markers are durable: if this
            # incarnation crashes mid-merge, the next one merges the chunks left
            # (idempotent) instead of the batch being written twice.
            ledger.unmarked, ledger.marks_done = outcome, 0
            self._mark_later()
            return
        ledger.in_flight = None
        self.parts.jobs.done(job)
        with contextlib.suppress(*SESSION_ERRORS):  # a hint: its lease ends it otherwise
            await self._release_claim()
        error = _cycle_reason(outcome)
        ledger.last_result, ledger.last_reason = outcome.failure.value, error
        kind = (BoundaryOutcome.NO_PROGRESS if outcome.failure is FailureKind.EMPTY
                else BoundaryOutcome.FAILED)
        await self._job_failed(job, kind, error)

    async def _job_failed(self, job: WriteJob, kind: BoundaryOutcome, error: str) -> None:
        """A finished job marked nothing: back off, or quarantine after ``max_failures``."""
        ledger = self.ledger
        ledger.failures += 1
        if after_failure(ledger.failures, self.parts.config.max_failures):
            await self._quarantine(job, error)
            await self._finish_boundary(BoundaryOutcome.QUARANTINED, error)
            return
        await self._finish_boundary(kind, error)
        ledger.retry_pending = True
        self.parts.timers.retry(self.session, ledger.failures)

    # -- the markers of a finished job, a chunk at a time ---------------------------

    def _mark_later(self) -> None:
        """Queue the next chunk of markers behind what the mailbox holds (appends first)."""
        ledger = self.ledger
        if ledger.mark_queued:
            return
        try:
            self.ref.cast_nowait(MarkNext())
        except ActorError:  # a full mailbox: the retry timer merges them
            if not ledger.retry_pending:
                ledger.retry_pending = True
                self.parts.timers.retry(self.session, ledger.failures + 1)
            return
        ledger.mark_queued = True

    async def _mark_next(self) -> None:
        """Merge the next chunk of the written job's markers (:func:`marker_chunks`).

        One chunk per message, oldest first: an append that arrives meanwhile
        waits for one chunk, not for the whole batch; a crash between chunks
        leaves a marked prefix of the batch. After the last chunk (merged with
        the claim's release in one hop) the job is done and the session plans.
        """
        ledger = self.ledger
        ledger.mark_queued = False
        job, outcome = ledger.in_flight, ledger.unmarked
        if job is None or outcome is None:  # delivered again after the last chunk
            await self._plan()
            return
        chunks = marker_chunks(outcome.marks, self.parts.workspace_id(), MARKER_CHUNK) or [{}]
        index = min(ledger.marks_done, len(chunks) - 1)
        last = index == len(chunks) - 1
        if not await self._merge_marks(job, chunks[index], release=last):
            return
        ledger.marks_done = index + 1
        if not last:
            self._mark_later()
            return
        if not ledger.merge_failed:
            self.parts.jobs.done(job)
        ledger.unmarked, ledger.in_flight, ledger.merge_failed = None, None, False
        ledger.last_result, ledger.last_reason, ledger.reported_error = "written", None, None
        self.parts.claims.released(self.session)
        ledger.failures = 0
        if ledger.boundary is not None:
            ledger.boundary.batches += 1
        await self._plan()

    async def _merge_marks(self, job: WriteJob, marks: dict[str, dict[str, str]], *,
                           release: bool, attempts: int = 2) -> bool:
        """Merge ``marks`` (and release the claim with the last chunk); True once durable.

        A refused merge (a full or read-only disk, a stuck session lock) is
        tried ``attempts`` times; then the batch is *unmarked*: written to
        memory, its markers owed. The job stays this session's job in flight
        (nothing plans the batch again) but no longer counts for ``drain``;
        the open boundary ends with ERROR, and the merge alone is retried
        after a backoff or at the next plan, never the write.
        """
        ledger = self.ledger
        started = anyio.current_time()
        error: BaseException | None = None
        for _ in range(attempts):
            try:
                self._forget_holder()
                if release:
                    await run_durable(self._mark_and_release, marks)
                else:
                    await run_durable(self.core.merge_node_metadata_batch, marks)
                break
            except SESSION_ERRORS as exc:
                error = exc
        else:
            assert error is not None
            if not ledger.merge_failed:
                ledger.merge_failed = True
                self.parts.jobs.done(job)
            ledger.failures += 1
            reason = (f"session {self.session!r}: batch {span(job.batch.node_ids)} is written "
                      f"to memory but its markers could not be saved: {describe_error(error)}; "
                      "the markers are retried, the batch is not written again")
            ledger.last_result, ledger.last_reason = "unmarked", reason
            if ledger.reported_error != reason:
                ledger.reported_error = reason
                self.parts.events.emit("skipped", session=self.session, reason=reason)
            await self._finish_boundary(BoundaryOutcome.ERROR, reason, error)
            if not ledger.retry_pending:
                ledger.retry_pending = True
                self.parts.timers.retry(self.session, ledger.failures)
            return False
        self._marked(list(marks), anyio.current_time() - started)
        self._queue_checkpoint()
        return True

    def _mark_and_release(self, marks: dict[str, dict[str, str]]) -> None:
        """One thread hop: the markers first, then the claim (a reader after it sees them)."""
        self.core.merge_node_metadata_batch(marks)
        self.claims.release(self.parts.claims.instance_id)

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
            at=self.parts.config.clock(),
            updated_at=updated_at if isinstance(updated_at, (int, float)) else None,
        )
        try:
            await self.parts.quarantine.park(entry)
        except Exception as exc:  # noqa: BLE001 - parked in memory all the same, and said so
            self.parts.quarantine.entries.append(entry)
            self.parts.events.emit("quarantine_unsaved", session=self.session,
                              nodes=list(entry.node_ids), error=describe_error(exc))
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
        if is_quarantined(self.parts.quarantine.entries, self.session, updated) is None:
            node = error.node if isinstance(error, MissingAuthorityError) else None
            await self.parts.quarantine.park(QuarantineEntry(
                session=self.session, node_ids=(node,) if node is not None else (),
                error=str(error), failures=0, at=self.parts.config.clock(),
                updated_at=updated,
            ))
        await self._finish_boundary(BoundaryOutcome.QUARANTINED, str(error))

    async def _finish_boundary(
        self, outcome: BoundaryOutcome, error: str | None, cause: BaseException | None = None
    ) -> None:
        ledger = self.ledger
        if ledger.boundary is None:
            return
        batches = ledger.boundary.batches
        waiters, ledger.waiters, ledger.boundary = ledger.waiters, [], None
        record = outcome.terminal and any(w.updated_at is not None for w in waiters)
        for waiter in waiters:
            waiter.outcome = outcome
            waiter.error = error
            waiter.cause = cause
            waiter.batches = batches
            waiter.done.set()
        self.parts.events.emit("boundary", session=self.session, outcome=outcome.value,
                          batches=batches, reason=error)
        if record:
            updated_at = next(w.updated_at for w in waiters if w.updated_at is not None)
            try:
                await self.parts.workspace().call(RecordSessionEnd(self.session, updated_at))
                self.parts.events.emit("session_end", session=self.session, updated_at=updated_at)
            except Exception as exc:  # noqa: BLE001 - the watchdog only looks at it again
                self.parts.events.emit("session_end_unsaved", session=self.session,
                                  error=describe_error(exc))


    # -- lost markers ------------------------------------------------------------------

    async def _repair_markers(self) -> list[str]:
        """Set again the markers another writer dropped (:mod:`memory.ledger._lost_markers`).

        Only records behind an own marker are candidates, found on the
        index; the workspace is asked about them only when there are any, so
        a consistent session costs one walk of its branches. The markers go
        through the same merge as a finished job's, in this mailbox; nothing
        is archived or written. A branch that cannot be walked is skipped
        (its error belongs to whoever reads it).
        """
        core = self.core
        workspace_id = self.parts.workspace_id()
        consistent = self._consistent
        if consistent is not None and consistent.still(core, workspace_id):
            return []
        self._consistent = None
        version, merged = core.index_version, core.meta().get("merged_heads")
        branches, walked = listed_branches(core, self.records)
        candidates = sorted({record.source_id for records in branches
                             for record in stranded_records(records, workspace_id)})
        if not candidates:
            if core.index_version == version:
                self._consistent = ConsistentSince(version, merged, walked)
            return []
        archived, cited = await self.parts.workspace().call(
            SourcesInMemory(tuple(candidates)))
        lost = sorted({node for b in branches
                       for node in lost_markers(b, workspace_id, archived, cited)})
        if not lost:
            return []
        started = anyio.current_time()
        await run_durable(core.merge_node_metadata_batch,
                          {node: {MARKER_KEY: workspace_id} for node in lost})
        self._marked(lost, anyio.current_time() - started)
        self._queue_checkpoint()
        self.parts.events.emit("markers_repaired", session=self.session, nodes=lost)
        return lost


    def _marked(self, node_ids: Sequence[str], seconds: float) -> None:
        """Markers of ``node_ids`` are durable, merged in ``seconds`` (an instrument's event)."""
        self.parts.events.emit("marked", session=self.session, node_ids=list(node_ids),
                          seconds=seconds)




def _cycle_reason(outcome: WriteOutcome) -> str:
    if outcome.error is not None:
        return str(outcome.error)
    return outcome.failure.value if outcome.failure is not None else "failed"


def session_factory(parts: SessionParts) -> Callable[[str], MemorySessionActor]:
    return lambda session: MemorySessionActor(parts, session)
