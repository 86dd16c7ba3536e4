"""What one ``scriptorium simulate`` run is asked to do: :class:`SimulationConfig`.

Apart from the run (:mod:`memory.simulate._simulate`) because the command,
the result and the tests all build or read one without running anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from memory.runtime._config import JournalMode, Shard
from memory.simulate._agents import Mix
from memory.writers._events import Event, EventListener
from memory.writers._offload import CpuWorkerMode
from memory.writers.model import ModelSettings
from store.lowlevel import state_path

__all__ = ["SimulationConfig", "Stage"]


@dataclass(frozen=True, kw_only=True)
class Stage(Event):
    """The simulation moves on to ``what``, counted in ``unit`` (``total`` if known)."""

    name: ClassVar[str] = "stage"
    what: str
    unit: str
    total: int | None


@dataclass(frozen=True)
class SimulationConfig:
    """One run. Durations are real seconds: the watchdog's clock is compressed, not virtual."""

    state_dir: str
    sessions: int = 200
    turns: int = 60
    seed: int = 0
    faults: frozenset[str] = frozenset()
    mix: Mix = field(default_factory=Mix)
    threshold: int = 8000
    writer_workers: int = 4
    session_idle: float = 2.0
    idle_after: float | None = None  # the incremental trigger's idle time; None: session_idle
    watchdog_poll: float = 2.0
    writer_timeout: float = 2.0
    outside_sessions: int = 8
    outside_rounds: int = 200
    agent_sessions: int = 8  # agent-writes: the sessions after the outside-appends ones
    agent_rounds: int = 200
    fault_rates: Mapping[str, Any] = field(default_factory=dict)  # FaultPlan field overrides
    model: ModelSettings | None = None  # a model writer on this endpoint; None: extractive
    progress: Callable[[int, int], None] | None = None  # done, total of the current stage
    # Every runtime and model-writer event, and a Stage event as the run moves on:
    # appending, each boundary round, the oracle.
    on_event: EventListener | None = None
    rate: float | None = None  # turns/s of the open loop; None: the closed loop
    arrivals: str = "poisson"  # the open loop's arrival process (see _open_loop.ARRIVALS)
    cpu_worker: CpuWorkerMode = "thread"  # RuntimeConfig.cpu_worker
    journal: JournalMode = "session"  # RuntimeConfig.journal
    # Issue 20: the agents sharded by session id over this many processes, each with
    # its own runtime on the one state (memory.simulate._shards); 1: this process alone.
    processes: int = 1
    shard: Shard | None = None  # the share this process runs (set in each such process)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", state_path(self.state_dir))
        if self.processes < 1:
            raise ValueError(f"a simulation runs in at least one process, not {self.processes}")
