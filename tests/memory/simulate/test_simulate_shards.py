"""``simulate(processes=2)``: the agents sharded over two processes, one oracle (issue 20)."""

from __future__ import annotations

from pathlib import Path

from memory.simulate._agents import Mix
from memory.simulate._config import SimulationConfig
from memory.simulate._faults import parse_faults
from memory.simulate._oracle import INVARIANTS
from memory.simulate._simulate import simulate

SESSIONS, TURNS = 8, 12


def small(state: str, **overrides: object) -> SimulationConfig:
    options: dict[str, object] = {
        "state_dir": state, "sessions": SESSIONS, "turns": TURNS, "seed": 11,
        "mix": Mix(idle_seconds=0.6), "session_idle": 0.4, "watchdog_poll": 0.4,
        "writer_timeout": 0.5, "outside_sessions": 1, "outside_rounds": 30,
        "agent_sessions": 1, "agent_rounds": 30, "processes": 2,
    }
    options.update(overrides)
    return SimulationConfig(**options)  # type: ignore[arg-type]


async def test_two_processes_run_every_agent_once_and_pass_one_oracle(tmp_path: Path) -> None:
    config = small(str(tmp_path), faults=parse_faults("all"), fault_rates={
        "crash_rate": 0.5, "max_process_crashes": 1, "writer_rate": 0.1})
    result = await simulate(config)
    failing = {n: v.problems for n, v in result.invariants.items() if not v.passed}
    assert failing == {}
    assert list(result.invariants) == list(INVARIANTS)
    assert all(v.checked > 0 for v in result.invariants.values())
    # every agent ran, in one process: a session made twice would have been refused
    sessions = sorted({sid for sid, _ in result.evidence.acknowledged}) if result.evidence else []
    assert sessions == [f"sim-{index:05d}" for index in range(SESSIONS)]
    assert result.turns >= SESSIONS * TURNS
    assert result.incarnations >= 2  # one runtime per process, at least
    assert result.injected["process-crashes"] >= 1  # a shard lived through its own crash
    assert result.batches >= SESSIONS
    assert result.peak_rss_mb > 0


async def test_an_open_loop_over_two_processes_issues_every_arrival_once(tmp_path: Path) -> None:
    result = await simulate(small(str(tmp_path), rate=200.0))
    assert all(v.passed for v in result.invariants.values())
    loop = result.open_loop
    assert loop is not None
    assert sorted(loop.issued) == list(range(SESSIONS * TURNS))  # each arrival by one process
    assert min(loop.issued.values()) >= 0.0  # each process's times from its own start
    assert result.latencies["append_ack"]
