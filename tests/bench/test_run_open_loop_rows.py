"""``bench/run.py``'s open-loop row: flagged against issue 15's targets, never met by absence.

The row is one ``simulate --rate`` run at half the capacity the closed
loop measured right before it; what is tested is how its JSON becomes
rows: the two latency targets are flagged met or missed, and a run in
which no batch came due under load is a miss, not a vacuous pass.
"""

from __future__ import annotations

import sys
from typing import Any

from tests.bench._modules import bench_module

run = bench_module("run")


def _data(cycles: int, cycle_p99: float, ack_p99: float) -> dict[str, Any]:
    return {
        "sessions": 1000, "invariants": {"head_branches_written": "PASS"},
        "latency_ms": {"due_to_durable_load_p50": cycle_p99 / 2,
                       "due_to_durable_load_p99": cycle_p99,
                       "append_ack_p50": ack_p99 / 2, "append_ack_p99": ack_p99},
        "latency_samples": {"due_to_durable_load": cycles, "append_ack": 100_000},
        "open_loop": {"rate": 700.0, "issued_per_s": 699.0, "late": 3, "scheduled": 100_000,
                      "lateness_p99_ms": 0.0},
        "closed_loop": {"capacity": 1400.0, "turns_per_session": "100"},
    }


def _verdicts(data: dict[str, Any]) -> dict[str, bool | None]:
    return {row.figure.split(" (")[0]: row.met for row in run._open_loop_rows(data)
            if row.target}


def test_the_targets_are_flagged_met_and_missed() -> None:
    assert _verdicts(_data(500, 1_900.0, 4.0)) == {
        "write cycle p99, due to markers durable": True, "append ack p99": True,
        "invariant: head_branches_written": True}
    assert _verdicts(_data(500, 2_100.0, 6.0)) == {
        "write cycle p99, due to markers durable": False, "append ack p99": False,
        "invariant: head_branches_written": True}


def test_no_batch_due_under_load_is_a_miss_not_a_pass() -> None:
    verdicts = _verdicts(_data(0, 0.0, 1.0))
    assert verdicts["write cycle p99, due to markers durable"] is False


def test_the_open_loop_row_is_run_by_bench_run() -> None:
    names = [bench.name for bench in run._benches(sys.executable)]
    assert run.OPEN_LOOP in names
