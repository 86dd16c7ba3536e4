"""``bench/load.py``'s pure parts: the loads it takes, the rows its runs become, the chart.

The runs themselves are simulate processes (seconds to minutes); what is
tested here is how their JSON becomes rows: issue 20's targets flagged met
or missed at the loads they name, a load at which no batch came due is a
miss and not a vacuous pass, and the sustainable rate is the highest load
that kept its due -> durable p99 within 5 s. And how the runs are taken:
each closed-loop run beside a floor round of its own, the ratio paired
round by round, every run and the floor on one scratch disk, ``--processes``
always passed to simulate, the open loop at the best processes value.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench._modules import bench_module

load = bench_module("load")
run = bench_module("run")


def test_loads_are_distinct_whole_percents() -> None:
    assert load.parse_loads("25,50,80,100") == (25, 50, 80, 100)
    for bad in ("", "50,50", "0", "half", "25,,x"):
        with pytest.raises(ValueError, match="--loads"):
            load.parse_loads(bad)


def test_the_targets_are_issue_20_s() -> None:
    assert [load.due_target_ms(p) for p in (25, 50, 80, 100)] == [2000, 2000, 5000, None]
    assert [load.ack_target_ms(p) for p in (25, 50, 80, 100)] == [20, 20, 20, None]


def _run(rate: float, ack_p99: float, due_p99: float, samples: int = 50,
         verdict: str = "PASS") -> dict[str, Any]:
    document = {
        "turns": 1000, "turns_per_s": 400.0, "invariants": {"head_branches_written": verdict},
        "latency_ms": {"append_ack_p50": 1.0, "append_ack_p99": ack_p99,
                       "due_to_durable_load_p50": due_p99 / 3,
                       "due_to_durable_load_p99": due_p99},
        "latency_samples": {"due_to_durable_load": samples},
        "memory_lag": {"group_size_mean": 3.5, "group_size_max": 9,
                       "oldest_due_age_p99_ms": 800.0},
        "open_loop": {"rate": rate},
    }
    return {"document": document, "seconds": 10.0, "cpu_seconds": 2.0}


def _data(runs: list[dict[str, Any]], closed_rate: float = 400.0) -> dict[str, Any]:
    """A document of before --processes: one closed run, the floor measured apart."""
    closed = _run(0.0, 0.0, 0.0)
    closed["document"]["turns_per_s"] = closed_rate
    return {"sessions": 300, "turns": 40, "seed": 5, "backend": "asyncio",
            "loads": [25, 50, 80, 100][:len(runs)],
            "floor": {"median": 1000.0, "min": 900.0, "max": 1100.0, "rounds": 5,
                      "values": [1000.0] * 5},
            "closed": closed, "runs": runs, "chart": None}


def _loop(processes: int, floors: list[float], rates: list[float]) -> dict[str, Any]:
    runs = []
    for rate in rates:
        entry = _run(0.0, 0.0, 0.0)
        entry["document"]["turns_per_s"] = rate
        runs.append(entry)
    return {"processes": processes, "floor": load.Summary.of(floors).to_json(), "runs": runs}


def _new_data(runs: list[dict[str, Any]], loops: list[dict[str, Any]],
              best: int) -> dict[str, Any]:
    """A document of today's shape: closed loops per processes value, the capacity's value."""
    floors = [v for loop in loops for v in loop["floor"]["values"]]
    return {"sessions": 300, "turns": 40, "seed": 5, "backend": "asyncio",
            "loads": [25, 50, 80, 100][:len(runs)], "processes": [e["processes"] for e in loops],
            "repeat": len(loops[0]["runs"]), "floor": load.Summary.of(floors).to_json(),
            "closed_loops": loops, "capacity": {"processes": best, "turns_per_s": 0.0},
            "runs": runs, "chart": None}


def test_the_rows_flag_each_target_met_or_missed() -> None:
    data = _new_data([_run(100, 5, 1500), _run(200, 30, 2500), _run(320, 10, 4000),
                      _run(400, 90, 60_000)], [_loop(1, [1000.0] * 3, [400.0] * 3)], best=1)
    found = {row.figure: row for row in load.rows(data)}
    closed = next(row for name, row in found.items() if name.startswith("closed loop, end"))
    assert (closed.ratio, closed.met) == (pytest.approx(0.4), True)  # 400 of 1,000 turns/s
    met = [(name.split(":")[0], name.split(": ")[1].split(" (")[0], row.met)
           for name, row in found.items() if row.target and "%" in name]
    assert met == [
        ("25% (100 turns/s, 1 process)", "append ack p99", True),
        ("25% (100 turns/s, 1 process)", "due -> durable p99", True),
        ("50% (200 turns/s, 1 process)", "append ack p99", False),  # 30 ms > 20 ms
        ("50% (200 turns/s, 1 process)", "due -> durable p99", False),  # 2.5 s > 2 s
        ("80% (320 turns/s, 1 process)", "append ack p99", True),
        ("80% (320 turns/s, 1 process)", "due -> durable p99", True),  # 4 s <= 5 s
    ]  # 100 %: figures, no targets
    sustainable = next(row for name, row in found.items() if name.startswith("sustainable"))
    assert sustainable.value.median == 320  # the highest load within 5 s
    assert sustainable.ratio == pytest.approx(0.32)  # of the floor's 1,000 turns/s
    assert found["invariants, every run"].met is True


def test_the_closed_loop_ratio_is_against_the_floor() -> None:
    good = next(r for r in load.rows(_data([_run(100, 5, 1)], closed_rate=250.0))
                if r.figure.startswith("closed loop, end"))
    bad = next(r for r in load.rows(_data([_run(100, 5, 1)], closed_rate=150.0))
               if r.figure.startswith("closed loop, end"))
    assert (good.ratio, good.met) == (pytest.approx(0.25), True)
    assert (bad.ratio, bad.met) == (pytest.approx(0.15), False)


def test_no_batch_due_under_load_is_a_miss_and_sustains_nothing() -> None:
    found = load.rows(_data([_run(100, 5, 0.0, samples=0)]))
    [due] = [row for row in found if row.figure.startswith("25% (100 turns/s, 1 process): due")]
    assert due.met is False and "no batch came due" in due.text
    [sustainable] = [row for row in found if row.figure.startswith("sustainable")]
    assert sustainable.text == "none of the loads"


def test_a_failed_invariant_in_any_run_fails_the_row() -> None:
    found = load.rows(_data([_run(100, 5, 1), _run(200, 5, 1, verdict="FAIL")]))
    assert [r.met for r in found if r.figure == "invariants, every run"] == [False]


def test_cpu_per_turn_is_the_process_cpu_over_its_turns() -> None:
    entry = load.Run(**_run(100, 5, 1))
    assert entry.cpu_ms_per_turn == pytest.approx(2.0)  # 2 s over 1,000 turns
    assert entry.cores_busy == pytest.approx(0.2)


def test_the_chart_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "load.png"
    load.chart(_data([_run(100, 5, 1500), _run(200, 8, 0.0, samples=0)]), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_registers_the_load_benchmark_and_links_its_chart() -> None:
    [bench] = [b for b in run._benches(sys.executable) if b.name == "load"]
    assert bench.script == "bench/load.py" and "--sessions" in bench.quick
    notes = bench.notes({**_data([]), "loads": [25, 50], "chart": "bench/load.png"})
    assert "![latency against load](load.png)" in notes and "25%, 50%" in notes


def test_processes_are_distinct_whole_numbers() -> None:
    assert load.parse_processes("1,2") == (1, 2)
    assert load.parse_processes("4, 1") == (4, 1)
    for bad in ("", "1,1", "0", "65", "two", "1,,x"):
        with pytest.raises(ValueError, match="--processes"):
            load.parse_processes(bad)


def test_simulate_is_always_told_its_processes_and_its_state() -> None:
    one = load.simulate_command(10, 5, 1, "asyncio", "/s/state-1", processes=1)
    two = load.simulate_command(10, 5, 1, "trio", "/s/state-2", processes=2, rate=12.34)
    assert one[one.index("--processes") + 1] == "1"  # simulate's own default may be 2
    assert two[two.index("--processes") + 1] == "2"
    assert one[one.index("--state") + 1] == "/s/state-1"
    assert two[two.index("--rate") + 1] == "12.3"


def test_each_simulate_run_has_a_fresh_state_in_the_scratch_dir_removed_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake_run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        state = command[command.index("--state") + 1]
        assert os.path.dirname(state) == str(tmp_path) and os.listdir(state) == []
        seen.append(state)
        Path(state, "sessions").mkdir()  # what a run leaves behind
        return subprocess.CompletedProcess(command, 0, '{"turns": 50, "turns_per_s": 9.0}', "")

    monkeypatch.setattr(load.subprocess, "run", fake_run)
    for _ in range(2):
        assert load.simulate(10, 5, 1, "asyncio", str(tmp_path)).document["turns_per_s"] == 9.0
    assert len(set(seen)) == 2 and os.listdir(tmp_path) == []


def test_the_floor_writes_in_the_scratch_dir_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []
    install = load.RawDisk.install

    def recording(self: Any, path: str, data: bytes, *, synced: bool) -> None:
        written.append(path)
        install(self, path, data, synced=synced)

    monkeypatch.setattr(load.RawDisk, "install", recording)
    assert load.format_floor(40, str(tmp_path)) > 0
    assert len(written) == 80 and all(p.startswith(f"{tmp_path}{os.sep}") for p in written)
    assert os.listdir(tmp_path) == []


def test_each_closed_run_sits_beside_a_floor_round_of_its_own() -> None:
    calls: list[str] = []
    floors = iter(range(1, 100))

    def floor() -> float:
        calls.append("floor")
        return float(next(floors))

    def closed(processes: int) -> Any:
        calls.append(f"closed {processes}")
        entry = _run(0.0, 0.0, 0.0)
        entry["document"]["turns_per_s"] = 100.0 * processes + calls.count(f"closed {processes}")
        return load.Run(**entry)

    loops = load.measure_closed((1, 2), 3, floor, closed)
    assert len(calls) == 12  # no warm-up run of simulate: 3 rounds x (floor + run) x 2
    for number in range(3):  # each round alternates floor and run (the order turns each round)
        part = calls[4 * number:4 * number + 4]
        assert sorted(part) == ["closed 1", "closed 2", "floor", "floor"]
        assert all((a == "floor") != (b == "floor") for a, b in itertools.pairwise(part))
    assert [loop.processes for loop in loops] == [1, 2]
    for loop in loops:  # the runs in round order, one floor round per run
        assert [r.document["turns_per_s"] for r in loop.runs] == [
            100.0 * loop.processes + n for n in (1, 2, 3)]
        assert loop.floor.rounds == 3
    assert sorted(v for loop in loops for v in loop.floor.values) == [float(n) for n in range(1, 7)]
    assert load.pooled_floor(loops).rounds == 6


def test_the_closed_loop_ratio_pairs_each_run_with_the_floor_of_its_round() -> None:
    # the machine slowed the floor of rounds 2 and 3, and the run of round 2 only: the
    # medians (150 of 400) would make 0.375, "met"; round by round the run is 0.15 of it
    data = _new_data([_run(100, 5, 1)], [_loop(1, [1000.0, 400.0, 400.0], [150.0, 60.0, 150.0])],
                     best=1)
    [row] = [r for r in load.rows(data) if r.figure.startswith("closed loop, end")]
    assert (row.ratio, row.met) == (pytest.approx(0.15), False)
    assert (row.value.low, row.value.high, row.against.low, row.against.high) == (
        60.0, 150.0, 400.0, 1000.0)  # the spread of both sides is kept


def test_the_open_loop_runs_at_the_best_processes_value_and_rows_name_it() -> None:
    loops = [_loop(1, [1000.0] * 3, [300.0, 320.0, 900.0]),  # one fast run: not the median
             _loop(2, [1000.0] * 3, [400.0, 410.0, 390.0])]
    best = load.capacity([load.ClosedLoop.from_json(loop) for loop in loops])
    assert (best.processes, best.rate.median) == (2, 400.0)
    found = [r.figure for r in load.rows(_new_data([_run(100, 5, 1)], loops, best=2))]
    assert [f for f in found if f.startswith("closed loop, end")] == [
        "closed loop, end to end, 300 sessions x 40 turns, 1 process",
        "closed loop, end to end, 300 sessions x 40 turns, 2 processes"]
    assert all("2 processes" in f for f in found if f.startswith(("25%", "sustainable")))


def test_the_chart_of_a_document_with_processes_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "load.png"
    load.chart(_new_data([_run(100, 5, 1500)], [_loop(2, [1000.0], [400.0])], best=2), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_open_loop_runs_with_the_capacity_s_processes_at_its_percents() -> None:
    asked: list[tuple[int, float | None]] = []

    def run(processes: int, rate: float | None) -> Any:
        asked.append((processes, rate))
        entry = _run(rate or 0.0, 0.0, 0.0)
        entry["document"]["turns_per_s"] = {1: 300.0, 2: 400.0, 3: 200.0}[processes]
        return load.Run(**entry)

    loops, best, runs = load.measure_runs((1, 2, 3), 2, (25, 100), lambda: 1000.0, run)
    assert [loop.processes for loop in loops] == [1, 2, 3] and best.processes == 2
    assert sorted(asked[:6], key=str) == sorted([(p, None) for p in (1, 2, 3)] * 2, key=str)
    assert asked[6:] == [(2, 100.0), (2, 400.0)] and len(runs) == 2


def test_run_s_notes_say_how_the_closed_loop_was_taken() -> None:
    [bench] = [b for b in run._benches(sys.executable) if b.name == "load"]
    data = {**_new_data([_run(100, 5, 1)], [_loop(1, [9.0], [1.0]), _loop(2, [9.0], [2.0])],
                        best=2), "scratch": "/disk"}
    notes = bench.notes(data)
    assert "`--processes` value (1, 2)" in notes and "`--processes 2`" in notes and "`/disk`" in notes
    assert "Closed loop" not in bench.notes(_data([]))  # a document of before: as it was
