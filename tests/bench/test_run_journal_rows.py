"""``bench/run.py``'s simulate rows per journal: each run's targets flagged, then shared set against session.

The target run and the open loop run once with ``--journal session`` and
once with ``--journal shared``; what is tested is how the two JSON
documents become rows: every figure names its journal, each journal's
misses are its own (a shared run that misses a target is flagged even when
the session run met it), the comparison rows divide the right way round,
and an outcome kept from before the pairing still reads (as the session
journal's, with nothing to compare).
"""

from __future__ import annotations

from typing import Any

from memory.simulate import FAULTS
from tests.bench._modules import bench_module

run = bench_module("run")


def _closed(turns_per_s: float, appending: float, rss: float) -> dict[str, Any]:
    return {"sessions": 1000, "branches": 10, "turns": 100_000, "turns_per_s": turns_per_s,
            "workload_seconds": 100_000 / appending, "peak_rss_mb": rss, "restarts": 0,
            "quarantined": 0, "invariants": {"no_turn_appended_twice": "PASS"}}


def _open(capacity: float, cycle_p99: float, ack_p99: float) -> dict[str, Any]:
    return {
        "sessions": 1000, "invariants": {"no_turn_appended_twice": "PASS"},
        "latency_ms": {"due_to_durable_load_p50": cycle_p99 / 2,
                       "due_to_durable_load_p99": cycle_p99,
                       "append_ack_p50": ack_p99 / 2, "append_ack_p99": ack_p99},
        "latency_samples": {"due_to_durable_load": 500, "append_ack": 100_000},
        "open_loop": {"rate": capacity / 2, "issued_per_s": capacity / 2, "late": 0,
                      "scheduled": 100_000, "lateness_p99_ms": 0.0},
        "closed_loop": {"capacity": capacity, "turns_per_session": "100"},
    }


def _target_rows(data: Any) -> dict[str, Any]:
    bench = next(b for b in run._benches("python") if b.name == "simulate, target size")
    return {row.figure: row for row in bench.rows(data)}


def _open_rows(data: Any) -> dict[str, Any]:
    bench = next(b for b in run._benches("python") if b.name == run.OPEN_LOOP)
    return {row.figure: row for row in bench.rows(data)}


def test_both_journals_are_run_for_the_target_size_and_the_open_loop() -> None:
    paired = {b.name: b.journals for b in run._benches("python") if b.journals}
    assert paired == {"simulate, target size": ("session", "shared"),
                      run.OPEN_LOOP: ("session", "shared")}


def test_each_journal_is_flagged_on_its_own_and_shared_is_divided_by_session() -> None:
    rows = _target_rows({"journals": {"session": _closed(2_100.0, 3_200.0, 900.0),
                                      "shared": _closed(1_050.0, 2_900.0, 450.0)}})
    assert rows["--journal session: end to end, to every branch written"].met is True
    assert rows["--journal shared: end to end, to every branch written"].met is False
    assert rows["--journal shared: appending phase alone"].met is False
    assert rows["--journal shared: invariant: no_turn_appended_twice"].met is True
    assert rows["shared / session: end to end"].ratio == 0.5
    assert rows["shared / session: peak RSS"].ratio == 0.5
    assert abs(rows["shared / session: appending phase"].ratio - 2_900 / 3_200) < 1e-9


def test_a_lower_latency_of_the_shared_log_reads_as_faster() -> None:
    rows = _open_rows({"journals": {"session": _open(400.0, 3_000.0, 8.0),
                                    "shared": _open(500.0, 1_500.0, 2.0)}})
    assert rows["--journal session: append ack p99"].met is False
    assert rows["--journal shared: append ack p99"].met is True
    ack = rows["shared / session: append ack p99"]
    assert ack.faster and ack.ratio == 4.0  # 8 ms / 2 ms
    assert rows["shared / session: write cycle p99, due to markers durable"].ratio == 2.0
    assert rows["shared / session: capacity (closed-loop appending phase)"].ratio == 1.25


def test_an_outcome_from_before_the_pairing_reads_as_the_session_journals_alone() -> None:
    rows = _target_rows(_closed(300.0, 400.0, 600.0))
    assert "--journal session: end to end, to every branch written" in rows
    assert not any(figure.startswith(("--journal shared", "shared / session"))
                   for figure in rows)


def test_the_shared_fault_run_injects_every_fault_the_shared_log_admits() -> None:
    assert run.SHARED_FAULTS.split(",") == [f for f in FAULTS if f != "outside-appends"]
