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
  worker reports a ``JobFinished``; the markers are merged here, a chunk
  at a time behind the appends (:mod:`memory.runtime._session_marks`).
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

What to do is decided by pure functions (:mod:`memory.ledger._plan`: a
view of the session and ``now`` in, a plan out); this actor reads the
facts for them and carries the plan out. The per-session ledger state
(:class:`~memory.runtime._session_state.SessionLedger`) is kept by the
runtime, not by the incarnation: a passivated or restarted actor finds its
job in flight, its failure streak and its pending boundary where it left
them. What the actor is given is
:class:`~memory.runtime._session_state.SessionParts`: the job queue, the
timers, the claims, the quarantine, the ledgers, no more; never the
runtime. Its messages (all ``actors.Idempotent``) are in
:mod:`memory.runtime._session_state`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import ClassVar

from actors import ActorError, StopReason
from memory._errors import (
    LedgerError,
    ScriptoriumMemoryError,
    describe_error,
)
from memory.ledger._ledger import batch_due_at, uncitable
from memory.ledger._plan import (
    Hold,
    SessionView,
    covered,
    hold,
    next_batch,
    not_busy,
    span,
)
from memory.ledger._records import SourceRecord
from memory.runtime._session_marks import MarkerOwner
from memory.runtime._session_state import (
    SESSION_ERRORS,
    BoundaryOutcome,
    BoundaryResult,
    CheckIdle,
    ClaimRecheck,
    Flush,
    JobFinished,
    MarkNext,
    MemorySessionMessage,
    Pending,
    Reconsider,
    RepairMarkers,
    RetryDue,
    SessionParts,
    StillOwed,
)
from memory.workspace._quarantine import is_quarantined
from memory.writers._prompt import render_prompt
from memory.writers._writer import Batch
from store import StoreError, TipMoved
from store.lowlevel import run_durable

__all__ = ["JobFinished", "MemorySessionActor", "MemorySessionMessage", "session_factory"]

# Plan, claim, confirm: when the batch planned before the claim differs from
# the one confirmed after it (another runtime wrote meanwhile), claim again,
# this many times at most before looking again later.
CLAIM_ATTEMPTS = 3


# -- the actor --------------------------------------------------------------------


class MemorySessionActor(MarkerOwner):
    """A session actor that also keeps the session's memory ledger."""

    # A branch that cannot be turned into records is the caller's to hear about.
    expected_errors: ClassVar[tuple[type[Exception], ...]] = (StoreError, LedgerError)

    def __init__(self, parts: SessionParts, session: str) -> None:
        super().__init__(parts, session)
        self._doing = ""  # the planning step under way, for an error's reason

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

    # -- messages -----------------------------------------------------------------

    async def dispatch(self, message: MemorySessionMessage) -> object:
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

    async def handle(self, message: MemorySessionMessage) -> object:
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
                await self.outcomes.finish_boundary(
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
        """End the open boundary with ERROR, naming the files the store could not read."""
        unreadable: list[str] = []
        if isinstance(error, StoreError) and self._core is not None:
            with contextlib.suppress(Exception):
                unreadable = [problem.path for problem in self._core.problems]
        return await self.outcomes.session_error(doing, error, unreadable)

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
                await self.outcomes.finish_boundary(BoundaryOutcome.QUARANTINED, blocked.error)
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
                    await self.outcomes.refuse(error, self.core.meta().get("updated_at"))
                    return
                if records is None:
                    break
                refused = uncitable(self.session, records)
                if refused is not None:  # an id written before the entry rule: never retried hot
                    await self.outcomes.quarantine_batch(
                        tuple(r.message_id for r in records), str(refused), 0,
                        self.core.meta().get("updated_at"))
                    if claimed is not None:
                        await self._release_claim()
                    await self.outcomes.finish_boundary(BoundaryOutcome.QUARANTINED, str(refused))
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
        await self.outcomes.finish_boundary(BoundaryOutcome.WRITTEN, None)

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



def session_factory(parts: SessionParts) -> Callable[[str], MemorySessionActor]:
    return lambda session: MemorySessionActor(parts, session)
