"""The benchmarks' shared helper (``bench/_harness.py``): its pure rules.

The benchmarks are not timed tests; what is tested here is what every table
rests on: the one percentile, the round summaries, warm-up rounds left out,
the order of interleaved rounds, ratios, and the met/missed verdicts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bench._modules import bench_module

BENCH = Path(__file__).resolve().parents[2] / "bench"


h = bench_module("_harness")


def test_percentile_interpolates_between_closest_ranks() -> None:
    samples = [4.0, 1.0, 3.0, 2.0]
    assert h.percentile(samples, 50) == 2.5  # the mean of the two middle samples
    assert h.percentile(samples, 0) == 1.0
    assert h.percentile(samples, 100) == 4.0
    assert h.percentile(samples, 25) == pytest.approx(1.75)
    assert h.percentile([7.0], 99) == 7.0
    # p99 of 1..100 lies between the 99th and 100th samples, not on the maximum
    assert h.percentile([float(i) for i in range(1, 101)], 99) == pytest.approx(99.01)


@pytest.mark.parametrize("q", [-1, 101])
def test_percentile_refuses_out_of_range(q: float) -> None:
    with pytest.raises(ValueError, match="0-100"):
        h.percentile([1.0], q)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        h.percentile([], 50)


def test_summary_is_median_min_max_of_the_rounds() -> None:
    summary = h.Summary.of([5.0, 1.0, 3.0, 9.0, 2.0])
    assert (summary.median, summary.low, summary.high, summary.rounds) == (3.0, 1.0, 9.0, 5)
    assert h.Summary.from_json(summary.to_json()) == summary
    assert summary.scaled(1e3).median == 3000.0
    rate = h.Summary.of([0.5, 0.25, 1.0]).inverse(100)  # seconds per 100 items -> items/s
    assert (rate.median, rate.low, rate.high) == (200.0, 100.0, 400.0)


def test_warm_up_rounds_are_run_but_not_counted() -> None:
    calls: list[float] = []

    def measure() -> float:
        calls.append(float(len(calls)))
        return calls[-1]

    summary = h.rounds(measure, rounds=5, warmup=2)
    assert len(calls) == 7
    assert summary.rounds == 5
    assert summary.low == 2.0  # rounds 0 and 1 were the warm-up


def test_interleaved_rounds_rotate_so_each_measure_takes_each_position() -> None:
    names = ["a", "b", "c"]
    orders = [h.round_order(names, number) for number in range(6)]
    for name in names:
        positions = {order.index(name) for order in orders}
        assert positions == {0, 1, 2}
    # and each measure follows each other one at least once
    follows = {(order[i], order[i + 1]) for order in orders for i in range(2)}
    assert {(x, y) for x in names for y in names if x != y} <= follows


def test_interleaved_runs_every_measure_once_per_round() -> None:
    seen: list[str] = []
    settled: list[int] = []

    def make(name: str, value: float) -> Callable[[], float]:
        def measure() -> float:
            seen.append(name)
            return value
        return measure

    found = h.interleaved({"x": make("x", 1.0), "y": make("y", 2.0)}, rounds=5, warmup=1,
                          settle=lambda: settled.append(1))
    assert seen.count("x") == seen.count("y") == 6
    assert len(settled) == 12  # before every measurement
    assert found["x"].median == 1.0 and found["y"].rounds == 5


def test_rounds_must_be_positive() -> None:
    with pytest.raises(ValueError):
        h.rounds(lambda: 1.0, rounds=0)


def test_the_ratio_pairs_rounds_measured_together() -> None:
    # a burst of load hit both sides of rounds 2-3, and only the floor of rounds 4-5:
    # the medians come from different rounds and make the figure "beat its floor"
    value = h.Summary.of([12.0, 36.0, 36.0, 12.0, 12.0])
    floor = h.Summary.of([10.0, 30.0, 30.0, 30.0, 30.0])
    assert value.median / floor.median == pytest.approx(0.4)
    row = h.ratio_row("x", value, "ms", floor, kind=h.FLOOR, what="f")
    assert row.ratio == pytest.approx(1.2)  # median of 1.2, 1.2, 1.2, 0.4, 0.4
    unpaired = h.ratio_row("x", value, "ms", floor, kind=h.FLOOR, what="f", paired=False)
    assert unpaired.ratio == pytest.approx(0.4)
    # one round each, or different counts: the medians
    assert h.paired_ratio(h.Summary.single(3.0), h.Summary.single(2.0)) is None
    assert h.paired_ratio(value, h.Summary.of([1.0, 2.0])) is None
    faster = h.ratio_row("x", h.Summary.of([1.0, 2.0, 3.0]), "ms", h.Summary.of([5.0, 8.0, 9.0]),
                         kind=h.TO_BEAT, what="f", faster=True)
    assert faster.ratio == pytest.approx(4.0)  # 1 / the median of 0.2, 0.25, 0.333


def test_scaled_and_inverted_rounds_keep_their_order() -> None:
    summary = h.Summary.of([2.0, 1.0, 4.0])
    assert summary.scaled(10).values == (20.0, 10.0, 40.0)
    assert summary.inverse(4).values == (2.0, 4.0, 1.0)


def test_ratio_rows_flag_met_and_missed() -> None:
    floor = h.Summary.of([10.0] * 5)
    near = h.ratio_row("call", h.Summary.of([12.0] * 5), "us", floor, kind=h.FLOOR,
                       what="deque + Event", op="<=", bound=1.3)
    far = h.ratio_row("call", h.Summary.of([20.0] * 5), "us", floor, kind=h.FLOOR,
                      what="deque + Event", op="<=", bound=1.3)
    assert near.ratio == pytest.approx(1.2) and near.met is True
    assert far.ratio == pytest.approx(2.0) and far.met is False
    assert far.target == "<= 1.3x the floor"
    assert h.missed([near, far]) == [far]


def test_faster_rows_read_the_other_way_round() -> None:
    beat = h.Summary.of([100.0] * 5)
    row = h.ratio_row("merge", h.Summary.of([25.0] * 5), "ms", beat, kind=h.TO_BEAT,
                      what="64 writes", faster=True, op=">=", bound=5)
    assert row.ratio == pytest.approx(4.0) and row.met is False
    assert h.format_ratio(row) == "4.00x faster"
    slower = h.ratio_row("merge", h.Summary.of([110.0] * 5), "ms", beat, kind=h.TO_BEAT,
                         what="64 writes", faster=True)
    assert h.format_ratio(slower) == "1.10x slower"


def test_value_rows_bound_the_figure_itself() -> None:
    row = h.value_row("cast", h.Summary.of([90_000.0] * 5), "msg/s", op=">=", bound=100_000)
    assert row.met is False and row.target == ">= 100,000 msg/s"
    assert h.value_row("note", h.Summary.single(3), "").met is None


def test_a_comparison_must_say_what_it_is() -> None:
    with pytest.raises(ValueError, match="kind"):
        h.Row("x", h.Summary.single(1), "ms", h.Summary.single(1), kind="raw floor")
    with pytest.raises(ValueError, match="verdict"):
        h.Row("x", h.Summary.single(1), "ms", target="<= 2 ms")


def test_rows_survive_json_and_the_table_shows_the_verdict() -> None:
    floor = h.Summary.of([10.0, 11.0, 9.0, 10.0, 12.0])
    row = h.ratio_row("call p50", h.Summary.of([30.0, 31.0, 29.0, 30.0, 32.0]), "us", floor,
                      kind=h.FLOOR, what="deque + Event", op="<=", bound=1.3)
    assert h.Row.from_json(row.to_json()) == row
    table = h.markdown_table([row, h.Row("turns", h.Summary.single(1904), "")])
    assert "**MISSED**" in table
    assert "30.00 us (29.00-32.00, 5 rounds)" in table
    assert "floor: 10.00 us (9.000-12.00, 5 rounds); deque + Event" in table
    assert "| turns | 1,904 |" in table


def test_numbers_keep_four_significant_digits() -> None:
    assert h.format_number(0.0012346) == "0.001235"
    assert h.format_number(19.234) == "19.23"
    assert h.format_number(648149.7) == "648,150"
    assert h.format_number(100_067) == "100,067"
    assert h.format_number(401) == "401"  # a count stays a count
    assert h.format_number(150.0) == "150.0"


PACKAGES = ("actors", "supervisors", "store", "memory")
# Timing helpers that would be a second copy of the harness's.
OWN_TIMING = {"percentile", "_best", "_median", "_time", "median"}


def _bench_files() -> list[Path]:
    return sorted(path for path in BENCH.glob("*.py") if path.name != "_harness.py")


def test_no_benchmark_is_named_like_a_package() -> None:
    # mypy (and any import from bench/) would resolve the package to the benchmark
    clashing = [path.name for path in _bench_files() if path.stem in PACKAGES]
    assert not clashing, f"bench/{clashing} shadow the packages of the same name"


def test_every_benchmark_times_through_the_one_harness() -> None:
    import ast

    for path in _bench_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert not defined & OWN_TIMING, (
            f"bench/{path.name} defines {sorted(defined & OWN_TIMING)}: use bench/_harness.py")
        calls = {f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)}
        assert "statistics.median" not in calls, f"bench/{path.name}: use bench/_harness.py"
        # _raw.py is the floors' bare calls; marker_race.py counts lost writes and _locomo.py
        # scores recall: they time nothing; journal_probe.py sums the thread time of the calls
        # of one diagnostic run: no rounds, no row
        if path.name not in ("_raw.py", "marker_race.py", "_locomo.py", "journal_probe.py"):
            imported = {node.module for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and node.module}
            assert "_harness" in imported, f"bench/{path.name} does not use bench/_harness.py"
