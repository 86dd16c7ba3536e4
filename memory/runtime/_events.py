"""The runtime's typed events, and an instrument that counts them.

Every child reports what it did as one event (a frozen dataclass of
:mod:`memory.writers._events`, stamped with ``at``) through
:class:`EventHook`, to ``RuntimeConfig.on_event``: ``scriptorium run
--log-json`` prints each one's :meth:`~memory.writers._events.Event.as_record`
as a JSON line, and the simulator and the tests measure the runtime through
the same stream (:class:`EventTally`) instead of through special members of
the runtime. The events an instrument reads:

- :class:`Submitted`: a batch handed to the writer pool, the delivery of each
  of its nodes, and when the rules first called for it
  (``memory.ledger.batch_due_at``, wall clock);
- :class:`JobDone` (``job``): a job's outcome, with the time from submission
  to it;
- :class:`Marked`: markers merged for a finished job or a repair, and how long
  the merge took;
- :class:`GroupTaken`: a writer worker took ``size`` due batches as one cycle,
  with ``waiting`` still queued and memory ``oldest_due_age`` seconds behind
  (:mod:`memory.runtime._backlog`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from memory.writers import Event, EventListener

__all__ = ["Abandoned", "BoundaryReached", "ConsolidationPass", "DeferralUnknown", "Deferred", "EventHook",
           "EventTally", "GroupTaken", "GroupWritten", "JobDone", "Marked", "MarkersRepairFailed",
           "MarkersRepaired", "Migrated", "QuarantineUnsaved", "Quarantined", "SessionEnd",
           "SessionEndUnsaved", "Skipped", "Submitted"]


class EventHook:
    """Where the runtime's events go; a no-op without ``on_event``."""

    def __init__(self, on_event: EventListener | None, clock: Callable[[], float]) -> None:
        self._on_event = on_event
        self._clock = clock

    @property
    def enabled(self) -> bool:
        """Whether anyone listens (callers skip building costly fields otherwise)."""
        return self._on_event is not None

    def now(self) -> float:
        """The runtime's wall clock (``RuntimeConfig.clock``), which events are stamped with."""
        return self._clock()

    def emit(self, event: Event) -> None:
        """Stamp ``event`` with the runtime's clock and hand it to ``on_event``."""
        if self._on_event is not None:
            self._on_event(dataclasses.replace(event, at=self._clock()))


# -- the write side: jobs of the writer pool --------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Submitted(Event):
    """A batch handed to the writer pool as job ``job``; ``due_at``: when the rules called."""

    name: ClassVar[str] = "submitted"
    session: str
    job: int
    node_ids: tuple[str, ...]
    due_at: float | None


@dataclass(frozen=True, kw_only=True)
class JobDone(Event):
    """Job ``job`` ended with ``result``, ``seconds`` after its submission."""

    name: ClassVar[str] = "job"
    session: str
    job: int
    result: str
    nodes: int
    node_ids: tuple[str, ...]
    files: tuple[str, ...]
    seconds: float | None
    error: str | None


@dataclass(frozen=True, kw_only=True)
class GroupTaken(Event):
    """A writer worker took ``size`` due batches as one cycle, ``waiting`` still queued."""

    name: ClassVar[str] = "group_taken"
    size: int
    waiting: int
    oldest_due_age: float | None


@dataclass(frozen=True, kw_only=True)
class GroupWritten(Event):
    """A group cycle wrote ``written`` of its ``batches`` (``fallback``: why not all)."""

    name: ClassVar[str] = "group"
    batches: int
    written: int
    fallback: str | None


@dataclass(frozen=True, kw_only=True)
class Deferred(Event):
    """The writer asked job ``job`` to wait ``seconds`` (a spent model budget)."""

    name: ClassVar[str] = "deferred"
    session: str
    job: int
    nodes: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class DeferralUnknown(Event):
    """The writer could not say how long a batch should wait: it is offered now."""

    name: ClassVar[str] = "deferral_unknown"
    session: str
    error: str


@dataclass(frozen=True, kw_only=True)
class Abandoned(Event):
    """Job ``job`` was given up (the runtime goes down); its batch stays owed."""

    name: ClassVar[str] = "abandoned"
    session: str
    job: int
    nodes: int


@dataclass(frozen=True, kw_only=True)
class Quarantined(Event):
    """A batch parked after ``max_failures`` failures (SPEC §7)."""

    name: ClassVar[str] = "quarantined"
    session: str
    nodes: tuple[str, ...]
    error: str


@dataclass(frozen=True, kw_only=True)
class QuarantineUnsaved(Event):
    """A quarantined batch parked in memory only: its record could not be written."""

    name: ClassVar[str] = "quarantine_unsaved"
    session: str
    nodes: tuple[str, ...]
    error: str


# -- a session's markers and boundaries --------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Marked(Event):
    """Markers of ``node_ids`` merged (durable), in ``seconds``."""

    name: ClassVar[str] = "marked"
    session: str
    node_ids: tuple[str, ...]
    seconds: float


@dataclass(frozen=True, kw_only=True)
class MarkersRepaired(Event):
    """Markers lost to a crash set again for ``nodes``."""

    name: ClassVar[str] = "markers_repaired"
    session: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ConsolidationPass(Event):
    """An automatic consolidation pass of ``scope`` ended: done, yielded, refused or failed.

    ``actions`` and ``record`` (the pass's record file) when done; ``problems``
    when refused (what it would have lost); ``error`` when the model failed.
    """

    name: ClassVar[str] = "consolidation"
    scope: str
    outcome: str
    actions: int | None = None
    record: str | None = None
    problems: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class MarkersRepairFailed(Event):
    """Lost markers could not be set again (tried at the next start)."""

    name: ClassVar[str] = "markers_repair_failed"
    session: str
    error: str


@dataclass(frozen=True, kw_only=True)
class Skipped(Event):
    """A session cannot be read or batched, for ``reason`` (said once per reason)."""

    name: ClassVar[str] = "skipped"
    session: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class BoundaryReached(Event):
    """A boundary (SPEC §6.5) ended with ``outcome`` after ``batches`` batches."""

    name: ClassVar[str] = "boundary"
    session: str
    outcome: str
    batches: int
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class SessionEnd(Event):
    """A session's end recorded in memory at its ``updated_at``."""

    name: ClassVar[str] = "session_end"
    session: str
    updated_at: object


@dataclass(frozen=True, kw_only=True)
class SessionEndUnsaved(Event):
    """A session's end could not be recorded (the watchdog looks again)."""

    name: ClassVar[str] = "session_end_unsaved"
    session: str
    error: str


@dataclass(frozen=True, kw_only=True)
class Migrated(Event):
    """SPEC §6.7: cursors became markers (``marked``: nodes per session)."""

    name: ClassVar[str] = "migrated"
    marked: dict[str, int]
    cursors_removed: int
    errors: tuple[str, ...]


class EventTally:
    """An ``on_event`` that counts deliveries, written batches, markers and latencies.

    ``deliveries``: how many times each ``(session, node)`` was handed to a
    writer; ``written_batches``: every batch written, in order;
    ``marked``: every ``(session, node)`` whose marker merge was
    acknowledged; ``latencies``: seconds per ``write_cycle`` (submission to
    outcome) and per ``marker_merge``, and per ``due_to_durable``: from a
    batch becoming due (its first ``submitted``, so a retry counts from the
    first) to the ``marked`` event of its markers, the full write cycle;
    ``cycles`` holds the same as ``(due_at, durable_at)`` pairs.
    ``groups`` counts the groups the workers took by size; ``latencies``'
    ``memory_lag`` holds the memory lag seen at each take, and
    ``waiting_max`` the most due batches seen waiting.
    ``forward`` also receives every event.
    """

    def __init__(self, forward: EventListener | None = None) -> None:
        self.deliveries: Counter[tuple[str, str]] = Counter()
        self.written_batches: list[tuple[str, tuple[str, ...]]] = []
        self.marked: set[tuple[str, str]] = set()
        self.latencies: dict[str, list[float]] = {
            "write_cycle": [], "marker_merge": [], "due_to_durable": [], "memory_lag": []}
        self.groups: Counter[int] = Counter()
        self.waiting_max = 0
        self._due: dict[tuple[str, str], float] = {}  # submitted, not marked yet
        self.cycles: list[tuple[float, float]] = []  # (due_at, durable_at) per marked batch
        self._forward = forward

    def __call__(self, event: Event) -> None:
        match event:
            case Submitted(session=session, node_ids=node_ids, due_at=due_at):
                self.deliveries.update((session, node) for node in node_ids)
                if due_at is not None:
                    for node in node_ids:
                        self._due.setdefault((session, node), due_at)
            case JobDone():
                if event.seconds is not None:
                    self.latencies["write_cycle"].append(event.seconds)
                if event.result == "written":
                    self.written_batches.append((event.session, tuple(event.node_ids)))
            case GroupTaken():
                self.groups[event.size] += 1
                self.waiting_max = max(self.waiting_max, event.waiting)
                if event.oldest_due_age is not None:
                    self.latencies["memory_lag"].append(event.oldest_due_age)
            case Marked(session=session, node_ids=node_ids):
                self.latencies["marker_merge"].append(event.seconds)
                dues = [due for node in node_ids
                        if (due := self._due.pop((session, node), None)) is not None]
                if dues:  # a repair's markers were never due as a batch
                    self.cycles.append((min(dues), event.at))
                    self.latencies["due_to_durable"].append(event.at - min(dues))
                self.marked.update((session, node) for node in node_ids)
        if self._forward is not None:
            self._forward(event)
