"""Scriptorium `memory.simulate`: ``scriptorium simulate``: the stress harness and its oracle.

Layout (see docs/architecture.md): ``_simulate`` the run, ``_config`` what
it is asked, ``_result`` what it returns; ``_agents``,
``_outside`` the simulated agents; ``_open_loop`` the arrivals of ``--rate``;
``_faults`` the injected faults;
``_oracle`` the invariants; ``_command`` the command and its report.
"""

from memory.simulate._config import SimulationConfig as SimulationConfig
from memory.simulate._faults import FAULTS as FAULTS
from memory.simulate._faults import parse_faults as parse_faults
from memory.simulate._result import SimulationResult as SimulationResult
from memory.simulate._simulate import simulate as simulate

__all__ = [
    "FAULTS",
    "SimulationConfig",
    "SimulationResult",
    "parse_faults",
    "simulate",
]
