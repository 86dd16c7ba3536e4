"""The memory runtime: the supervision tree of SPEC §2, embedded or headless.

::

    MemoryRuntime (root supervisor, one_for_one)
    ├── WorkspaceActor          permanent   <state>/memory
    ├── SessionSupervisor       dynamic     one MemorySessionActor per active session
    ├── WriterPool              one_for_one K WriterWorker, restarted with backoff
    └── IdleWatchdog            permanent

``open_runtime`` starts the tree and yields a :class:`MemoryRuntime`, the
handle an agent embeds: ``rt.sessions`` appends and reads turns through
their session actors, ``rt.pending`` / ``rt.flush`` / ``rt.drain`` drive
memory. Everything a child needs from its siblings (the job queue, the
per-session ledgers, references) lives here, outside the children, so a
restarted child finds it intact.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import secrets
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from anyio.abc import TaskGroup

from actors import ActorError, ActorRef, open_actor
from memory._errors import BoundaryError, ConcurrentUpdate
from memory.ledger._ledger import WritePolicy
from memory.ledger._records import MARKER_KEY, SourceRecord
from memory.ledger._tokens import TokenCounter, default_counter
from memory.maintenance._backfill import BackfillReport, backfill
from memory.maintenance._migrate import MigrationReport, Progress, migrate
from memory.runtime._pool import worker_factory
from memory.runtime._session_actor import (
    SESSION_ERRORS,
    BoundaryOutcome,
    BoundaryReport,
    BoundaryResult,
    ClaimRecheck,
    Flush,
    Pending,
    Reconsider,
    RepairMarkers,
    RetryDue,
    SessionLedger,
    StillOwed,
    WriteJob,
    session_factory,
)
from memory.runtime._settings import apply_timings, check_lock_timeout, read_settings
from memory.runtime._watchdog import IdleWatchdog, PollNow, Touched
from memory.runtime._workspace_actor import (
    ArchiveBatches,
    BatchesCovered,
    CheckEdits,
    CitedSources,
    CommitEdits,
    QuarantineBatch,
    ReadQuarantine,
    ReadRuntimeState,
    RecordSessionEnd,
    ReleaseQuarantine,
    ReplaceRuntimeState,
    TakeSnapshot,
    WorkspaceActor,
)
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.workspace._quarantine import QuarantineEntry
from memory.workspace._runtime_state import RuntimeState
from memory.workspace._topic_ids import handle_key
from memory.writers._cycle import FailureKind, WriteOutcome, run_group_cycle, run_write_cycle
from memory.writers._extractive import ExtractiveWriter
from memory.writers._prompt import render_prompt
from memory.writers._writer import Batch, GroupWriter, Writer
from store import (
    LOCK_TIMEOUT,
    Append,
    DurableFiles,
    GetBranch,
    InsertSummary,
    ListBranches,
    MergeMetadata,
    RewindTo,
    SessionCore,
    SessionNotFoundError,
    SetHead,
    SpawnBranch,
    StoreError,
    missing_meta,
    release_claim,
    run_durable,
    state_path,
    validate_id,
)
from supervisors import (
    Backoff,
    ChildSpec,
    DynamicSupervisor,
    GetChild,
    Restart,
    Strategy,
    Supervisor,
)

__all__ = ["CONCURRENT_RETRIES", "MemoryRuntime", "RuntimeConfig", "Sessions", "open_runtime"]

CONCURRENT_RETRIES = 8
# A claim's lease when the writer has no timeout: a holder on another host
# that died blocks its sessions at most this long.
UNBOUNDED_LEASE = 24 * 3600.0


@dataclass(frozen=True)
class RuntimeConfig:
    """Every knob of the runtime, with the defaults of SPEC §6-7.

    ``clock`` is the wall clock (``updated_at``, timestamps, idle rules);
    timers use anyio's clock, so tests on virtual time pass a wall clock
    derived from ``anyio.current_time()``.
    """

    policy: WritePolicy = field(default_factory=WritePolicy)
    writer_workers: int = 4
    writer_timeout: float = 600.0
    session_idle: float = 1800.0
    watchdog_poll: float = 300.0
    passivate_after: float = 300.0
    max_failures: int = 5
    retry_backoff: Backoff = field(
        default_factory=lambda: Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0.25)
    )
    worker_backoff: Backoff = field(
        default_factory=lambda: Backoff(initial=0.5, factor=2.0, maximum=30.0, jitter=0.25)
    )
    call_timeout: float | None = 120.0
    # How long a session mutation waits for <sid>/.lock, and a workspace write for
    # memory/.scriptorium/write.lock, held by another process before it fails
    # with SessionLockTimeout / WorkspaceLockTimeout (None: forever).
    lock_timeout: float | None = LOCK_TIMEOUT
    # Claims between runtimes (docs/decisions.md, "Claims between runtimes"):
    # a claim's lease is writer_timeout + claim_margin; a session blocked by
    # another runtime's claim looks again after claim_recheck's delays.
    claim_margin: float = 60.0
    claim_recheck: Backoff = field(
        default_factory=lambda: Backoff(initial=0.05, factor=2.0, maximum=1.0, jitter=0.25)
    )
    clock: Callable[[], float] = time.time
    counter: TokenCounter = field(default_factory=default_counter)
    files: DurableFiles = field(default_factory=DurableFiles)
    seed: int | None = None
    track_deliveries: bool = False
    on_event: Callable[[dict[str, Any]], None] | None = None

    def __post_init__(self) -> None:
        # A NaN or infinite bound would make every lock wait endless.
        check_lock_timeout(self.lock_timeout, "RuntimeConfig.lock_timeout")


class MemoryRuntime:
    """The embedded runtime's handle; build it with :func:`open_runtime`."""

    def __init__(self, state_dir: str, writer: Writer, config: RuntimeConfig) -> None:
        self.state_dir = state_dir
        self.memory_dir = os.path.join(state_dir, "memory")
        self.writer = writer
        self.config = config
        self.sessions = Sessions(self)
        # Names this runtime in the claims it writes (store._claim); new per open_runtime.
        self.instance_id = "r-" + secrets.token_hex(4)
        self._claimed: set[str] = set()  # sessions whose claim this runtime may still hold
        self.quarantined: list[QuarantineEntry] = []
        self.rng = random.Random(config.seed)
        self.deliveries: Counter[tuple[str, str]] = Counter()
        self.latencies: dict[str, deque[float]] = {
            "write_cycle": deque(maxlen=100_000), "marker_merge": deque(maxlen=100_000)}
        self.outcomes: Counter[str] = Counter()
        # With track_deliveries: every batch that was written (session, node ids), in order,
        # and every (session, node) whose marker merge was acknowledged.
        self.written_batches: list[tuple[str, tuple[str, ...]]] = []
        self.marked: set[tuple[str, str]] = set()
        self._ledgers: dict[str, SessionLedger] = {}
        self._known_sessions: set[str] = set()  # ids whose meta.json session_ref has seen
        self._job_ids = itertools.count(1)
        self._submitted_at: dict[int, float] = {}
        self._exclusive = anyio.Lock()  # see Writer.exclusive
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._jobs_send, self._jobs_receive = anyio.create_memory_object_stream[WriteJob](
            max_buffer_size=math.inf
        )
        self._workspace: WorkspaceActor | None = None
        self._sessions: DynamicSupervisor[str] | None = None
        self._watchdog: IdleWatchdog | None = None
        self._task_group: TaskGroup | None = None
        self.root: ActorRef | None = None
        self.migration: MigrationReport | None = None
        # Set by open_runtime once the tree is up; stable across restarts (refs point at cells).
        self.workspace_ref: ActorRef
        self.watchdog_ref: ActorRef

    # -- the tree -------------------------------------------------------------------

    def root_supervisor(self) -> Supervisor:
        config = self.config

        def start_workspace() -> WorkspaceActor:
            self._workspace = WorkspaceActor(self.memory_dir, files=config.files,
                                             clock=config.clock,
                                             lock_timeout=config.lock_timeout)
            return self._workspace

        def start_sessions() -> DynamicSupervisor[str]:
            self._sessions = DynamicSupervisor(
                session_factory(self), restart=Restart.TRANSIENT,
                idle_timeout=config.passivate_after, call_timeout=config.call_timeout,
                capacity=10_000,
            )
            return self._sessions

        def start_pool() -> Supervisor:
            start = worker_factory(self, self._jobs_receive)
            workers = [
                ChildSpec(f"writer-{i}", start, Restart.PERMANENT)
                for i in range(config.writer_workers)
            ]
            return Supervisor(
                workers, strategy=Strategy.ONE_FOR_ONE,
                max_restarts=5 * config.writer_workers, within=10.0,
                backoff=config.worker_backoff, rng=self.rng,
            )

        def start_watchdog() -> IdleWatchdog:
            self._watchdog = IdleWatchdog(self)
            return self._watchdog

        return Supervisor(
            [
                ChildSpec("workspace", start_workspace, Restart.PERMANENT, call_timeout=None,
                          capacity=100_000),
                ChildSpec("sessions", start_sessions, Restart.PERMANENT),
                ChildSpec("writers", start_pool, Restart.PERMANENT),
                ChildSpec("watchdog", start_watchdog, Restart.PERMANENT, capacity=100_000),
            ],
            strategy=Strategy.ONE_FOR_ONE, rng=self.rng,
        )

    @property
    def workspace_id(self) -> str:
        if self._workspace is None or not self._workspace.workspace_id:
            raise RuntimeError("the workspace actor has not started yet")
        return self._workspace.workspace_id

    def session_ref(self, session: str) -> ActorRef:
        """The session's actor; it activates on the first message.

        An unknown id is checked on disk once: a ``stat`` per call on the event
        loop was a tenth of its time under load (a session deleted later fails
        in its actor instead, with the same error).
        """
        if session not in self._known_sessions:
            validate_id(session, "session id")
            sessions = os.path.join(self.state_dir, "sessions")
            if not os.path.isfile(os.path.join(sessions, session, "meta.json")):
                raise missing_meta(sessions, session) or SessionNotFoundError(
                    session, f"sessions/{session}")
            self._known_sessions.add(session)
        if self._sessions is None:
            raise RuntimeError("the session supervisor has not started yet")
        return self._sessions.child(session)

    # -- what session actors and workers use -------------------------------------------

    def ledger(self, session: str) -> SessionLedger:
        ledger = self._ledgers.get(session)
        if ledger is None:
            ledger = self._ledgers[session] = SessionLedger()
        return ledger

    def next_job_id(self) -> int:
        return next(self._job_ids)

    def render_prompt(self, records: Sequence[SourceRecord]) -> str:
        return render_prompt(records, ())

    def submit(self, job: WriteJob) -> None:
        if self._in_flight == 0:
            self._idle = anyio.Event()
        self._in_flight += 1
        self._submitted_at[job.id] = anyio.current_time()
        if self.config.track_deliveries:
            self.deliveries.update((job.batch.session_id, n) for n in job.batch.node_ids)
        self._jobs_send.send_nowait(job)

    def emit(self, event: str, **fields: Any) -> None:
        """One structured event (``scriptorium run --log-json`` prints each as a JSON line)."""
        if self.config.on_event is not None:
            self.config.on_event({"event": event, "at": self.config.clock(), **fields})

    def record_outcome(self, job: WriteJob, outcome: WriteOutcome) -> None:
        result = "written" if outcome.failure is None else outcome.failure.value
        self.outcomes[result] += 1
        started = self._submitted_at.pop(job.id, None)
        elapsed = None
        if started is not None:
            elapsed = anyio.current_time() - started
            self.latencies["write_cycle"].append(elapsed)
        self.emit("job", session=job.batch.session_id, job=job.id, result=result,
                  nodes=len(job.batch.node_ids), files=list(outcome.changed_files),
                  seconds=elapsed, error=None if outcome.error is None else str(outcome.error))
        if self.config.track_deliveries and outcome.failure is None:
            self.written_batches.append((job.batch.session_id, job.batch.node_ids))

    def record_marks(self, session: str, node_ids: Sequence[str], seconds: float) -> None:
        """A session actor merged the markers of a finished job, taking ``seconds``."""
        self.latencies["marker_merge"].append(seconds)
        if self.config.track_deliveries:
            self.marked.update((session, node_id) for node_id in node_ids)

    def abandon_job(self, job: WriteJob) -> None:
        """``job``'s outcome never reached its session: the session forgets it and plans again.

        Synchronous (it runs while a worker is cancelled). A job the session
        already finished, or replaced, is left alone.
        """
        session = job.batch.session_id
        ledger = self.ledger(session)
        if ledger.in_flight is None or ledger.in_flight.id != job.id:
            return
        ledger.in_flight = None
        self._submitted_at.pop(job.id, None)
        self.job_done(job)
        self.emit("abandoned", session=session, job=job.id, nodes=len(job.batch.node_ids))
        with contextlib.suppress(Exception):  # a runtime going down has no session to wake
            self.session_ref(session).cast_nowait(Reconsider())

    def job_done(self, job: WriteJob) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    def schedule_retry(self, session: str, failures: int) -> None:
        self._cast_later(session, RetryDue(), self.config.retry_backoff.delay(failures, self.rng))

    def schedule_claim_recheck(self, session: str, attempt: int) -> None:
        """Another runtime holds the session's claim: ask the session again later."""
        self._cast_later(session, ClaimRecheck(),
                         self.config.claim_recheck.delay(attempt, self.rng))

    def _cast_later(self, session: str, message: object, delay: float) -> None:
        async def later() -> None:
            await anyio.sleep(delay)
            with contextlib.suppress(Exception):
                await self.session_ref(session).cast(message)

        assert self._task_group is not None
        self._task_group.start_soon(later)

    @property
    def claim_lease(self) -> float:
        """How long a claim binds: one write cycle's timeout and a margin."""
        timeout = self.config.writer_timeout
        return (timeout if math.isfinite(timeout) else UNBOUNDED_LEASE) + self.config.claim_margin

    def claim_taken(self, session: str) -> None:
        self._claimed.add(session)

    def claim_released(self, session: str) -> None:
        self._claimed.discard(session)

    def release_claims(self) -> None:
        """On exit: release every claim still held, so no other runtime waits out a lease.

        Synchronous (run it in a worker thread). A failure leaves that claim
        to expire; it is a hint, nothing is lost.
        """
        for session in sorted(self._claimed):
            with contextlib.suppress(OSError, StoreError):
                release_claim(self.state_dir, session, self.instance_id, self.config.files)
        self._claimed.clear()

    async def quarantine(self, entry: QuarantineEntry) -> None:
        await self.workspace_ref.call(QuarantineBatch(entry), timeout=None)
        self.quarantined.append(entry)
        self.outcomes["quarantined"] += 1
        self.emit("quarantined", session=entry.session, nodes=list(entry.node_ids),
                  error=entry.error)

    async def record_session_end(self, session: str, updated_at: float) -> None:
        await self.workspace_ref.call(RecordSessionEnd(session, updated_at), timeout=None)
        self.emit("session_end", session=session, updated_at=updated_at)

    def watchdog_touch(self, session: str, updated_at: object) -> None:
        if isinstance(updated_at, (int, float)):
            with contextlib.suppress(Exception):
                self.watchdog_ref.cast_nowait(Touched(session, float(updated_at)))

    async def write_cycle(self, batch: Batch) -> WriteOutcome:
        """One batch through archive → writer → commit (SPEC §6.4), as workers and backfill run it.

        A concurrent update (another commit landed first) is retried at once
        on a fresh snapshot: contention, not failure. A batch that changed
        nothing but whose every trusted record is archived and already cited
        counts as written (see docs/decisions.md, "Runtime").
        """
        steps = _WorkspaceSteps(self.workspace_ref)

        async def archive(batch: Batch) -> object:
            return await steps.archive((batch,))

        async def commit(batch: Batch, edits: Sequence[TopicEdit], base: str) -> Any:
            return await steps.commit((batch,), edits, base)

        exclusive = self._exclusive if getattr(self.writer, "exclusive", False) else None
        async with exclusive or contextlib.nullcontext():
            for _ in range(1 + CONCURRENT_RETRIES):
                outcome = await run_write_cycle(
                    batch, self.writer, snapshot=steps.snapshot, archive=archive, commit=commit,
                    timeout=self._writer_limit)
                if not (outcome.failure is FailureKind.REJECTED and outcome.error is not None
                        and isinstance(outcome.error.__cause__, ConcurrentUpdate)):
                    break
            if outcome.failure is FailureKind.EMPTY and (await steps.covered((batch,)))[0]:
                outcome = replace(outcome, marks=batch.node_ids, failure=None, error=None)
        return outcome

    @property
    def groups_batches(self) -> bool:
        """Whether waiting batches are committed together (an exclusive :class:`GroupWriter`)."""
        return bool(getattr(self.writer, "exclusive", False)) and isinstance(
            self.writer, GroupWriter)

    async def write_group(self, batches: Sequence[Batch]) -> list[WriteOutcome]:
        """Several batches as one transaction, each one the group does not cover alone.

        See :class:`~memory.writers._writer.GroupWriter`; without one (or for a
        single batch) this is :meth:`write_cycle` per batch.
        """
        writer = self.writer
        if len(batches) < 2 or not self.groups_batches or not isinstance(writer, GroupWriter):
            return [await self.write_cycle(batch) for batch in batches]
        steps = _WorkspaceSteps(self.workspace_ref)
        async with self._exclusive:
            group = await run_group_cycle(
                batches, writer, snapshot=steps.snapshot, archive=steps.archive,
                commit=steps.commit, covered=steps.covered, timeout=self._writer_limit)
        written = sum(outcome is not None for outcome in group.outcomes)
        self.emit("group", batches=len(batches), written=written, fallback=group.fallback)
        return [outcome if outcome is not None else await self.write_cycle(batch)
                for batch, outcome in zip(batches, group.outcomes, strict=True)]

    @property
    def _writer_limit(self) -> float | None:
        timeout = self.config.writer_timeout
        return None if math.isinf(timeout) else timeout

    async def migrate(self, progress: Progress | None = None) -> MigrationReport:
        """SPEC §6.7: position cursors in runtime.json become markers (no-op without cursors)."""
        workspace = self.workspace_ref

        async def read_state() -> RuntimeState:
            state: RuntimeState = await workspace.call(ReadRuntimeState(), timeout=None)
            return state

        async def write_state(state: RuntimeState) -> object:
            return await workspace.call(ReplaceRuntimeState(state), timeout=None)

        async def mark(session: str, node_ids: Sequence[str]) -> object:
            return await self.sessions.merge_node_metadata_batch(
                session, {node: {MARKER_KEY: self.workspace_id} for node in node_ids})

        report = await migrate(self.memory_dir, get_branch=self.sessions.get_branch, mark=mark,
                               read_state=read_state, write_state=write_state, progress=progress)
        if report.had_cursors:
            self.emit("migrated", marked={s: len(ids) for s, ids in report.marked.items()},
                      cursors_removed=report.cursors_removed, errors=list(report.errors))
        return report

    async def backfill(self, progress: Progress | None = None) -> BackfillReport:
        """SPEC §6.8: write every trusted archived source no topic cites yet (markers ignored)."""
        workspace = self.workspace_ref
        cited: frozenset[str] = await workspace.call(CitedSources(), timeout=None)

        async def revision() -> str:
            view: WorkspaceSnapshot = await workspace.call(TakeSnapshot(), timeout=None)
            return view.revision

        return await backfill(
            self.memory_dir, write_batch=self.write_cycle, cited=lambda s: handle_key(s) in cited,
            revision=revision, threshold=self.config.policy.threshold,
            counter=self.config.counter, progress=progress)

    # -- the public API ----------------------------------------------------------------

    async def pending(self, session: str, tip: str | None = None) -> list[SourceRecord]:
        """The owed records of a branch (default: the head branch), oldest first."""
        owed: list[SourceRecord] = await self.session_ref(session).call(
            Pending(tip), timeout=self.config.call_timeout)
        return owed

    async def flush(self, session: str) -> BoundaryOutcome:
        """Run the session boundary now (SPEC §6.6) and wait for its outcome.

        Raises :class:`~memory._errors.BoundaryError` (the original error in
        ``cause``) when the boundary stopped on an error rather than an
        outcome; :meth:`boundary` returns that as a report instead.
        """
        report = await self.boundary(session)
        if report.outcome is BoundaryOutcome.ERROR:
            raise BoundaryError(session, report.reason, report.cause) from report.cause
        return report.outcome

    async def boundary(self, session: str) -> BoundaryReport:
        """Run the session boundary now and report how it ended, and why.

        Never waits forever and never raises for one session's trouble: a
        broken branch, an unreadable file, a refused write, a stuck session
        lock or a session that does not exist end as ``ERROR`` with a reason
        naming the session and the node or file (docs/decisions.md,
        "Boundaries end").
        """
        try:
            result: BoundaryResult = await self.session_ref(session).call(
                Flush(), timeout=self.config.call_timeout)
        except (*SESSION_ERRORS, ActorError) as exc:
            return BoundaryReport.failed(session, exc)
        await result.wait()
        return BoundaryReport.of(session, result)

    async def still_owed(self, session: str, *, boundary: bool) -> list[tuple[str, list[str]]]:
        """Per tip the rules cover (see :class:`StillOwed`), the node ids not marked yet."""
        owed: list[tuple[str, list[str]]] = await self.session_ref(session).call(
            StillOwed(boundary), timeout=self.config.call_timeout)
        return owed

    async def drain(self) -> None:
        """Wait until no write job is in flight."""
        while self._in_flight:
            await self._idle.wait()

    async def repair_markers(self, session: str) -> list[str]:
        """Set again the session's lost markers now (:mod:`memory.ledger._lost_markers`); the node ids.

        The same repair a session actor runs when it activates and when the
        idle watchdog's scan sees its files change; it writes no memory.
        """
        marked: list[str] = await self.session_ref(session).call(
            RepairMarkers(raise_errors=True, reload=True), timeout=self.config.call_timeout)
        return marked

    async def poll_idle(self) -> int:
        """Run the idle watchdog's disk scan now; returns how many sessions it asked."""
        found: int = await self.watchdog_ref.call(PollNow(), timeout=None)
        return found

    async def release(self, session: str | None = None) -> list[QuarantineEntry]:
        released: list[QuarantineEntry] = await self.workspace_ref.call(
            ReleaseQuarantine(session), timeout=None)
        gone = {(e.session, e.node_ids) for e in released}
        self.quarantined = [e for e in self.quarantined if (e.session, e.node_ids) not in gone]
        for entry in released:
            self.ledger(entry.session).failures = 0
            with contextlib.suppress(Exception):
                await self.session_ref(entry.session).cast(RetryDue())
        return released

    def statistics(self) -> dict[str, Any]:
        return {
            "in_flight": self._in_flight,
            "outcomes": dict(self.outcomes),
            "quarantined": len(self.quarantined),
            "sessions_active": 0 if self._sessions is None else len(self._sessions.registry),
            # A writer with usage to report (a model writer's tokens, calls, retries).
            "writer": getattr(self.writer, "statistics", dict)(),
        }


@dataclass(frozen=True)
class _WorkspaceSteps:
    """The write cycle's steps as calls to the workspace actor."""

    workspace: ActorRef

    async def archive(self, batches: Sequence[Batch]) -> object:
        return await self.workspace.call(ArchiveBatches(tuple(batches)), timeout=None)

    async def snapshot(self) -> WorkspaceSnapshot:
        view: WorkspaceSnapshot = await self.workspace.call(TakeSnapshot(), timeout=None)
        return replace(view, check=self.check)

    async def check(self, edits: Sequence[TopicEdit], sources: frozenset[str]) -> Any:
        return await self.workspace.call(CheckEdits(tuple(edits), sources), timeout=None)

    async def commit(self, batches: Sequence[Batch], edits: Sequence[TopicEdit], base: str) -> Any:
        return await self.workspace.call(
            CommitEdits(tuple(batches), tuple(edits), base), timeout=None)

    async def covered(self, batches: Sequence[Batch]) -> list[bool]:
        verdicts: list[bool] = await self.workspace.call(
            BatchesCovered(tuple(batches)), timeout=None)
        return verdicts


class Sessions:
    """Session operations, each through the session's actor (SPEC §8)."""

    def __init__(self, runtime: MemoryRuntime) -> None:
        self._rt = runtime

    async def create(self, title: str = "", session_id: str | None = None) -> str:
        rt = self._rt
        core = await run_durable(lambda: SessionCore.create(
            rt.state_dir, session_id, title=title, files=rt.config.files, clock=rt.config.clock))
        return core.session

    async def _call(self, session: str, message: object) -> Any:
        return await self._rt.session_ref(session).call(message, timeout=self._rt.config.call_timeout)

    async def append(self, session: str, message: Mapping[str, Any]) -> dict[str, Any]:
        node: dict[str, Any] = await self._call(session, Append(message))
        return node

    async def get_branch(self, session: str, tip: str | None = None) -> list[dict[str, Any]]:
        branch: list[dict[str, Any]] = await self._call(session, GetBranch(tip))
        return branch

    async def list_branches(self, session: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = await self._call(session, ListBranches())
        return rows

    async def set_head(self, session: str, node_id: str) -> None:
        await self._call(session, SetHead(node_id))

    async def rewind_to(self, session: str, user_turn: str) -> list[str]:
        stamped: list[str] = await self._call(session, RewindTo(user_turn))
        return stamped

    async def spawn_branch(
        self, session: str, caller_node: str, source: str, prompt: str, name: str | None = None
    ) -> dict[str, Any]:
        node: dict[str, Any] = await self._call(
            session, SpawnBranch(caller_node, source, prompt, name))
        return node

    async def insert_summary(self, session: str, covers_ids: Sequence[str], text: str) -> dict[str, Any]:
        node: dict[str, Any] = await self._call(session, InsertSummary(tuple(covers_ids), text))
        return node

    async def merge_node_metadata_batch(
        self, session: str, patches: Mapping[str, Mapping[str, Any]]
    ) -> list[str]:
        changed: list[str] = await self._call(session, MergeMetadata(patches))
        return changed


@contextlib.asynccontextmanager
async def open_runtime(
    state_dir: str | os.PathLike[str],
    writer: Writer | None = None,
    *,
    config: RuntimeConfig | None = None,
) -> AsyncIterator[MemoryRuntime]:
    """Start the runtime on ``state_dir`` for the block's duration (SPEC §8).

    ``config=None`` is the default config with the timings of
    ``<state>/scriptorium.toml`` (:mod:`memory.runtime._settings`); a given config is
    used as it is. ``writer=None`` uses the built-in extractive writer; ``rt.writer`` may be
    replaced while running (workers read it for each job). On exit, in-flight
    jobs are cancelled (use ``await rt.drain()`` first to finish them) and
    the tree stops in reverse start order.
    """
    state = state_path(state_dir)
    if config is None:  # the defaults, with <state>/scriptorium.toml's timings
        config = apply_timings(RuntimeConfig(), read_settings(state))
    runtime = MemoryRuntime(state, writer or ExtractiveWriter(), config)
    files = runtime.config.files
    await run_durable(files.make_dirs, os.path.join(state, "sessions"))
    try:
        async with open_actor(runtime.root_supervisor(), name="runtime", call_timeout=None) as root:
            runtime.root = root
            runtime.workspace_ref = await root.call(GetChild("workspace"))
            runtime.watchdog_ref = await root.call(GetChild("watchdog"))
            runtime.quarantined = list(await runtime.workspace_ref.call(ReadQuarantine(), timeout=None))
            # SPEC §6.7: before anything computes what a branch owes.
            runtime.migration = await runtime.migrate()
            # Retry timers live in their own group: leaving the block cancels them,
            # then the tree stops gracefully in reverse start order.
            body_error: BaseException | None = None
            async with anyio.create_task_group() as timers:
                runtime._task_group = timers
                try:
                    yield runtime
                except BaseException as exc:  # noqa: BLE001 - re-raised below, not in a group
                    body_error = exc
                finally:
                    timers.cancel_scope.cancel()
            if body_error is not None:
                raise body_error
    finally:
        # A claim lives as long as its runtime (a dead process's claims are void by pid).
        with anyio.CancelScope(shield=True):
            await run_durable(runtime.release_claims)
