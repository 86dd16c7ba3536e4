"""What a ``scriptorium simulate`` run returns, and the counts it is made from.

A run outlives its runtimes (a simulated crash kills one, the harness opens
the next): :class:`Totals` sums what each incarnation counted, and
:func:`build_result` turns the totals, the agents and the oracle's verdicts
into one :class:`SimulationResult`, which :mod:`memory.simulate._command`
reports. The run itself is :mod:`memory.simulate._simulate`'s.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from memory.runtime._events import EventTally
from memory.runtime._runtime import MemoryRuntime
from memory.simulate._agents import Agent
from memory.simulate._config import SimulationConfig
from memory.simulate._open_loop import OpenLoop
from memory.simulate._oracle import Evidence, Verdict

__all__ = ["SimulationResult", "Totals", "build_result"]


@dataclass
class SimulationResult:
    config: SimulationConfig
    invariants: dict[str, Verdict]
    turns: int
    seconds: float
    branches: int
    batches: int
    restarts: int
    quarantined: int
    incarnations: int
    injected: dict[str, int]
    outcomes: dict[str, int]
    actions: dict[str, int]
    latencies: dict[str, list[float]]
    deliveries: int
    peak_rss_mb: float
    workspace_id: str = ""
    evidence: Evidence | None = None
    workload_seconds: float = 0.0  # until the last agent finished; the rest is the boundary
    open_loop: OpenLoop | None = None  # the arrivals, when ``config.rate`` is set
    notes: list[str] = field(default_factory=list)  # what the run left out, and why
    groups: dict[int, int] = field(default_factory=dict)  # write groups taken, by size
    due_waiting_max: int = 0  # the most due batches seen waiting for a worker

    @property
    def passed(self) -> bool:
        return all(verdict.passed for verdict in self.invariants.values())

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Totals:
    """What survives runtime incarnations: counters of every dead runtime, summed."""

    outcomes: Counter[str] = field(default_factory=Counter)
    latencies: dict[str, list[float]] = field(
        default_factory=lambda: {"write_cycle": [], "marker_merge": []})
    written_batches: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    marked: set[tuple[str, str]] = field(default_factory=set)
    cycles: list[tuple[float, float]] = field(default_factory=list)  # (due_at, durable_at)
    deliveries: int = 0
    restarts: int = 0
    quarantined: int = 0
    incarnations: int = 0
    groups: Counter[int] = field(default_factory=Counter)
    waiting_max: int = 0

    def absorb(self, rt: MemoryRuntime, tally: EventTally, restarts: int) -> None:
        """One incarnation's counts: its statistics, and what its events told ``tally``."""
        outcomes = rt.statistics().outcomes
        self.merge(Totals(
            outcomes=Counter(outcomes),
            latencies={name: list(values) for name, values in tally.latencies.items()},
            written_batches=list(tally.written_batches), marked=set(tally.marked),
            cycles=list(tally.cycles), deliveries=sum(tally.deliveries.values()),
            restarts=restarts, quarantined=outcomes.get("quarantined", 0),
            groups=Counter(tally.groups), waiting_max=tally.waiting_max))

    def merge(self, other: Totals) -> None:
        """Add ``other``'s counts: an incarnation's, or another process's (a sharded run's)."""
        self.outcomes.update(other.outcomes)
        for name, values in other.latencies.items():
            self.latencies.setdefault(name, []).extend(values)
        self.written_batches.extend(other.written_batches)
        self.marked |= other.marked
        self.cycles.extend(other.cycles)
        self.groups.update(other.groups)
        self.waiting_max = max(self.waiting_max, other.waiting_max)
        self.deliveries += other.deliveries
        self.restarts += other.restarts
        self.quarantined += other.quarantined
        self.incarnations += other.incarnations


def build_result(
    config: SimulationConfig,
    invariants: dict[str, Verdict],
    agents: list[Agent],
    totals: Totals,
    injected: dict[str, int],
    seconds: float,
    outside: dict[str, object],
    *,
    peak_rss_mb: float,
) -> SimulationResult:
    actions: Counter[str] = Counter()
    for agent in agents:
        actions.update(agent.actions)
        actions["refused"] += agent.refused
        actions["errors"] += agent.errors
        actions["crashed"] += agent.crashed
        actions["retried"] += agent.retried
    appended = outside.get("appended")
    outside_turns = len(appended) if isinstance(appended, list) else 0
    return SimulationResult(
        config=config,
        invariants=invariants,
        turns=sum(agent.done_turns for agent in agents) + outside_turns,
        seconds=seconds,
        branches=invariants["no_owed_tail_at_threshold"].checked,
        batches=totals.outcomes["written"],
        restarts=totals.restarts,
        quarantined=totals.quarantined,
        incarnations=totals.incarnations,
        injected=injected,
        outcomes=dict(totals.outcomes),
        actions=dict(actions),
        latencies={**totals.latencies,
                   "append_ack": [s for agent in agents for s in agent.ack_seconds]},
        deliveries=totals.deliveries,
        peak_rss_mb=peak_rss_mb,
        groups=dict(totals.groups),
        due_waiting_max=totals.waiting_max,
    )
