"""RuntimeConfig: every knob of the memory runtime, with the defaults of SPEC §6-7."""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from memory.consolidation import ConsolidationPolicy
from memory.ledger._ledger import WritePolicy
from memory.ledger._tokens import TokenCounter, default_counter
from memory.recall import Embedder
from memory.runtime._settings import Timings, check_lock_timeout
from memory.writers._events import EventListener
from memory.writers._offload import CPU_WORKER_MODES, CpuWorkerMode
from store import LOCK_TIMEOUT, DurableFiles
from supervisors import Backoff

__all__ = ["JOURNAL_MODES", "JournalMode", "RuntimeConfig", "Shard", "apply_timings",
           "held_by"]

JournalMode = Literal["session", "shared"]
JOURNAL_MODES: tuple[JournalMode, ...] = ("session", "shared")


@dataclass(frozen=True)
class Shard:
    """One runtime's share of a state's sessions: those whose id hashes to ``index`` of ``count``.

    Runtimes on one state directory are safe together (claims, locks), but
    each one's idle watchdog polls every session, so two of them would both
    look at, open and finish every session. With a shard each runtime's own
    scans take only its sessions; what the host asks of a session by name
    (append, flush) is served whatever its shard. The hash is CRC-32 of the
    id: stable across processes and Python runs (``hash()`` is salted), so
    every process of a sharded run agrees on who holds which session.
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"a shard is K/N with 0 <= K < N, not {self.index}/{self.count}")

    def holds(self, session_id: str) -> bool:
        return zlib.crc32(session_id.encode()) % self.count == self.index

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"`` (e.g. ``0/2``), as ``--shard`` takes it; ValueError names what is wrong."""
        index, slash, count = text.partition("/")
        with contextlib.suppress(ValueError):
            if slash:
                return cls(int(index), int(count))
        raise ValueError(f"a shard is K/N with 0 <= K < N (e.g. 0/2), not {text!r}")


def held_by(shard: Shard | None) -> Callable[[str], bool] | None:
    """``list_sessions``'s ``keep`` for ``shard``: its sessions' ids; None (all) without one."""
    return None if shard is None else shard.holds


@dataclass(frozen=True)
class RuntimeConfig:
    """Every knob of the runtime, with the defaults of SPEC §6-7.

    ``clock`` is the wall clock (``updated_at``, timestamps, idle rules);
    timers use anyio's clock, so tests on virtual time pass a wall clock
    derived from ``anyio.current_time()``. ``on_event`` receives each of the
    runtime's events as a typed, frozen :class:`~memory.writers.Event`
    (``Submitted``, ``JobDone``, ``Marked``... of :mod:`memory.runtime._events`,
    the CPU worker's ``CpuWorker*`` of :mod:`memory.writers._events`), stamped
    with ``at`` from ``clock``, on the event loop's thread; it must not block.
    Match on the type, or read ``event.name``; ``event.as_record()`` is the
    ``{"event": name, "at": ..., fields...}`` line of ``scriptorium run
    --log-json``. The log, and the simulator's and the tests' instruments.
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
    # How long a session mutation waits for <sid>/.lock, and a workspace write for
    # memory/.scriptorium/write.lock, held by another process before it fails
    # with SessionLockTimeoutError / WorkspaceLockTimeoutError (None: forever).
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
    on_event: EventListener | None = None
    # Recall's optional embedding backend (memory.recall.Embedder); None: BM25 and the rules.
    recall_embedder: Embedder | None = None
    # Where the extractive writer's extraction and a commit's normalisation run:
    # "thread", a worker thread of this process (off the event loop, under its GIL),
    # or "process", one worker process off the GIL (falling back to a thread, with a
    # cpu_worker event, where none can run). The default is what we measured
    # (docs/decisions.md, "Off the event loop").
    cpu_worker: CpuWorkerMode = "thread"
    # Where session mutations are made durable: "session", each session's own
    # journal, flushed per mutation, the session locked per mutation (other
    # processes may write the same session between two of ours); or "shared",
    # one runtime log for every session this runtime holds, group-committed
    # (one flush for concurrent mutations of many sessions), each session held
    # exclusively from activation to passivation (store/_runtime_log.py).
    journal: JournalMode = "session"
    # Issue 23: when the runtime consolidates by itself (memory.consolidation's triggers).
    consolidation: ConsolidationPolicy = field(default_factory=ConsolidationPolicy)
    # Issue 20: the sessions this runtime's own scans take (Shard); None: all of them.
    shard: Shard | None = None

    def __post_init__(self) -> None:
        # A NaN or infinite bound would make every lock wait endless.
        check_lock_timeout(self.lock_timeout, "RuntimeConfig.lock_timeout")
        if self.cpu_worker not in CPU_WORKER_MODES:
            raise ValueError(f"RuntimeConfig.cpu_worker must be one of {CPU_WORKER_MODES}, "
                             f"not {self.cpu_worker!r}")
        if self.journal not in JOURNAL_MODES:
            raise ValueError(f"RuntimeConfig.journal must be one of {JOURNAL_MODES}, "
                             f"not {self.journal!r}")


def apply_timings(config: RuntimeConfig, timings: Timings) -> RuntimeConfig:
    """``config`` with the values ``timings`` sets (it warns for an unusual threshold)."""
    policy = config.policy
    if timings.threshold is not None or timings.idle_after is not None:
        policy = replace(
            policy,
            threshold=timings.threshold if timings.threshold is not None else policy.threshold,
            idle_after=timings.idle_after if timings.idle_after is not None else policy.idle_after,
        )
    return replace(
        config, policy=policy,
        session_idle=(timings.session_idle if timings.session_idle is not None
                      else config.session_idle),
        watchdog_poll=(timings.watchdog_poll if timings.watchdog_poll is not None
                       else config.watchdog_poll),
        consolidation=(timings.consolidation if timings.consolidation is not None
                       else config.consolidation),
    )
