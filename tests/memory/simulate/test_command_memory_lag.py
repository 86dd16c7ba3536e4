"""``scriptorium simulate`` reports how far memory fell behind, and keeps its comparable keys."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from memory.cli import main


def test_simulate_reports_the_memory_lag_and_the_group_sizes(tmp_path: Path) -> None:
    outcome = CliRunner().invoke(main, ["simulate", "--sessions", "6", "--turns", "8", "--json",
                                        "--state", str(tmp_path / "s")])
    assert outcome.exit_code == 0, outcome.output
    doc = orjson.loads(outcome.stdout)
    # The keys runs are compared by (issue 20) stay where they were.
    assert {"append_ack_p99", "due_to_durable_p99"} <= set(doc["latency_ms"])
    assert doc["turns_per_s"] > 0
    lag = doc["memory_lag"]
    sizes = {int(size): count for size, count in lag["groups"].items()}
    assert sizes and min(sizes) >= 1
    assert lag["group_size_max"] == max(sizes)
    # Every written batch went through a group taken by a worker.
    assert sum(size * count for size, count in sizes.items()) >= doc["batches"]
    assert 0 <= lag["oldest_due_age_p50_ms"] <= lag["oldest_due_age_p99_ms"] \
        <= lag["oldest_due_age_max_ms"]
    text = CliRunner().invoke(main, ["simulate", "--sessions", "3", "--turns", "4",
                                     "--state", str(tmp_path / "t")])
    assert text.exit_code == 0, text.output
    assert "memory lag" in text.output and "groups: mean" in text.output
