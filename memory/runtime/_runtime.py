"""The memory runtime: the supervision tree of SPEC §2, embedded or headless.

::

    MemoryRuntime (root supervisor, one_for_one)
    ├── WorkspaceActor          permanent   <state>/memory
    ├── SessionSupervisor       dynamic     one MemorySessionActor per active session
    ├── WriterPool              one_for_one K WriterWorker, restarted with backoff
    ├── IdleWatchdog            permanent
    └── ConsolidationJob        permanent   passes when runtime.json's counters call for one

``open_runtime`` starts the tree and yields a :class:`MemoryRuntime`, the
handle an agent embeds: ``rt.sessions`` appends and reads turns through
their session actors, ``rt.pending`` / ``rt.flush`` / ``rt.drain`` drive
memory (SPEC §8). Everything a child needs from its siblings lives here,
outside the children, so a restarted child finds it intact. The parts are
their own small objects: the job queue (:mod:`._jobs`), the timers
(:mod:`._timers`), the claims ledger (:mod:`._claims`), the write cycle
(:mod:`._write_cycle`), the quarantine (:mod:`._quarantine`), the session
ledgers and the event hook (:mod:`._events`). No child is handed the
runtime: a session actor gets :class:`SessionParts`, the writer pool a
:class:`~memory.runtime._desk.JobDesk` (a batch goes down to the cycle and
back to its session without passing through here), the watchdog its
config, directories and session refs. This module composes them and
serves the public API.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread

from actors import ActorError, ActorRef, MailboxOptions, open_actor
from memory._errors import BoundaryError, RuntimeClosedError
from memory.ledger._records import SourceRecord
from memory.maintenance._backfill import BackfillReport
from memory.maintenance._migrate import MigrationReport, Progress
from memory.recall import BranchView, Context, Hit, Recall, SyncReport, TimeBound, with_owed
from memory.runtime._backlog import MemoryLag
from memory.runtime._claims import ClaimsLedger
from memory.runtime._config import RuntimeConfig, apply_timings
from memory.runtime._consolidation import ConsolidationJob
from memory.runtime._desk import JobDesk
from memory.runtime._events import EventHook
from memory.runtime._jobs import JobQueue
from memory.runtime._maintenance import backfill_sources, migrate_cursors
from memory.runtime._owed_turns import owed_records
from memory.runtime._pool import worker_factory
from memory.runtime._quarantine import Quarantine
from memory.runtime._session_actor import session_factory
from memory.runtime._session_state import (
    SESSION_ERRORS,
    BoundaryOutcome,
    BoundaryReport,
    BoundaryResult,
    Flush,
    MemorySessionMessage,
    Pending,
    RepairMarkers,
    RetryDue,
    SessionLedger,
    SessionLedgers,
    SessionParts,
    StillOwed,
)
from memory.runtime._sessions import Sessions, branch_view
from memory.runtime._settings import read_settings
from memory.runtime._timers import Timers
from memory.runtime._watchdog import IdleWatchdog, PollNow, Touched, WatchdogMessage
from memory.runtime._workspace_actor import (
    WorkspaceActor,
    WorkspaceMessage,
)
from memory.runtime._write_cycle import CONCURRENT_RETRIES, WriteCycle
from memory.workspace._quarantine import QuarantineEntry
from memory.writers._events import Event
from memory.writers._extractive import ExtractiveWriter
from memory.writers._offload import CpuWorker
from memory.writers._writer import ReportingWriter, Writer
from store import (
    RuntimeLog,
    SessionNotFoundError,
)
from store.lowlevel import missing_meta, recover_dead_runtimes, run_durable, state_path, validate_id
from supervisors import (
    ChildSpec,
    DynamicSupervisor,
    Intensity,
    Restart,
    Strategy,
    Supervisor,
    SupervisorMessage,
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


@dataclass(frozen=True)
class RuntimeStatistics:
    """A snapshot of :meth:`MemoryRuntime.statistics`."""

    in_flight: int  # write jobs submitted and not yet finished (what drain waits for)
    outcomes: Mapping[str, int]  # jobs by result ("written" or a FailureKind value), "quarantined"
    quarantined: int  # batches parked in quarantine now
    sessions_active: int  # session actors running
    writer: Mapping[str, Any]  # a writer's own usage (a model writer's tokens, calls, retries)
    lag: MemoryLag  # how far memory is behind (memory.runtime._backlog)


class MemoryRuntime:
    """The embedded runtime's handle; build it with :func:`open_runtime`."""

    def __init__(self, state_dir: str, writer: Writer, config: RuntimeConfig) -> None:
        self.state_dir = state_dir
        self.memory_dir = os.path.join(state_dir, "memory")
        self.writer = writer
        self.config = config
        self.sessions = Sessions(state_dir, config, self.session_ref, self.ensure_open)
        self.rng = random.Random(config.seed)
        self.events = EventHook(config.on_event, config.clock)
        self.jobs = JobQueue(self.events)
        self.claims = ClaimsLedger(state_dir, config.files, writer_timeout=config.writer_timeout,
                                   margin=config.claim_margin)
        self.timers = Timers(self._cast, rng=self.rng, retry_backoff=config.retry_backoff,
                             recheck_backoff=config.claim_recheck)
        self.cpu_worker = (CpuWorker(on_event=self._event_from_thread)  # None: in-thread
                           if config.cpu_worker == "process" else None)
        self.cycle = WriteCycle(lambda: self.writer, lambda: self.workspace_ref, self.events,
                                writer_timeout=config.writer_timeout, run_cpu=self.cpu_worker,
                                turns=self.memory_dir if config.shard else None)
        self.quarantine = Quarantine(lambda: self.workspace_ref, self.jobs.outcomes, self.events)
        self.ledgers = SessionLedgers()
        self.desk = JobDesk(self.jobs, self.cycle, self.timers, self.ledgers, self.session_ref,
                            self.events)
        self._known_sessions: set[str] = set()  # ids whose meta.json session_ref has seen
        self._workspace: WorkspaceActor | None = None
        self.recall_index = Recall(self.memory_dir, counter=config.counter, files=config.files,
                                   lock_timeout=config.lock_timeout, clock=config.clock,
                                   embedder=config.recall_embedder)
        self._sessions: DynamicSupervisor[str, MemorySessionMessage] | None = None
        self._watchdog: IdleWatchdog | None = None
        self.root: ActorRef[SupervisorMessage] | None = None
        # The runtime log of journal = "shared" (opened by open_runtime), else None.
        self.runtime_log: RuntimeLog | None = None
        self.migration: MigrationReport | None = None
        # Set by open_runtime once the tree is up; stable across restarts (refs point at cells).
        self.workspace_ref: ActorRef[WorkspaceMessage]
        self.watchdog_ref: ActorRef[WatchdogMessage]
        # The root's children that others talk to, by the spec they run from (typed refs).
        self.workspace_spec: ChildSpec[WorkspaceMessage]
        self.watchdog_spec: ChildSpec[WatchdogMessage]
        # Set when open_runtime's block ends: every public method then raises
        # RuntimeClosedError (statistics() stays readable: counters of a finished run).
        self.closed = False

    def ensure_open(self, method: str) -> None:
        """Raise :class:`RuntimeClosedError` naming ``method`` once the runtime's block ended."""
        if self.closed:
            raise RuntimeClosedError(self.state_dir, method)

    def _event_from_thread(self, event: Event) -> None:
        """An event of a worker thread (the CPU worker's), emitted on the event loop's thread."""
        anyio.from_thread.run_sync(self.events.emit, event)

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

        def start_sessions() -> DynamicSupervisor[str, MemorySessionMessage]:
            parts = SessionParts(
                config=config, state_dir=self.state_dir, runtime_log=self.runtime_log,
                workspace=lambda: self.workspace_ref, workspace_id=lambda: self.workspace_id,
                ledgers=self.ledgers, jobs=self.jobs, claims=self.claims, timers=self.timers,
                quarantine=self.quarantine, events=self.events, touch=self._touch)
            self._sessions = DynamicSupervisor(
                session_factory(parts), restart=Restart.TRANSIENT,
                idle_timeout=config.passivate_after,
                options=MailboxOptions(capacity=10_000),
            )
            return self._sessions

        def start_pool() -> Supervisor:
            start = worker_factory(self.desk, self.jobs)
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
            self._watchdog = IdleWatchdog(config, self.state_dir, self.memory_dir,
                                          self.session_ref)
            return self._watchdog

        big = MailboxOptions(capacity=100_000)
        self.workspace_spec = ChildSpec("workspace", start_workspace, Restart.PERMANENT, options=big)
        self.watchdog_spec = ChildSpec("watchdog", start_watchdog, Restart.PERMANENT, options=big)
        return Supervisor(
            [
                self.workspace_spec,
                ChildSpec("sessions", start_sessions, Restart.PERMANENT),
                ChildSpec("writers", start_pool, Restart.PERMANENT),
                self.watchdog_spec,
                ChildSpec("consolidation", lambda: ConsolidationJob(
                    config, lambda: self.workspace_ref, lambda: self.writer, self.events),
                    Restart.PERMANENT),
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

    def session_ref(self, session: str) -> ActorRef[MemorySessionMessage]:
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

    async def _cast(self, session: str, message: MemorySessionMessage) -> None:
        await self.session_ref(session).cast(message)

    # -- what the runtime keeps for its children ---------------------------------------

    @property
    def quarantined(self) -> list[QuarantineEntry]:
        """The batches parked in quarantine now (SPEC §7)."""
        return self.quarantine.entries

    def ledger(self, session: str) -> SessionLedger:
        """What the runtime remembers of ``session``'s memory (its jobs, failures, boundary)."""
        return self.ledgers.of(session)

    def _touch(self, session: str, updated_at: object) -> None:
        """A session appended: move its idle deadline in the watchdog."""
        if isinstance(updated_at, (int, float)):
            with contextlib.suppress(Exception):
                self.watchdog_ref.cast_nowait(Touched(session, float(updated_at)))

    async def migrate(self, progress: Progress | None = None) -> MigrationReport:
        """SPEC §6.7: position cursors in runtime.json become markers (no-op without cursors)."""
        self.ensure_open("rt.migrate")
        return await migrate_cursors(self.workspace_ref, self.sessions, self.workspace_id,
                                     self.memory_dir, self.events, progress)

    async def backfill(self, progress: Progress | None = None) -> BackfillReport:
        """SPEC §6.8: write every trusted archived source no topic cites yet (markers ignored)."""
        self.ensure_open("rt.backfill")
        return await backfill_sources(self.workspace_ref, self.cycle, self.memory_dir,
                                      self.config, progress)

    # -- the public API ----------------------------------------------------------------

    async def pending(self, session: str, tip: str | None = None) -> list[SourceRecord]:
        """The owed records of a branch (default: the head branch), oldest first."""
        self.ensure_open("rt.pending")
        owed: list[SourceRecord] = await self.session_ref(session).call(
            Pending(tip))
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
        "Session boundaries").
        """
        self.ensure_open("rt.boundary")
        try:
            result: BoundaryResult = await self.session_ref(session).call(
                Flush())
        except (*SESSION_ERRORS, ActorError) as exc:
            return BoundaryReport.failed(session, exc)
        await result.wait()
        return BoundaryReport.of(session, result)

    async def still_owed(self, session: str, *, boundary: bool) -> list[tuple[str, list[str]]]:
        """Per tip the rules cover (see :class:`StillOwed`), the node ids not marked yet."""
        self.ensure_open("rt.still_owed")
        owed: list[tuple[str, list[str]]] = await self.session_ref(session).call(
            StillOwed(boundary))
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
            RepairMarkers(raise_errors=True, reload=True))
        return marked

    async def poll_idle(self) -> int:
        """Run the idle watchdog's disk scan now; returns how many sessions it asked."""
        self.ensure_open("rt.poll_idle")
        found: int = await self.watchdog_ref.call(PollNow())
        return found

    async def release(self, session: str | None = None) -> list[QuarantineEntry]:
        self.ensure_open("rt.release")
        released = await self.quarantine.release(session)
        for entry in released:
            self.ledger(entry.session).failures = 0
            with contextlib.suppress(Exception):
                await self.session_ref(entry.session).cast(RetryDue())
        return released

    # -- recall (issue 13): the read side, in memory.recall -------------------------

    async def recall(
        self, query: str, *, k: int = 8, session: str | None = None, tip: str | None = None,
        since: TimeBound = None, until: TimeBound = None, include_pending: bool = False,
        include_owed: bool = False,
    ) -> list[Hit]:
        """The ``k`` best units for ``query``; with ``session`` (and ``tip``), branch-aware.

        ``include_owed``: then up to ``k`` turns not yet in memory (``kind="owed"``,
        :mod:`memory.recall._owed`).
        """
        self.ensure_open("rt.recall")
        view = await self._branch_view(session, tip)
        hits = await self.recall_index.recall(query, k=k, view=view, since=since, until=until,
                                              include_pending=include_pending)
        if include_owed:
            hits += await self.recall_index.recall_owed(
                query, await self._owed(), k=k, view=view, since=since, until=until,
                include_pending=include_pending, shown=hits)
        return hits

    async def _owed(self) -> list[SourceRecord]:
        return await owed_records(self.state_dir, self.workspace_id, self.sessions,
                                  self.config.counter)

    async def context(
        self, query: str, *, budget_tokens: int = 500, session: str | None = None,
        tip: str | None = None, as_of: TimeBound = None, include_owed: bool = False,
    ) -> Context:
        """A prompt block of at most ``budget_tokens`` (the config's counter) for ``query``.

        ``include_owed``: turns not yet in memory fill what memory's block left of the budget.
        """
        self.ensure_open("rt.context")
        view = await self._branch_view(session, tip)
        context = await self.recall_index.context(query, budget_tokens=budget_tokens, view=view,
                                                  as_of=as_of)
        if include_owed:
            owed = await self.recall_index.recall_owed(
                query, await self._owed(), view=view, shown=context.hits)
            context = with_owed(context, owed, budget_tokens, self.config.counter)
        return context

    async def reindex(self, progress: Progress | None = None) -> SyncReport:
        """Rebuild the recall index from the files (``progress(done, total)`` files)."""
        self.ensure_open("rt.reindex")
        return await self.recall_index.reindex(progress)

    async def _branch_view(self, session: str | None, tip: str | None) -> BranchView | None:
        return await branch_view(self.sessions, session, tip)

    def statistics(self) -> RuntimeStatistics:
        return RuntimeStatistics(
            in_flight=self.jobs.in_flight,
            outcomes=dict(self.jobs.outcomes),
            quarantined=len(self.quarantined),
            sessions_active=0 if self._sessions is None else len(self._sessions.registry),
            # A writer with usage to report (a model writer's tokens, calls, retries).
            writer=self.writer.statistics() if isinstance(self.writer, ReportingWriter) else {},
            lag=self.jobs.lag(),
        )


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
            runtime.workspace_ref = await get_child(root, runtime.workspace_spec)
            runtime.watchdog_ref = await get_child(root, runtime.watchdog_spec)
            await runtime.quarantine.load()
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
