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
memory (SPEC §8). Everything a child needs from its siblings lives here,
outside the children, so a restarted child finds it intact; each child
sees only its own narrow protocol of it (``SessionHost``, ``PoolHost``,
``WatchdogHost``). The parts are their own small objects: the job queue
(:mod:`._jobs`), the timers (:mod:`._timers`), the claims ledger
(:mod:`._claims`), the write cycle (:mod:`._write_cycle`) and the event
hook (:mod:`._events`); this module composes them, keeps the per-session
ledgers, runs migration and backfill, and serves the public API.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.from_thread

from actors import ActorError, ActorRef, MailboxOptions, Request, open_actor
from memory._errors import BoundaryError, RecallError, RuntimeClosedError, describe_error
from memory.ledger._records import MARKER_KEY, SourceRecord
from memory.maintenance._backfill import BackfillReport, backfill
from memory.maintenance._migrate import MigrationReport, Progress, migrate
from memory.recall import BranchView, Context, Hit, Recall, SyncReport, TimeBound
from memory.runtime._claims import ClaimsLedger
from memory.runtime._config import RuntimeConfig, apply_timings
from memory.runtime._consolidation import ConsolidationJob
from memory.runtime._events import EventHook
from memory.runtime._jobs import JobQueue, WriteJob
from memory.runtime._pool import worker_factory
from memory.runtime._session_actor import (
    SESSION_ERRORS,
    BoundaryOutcome,
    BoundaryReport,
    BoundaryResult,
    Flush,
    Pending,
    Reconsider,
    RepairMarkers,
    RetryDue,
    SessionLedger,
    StillOwed,
    session_factory,
)
from memory.runtime._settings import read_settings
from memory.runtime._timers import Timers
from memory.runtime._watchdog import IdleWatchdog, PollNow, Touched
from memory.runtime._workspace_actor import (
    CitedSources,
    DropCursors,
    QuarantineBatch,
    ReadQuarantine,
    ReadRuntimeState,
    RecordSessionEnd,
    ReleaseQuarantine,
    TakeSnapshot,
    WorkspaceActor,
)
from memory.runtime._write_cycle import CONCURRENT_RETRIES, WriteCycle
from memory.workspace._edits import WorkspaceSnapshot
from memory.workspace._quarantine import QuarantineEntry
from memory.workspace._runtime_state import RuntimeState
from memory.workspace._topic_ids import handle_key
from memory.writers._cycle import WriteOutcome
from memory.writers._extractive import ExtractiveWriter
from memory.writers._offload import CpuWorker
from memory.writers._writer import Batch, Writer
from store import (
    Append,
    GetBranch,
    InsertSummary,
    ListBranches,
    MergeMetadata,
    RewindTo,
    RuntimeLog,
    SessionCore,
    SessionNotFoundError,
    SetHead,
    SpawnBranch,
    missing_meta,
    recover_dead_runtimes,
    run_durable,
    state_path,
    validate_id,
)
from supervisors import (
    ChildSpec,
    DynamicSupervisor,
    Intensity,
    Restart,
    Strategy,
    Supervisor,
    get_child,
)

__all__ = [
    "CONCURRENT_RETRIES",
    "MemoryRuntime",
    "RuntimeConfig",
    "RuntimeStatistics",
    "Sessions",
    "open_runtime",
]

R = TypeVar("R")


@dataclass(frozen=True)
class RuntimeStatistics:
    """A snapshot of :meth:`MemoryRuntime.statistics`."""

    in_flight: int  # write jobs submitted and not yet finished (what drain waits for)
    outcomes: Mapping[str, int]  # jobs by result ("written" or a FailureKind value), "quarantined"
    quarantined: int  # batches parked in quarantine now
    sessions_active: int  # session actors running
    writer: Mapping[str, Any]  # a writer's own usage (a model writer's tokens, calls, retries)


class MemoryRuntime:
    """The embedded runtime's handle; build it with :func:`open_runtime`."""

    def __init__(self, state_dir: str, writer: Writer, config: RuntimeConfig) -> None:
        self.state_dir = state_dir
        self.memory_dir = os.path.join(state_dir, "memory")
        self.writer = writer
        self.config = config
        self.sessions = Sessions(self)
        self.rng = random.Random(config.seed)
        self.events = EventHook(config.on_event, config.clock)
        self.jobs = JobQueue(self.events)
        self.claims = ClaimsLedger(state_dir, config.files, writer_timeout=config.writer_timeout,
                                   margin=config.claim_margin)
        self.timers = Timers(self._cast, rng=self.rng, retry_backoff=config.retry_backoff,
                             recheck_backoff=config.claim_recheck)
        # The writer's and the commit's CPU work, off the interpreter lock (None: in-thread).
        self.cpu_worker = (CpuWorker(on_event=self._event_from_thread)
                           if config.cpu_worker == "process" else None)
        self.cycle = WriteCycle(lambda: self.writer, lambda: self.workspace_ref, self.events,
                                writer_timeout=config.writer_timeout, run_cpu=self.cpu_worker)
        self.quarantined: list[QuarantineEntry] = []
        self._ledgers: dict[str, SessionLedger] = {}
        self._known_sessions: set[str] = set()  # ids whose meta.json session_ref has seen
        self._workspace: WorkspaceActor | None = None
        self.recall_index = Recall(self.memory_dir, counter=config.counter, files=config.files,
                                   lock_timeout=config.lock_timeout, clock=config.clock,
                                   embedder=config.recall_embedder)
        self._sessions: DynamicSupervisor[str] | None = None
        self._watchdog: IdleWatchdog | None = None
        self.root: ActorRef | None = None
        # The runtime log of journal = "shared" (opened by open_runtime), else None.
        self.runtime_log: RuntimeLog | None = None
        self.migration: MigrationReport | None = None
        # Set by open_runtime once the tree is up; stable across restarts (refs point at cells).
        self.workspace_ref: ActorRef
        self.watchdog_ref: ActorRef
        # Set when open_runtime's block ends: every public method then raises
        # RuntimeClosedError (statistics() stays readable: counters of a finished run).
        self.closed = False

    def ensure_open(self, method: str) -> None:
        """Raise :class:`RuntimeClosedError` naming ``method`` once the runtime's block ended."""
        if self.closed:
            raise RuntimeClosedError(self.state_dir, method)

    def _event_from_thread(self, event: str, **fields: Any) -> None:
        """An event of a worker thread (the CPU worker's), emitted on the event loop's thread."""
        anyio.from_thread.run_sync(functools.partial(self.events.emit, event, **fields))

    # -- the tree -------------------------------------------------------------------

    def root_supervisor(self) -> Supervisor:
        config = self.config

        def start_workspace() -> WorkspaceActor:
            self._workspace = WorkspaceActor(self.memory_dir, files=config.files,
                                             on_change=self.recall_index.sync_after_write,
                                             clock=config.clock,
                                             lock_timeout=config.lock_timeout,
                                             run_cpu=self.cpu_worker)
            return self._workspace

        def start_sessions() -> DynamicSupervisor[str]:
            self._sessions = DynamicSupervisor(
                session_factory(self), restart=Restart.TRANSIENT,
                idle_timeout=config.passivate_after,
                options=MailboxOptions(capacity=10_000),
            )
            return self._sessions

        def start_pool() -> Supervisor:
            start = worker_factory(self, self.jobs.receive)
            workers = [
                ChildSpec(f"writer-{i}", start, Restart.PERMANENT)
                for i in range(config.writer_workers)
            ]
            return Supervisor(
                workers, strategy=Strategy.ONE_FOR_ONE,
                intensity=Intensity(5 * config.writer_workers, 10.0),
                backoff=config.worker_backoff, rng=self.rng,
            )

        def start_watchdog() -> IdleWatchdog:
            self._watchdog = IdleWatchdog(self)
            return self._watchdog

        return Supervisor(
            [
                ChildSpec("workspace", start_workspace, Restart.PERMANENT,
                          options=MailboxOptions(capacity=100_000)),
                ChildSpec("sessions", start_sessions, Restart.PERMANENT),
                ChildSpec("writers", start_pool, Restart.PERMANENT),
                ChildSpec("watchdog", start_watchdog, Restart.PERMANENT,
                          options=MailboxOptions(capacity=100_000)),
                # Issue 23: passes when runtime.json's counters call for one.
                ChildSpec("consolidation", lambda: ConsolidationJob(self), Restart.PERMANENT),
            ],
            strategy=Strategy.ONE_FOR_ONE, rng=self.rng,
        )

    @property
    def workspace_id(self) -> str:
        if self._workspace is None or not self._workspace.workspace_id:
            raise RuntimeError("the workspace actor has not started yet")
        return self._workspace.workspace_id

    @property
    def instance_id(self) -> str:
        """This runtime's name in the claims it writes (new per ``open_runtime``)."""
        return self.claims.instance_id

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

    async def _cast(self, session: str, message: object) -> None:
        await self.session_ref(session).cast(message)

    # -- what the children use (SessionHost, PoolHost, WatchdogHost) --------------------

    def ledger(self, session: str) -> SessionLedger:
        ledger = self._ledgers.get(session)
        if ledger is None:
            ledger = self._ledgers[session] = SessionLedger()
        return ledger

    def emit(self, event: str, **fields: Any) -> None:
        """One structured event (``scriptorium run --log-json`` prints each as a JSON line)."""
        self.events.emit(event, **fields)

    def record_outcome(self, job: WriteJob, outcome: WriteOutcome) -> None:
        self.jobs.record_outcome(job, outcome)

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
        self.jobs.forget(job)
        self.jobs.done(job)
        self.emit("abandoned", session=session, job=job.id, nodes=len(job.batch.node_ids))
        with contextlib.suppress(Exception):  # a runtime going down has no session to wake
            self.session_ref(session).cast_nowait(Reconsider())

    async def quarantine(self, entry: QuarantineEntry) -> None:
        await self.workspace_ref.call(QuarantineBatch(entry))
        self.quarantined.append(entry)
        self.jobs.outcomes["quarantined"] += 1
        self.emit("quarantined", session=entry.session, nodes=list(entry.node_ids),
                  error=entry.error)

    async def record_session_end(self, session: str, updated_at: float) -> None:
        await self.workspace_ref.call(RecordSessionEnd(session, updated_at))
        self.emit("session_end", session=session, updated_at=updated_at)

    def watchdog_touch(self, session: str, updated_at: object) -> None:
        if isinstance(updated_at, (int, float)):
            with contextlib.suppress(Exception):
                self.watchdog_ref.cast_nowait(Touched(session, float(updated_at)))

    async def write_cycle(self, batch: Batch) -> WriteOutcome:
        """One batch through archive → writer → commit (SPEC §6.4), as workers run it.

        The worker asked the writer's ``deferral`` first, so the writer's
        ``admit`` (a wait) is not awaited here; backfill, which has no pool,
        awaits it (:meth:`backfill`). See :class:`~memory.runtime._write_cycle.WriteCycle`.
        """
        return await self.cycle.write(batch, admitted=True)

    @property
    def groups_batches(self) -> bool:
        """Whether waiting batches are committed together (an exclusive ``GroupWriter``)."""
        return self.cycle.groups_batches

    async def write_group(self, batches: Sequence[Batch]) -> list[WriteOutcome]:
        """Several batches as one transaction; each one the group does not cover, alone.

        See :meth:`WriteCycle.group <memory.runtime._write_cycle.WriteCycle.group>`.
        """
        grouped = await self.cycle.group(batches)
        return [outcome if outcome is not None else await self.write_cycle(batch)
                for batch, outcome in zip(batches, grouped, strict=True)]

    async def deferral(self, batch: Batch) -> float:
        """Seconds the writer asks ``batch`` to wait (a spent model budget); 0 if it cannot say."""
        try:
            return await self.cycle.deferral(batch)
        except Exception as exc:  # noqa: BLE001 - the cycle meets the writer's trouble itself
            self.emit("deferral_unknown", session=batch.session_id, error=describe_error(exc))
            return 0.0

    def defer_job(self, job: WriteJob, delay: float) -> None:
        """``job`` goes back to the queue after ``delay`` seconds; it stays in flight meanwhile.

        Neither failed nor marked, and no worker waits for it. A runtime
        closing has no timers left: the job is abandoned (its session plans
        again next time; the batch stays owed).
        """
        self.emit("deferred", session=job.batch.session_id, job=job.id,
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

    async def migrate(self, progress: Progress | None = None) -> MigrationReport:
        """SPEC §6.7: position cursors in runtime.json become markers (no-op without cursors)."""
        self.ensure_open("rt.migrate")
        workspace = self.workspace_ref

        async def read_state() -> RuntimeState:
            state: RuntimeState = await workspace.call(ReadRuntimeState())
            return state

        async def drop_cursors() -> object:
            return await workspace.call(DropCursors())

        async def mark(session: str, node_ids: Sequence[str]) -> object:
            return await self.sessions.merge_node_metadata_batch(
                session, {node: {MARKER_KEY: self.workspace_id} for node in node_ids})

        report = await migrate(self.memory_dir, get_branch=self.sessions.get_branch, mark=mark,
                               read_state=read_state, drop_cursors=drop_cursors, progress=progress)
        if report.had_cursors:
            self.emit("migrated", marked={s: len(ids) for s, ids in report.marked.items()},
                      cursors_removed=report.cursors_removed, errors=list(report.errors))
        return report

    async def backfill(self, progress: Progress | None = None) -> BackfillReport:
        """SPEC §6.8: write every trusted archived source no topic cites yet (markers ignored)."""
        self.ensure_open("rt.backfill")
        workspace = self.workspace_ref
        cited: frozenset[str] = await workspace.call(CitedSources())

        async def revision() -> str:
            view: WorkspaceSnapshot = await workspace.call(TakeSnapshot())
            return view.revision

        return await backfill(
            self.memory_dir, write_batch=self.cycle.write, cited=lambda s: handle_key(s) in cited,
            revision=revision, threshold=self.config.policy.threshold,
            counter=self.config.counter, progress=progress)

    # -- the public API ----------------------------------------------------------------

    async def pending(self, session: str, tip: str | None = None) -> list[SourceRecord]:
        """The owed records of a branch (default: the head branch), oldest first."""
        self.ensure_open("rt.pending")
        owed: list[SourceRecord] = await self.session_ref(session).call(
            Pending(tip), timeout=self.config.call_timeout)
        return owed

    async def flush(self, session: str) -> BoundaryOutcome:
        """Run the session boundary now (SPEC §6.6) and wait for its outcome.

        Raises :class:`~memory._errors.BoundaryError` (the original error in
        ``cause``) when the boundary stopped on an error rather than an
        outcome; :meth:`boundary` returns that as a report instead.
        """
        self.ensure_open("rt.flush")
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
        self.ensure_open("rt.boundary")
        try:
            result: BoundaryResult = await self.session_ref(session).call(
                Flush(), timeout=self.config.call_timeout)
        except (*SESSION_ERRORS, ActorError) as exc:
            return BoundaryReport.failed(session, exc)
        await result.wait()
        return BoundaryReport.of(session, result)

    async def still_owed(self, session: str, *, boundary: bool) -> list[tuple[str, list[str]]]:
        """Per tip the rules cover (see :class:`StillOwed`), the node ids not marked yet."""
        self.ensure_open("rt.still_owed")
        owed: list[tuple[str, list[str]]] = await self.session_ref(session).call(
            StillOwed(boundary), timeout=self.config.call_timeout)
        return owed

    async def drain(self) -> None:
        """Wait until no write job is in flight."""
        self.ensure_open("rt.drain")
        await self.jobs.drain()

    async def repair_markers(self, session: str) -> list[str]:
        """Set again the session's lost markers now (:mod:`memory.ledger._lost_markers`); the node ids.

        The same repair a session actor runs when it activates and when the
        idle watchdog's scan sees its files change; it writes no memory.
        """
        self.ensure_open("rt.repair_markers")
        marked: list[str] = await self.session_ref(session).call(
            RepairMarkers(raise_errors=True, reload=True), timeout=self.config.call_timeout)
        return marked

    async def poll_idle(self) -> int:
        """Run the idle watchdog's disk scan now; returns how many sessions it asked."""
        self.ensure_open("rt.poll_idle")
        found: int = await self.watchdog_ref.call(PollNow())
        return found

    async def release(self, session: str | None = None) -> list[QuarantineEntry]:
        self.ensure_open("rt.release")
        released: list[QuarantineEntry] = await self.workspace_ref.call(
            ReleaseQuarantine(session))
        gone = {(e.session, e.node_ids) for e in released}
        self.quarantined = [e for e in self.quarantined if (e.session, e.node_ids) not in gone]
        for entry in released:
            self.ledger(entry.session).failures = 0
            with contextlib.suppress(Exception):
                await self.session_ref(entry.session).cast(RetryDue())
        return released

    # -- recall (issue 13): the read side, in memory.recall -------------------------

    async def recall(
        self, query: str, *, k: int = 8, session: str | None = None, tip: str | None = None,
        since: TimeBound = None, until: TimeBound = None, include_pending: bool = False,
    ) -> list[Hit]:
        """The ``k`` best units for ``query``; with ``session`` (and ``tip``), branch-aware."""
        self.ensure_open("rt.recall")
        view = await self._branch_view(session, tip)
        return await self.recall_index.recall(query, k=k, view=view, since=since, until=until,
                                              include_pending=include_pending)

    async def context(
        self, query: str, *, budget_tokens: int = 500, session: str | None = None,
        tip: str | None = None, as_of: TimeBound = None,
    ) -> Context:
        """A prompt block of at most ``budget_tokens`` (the config's counter) for ``query``."""
        self.ensure_open("rt.context")
        view = await self._branch_view(session, tip)
        return await self.recall_index.context(query, budget_tokens=budget_tokens, view=view,
                                               as_of=as_of)

    async def reindex(self, progress: Progress | None = None) -> SyncReport:
        """Rebuild the recall index from the files (``progress(done, total)`` files)."""
        self.ensure_open("rt.reindex")
        return await self.recall_index.reindex(progress)

    async def _branch_view(self, session: str | None, tip: str | None) -> BranchView | None:
        if session is None:
            if tip is not None:
                raise RecallError(f"tip {tip!r} was given without its session; add --session")
            return None
        branch = await self.sessions.get_branch(session, tip)  # unknown session or tip: raises
        on = frozenset(str(m["id"]) for m in branch if m.get("id") is not None)
        head = tip if tip is not None else (str(branch[-1]["id"]) if branch else "")
        live = set(on)
        for row in await self.sessions.list_branches(session):
            if row["head_msg_id"] not in live:  # a tip on the asked branch adds nothing
                live.update(str(m["id"]) for m in await self.sessions.get_branch(
                    session, row["head_msg_id"]) if m.get("id") is not None)
        return BranchView(session, head, on, frozenset(live))

    def statistics(self) -> RuntimeStatistics:
        return RuntimeStatistics(
            in_flight=self.jobs.in_flight,
            outcomes=dict(self.jobs.outcomes),
            quarantined=len(self.quarantined),
            sessions_active=0 if self._sessions is None else len(self._sessions.registry),
            # A writer with usage to report (a model writer's tokens, calls, retries).
            writer=getattr(self.writer, "statistics", dict)(),
        )


class Sessions:
    """Session operations, each through the session's actor (SPEC §8)."""

    def __init__(self, runtime: MemoryRuntime) -> None:
        self._rt = runtime

    async def create(self, title: str = "", session_id: str | None = None) -> str:
        rt = self._rt
        rt.ensure_open("rt.sessions.create")
        core = await run_durable(lambda: SessionCore.create(
            rt.state_dir, session_id, title=title, files=rt.config.files, clock=rt.config.clock))
        return core.session

    async def _call(self, session: str, message: Request[R]) -> R:
        self._rt.ensure_open(f"rt.sessions, {type(message).__name__}")
        return await self._rt.session_ref(session).call(message, timeout=self._rt.config.call_timeout)

    async def append(self, session: str, message: Mapping[str, Any], *,
                     created_at: float | None = None) -> dict[str, Any]:
        """Append one turn; ``created_at``: its own time for imported history (default now)."""
        node: dict[str, Any] = await self._call(session, Append(message, created_at))
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
    if config.journal == "shared":
        runtime.runtime_log = await run_durable(
            lambda: RuntimeLog.open(state, files=files))
    try:
        if runtime.runtime_log is not None:  # before any session is opened
            await run_durable(recover_dead_runtimes, state, runtime.runtime_log)
        async with open_actor(runtime.root_supervisor(), name="runtime") as root:
            runtime.root = root
            runtime.workspace_ref = await get_child(root, "workspace")
            runtime.watchdog_ref = await get_child(root, "watchdog")
            runtime.quarantined = list(await runtime.workspace_ref.call(ReadQuarantine()))
            # SPEC §6.7: before anything computes what a branch owes.
            runtime.migration = await runtime.migrate()
            # Retry timers live in their own group: leaving the block cancels them,
            # then the tree stops gracefully in reverse start order.
            body_error: BaseException | None = None
            async with runtime.timers.running():
                try:
                    yield runtime
                except BaseException as exc:  # noqa: BLE001 - re-raised below, not in a group
                    body_error = exc
                finally:
                    runtime.closed = True  # before the tree stops: RuntimeClosedError from here
            if body_error is not None:
                raise body_error
    finally:
        # A claim lives as long as its runtime (a dead process's claims are void by pid).
        with anyio.CancelScope(shield=True):
            try:  # after every session actor closed; before the claims, whose release
                # takes session locks a failed close left the log holding
                if runtime.runtime_log is not None:
                    await run_durable(runtime.runtime_log.close)
            finally:
                await run_durable(runtime.claims.release_all)
                await anyio.to_thread.run_sync(runtime.recall_index.close)
                if runtime.cpu_worker is not None:
                    await anyio.to_thread.run_sync(runtime.cpu_worker.close)
