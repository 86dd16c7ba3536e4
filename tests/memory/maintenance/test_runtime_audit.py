"""The audit finds runtime.json's lost orders and backward counters; --repair fixes them (issue 23)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from click.testing import CliRunner

from memory.cli._cli import main
from memory.maintenance import audit, read_audit_inputs
from memory.maintenance._runtime_audit import runtime_findings
from memory.workspace._runtime_state import (
    RUNTIME_PATH,
    Floor,
    RuntimeState,
    read_runtime_state,
    write_runtime_state,
)
from store import DurableFiles
from tests.fixture import copy_fixture

WID = "w-aa116220"
FIXTURE_ORDER = {"37913bbd": 0, "3216f7d0": 1}  # the fixture's topic blocks


def test_findings_name_each_unordered_block_and_each_counter_below_its_floor() -> None:
    state = RuntimeState({"37913bbd": 0}, 1, 2, 30)
    found = runtime_findings(state, Floor(entries=3, local_batches=5), ["37913bbd", "3216f7d0"])
    assert found == {
        "unordered_blocks": [{"block": "3216f7d0"}],
        "runtime_backwards": [{"counter": "entries", "floor": 3, "value": 1},
                              {"counter": "local_batches", "floor": 5, "value": 2}],
    }
    assert runtime_findings(state, Floor.of(state), ["37913bbd"]) == {
        "unordered_blocks": [], "runtime_backwards": []}


def _stale_state(tmp_path: Path) -> str:
    """The fixture after scriptorium wrote 9 batches, then another program's old copy."""
    state = copy_fixture(tmp_path / "state")
    memory = str(state / "memory")
    write_runtime_state(memory, RuntimeState({**FIXTURE_ORDER, "0badc0de": 2}, 4, 9, 9000),
                        DurableFiles())
    (state / "memory" / RUNTIME_PATH).write_text(json.dumps(
        {"creation_order": {"37913bbd": 0}, "local_batches": 1, "local_tokens": 100}))
    return str(state)


def test_the_audit_reports_a_stale_overwrite_and_repair_raises_it_back(tmp_path: Path) -> None:
    state = _stale_state(tmp_path)
    report = audit(read_audit_inputs(state, WID))
    assert not report["ok"]
    assert report["unordered_blocks"] == [{"block": "3216f7d0"}]
    assert {s["counter"] for s in report["runtime_backwards"]} == {
        "entries", "write_commits_since_global", "local_batches", "local_tokens"}
    assert {p["kind"] for p in report["problems"]} == {"unordered_blocks", "runtime_backwards"}

    result = CliRunner().invoke(main, ["memory", "audit", "--repair", "--state", state, "--json"])
    assert result.exit_code == 0, result.output
    repaired = orjson.loads(result.stdout)
    assert repaired["ok"] is True
    # 0badc0de is in no topic: its entry is gone for good, and said so
    assert repaired["repaired_runtime"] == {
        "ordered": 1, "raised": ["write_commits_since_global", "local_batches", "local_tokens"],
        "entries_lost": 1}
    after = read_runtime_state(str(Path(state) / "memory"))
    assert after.creation_order == {"37913bbd": 0, "3216f7d0": 1}
    assert (after.write_commits_since_global, after.local_batches, after.local_tokens) == (
        4, 9, 9000)


def test_the_audit_without_repair_exits_1_and_says_what_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["memory", "audit", "--state", _stale_state(tmp_path)])
    assert result.exit_code == 1
    assert "unordered_blocks: 1" in result.output and "--repair" in result.output
