"""What one ``scriptorium simulate`` run is asked to do: :class:`SimulationConfig`.

Apart from the run (:mod:`memory.simulate._simulate`) because the command,
the result and the tests all build or read one without running anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memory.runtime._config import JournalMode
from memory.simulate._agents import Mix
from memory.writers._offload import CpuWorkerMode
from memory.writers.model import ModelSettings
from store.lowlevel import state_path

__all__ = ["SimulationConfig"]


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
    # Every runtime and model-writer event, and a ``stage`` event ({"what", "unit",
    # "total"}) as the run moves on: appending, each boundary round, the oracle.
    on_event: Callable[[dict[str, Any]], None] | None = None
    rate: float | None = None  # turns/s of the open loop; None: the closed loop
    arrivals: str = "poisson"  # the open loop's arrival process (see _open_loop.ARRIVALS)
    cpu_worker: CpuWorkerMode = "thread"  # RuntimeConfig.cpu_worker
    journal: JournalMode = "session"  # RuntimeConfig.journal

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", state_path(self.state_dir))
