"""``scriptorium simulate --rate``: arrivals on a clock, the write cycle measured from due to durable.

The scheduler is tested on virtual time: its arrivals are exactly where
the schedule puts them, a slow runtime makes no arrival wait unless its
own session is still busy, and those are counted as late, never dropped.
The write cycle's start (``batch_due_at``) and the instrument that measures
it (``EventTally``) are tested as the pure rules they are. Then small
runs: one that passes every invariant and prints the latency lines, and,
on virtual time, one with a planted slow writer whose arrivals keep their
schedule exactly while its write cycles grow by the writer's delay.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from memory.ledger import SourceRecord, WritePolicy, batch_due_at
from memory.runtime import Marked, Submitted
from memory.runtime._config import RuntimeConfig
from memory.runtime._events import EventTally
from memory.simulate import _simulate
from memory.simulate._agents import Mix
from memory.simulate._command import render_report, result_document
from memory.simulate._config import SimulationConfig
from memory.simulate._open_loop import OpenLoop, arrival_offsets
from memory.simulate._result import SimulationResult
from memory.simulate._simulate import simulate
from memory.workspace._edits import TopicEdit, WorkspaceSnapshot
from memory.writers._extractive import ExtractiveWriter
from memory.writers._writer import Batch
from tests.memory._runtime import virtual_wall_clock

# The runs use a small threshold so that batches come due while turns arrive.
pytestmark = pytest.mark.filterwarnings("ignore::memory.ledger.ReferenceThresholdWarning")

# -- the schedule -------------------------------------------------------------------


def test_fixed_arrivals_are_evenly_spaced() -> None:
    assert arrival_offsets(4.0, 5, arrivals="fixed") == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_poisson_arrivals_are_seeded_and_average_the_rate() -> None:
    offsets = arrival_offsets(200.0, 20_000, seed=3)
    assert offsets == arrival_offsets(200.0, 20_000, seed=3)
    assert offsets != arrival_offsets(200.0, 20_000, seed=4)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert all(gap >= 0 for gap in gaps)
    assert statistics.fmean(gaps) == pytest.approx(1 / 200, rel=0.03)
    # exponential gaps, not even ones: the spread of a Poisson process
    assert statistics.stdev(gaps) == pytest.approx(1 / 200, rel=0.05)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan")])
def test_a_rate_that_is_not_positive_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        arrival_offsets(rate, 3)


def test_an_unknown_arrival_process_is_refused() -> None:
    with pytest.raises(ValueError, match="bursty"):
        arrival_offsets(1.0, 3, arrivals="bursty")


# -- the open loop, on virtual time ---------------------------------------------------


@pytest.mark.virtual_time
async def test_arrivals_are_issued_exactly_on_their_schedule() -> None:
    offsets = arrival_offsets(50.0, 200, seed=1)
    loop = OpenLoop(offsets, lanes=8)
    lanes: list[tuple[int, int]] = []

    async def issue(lane: int, k: int) -> None:
        lanes.append((lane, k))
        await anyio.sleep(0.001)

    await loop.run(issue)
    assert loop.done
    assert sorted(k for _, k in lanes) == list(range(200))
    assert all(lane == k % 8 for lane, k in lanes)
    assert {k: t - loop.scheduled(k) for k, t in loop.issued.items()} == dict.fromkeys(
        range(200), 0.0)
    assert loop.late == 0


@pytest.mark.virtual_time
async def test_a_slow_runtime_does_not_slow_the_arrivals() -> None:
    """Every call takes 0.5 s, ten times the mean gap: the arrivals still come at their times.

    Each lane's own gap (8 lanes x 0.1 s) is longer than a call, so no
    arrival finds its session busy. A loop that issued on completion would
    fall 0.45 s behind per arrival.
    """
    loop = OpenLoop(arrival_offsets(10.0, 40, arrivals="fixed"), lanes=8)

    async def slow(_lane: int, _k: int) -> None:
        await anyio.sleep(0.5)

    started = anyio.current_time()
    await loop.run(slow)
    assert [loop.issued[k] - started for k in range(40)] == pytest.approx(
        [k / 10.0 for k in range(40)], abs=1e-9)
    assert loop.late == 0
    assert anyio.current_time() - started == pytest.approx(3.9 + 0.5)


@pytest.mark.virtual_time
async def test_an_arrival_whose_session_is_busy_is_late_not_dropped() -> None:
    """Lane 0's calls take 1 s; its arrivals are late and say how late; lane 1 keeps time."""
    loop = OpenLoop(arrival_offsets(4.0, 8, arrivals="fixed"), lanes=2)  # a lane: one per 0.5 s

    async def issue(lane: int, _k: int) -> None:
        await anyio.sleep(1.0 if lane == 0 else 0.01)

    await loop.run(issue)
    assert sorted(loop.issued) == list(range(8))  # none dropped
    assert loop.late == 3  # lane 0's arrivals 2, 4, 6
    assert [loop.lateness[k] for k in (0, 2, 4, 6)] == pytest.approx([0.0, 0.5, 1.0, 1.5])
    assert all(loop.lateness[k] == 0.0 for k in (1, 3, 5, 7))
    assert all(loop.issued[k] == pytest.approx(loop.scheduled(k)) for k in (1, 3, 5, 7))


@pytest.mark.virtual_time
async def test_the_loop_resumes_its_schedule_after_an_interruption() -> None:
    """A runtime crash cancels the run; the next run issues the rest on the same schedule."""
    loop = OpenLoop(arrival_offsets(10.0, 20, arrivals="fixed"), lanes=2)
    seen: list[int] = []

    async def issue(_lane: int, k: int) -> None:
        seen.append(k)

    with anyio.move_on_after(0.95):
        await loop.run(issue)
    assert not loop.done
    first = list(seen)
    await anyio.sleep(0.5)  # the reopening
    await loop.run(issue)
    assert loop.done
    assert sorted(seen) == list(range(20))  # each issued once
    assert first == list(range(10))
    assert loop.late == 5  # arrivals 10..14 came due while the runtime was down
    assert loop.lateness[10] == pytest.approx(0.45)


# -- when a batch is due ----------------------------------------------------------------


def _records(*spec: tuple[float, int]) -> list[SourceRecord]:
    return [SourceRecord("s", f"n{i}", "user", "x", at, "Owner", tokens=tokens)
            for i, (at, tokens) in enumerate(spec)]


def test_a_batch_at_the_threshold_was_due_when_its_last_record_came() -> None:
    policy = WritePolicy(threshold=8000, idle_after=30.0)
    assert batch_due_at(_records((10.0, 5000), (12.0, 3000)), policy) == 12.0
    assert batch_due_at(_records((10.0, 5000), (12.0, 3000)), policy, boundary_at=11.0) == 12.0


def test_a_shorter_batch_was_due_at_the_idle_rule_or_the_boundary_whichever_first() -> None:
    policy = WritePolicy(threshold=8000, idle_after=30.0)
    assert batch_due_at(_records((10.0, 100), (12.0, 100)), policy) == 42.0
    assert batch_due_at(_records((10.0, 100), (12.0, 100)), policy, boundary_at=20.0) == 20.0
    assert batch_due_at(_records((10.0, 100), (12.0, 100)), policy, boundary_at=50.0) == 42.0
    with pytest.raises(ValueError):
        batch_due_at([], policy)


def test_the_tally_measures_from_the_first_time_due_to_the_markers() -> None:
    """A batch submitted twice (its first job failed) counts from its first due time."""
    tally = EventTally()
    tally(Submitted(at=11.0, session="s", job=1, node_ids=("a", "b"), due_at=10.0))
    tally(Submitted(at=14.0, session="s", job=2, node_ids=("a", "b"), due_at=10.0 + 1))
    tally(Marked(at=15.5, session="s", node_ids=("a", "b"), seconds=0.01))
    tally(Marked(at=16.0, session="s", node_ids=("c",), seconds=0.01))  # a repair: never due
    assert tally.latencies["due_to_durable"] == [5.5]
    assert tally.cycles == [(10.0, 15.5)]


# -- real runs ------------------------------------------------------------------------------


def _open(state: str, **overrides: object) -> SimulationConfig:
    options: dict[str, object] = {
        "state_dir": state, "sessions": 8, "turns": 12, "seed": 5, "mix": Mix(),
        "session_idle": 0.4, "watchdog_poll": 0.2, "writer_timeout": 2.0,
        "threshold": 300, "rate": 40.0,
    }
    options.update(overrides)
    return SimulationConfig(**options)  # type: ignore[arg-type]


async def test_a_small_open_loop_run_passes_every_invariant_and_reports_its_latencies(
        tmp_path: Path) -> None:
    result = await simulate(_open(str(tmp_path)))
    assert {n: v.problems for n, v in result.invariants.items() if not v.passed} == {}
    loop = result.open_loop
    assert loop is not None and loop.done and len(loop.issued) == 8 * 12
    assert result.latencies["due_to_durable_load"]  # batches came due while turns arrived
    assert len(result.latencies["append_ack"]) >= 8 * 12 * 0.9
    doc = result_document(result)
    assert doc["open_loop"]["scheduled"] == 96 and doc["open_loop"]["issued"] == 96
    for key in ("due_to_durable_load_p50", "due_to_durable_load_p99", "append_ack_p50",
                "append_ack_p99"):
        assert doc["latency_ms"][key] > 0
    report = render_report(result)
    assert "open loop" in report and "late arrivals" in report
    assert "due -> durable   p50" in report and "append ack       p50" in report
    assert report.endswith("ALL PASS")


def test_the_command_takes_a_rate_and_prints_one_json_object(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = CliRunner().invoke(main, [
        "simulate", "--sessions", "4", "--turns", "6", "--rate", "30", "--arrivals", "fixed",
        "--session-idle", "0.3", "--watchdog-poll", "0.2", "--threshold", "8000",
        "--backend", "trio", "--json", "--state", str(state)])
    assert run.exit_code == 0, run.output
    doc = orjson.loads(run.stdout)
    assert set(doc["invariants"].values()) == {"PASS"}
    assert doc["open_loop"]["rate"] == 30.0 and doc["open_loop"]["arrivals"] == "fixed"
    assert doc["open_loop"]["issued"] == 24
    assert "append_ack_p99" in doc["latency_ms"]


@pytest.mark.parametrize("rate", ["0", "-5", "nan"])
def test_the_command_refuses_a_rate_that_is_not_positive(rate: str) -> None:
    run = CliRunner().invoke(main, ["simulate", "--rate", rate])
    assert run.exit_code == 2
    assert "--rate" in run.output


class SlowWriter(ExtractiveWriter):
    """The planted slow runtime: every write holds its batch for ``delay`` seconds first."""

    delay = 0.4

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        await anyio.sleep(self.delay)
        return await super().write(batch, workspace)

    async def write_group(self, batches: Sequence[Batch],
                          workspace: WorkspaceSnapshot) -> list[TopicEdit]:
        await anyio.sleep(self.delay)
        return await super().write_group(batches, workspace)


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_with_a_slow_writer_the_arrivals_keep_their_schedule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writes take 0.4 s more, and it shows in the write cycle, not in the arrivals.

    Each session has an arrival every 0.4 s (8 sessions at 20 turns/s,
    fixed): appends never wait on a writer, so every arrival is issued
    exactly when the schedule says, while every batch's due-to-durable
    latency includes the writer's 0.4 s. On virtual time, with the
    runtime's wall clock following it: disk work takes no time, so an
    arrival that waited on a write would be late by the write's 0.4 s.
    """
    monkeypatch.setattr(_simulate, "ExtractiveWriter", SlowWriter)
    simulators_config = _simulate.runtime_config

    def runtime_config(*args: Any) -> RuntimeConfig:
        return dataclasses.replace(simulators_config(*args), clock=virtual_wall_clock)

    monkeypatch.setattr(_simulate, "runtime_config", runtime_config)
    result = await simulate(_open(str(tmp_path), rate=20.0, arrivals="fixed", turns=10))
    assert {n: v.problems for n, v in result.invariants.items() if not v.passed} == {}
    loop = result.open_loop
    assert loop is not None and len(loop.issued) == 80
    assert loop.late == 0 and set(loop.lateness.values()) == {0.0}
    assert loop.issued[79] == pytest.approx(loop.scheduled(79), abs=1e-6)
    cycles = result.latencies["due_to_durable"]
    # 1e-6: the wall clock is an epoch plus virtual time, a float with ~0.2 µs steps there
    assert cycles and min(cycles) >= SlowWriter.delay - 1e-6


def test_the_report_says_n_a_when_no_batch_fell_due_under_load(tmp_path: Path) -> None:
    """0.0 ms would claim instant writes; no sample is no latency, and the JSON counts 0."""
    result = SimulationResult(
        config=SimulationConfig(state_dir=str(tmp_path)), invariants={}, turns=4, seconds=1.0,
        branches=1, batches=1, restarts=0, quarantined=0, incarnations=1, injected={},
        outcomes={}, actions={}, deliveries=1, peak_rss_mb=1.0,
        latencies={"due_to_durable": [0.25], "due_to_durable_load": []})
    [line] = [line for line in render_report(result).splitlines() if "due -> durable" in line]
    assert line == "  due -> durable   n/a (no batch fell due under load; all: p99 250.0 ms)"
    doc = result_document(result)
    assert doc["latency_samples"]["due_to_durable_load"] == 0
    assert doc["latency_ms"]["due_to_durable_load_p99"] == 0.0  # the JSON keeps its keys
