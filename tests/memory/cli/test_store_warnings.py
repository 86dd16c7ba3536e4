"""A damaged session journal: a warning naming it in ``run`` (JSON with --log-json), and in audit."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from memory.cli._cli import main
from tests.fixture import copy_fixture

GARBAGE = b"scriptorium-journal 3 99 deadbeef\nnot a record"


def _damaged_state(tmp_path: Path) -> Path:
    state = copy_fixture(tmp_path / "state")
    (state / "sessions" / "demo" / ".journal").write_bytes(GARBAGE)
    return state


def test_audit_reports_a_damaged_journal_by_name(tmp_path: Path) -> None:
    state = _damaged_state(tmp_path)
    result = CliRunner().invoke(main, ["memory", "audit", "--json", "--state", str(state)])
    assert result.exit_code == 1, result.output
    report = orjson.loads(result.stdout)
    assert report["damaged_logs"] == [
        {"file": "sessions/demo/.journal", "offset": 0, "dropped_bytes": len(GARBAGE)}]
    assert "damaged_logs" in [problem["kind"] for problem in report["problems"]]


def test_run_log_json_prints_the_dropped_tail_as_a_json_event(tmp_path: Path) -> None:
    state = _damaged_state(tmp_path)
    result = CliRunner().invoke(main, ["run", "--once", "--log-json", "--state", str(state)])
    assert result.exit_code == 0, result.output
    events = [orjson.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [damaged] = [event for event in events if event["event"] == "log_damaged"]
    assert damaged["file"] == "sessions/demo/.journal"
    assert damaged["dropped_bytes"] == len(GARBAGE) and damaged["level"] == "warning"
