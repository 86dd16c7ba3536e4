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
- **Every boundary ends, with a reason** (docs/decisions.md, "Session
  boundaries"): an error while planning, walking, claiming or marking (a broken
  branch, an unreadable file, a disk that refuses writes, a session lock
  held too long) ends the open boundary with ``error`` and a reason naming
  the session and the node or file, is reported once as a ``skipped``
  event, and leaves the actor running; a crash of the actor ends it too.

The per-session ledger state (:class:`SessionLedger`) is kept by the
runtime, not by the incarnation: a passivated or restarted actor finds its
job in flight, its failure streak and its pending boundary where it left
them. What the actor needs from the runtime is :class:`SessionHost`, no more.

Every message of this module is ``actors.Idempotent`` (delivered again
after a crash): ``Pending`` reads; the others only re-evaluate the ledger
(``_plan`` submits nothing while a job is in flight), and a ``JobFinished``
merges markers (fixed values) while its job is still in flight, so a
redelivery after the merge finds the job gone and only plans again.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import anyio

from actors import ActorError, ActorRef, Idempotent, Request, StopReason
from memory._errors import (
    LedgerError,
    MissingAuthorityError,
    ScriptoriumMemoryError,
    describe_error,
)
from memory.ledger._claim import Claim
from memory.ledger._ledger import (
    NodeRecords,
    OwedTails,
    batch_due_at,
    first_batch,
    may_write,
    should_write,
    should_write_at_boundary,
    uncitable,
)
from memory.ledger._lost_markers import lost_markers, stranded_records
from memory.ledger._records import MARKER_KEY, SourceRecord
from memory.runtime._claims import SessionClaims
from memory.runtime._config import RuntimeConfig
from memory.runtime._jobs import WriteJob
from memory.runtime._workspace_actor import SourcesInMemory, WorkspaceMessage
from memory.workspace._quarantine import QuarantineEntry, is_quarantined
from memory.writers._cycle import FailureKind, WriteOutcome
from memory.writers._prompt import render_prompt
from memory.writers._writer import Batch
from store import (
    RuntimeLog,
    SessionActor,
    SessionCore,
    SessionMessage,
    SessionOptions,
    StoreError,
    TipMoved,
)
from store.lowlevel import run_durable

ROOT = "ROOT"  # SPEC §4: the predecessor of a session's first turn; a walk ends there

__all__ = [
    "SESSION_ERRORS",
    "BoundaryOutcome",
    "BoundaryReport",
    "BoundaryResult",
    "CheckIdle",
    "ClaimRecheck",
    "Flush",
    "JobFinished",
    "JobSink",
    "MemorySessionActor",
    "Pending",
    "Reconsider",
    "RepairMarkers",
    "RetryDue",
    "RuntimeClaims",
    "SessionHost",
    "SessionLedger",
    "SessionTimers",
    "StillOwed",
]

# What stops one session's planning or marking but not the runtime: the disk
# holds something the store cannot read or walk (StoreError), the disk refused
# (OSError: full, read-only, no permission), a branch cannot become records.
SESSION_ERRORS = (StoreError, OSError, ScriptoriumMemoryError)


# -- messages ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pending(Idempotent, Request[list[SourceRecord]]):
    """The owed records of the branch ending at ``tip`` (default: head), minus those in flight."""

    tip: str | None = None


@dataclass(frozen=True, slots=True)
class Flush(Idempotent, Request["BoundaryResult"]):
    """Start a session boundary now; replies with a :class:`BoundaryResult` to await."""


@dataclass(frozen=True, slots=True)
class CheckIdle(Idempotent):
    """From the idle watchdog: run the boundary if idle for ``idle_after`` and not yet processed."""

    now: float
    processed_updated_at: float | None


@dataclass(frozen=True, slots=True)
class JobFinished(Idempotent, Request[None]):
    job_id: int
    outcome: WriteOutcome


@dataclass(frozen=True, slots=True)
class RetryDue(Idempotent):
    """The backoff after a failed job has elapsed."""


@dataclass(frozen=True, slots=True)
class Reconsider(Idempotent, Request["str | None"]):
    """Something outside changed (another process appended): evaluate the trigger again."""


@dataclass(frozen=True, slots=True)
class ClaimRecheck(Idempotent):
    """Another runtime held this session's claim a moment ago: plan again (not a failure)."""


@dataclass(frozen=True, slots=True)
class RepairMarkers(Idempotent, Request[list[str]]):
    """Find this session's lost markers and set them again; replies with the node ids marked.

    Sent by the actor to itself on every activation, and by the idle
    watchdog's scan when the session's files changed (:mod:`memory.ledger._lost_markers`).
    Those background repairs report a failure as an event and leave it to
    the next scan; ``raise_errors`` hands it to the caller instead.
    ``reload`` reads every node file again first: the agent's write that
    dropped a marker may fall in the same timestamp tick as our marker
    merge, and then the index's freshness fingerprint does not move.
    """

    raise_errors: bool = False
    reload: bool = False


@dataclass(frozen=True, slots=True)
class StillOwed(Idempotent, Request[list[tuple[str, list[str]]]]):
    """Per tip the rules cover, the node ids still owed (jobs in flight included).

    ``boundary``: the tips a session boundary covers (the head branch, and
    other tips owing a whole batch); otherwise the head branch if the
    trigger rule calls for a write. Replies ``[(tip, [node ids]), ...]``.
    """

    boundary: bool


# -- state kept across incarnations ---------------------------------------------


# What the memory runtime's session actor takes: the store's messages and the ledger's.
MemorySessionMessage = (
    SessionMessage | Pending | StillOwed | Flush | CheckIdle | JobFinished | RetryDue
    | Reconsider | ClaimRecheck | RepairMarkers
)


class BoundaryOutcome(enum.Enum):
    WRITTEN = "written"  # every branch the rules cover is written
    NO_PROGRESS = "no progress"  # a job changed nothing: terminal, not a loop
    QUARANTINED = "quarantined"  # terminal until the session changes or a release
    FAILED = "failed"  # retryable: the watchdog tries again at its next poll
    # Not the writer: planning, walking, claiming or marking raised (a broken
    # branch, an unreadable file, a full or read-only disk, a stuck lock).
    # Retryable like FAILED; the reason names the session and the node or file.
    ERROR = "error"

    @property
    def terminal(self) -> bool:
        return self not in (BoundaryOutcome.FAILED, BoundaryOutcome.ERROR)


@dataclass
class BoundaryResult:
    """Completion of one session boundary; ``await result.wait()`` outside the actor."""

    updated_at: float | None
    from_watchdog: bool
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: BoundaryOutcome | None = None
    error: str | None = None  # the reason, for every outcome but WRITTEN
    batches: int = 0
    cause: BaseException | None = None  # the exception behind ERROR
    requested_at: float | None = None  # the wall clock when it was asked for

    async def wait(self) -> BoundaryOutcome:
        await self.done.wait()
        assert self.outcome is not None
        return self.outcome


@dataclass(frozen=True)
class BoundaryReport:
    """How one session boundary ended and why (``MemoryRuntime.boundary``)."""

    session: str
    outcome: BoundaryOutcome
    reason: str
    batches: int = 0
    cause: BaseException | None = None

    @classmethod
    def of(cls, session: str, result: BoundaryResult) -> BoundaryReport:
        assert result.outcome is not None
        if result.outcome is BoundaryOutcome.WRITTEN:
            reason = f"{result.batches} batch(es) written"
        else:
            reason = result.error or result.outcome.value
        return cls(session, result.outcome, reason, result.batches, result.cause)

    @classmethod
    def failed(cls, session: str, error: BaseException) -> BoundaryReport:
        """The boundary could not even start (no such session, an actor that cannot open it)."""
        text = describe_error(error)
        reason = text if f"session {session!r}" in text else f"session {session!r}: {text}"
        return cls(session, BoundaryOutcome.ERROR, reason, 0, error)


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
    unmarked: WriteOutcome | None = None  # in_flight was written; its markers are still owed
    jobs: int = 0  # jobs finished (written or not), so a command can tell which ran for it
    last_result: str | None = None  # "written" or a FailureKind value, of the last finished job
    last_reason: str | None = None  # why the last job, planning or marking failed
    reported_error: str | None = None  # the last error logged as "skipped" (logged once)


# -- what the actor needs from its runtime -----------------------------------------


class JobSink(Protocol):
    """The job queue, as a session actor uses it (:class:`~memory.runtime._jobs.JobQueue`)."""

    def submit(self, batch: Batch, *, boundary: bool,
               due_at: float | None = None) -> WriteJob: ...

    def done(self, job: WriteJob) -> None: ...


class RuntimeClaims(Protocol):
    """The runtime's claims (:class:`~memory.runtime._claims.ClaimsLedger`)."""

    @property
    def instance_id(self) -> str: ...

    @property
    def lease(self) -> float: ...

    def taken(self, session: str) -> None: ...

    def released(self, session: str) -> None: ...


class SessionTimers(Protocol):
    """Delayed messages to a session actor (:class:`~memory.runtime._timers.Timers`)."""

    def retry(self, session: str, failures: int) -> None:
        """Send ``RetryDue`` after the retry backoff for ``failures`` consecutive failures."""

    def recheck(self, session: str, attempt: int) -> None:
        """Send ``ClaimRecheck`` after the recheck backoff for ``attempt``."""


class SessionHost(Protocol):
    """What a :class:`MemorySessionActor` uses of its runtime, and nothing else."""

    @property
    def config(self) -> RuntimeConfig: ...

    @property
    def state_dir(self) -> str: ...

    @property
    def workspace_id(self) -> str: ...

    @property
    def runtime_log(self) -> RuntimeLog | None: ...

    @property
    def workspace_ref(self) -> ActorRef[WorkspaceMessage]: ...

    @property
    def quarantined(self) -> list[QuarantineEntry]: ...

    @property
    def jobs(self) -> JobSink: ...

    @property
    def claims(self) -> RuntimeClaims: ...

    @property
    def timers(self) -> SessionTimers: ...

    def ledger(self, session: str) -> SessionLedger: ...

    def emit(self, event: str, **fields: Any) -> None: ...

    def watchdog_touch(self, session: str, updated_at: object) -> None: ...

    async def quarantine(self, entry: QuarantineEntry) -> None: ...

    async def record_session_end(self, session: str, updated_at: float) -> None: ...


# Plan, claim, confirm: when the batch planned before the claim differs from
# the one confirmed after it (another runtime wrote meanwhile), claim again,
# this many times at most before looking again later.
CLAIM_ATTEMPTS = 3


# -- the actor --------------------------------------------------------------------


class MemorySessionActor(SessionActor[MemorySessionMessage]):
    """A session actor that also keeps the session's memory ledger."""

    # A branch that cannot be turned into records is the caller's to hear about.
    expected_errors: ClassVar[tuple[type[Exception], ...]] = (StoreError, LedgerError)

    def __init__(self, runtime: SessionHost, session: str) -> None:
        super().__init__(runtime.state_dir, session, options=SessionOptions(
            files=runtime.config.files, clock=runtime.config.clock,
            lock_timeout=runtime.config.lock_timeout, log=runtime.runtime_log,
        ))
        self.runtime = runtime
        self.ledger = runtime.ledger(session)
        self.records = NodeRecords(session, counter=runtime.config.counter)
        self.tails = OwedTails(self.records, runtime.workspace_id)
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
            self._claims = SessionClaims(core, self.runtime.config.files)
        return self._claims

    # -- reading what is owed ---------------------------------------------------

    def owed(self, tip: str | None) -> list[SourceRecord]:
        """SPEC §6.2 on the branch at ``tip``, minus the jobs in flight (their nodes are owed too).

        In flight: this runtime's job, and the batch another runtime's live
        claim names (read without the lock: a hint, see :mod:`memory.ledger._claim`).

        Walks back from the tip and stops at the newest own marker, so the cost
        follows the backlog; a branch with no own marker is read whole.
        """
        return self._not_busy(self._owed_tail(tip))

    def _owed_tail(self, tip: str | None) -> list[SourceRecord]:
        """SPEC §6.2 on the branch at ``tip``, jobs in flight included."""
        return self.tails.of(self.core, tip)

    def _not_busy(self, owed: list[SourceRecord]) -> list[SourceRecord]:
        """``owed`` minus this runtime's job in flight and the batch another runtime claims."""
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
        """Another runtime's live claim: a hint read without the lock, once per message.

        The stat behind it is a syscall on the event loop's thread; one per
        message is as fresh as one per read (a claim written during the
        message is ordered after it), and the decision itself is always
        taken under the session lock (``claim_batch`` reads the file
        again). A claim or release of ours (a thread hop) forgets it.
        """
        if not self._holder_read:
            self._holder = self.claims.holder(self.runtime.claims.instance_id,
                                              self.runtime.config.clock())
            self._holder_read = True
        return self._holder

    def _forget_holder(self) -> None:
        self._holder, self._holder_read = None, False

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
                if now - updated_at < self.runtime.config.session_idle:
                    return None
                return await self._start_boundary(from_watchdog=True)
            case JobFinished(job_id, outcome):
                await self._job_finished(job_id, outcome)
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
                    self.runtime.emit("markers_repair_failed", session=self.session,
                                      error=str(error))
                    return []
        return await super().dispatch(message)

    async def on_start(self) -> None:
        await super().on_start()
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
        self.runtime.watchdog_touch(self.session, self.core.meta().get("updated_at"))
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
            requested_at=self.runtime.config.clock(),
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
            self.runtime.emit("skipped", session=self.session, reason=reason)
        await self._finish_boundary(BoundaryOutcome.ERROR, reason, error)
        return reason

    async def _plan_next(self) -> None:
        ledger = self.ledger
        job = ledger.in_flight
        if (ledger.unmarked is not None and job is not None
                and not await self._mark(job, ledger.unmarked, attempts=1)):
            return
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
                self._doing = f"claiming batch {_span(node_ids)}"
                if self._claim_holder() is not None or not await self._claim(node_ids):
                    break  # another runtime's job is in flight
                claimed = node_ids
        except BaseException:
            if claimed is not None:  # a hint: if giving it back fails too, its lease ends it
                with contextlib.suppress(Exception):
                    await self._release_claim()
            raise
        if claimed is not None:
            self._doing = f"releasing the claim on batch {_span(claimed)}"
            await self._release_claim()
        if records is not None or (ledger.boundary is not None
                                   and self._claim_holder() is not None):
            self._recheck_later()  # blocked, or the disk kept moving under the confirmation
            return
        ledger.rechecks = 0
        ledger.reported_error = None
        await self._finish_boundary(BoundaryOutcome.WRITTEN, None)

    def _still_owed(self, *, boundary: bool) -> list[tuple[str, list[str]]]:
        """See :class:`StillOwed`: what the rules cover and is not marked yet, in flight or not."""
        config = self.runtime.config
        owed = self._owed_tail
        head = self.core.head
        if boundary:
            return [(tip, [r.message_id for r in records])
                    for tip, records in self._boundary_branches(owed)]
        if head is None:
            return []
        records = owed(head)
        if records and should_write(records, config.clock(), config.policy):
            return [(head, [r.message_id for r in records])]
        return []

    def _next_batch(self) -> list[SourceRecord] | None:
        """The batch the rules call for on the current index (SPEC §6.3, §6.6), if any."""
        config = self.runtime.config
        if self.ledger.boundary is None:
            head = self.core.head
            if head is None:
                return None
            owed = self._owed_tail(head)
            now = config.clock()
            # After each append: the claim is read only when the trigger can fire at all.
            if not may_write(owed, now, config.policy):
                return None
            owed = self._not_busy(owed)
            if should_write(owed, now, config.policy):
                return first_batch(owed, config.policy.threshold)
            return None
        for _, owed in self._boundary_branches(self.owed):
            return first_batch(owed, config.policy.threshold)
        return None

    def _boundary_branches(
        self, owed: Callable[[str], list[SourceRecord]]
    ) -> Iterator[tuple[str, list[SourceRecord]]]:
        """The branches a session boundary writes, in order, with what each owes (SPEC §6.6).

        The head branch completely; every other live tip only if it owes a
        whole batch (a short abandoned branch is a rejected retry); then the
        merged heads completely: a sub-agent's branch attached back is work
        someone kept, not a retry, and it is never a tip (docs/decisions.md).
        """
        head = self.core.head
        if head is not None:
            records = owed(head)
            if records:
                yield head, records
        for row in self.core.list_branches():
            tip = row["head_msg_id"]
            if tip == head:
                continue
            records = owed(tip)
            if should_write_at_boundary(records, head=False, policy=self.runtime.config.policy):
                yield tip, records
        for tip in self._merged_heads():
            if tip == head:
                continue
            records = owed(tip)
            if records:
                yield tip, records

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
        claims = self.runtime.claims
        self._forget_holder()
        taken = await run_durable(self.claims.claim_batch, node_ids, claims.instance_id,
                                  self.runtime.config.clock(), claims.lease)
        if taken:
            claims.taken(self.session)
        return taken

    async def _release_claim(self) -> None:
        self._forget_holder()
        await run_durable(self.claims.release, self.runtime.claims.instance_id)
        self.runtime.claims.released(self.session)

    def _recheck_later(self) -> None:
        ledger = self.ledger
        if ledger.recheck_pending:
            return
        ledger.recheck_pending = True
        ledger.rechecks += 1
        self.runtime.timers.recheck(self.session, ledger.rechecks)

    def _submit(self, records: list[SourceRecord], *, boundary: bool) -> None:
        batch = Batch(self.session, tuple(records), render_prompt(records, ()))
        opened = self.ledger.boundary
        due_at = batch_due_at(records, self.runtime.config.policy,
                              None if opened is None else opened.requested_at)
        self.ledger.in_flight = self.runtime.jobs.submit(batch, boundary=boundary, due_at=due_at)

    async def _job_finished(self, job_id: int, outcome: WriteOutcome) -> None:
        ledger = self.ledger
        job = ledger.in_flight
        if job is None or job.id != job_id:
            # A report for a job this session no longer waits for, or this very
            # report delivered again after a crash past its merge: plan again
            # (idempotent), since the crash may have cut the planning short.
            await self._plan()
            return
        ledger.jobs += 1
        if outcome.failure is None:
            # The job stays in flight until its markers are durable: if this
            # incarnation crashes mid-merge, the redelivered report finds it and
            # merges again (idempotent) instead of the batch being written twice.
            if await self._mark(job, outcome, attempts=2):
                await self._plan()
            return
        ledger.in_flight = None
        self.runtime.jobs.done(job)
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
        if ledger.failures >= self.runtime.config.max_failures:
            await self._quarantine(job, error)
            await self._finish_boundary(BoundaryOutcome.QUARANTINED, error)
            return
        await self._finish_boundary(kind, error)
        ledger.retry_pending = True
        self.runtime.timers.retry(self.session, ledger.failures)

    async def _mark(self, job: WriteJob, outcome: WriteOutcome, *, attempts: int) -> bool:
        """Merge the markers of a written job; True once they are durable.

        A refused merge (a full or read-only disk, a stuck session lock) is
        tried ``attempts`` times; then the batch is *unmarked*: written to
        memory, its markers owed. The job stays this session's job in flight
        (nothing plans the batch again) but no longer counts for ``drain``;
        the open boundary ends with ERROR, and the merge alone is retried
        after a backoff or at the next plan, never the write.
        """
        ledger = self.ledger
        marks = {node_id: {MARKER_KEY: self.runtime.workspace_id} for node_id in outcome.marks}
        started = anyio.current_time()
        error: BaseException | None = None
        for _ in range(attempts):
            try:
                self._forget_holder()
                await run_durable(self._mark_and_release, marks)
                break
            except SESSION_ERRORS as exc:
                error = exc
        else:
            assert error is not None
            if ledger.unmarked is None:
                ledger.unmarked = outcome
                self.runtime.jobs.done(job)
            ledger.failures += 1
            reason = (f"session {self.session!r}: batch {_span(job.batch.node_ids)} is written "
                      f"to memory but its markers could not be saved: {describe_error(error)}; "
                      "the markers are retried, the batch is not written again")
            ledger.last_result, ledger.last_reason = "unmarked", reason
            if ledger.reported_error != reason:
                ledger.reported_error = reason
                self.runtime.emit("skipped", session=self.session, reason=reason)
            await self._finish_boundary(BoundaryOutcome.ERROR, reason, error)
            if not ledger.retry_pending:
                ledger.retry_pending = True
                self.runtime.timers.retry(self.session, ledger.failures)
            return False
        if ledger.unmarked is None:
            self.runtime.jobs.done(job)
        ledger.unmarked = None
        ledger.in_flight = None
        ledger.last_result, ledger.last_reason, ledger.reported_error = "written", None, None
        self._marked(outcome.marks, anyio.current_time() - started)
        self.runtime.claims.released(self.session)
        self._queue_checkpoint()
        ledger.failures = 0
        if ledger.boundary is not None:
            ledger.boundary.batches += 1
        return True

    def _mark_and_release(self, marks: dict[str, dict[str, str]]) -> None:
        """One thread hop: the markers first, then the claim (a reader after it sees them)."""
        self.core.merge_node_metadata_batch(marks)
        self.claims.release(self.runtime.claims.instance_id)

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
        try:
            await self.runtime.quarantine(entry)
        except Exception as exc:  # noqa: BLE001 - parked in memory all the same, and said so
            self.runtime.quarantined.append(entry)
            self.runtime.emit("quarantine_unsaved", session=self.session,
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
        if is_quarantined(self.runtime.quarantined, self.session, updated) is None:
            node = error.node if isinstance(error, MissingAuthorityError) else None
            await self.runtime.quarantine(QuarantineEntry(
                session=self.session, node_ids=(node,) if node is not None else (),
                error=str(error), failures=0, at=self.runtime.config.clock(),
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
        self.runtime.emit("boundary", session=self.session, outcome=outcome.value,
                          batches=batches, reason=error)
        if record:
            updated_at = next(w.updated_at for w in waiters if w.updated_at is not None)
            try:
                await self.runtime.record_session_end(self.session, updated_at)
            except Exception as exc:  # noqa: BLE001 - the watchdog only looks at it again
                self.runtime.emit("session_end_unsaved", session=self.session,
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
        workspace_id = self.runtime.workspace_id
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
        archived, cited = await self.runtime.workspace_ref.call(
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
        self.runtime.emit("markers_repaired", session=self.session, nodes=lost)
        return lost


    def _marked(self, node_ids: Sequence[str], seconds: float) -> None:
        """Markers of ``node_ids`` are durable, merged in ``seconds`` (an instrument's event)."""
        self.runtime.emit("marked", session=self.session, node_ids=list(node_ids),
                          seconds=seconds)


def listed_branches(
    core: SessionCore, records: NodeRecords
) -> tuple[list[list[SourceRecord]], set[str]]:
    """The records of every listed branch that can be walked, and the ids of their nodes.

    A branch that cannot be walked is skipped (its error belongs to whoever reads it).
    """
    branches: list[list[SourceRecord]] = []
    walked: set[str] = set()
    for row in core.list_branches():
        try:
            nodes = core.branch_nodes(row["head_msg_id"])
            found = [r for r in map(records.of, nodes) if r is not None]
        except (StoreError, LedgerError):
            continue
        branches.append(found)
        walked.update(node.id for node in nodes)
    return branches, walked


class ConsistentSince:
    """A session the lost-marker repair found consistent, and what may change without a walk.

    A lost marker is an unmarked record behind an own marker on a branch.
    After a walk that found none, ``covered`` holds every node of the
    walked branches: the branch ending at any of them has none either (its
    records are a prefix of a walked branch's, and the newest own marker of
    a prefix is no newer). Adding nodes cannot create one unless a new node
    carries an own marker or continues a node outside ``covered``: an added
    node only removes tips (a child), the trunk can only move onto new
    nodes, and a tip's branch is its predecessor's plus unmarked new turns.
    Anything else since (a merge, a rewind, a rebuild that found other
    nodes, ``merged_heads`` changed, which decides which tips are listed)
    means walking again.
    """

    def __init__(self, version: int, merged: object, covered: set[str]) -> None:
        self.version = version
        self.merged = merged
        self.covered = covered

    def still(self, core: SessionCore, workspace_id: str) -> bool:
        """True if the session is still consistent; then it is kept for its current version."""
        added = core.added_since(self.version)
        if added is None or core.meta().get("merged_heads") != self.merged:
            return False
        for node_id in added:
            node = core.node(node_id)
            if node.metadata.get(MARKER_KEY) == workspace_id:
                return False
            previous = node.predecessor
            if previous is not None and previous != ROOT and previous not in self.covered:
                return False
            self.covered.add(node_id)
        self.version = core.index_version
        return True


def _span(node_ids: tuple[str, ...]) -> str:
    return node_ids[0] if len(node_ids) == 1 else f"{node_ids[0]}..{node_ids[-1]}"


def _cycle_reason(outcome: WriteOutcome) -> str:
    if outcome.error is not None:
        return str(outcome.error)
    return outcome.failure.value if outcome.failure is not None else "failed"


def session_factory(runtime: SessionHost) -> Callable[[str], MemorySessionActor]:
    return lambda session: MemorySessionActor(runtime, session)
