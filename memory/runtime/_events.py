"""The runtime's structured events, and an instrument that counts them.

Every child reports what it did as one event (a dict with ``event``,
``at`` and fields) through :class:`EventHook`, to ``RuntimeConfig.on_event``:
``scriptorium run --log-json`` prints each as a JSON line, and the
simulator and the tests measure the runtime through the same stream
(:class:`EventTally`) instead of through special members of the runtime.

Events an instrument reads (besides the log's ``job``, ``boundary``,
``skipped``, ``quarantined``...):

- ``submitted`` (``session``, ``job``, ``node_ids``, ``due_at``): a batch
  handed to the writer pool, the delivery of each of its nodes, and when the
  rules first called for it (``memory.ledger.batch_due_at``, wall clock);
- ``job`` (``result``, ``seconds``, ``node_ids``): a job's outcome, with the
  time from submission to it;
- ``marked`` (``session``, ``node_ids``, ``seconds``): markers merged for a
  finished job or a repair, and how long the merge took;
- ``group_taken`` (``size``, ``waiting``, ``oldest_due_age``): a writer
  worker took ``size`` due batches as one cycle, with ``waiting`` still
  queued and memory ``oldest_due_age`` seconds behind
  (:mod:`memory.runtime._backlog`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = ["EventHook", "EventTally"]


class EventHook:
    """Where the runtime's events go; a no-op without ``on_event``."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None] | None,
                 clock: Callable[[], float]) -> None:
        self._on_event = on_event
        self._clock = clock

    @property
    def enabled(self) -> bool:
        """Whether anyone listens (callers skip building costly fields otherwise)."""
        return self._on_event is not None

    def now(self) -> float:
        """The runtime's wall clock (``RuntimeConfig.clock``), which events are stamped with."""
        return self._clock()

    def emit(self, event: str, **fields: Any) -> None:
        """One structured event (``scriptorium run --log-json`` prints each as a JSON line)."""
        if self._on_event is not None:
            self._on_event({"event": event, "at": self._clock(), **fields})


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

    def __init__(self, forward: Callable[[dict[str, Any]], None] | None = None) -> None:
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

    def __call__(self, event: dict[str, Any]) -> None:
        match event.get("event"):
            case "submitted":
                session = event["session"]
                self.deliveries.update((session, node) for node in event["node_ids"])
                due_at = event.get("due_at")
                if due_at is not None:
                    for node in event["node_ids"]:
                        self._due.setdefault((session, node), due_at)
            case "job":
                if event.get("seconds") is not None:
                    self.latencies["write_cycle"].append(event["seconds"])
                if event.get("result") == "written":
                    self.written_batches.append((event["session"], tuple(event["node_ids"])))
            case "group_taken":
                self.groups[event["size"]] += 1
                self.waiting_max = max(self.waiting_max, event["waiting"])
                if event.get("oldest_due_age") is not None:
                    self.latencies["memory_lag"].append(event["oldest_due_age"])
            case "marked":
                session = event["session"]
                self.latencies["marker_merge"].append(event["seconds"])
                dues = [due for node in event["node_ids"]
                        if (due := self._due.pop((session, node), None)) is not None]
                if dues:  # a repair's markers were never due as a batch
                    self.cycles.append((min(dues), event["at"]))
                    self.latencies["due_to_durable"].append(event["at"] - min(dues))
                self.marked.update((session, node) for node in event["node_ids"])
        if self._forward is not None:
            self._forward(event)
