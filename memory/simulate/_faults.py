"""The faults ``scriptorium simulate`` injects, each switchable and seeded.

A stress run that only exercises the happy path proves little: the design's
promises (SPEC §6.4, §7) are about what happens when a writer raises, hangs,
is rejected or changes nothing, when the disk is slow, when the process dies
between install and mark, when a session actor crashes mid-operation, and
when another process writes the same sessions. Each fault here is named on
the command line (``--faults writer-raise,slow-disk`` or ``all``) and decided
by a seeded hash of *what* is being done (the batch, the step's path), not by
call order, so a seed reproduces the same decisions whatever the scheduling.

Two seams carry them: :class:`FaultyWriter` wraps the real writer (the
runtime reads ``rt.writer`` per job), and :class:`FaultyDisk` is the
:class:`~store.DurableFiles` subclass the runtime writes through.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from memory.ledger._claim import RELEASED
from memory.ledger._records import MARKER_KEY
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.writers._writer import Batch, GroupWriter, Writer, WriterOutput
from store import DurableFiles, RuntimeLog
from store.lowlevel import CLAIM_NAME

__all__ = [
    "EFFECTS",
    "FAULTS",
    "FaultPlan",
    "FaultyDisk",
    "FaultyWriter",
    "InjectedIOError",
    "SimulatedCrash",
    "is_injected",
    "parse_faults",
]

FAULTS = (
    "writer-raise",
    "writer-hang",
    "reject",
    "empty",
    "slow-disk",
    "crash-before-mark",
    "actor-crash",
    "outside-appends",
    "agent-writes",
)


# The effects an ``actor-crash`` can follow, told apart by what is installed.
# The rare ones happen a few dozen times per run at most (an agent's spawns,
# summaries and rewinds; the ledger's claims and marker merges, once per batch).
EFFECTS = ("append", "head", "marks", "claim", "spawn", "summary", "rewind")
RARE_EFFECTS = frozenset({"marks", "claim", "spawn", "summary", "rewind"})


class SimulatedCrash(BaseException):
    """The simulated process died here; a BaseException so no ``except Exception`` survives it."""


class InjectedIOError(OSError):
    """An I/O error this plan injected (``actor-crash``), so the harness can tell it from a real one."""


def is_injected(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from or wraps, is an :class:`InjectedIOError`."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, InjectedIOError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def parse_faults(spec: str) -> frozenset[str]:
    """``"all"``, ``""``/``"none"`` or a comma-separated list of :data:`FAULTS`."""
    names = {part.strip() for part in spec.split(",") if part.strip()}
    if names <= {"none"}:
        return frozenset()
    if "all" in names:
        return frozenset(FAULTS)
    unknown = sorted(names - set(FAULTS))
    if unknown:
        raise ValueError(
            f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULTS)} or 'all'"
        )
    return frozenset(names)


def chance(seed: int, *parts: object) -> float:
    """A number in [0, 1) fixed by ``seed`` and ``parts``: the same question, the same answer."""
    text = "\x1f".join(str(part) for part in (seed, *parts))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") / 2**64


@dataclass
class FaultPlan:
    """Which faults are on, how often, and what was injected so far.

    Rates are per decision (per writer call, per durable step). Process
    crashes and actor crashes are capped so a run always finishes; the
    ``enabled`` switch turns everything off for the final settling phase.
    """

    faults: frozenset[str]
    seed: int
    writer_rate: float = 0.04
    slow_rate: float = 0.02
    slow_seconds: float = 0.002
    actor_crash_rate: float = 0.004
    max_actor_crashes: int = 8  # before the effect, and again after it (each its own cap)
    # After the effect, per kind of effect (EFFECTS), so that the rare ones (a spawn,
    # a summary, a rewind: requests that are not idempotent; a claim) are hit too.
    rare_effect_crash_rate: float = 0.25
    max_crashes_per_effect: int = 2
    max_process_crashes: int = 2
    crash_rate: float = 0.02
    enabled: bool = True
    injected: Counter[str] = field(default_factory=Counter)
    # Per session: how many injected crashes could make it re-deliver a written batch.
    crashed_sessions: Counter[str] = field(default_factory=Counter)
    process_crashes: int = 0

    def on(self, fault: str) -> bool:
        return self.enabled and fault in self.faults


class FaultyWriter:
    """Wraps a writer; for a chosen share of batches, fails the way the plan says.

    The decision hashes the batch's session, first node and the attempt
    number for that batch, so a retried batch is decided afresh and a
    failing batch does not fail forever (quarantine still happens when the
    dice say so ``max_failures`` times in a row).
    """

    def __init__(self, inner: Writer, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        # The runtime serialises an exclusive writer's cycles; a wrapper that hid
        # the flag would let workers race and lose commits to concurrent updates.
        self.exclusive: bool = getattr(inner, "exclusive", False)
        self._attempts: Counter[tuple[str, str]] = Counter()

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> WriterOutput:
        key = _batch_key(batch)
        self._attempts[key] += 1
        fault = self._fault(key, self._attempts[key])
        if fault is not None:
            self.plan.injected[fault] += 1
            if fault == "writer-raise":
                raise RuntimeError(f"simulated model endpoint error on {batch.session_id}")
            if fault == "writer-hang":
                await anyio.sleep_forever()
            if fault == "reject":
                # Outside topics/: the transaction refuses the whole commit.
                return [TopicEdit("notes/rejected.md", "Rejected edit.[^e1] ^\n")]
            return []
        return await self.inner.write(batch, workspace)

    async def write_group(
        self, batches: Sequence[Batch], workspace: WorkspaceSnapshot
    ) -> Sequence[TopicEdit]:
        """A batch the dice give a fault is left out: it runs alone and meets the fault there."""
        if not isinstance(self.inner, GroupWriter):
            raise TypeError(f"{type(self.inner).__name__} takes one batch at a time")
        keys = [_batch_key(batch) for batch in batches]
        clean = [batch for batch, key in zip(batches, keys, strict=True)
                 if self._fault(key, self._attempts[key] + 1) is None]
        return await self.inner.write_group(clean, workspace)

    def _fault(self, key: tuple[str, str], attempt: int) -> str | None:
        plan = self.plan
        for fault in ("writer-raise", "writer-hang", "reject", "empty"):
            if plan.on(fault) and chance(plan.seed, fault, *key, attempt) < plan.writer_rate:
                return fault
        return None


def _batch_key(batch: Batch) -> tuple[str, str]:
    return batch.session_id, batch.node_ids[0] if batch.node_ids else ""


class FaultyDisk(DurableFiles):
    """The durable seam with slow steps, session actor crashes and process crashes.

    - ``slow-disk``: a share of fsyncs and renames sleep (in the worker thread).
    - ``actor-crash``: an ``OSError`` in a session actor's worker thread, at
      three kinds of point. Before the effect: the session journal is about to
      be opened, nothing is written. Between: a node file's temp file is about
      to be opened, the journal record is durable but not installed (the next
      owner replays it). After the effect (``actor-crash-after-<effect>``, one
      decision stream and cap per :data:`EFFECTS`): a node file or ``meta.json``
      was just installed (the append, spawn, summary, rewind or marker merge has
      happened), or a claim was just written by the planning an append or a
      finished job triggers (issue 10's ENOSPC on the claim).
      The session actor crashes and its supervisor restarts it; an idempotent
      message is delivered again, any other fails its caller with
      ``ActorCrashedError``, and the agents cope (:mod:`memory.simulate._agents`).
    - ``crash-before-mark``: :class:`SimulatedCrash` when a session journal
      record that sets markers is about to be written, i.e. after the batch
      was installed in memory and before it is marked; the whole runtime dies
      and the harness reopens it.

    With the runtime log (``--journal shared``) the same points are its
    records: a mutation's record about to be appended stands for the session
    journal about to be opened, and one carrying markers for the marking
    step.
    """

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self._lock = threading.Lock()
        self._decisions: Counter[str] = Counter()

    def _decide(self, fault: str, rate: float) -> bool:
        with self._lock:
            self._decisions[fault] += 1
            n = self._decisions[fault]
        return chance(self.plan.seed, fault, n) < rate

    def _step(self, step: str, path: str) -> None:
        plan = self.plan
        if not plan.enabled:
            return
        if step in ("fsync", "syncfs", "rename") and plan.on("slow-disk") and self._decide(
            "slow-disk", plan.slow_rate
        ):
            plan.injected["slow-disk"] += 1
            time.sleep(plan.slow_seconds)
        if step != "open" or f"{os.sep}sessions{os.sep}" not in path:
            return
        marker_journal = path.endswith(f"{os.sep}.journal")
        node_file = f"{os.sep}history{os.sep}" in path
        if marker_journal or node_file:
            self._crash_actor("actor-crash", path)

    def replace_unsynced(self, path: str, data: bytes) -> None:
        super().replace_unsynced(path, data)
        plan = self.plan
        if not (plan.enabled and plan.on("actor-crash")) or (
                f"{os.sep}sessions{os.sep}" not in path):
            return
        effect = _effect_of(path, data)
        if effect is None:
            return
        kind = f"actor-crash-after-{effect}"
        rate = plan.rare_effect_crash_rate if effect in RARE_EFFECTS else plan.actor_crash_rate
        if plan.injected[kind] < plan.max_crashes_per_effect and self._decide(kind, rate):
            self._crash(kind, path)

    def _crash_actor(self, kind: str, path: str, session: str | None = None) -> None:
        plan = self.plan
        if (plan.on("actor-crash") and plan.injected[kind] < plan.max_actor_crashes
                and self._decide(kind, plan.actor_crash_rate)):
            self._crash(kind, path, session)

    def _crash(self, kind: str, path: str, session: str | None = None) -> None:
        session = _session_of(path) if session is None else session
        with self._lock:
            self.plan.injected[kind] += 1
            self.plan.crashed_sessions[session] += 1
        raise InjectedIOError(
            f"simulated I/O error in session {session} ({os.path.basename(path)})")

    def append_synced(self, path: str, data: bytes) -> int:
        """A session journal record carrying markers is the marking step of SPEC §6.4."""
        if path.endswith(f"{os.sep}.journal"):
            self._crash_before_mark(data, _session_of(path))
        return super().append_synced(path, data)

    def append_to(self, fd: int, path: str, data: bytes) -> None:
        """A runtime log's mutation record: the session journal's points, for its session."""
        record = RuntimeLog.record_of(data)
        if self.plan.enabled and record is not None and record[0] == "M":
            self._crash_actor("actor-crash", path, record[1])
            self._crash_before_mark(data, record[1])
        super().append_to(fd, path, data)

    def _crash_before_mark(self, data: bytes, session: str) -> None:
        plan = self.plan
        if (plan.enabled and plan.on("crash-before-mark") and MARKER_BYTES in data
                and plan.process_crashes < plan.max_process_crashes
                and self._decide("crash-before-mark", plan.crash_rate)):
            with self._lock:
                plan.process_crashes += 1
            plan.injected["crash-before-mark"] += 1
            raise SimulatedCrash(f"simulated crash before marking in session {session}")


MARKER_BYTES = f'"{MARKER_KEY}"'.encode()


def _effect_of(path: str, data: bytes) -> str | None:
    """Which effect installing ``data`` at ``path`` completes (EFFECTS), if any.

    A claim being released is none: that runs at shutdown, outside any actor.
    Told apart by content, so a node carrying several flags counts as the first.
    """
    name = os.path.basename(path)
    if name == CLAIM_NAME:
        return "claim" if data != RELEASED else None
    if name == "meta.json":
        return "head"
    if f"{os.sep}history{os.sep}" not in path:
        return None
    if b'"spawn_branch_root"' in data:
        return "spawn"
    if b'"covers_ids"' in data:
        return "summary"
    if b'"rewound"' in data:
        return "rewind"
    if MARKER_BYTES in data:
        return "marks"
    return "append"


def _session_of(path: str) -> str:
    parts = path.split(os.sep)
    index = len(parts) - 1 - parts[::-1].index("sessions")
    return parts[index + 1] if index + 1 < len(parts) else ""
