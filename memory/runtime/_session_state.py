"""A session actor's messages, and what its runtime keeps for it between incarnations.

The messages of :class:`~memory.runtime._session_actor.MemorySessionActor`
(SPEC §6: what a session owes, its jobs, its boundary), the outcome of a
session boundary, and :class:`SessionLedger`, the per-session state the
runtime keeps so that a passivated or restarted actor finds its job in
flight, its failure streak and its pending boundary where it left them.

Every message here is ``actors.Idempotent`` (delivered again after a
crash): ``Pending`` and ``StillOwed`` read; the others only re-evaluate the
ledger (planning submits nothing while a job is in flight), and a
``JobFinished`` or ``MarkNext`` merges markers (fixed values) while its job
is still in flight, so a redelivery after the merge finds the job gone and
only plans again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from actors import ActorRef, Idempotent, Request
from memory._errors import ScriptoriumMemoryError, describe_error
from memory.ledger._records import SourceRecord
from memory.runtime._config import RuntimeConfig
from memory.runtime._jobs import WriteJob
from memory.runtime._workspace_actor import WorkspaceMessage
from memory.workspace._quarantine import QuarantineEntry
from memory.writers._cycle import WriteOutcome
from memory.writers._writer import Batch
from store import RuntimeLog, SessionMessage, StoreError

__all__ = [
    "SESSION_ERRORS",
    "BoundaryOutcome",
    "BoundaryReport",
    "BoundaryResult",
    "CheckIdle",
    "ClaimRecheck",
    "Events",
    "Flush",
    "JobFinished",
    "JobSink",
    "MarkNext",
    "MemorySessionMessage",
    "ParkedBatches",
    "Pending",
    "Reconsider",
    "RepairMarkers",
    "RetryDue",
    "RuntimeClaims",
    "SessionLedger",
    "SessionLedgers",
    "SessionParts",
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
class MarkNext(Idempotent):
    """Merge the next chunk of the written job's markers (queued behind the appends)."""


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


# What the memory runtime's session actor takes: the store's messages and the ledger's.
MemorySessionMessage = (
    SessionMessage | Pending | StillOwed | Flush | CheckIdle | JobFinished | MarkNext
    | RetryDue | Reconsider | ClaimRecheck | RepairMarkers
)


# -- state kept across incarnations ---------------------------------------------


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
    marks_done: int = 0  # chunks of unmarked's markers durable (memory.ledger._plan.marker_chunks)
    mark_queued: bool = False  # a MarkNext is in the mailbox
    merge_failed: bool = False  # a chunk's merge was refused: drain no longer waits for the job
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


class ParkedBatches(Protocol):
    """The runtime's quarantine (:class:`~memory.runtime._quarantine.Quarantine`)."""

    @property
    def entries(self) -> list[QuarantineEntry]: ...

    async def park(self, entry: QuarantineEntry) -> None: ...


class Events(Protocol):
    """The runtime's event hook (:class:`~memory.runtime._events.EventHook`)."""

    def emit(self, event: str, **fields: Any) -> None: ...


class SessionLedgers:
    """Every session's :class:`SessionLedger`, kept by the runtime across incarnations."""

    def __init__(self) -> None:
        self._ledgers: dict[str, SessionLedger] = {}

    def of(self, session: str) -> SessionLedger:
        ledger = self._ledgers.get(session)
        if ledger is None:
            ledger = self._ledgers[session] = SessionLedger()
        return ledger


@dataclass(frozen=True)
class SessionParts:
    """What a :class:`~memory.runtime._session_actor.MemorySessionActor` is given, no more.

    The runtime's parts a session actor uses, each by the narrow protocol
    above: not the runtime. ``workspace`` and ``workspace_id`` are read
    when used (the workspace actor starts beside the sessions);
    ``touch(session, updated_at)`` moves the idle watchdog's deadline.
    """

    config: RuntimeConfig
    state_dir: str
    runtime_log: RuntimeLog | None
    workspace: Callable[[], ActorRef[WorkspaceMessage]]
    workspace_id: Callable[[], str]
    ledgers: SessionLedgers
    jobs: JobSink
    claims: RuntimeClaims
    timers: SessionTimers
    quarantine: ParkedBatches
    events: Events
    touch: Callable[[str, object], None]
