"""``bench/load.py``'s pure parts: the loads it takes, the rows its runs become, the chart.

The runs themselves are simulate processes (seconds to minutes); what is
tested here is how their JSON becomes rows: issue 20's targets flagged met
or missed at the loads they name, a load at which no batch came due is a
miss and not a vacuous pass, and the sustainable rate is the highest load
that kept its due -> durable p99 within 5 s.
"""

from __future__ import annotations

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
    closed = _run(0.0, 0.0, 0.0)
    closed["document"]["turns_per_s"] = closed_rate
    return {"sessions": 300, "turns": 40, "seed": 5, "backend": "asyncio",
            "loads": [25, 50, 80, 100][:len(runs)],
            "floor": {"median": 1000.0, "min": 900.0, "max": 1100.0, "rounds": 5,
                      "values": [1000.0] * 5},
            "closed": closed, "runs": runs, "chart": None}


def test_the_rows_flag_each_target_met_or_missed() -> None:
    data = _data([_run(100, 5, 1500), _run(200, 30, 2500), _run(320, 10, 4000),
                  _run(400, 90, 60_000)])
    found = {row.figure: row for row in load.rows(data)}
    closed = next(row for name, row in found.items() if name.startswith("closed loop, end"))
    assert (closed.ratio, closed.met) == (pytest.approx(0.4), True)  # 400 of 1,000 turns/s
    met = [(name.split(":")[0], name.split(": ")[1].split(" (")[0], row.met)
           for name, row in found.items() if row.target and "%" in name]
    assert met == [
        ("25% (100 turns/s)", "append ack p99", True),
        ("25% (100 turns/s)", "due -> durable p99", True),
        ("50% (200 turns/s)", "append ack p99", False),  # 30 ms > 20 ms
        ("50% (200 turns/s)", "due -> durable p99", False),  # 2.5 s > 2 s
        ("80% (320 turns/s)", "append ack p99", True),
        ("80% (320 turns/s)", "due -> durable p99", True),  # 4 s <= 5 s
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
    [due] = [row for row in found if row.figure.startswith("25% (100 turns/s): due")]
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
