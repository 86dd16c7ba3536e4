"""``scriptorium status`` and ``run``'s ``lag`` lines: how far memory is behind, visible.

``status`` reads the files only (no runtime): per session the owed turns of
the head branch and how long the trigger rule has called for them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from memory.cli import main
from memory.cli._status_command import SessionLag, session_lag
from memory.ledger import SourceRecord, WritePolicy
from memory.runtime import MemoryLag
from memory.runtime._headless import lag_event
from store import SessionCore

REPO = Path(__file__).resolve().parents[3]
HOUR = 3600.0  # the default idle_after
POLICY = WritePolicy(threshold=8000, idle_after=HOUR)


def _record(node: str, at: float, tokens: int) -> SourceRecord:
    return SourceRecord("s", node, "user", "tea", at, "Owner (owner/local)", tokens=tokens)


def test_owed_turns_under_the_threshold_and_not_idle_are_not_due() -> None:
    owed = [_record("a", 1_000.0, 10), _record("b", 1_010.0, 10)]
    assert session_lag(owed, 1_020.0, POLICY) == SessionLag(2, 20, None)
    assert session_lag(owed, 1_020.0, POLICY).age(1_020.0) is None


def test_idle_owed_turns_are_due_from_the_last_one_plus_idle_after() -> None:
    owed = [_record("a", 1_000.0, 10), _record("b", 1_010.0, 10)]
    lag = session_lag(owed, 1_010.0 + HOUR + 50.0, POLICY)
    assert lag.due_at == 1_010.0 + HOUR and lag.age(1_010.0 + HOUR + 50.0) == 50.0


def test_a_threshold_batch_is_due_when_its_last_turn_reached_it() -> None:
    owed = [_record("a", 1_000.0, 5000), _record("b", 1_010.0, 5000), _record("c", 1_100.0, 1)]
    lag = session_lag(owed, 1_200.0, POLICY)
    assert (lag.owed, lag.tokens, lag.due_at) == (3, 10_001, 1_010.0)


def test_nothing_owed_is_nothing_due() -> None:
    assert session_lag([], 5.0, POLICY) == SessionLag(0, 0, None)


def _session(state: Path, sid: str, created_at: float, turns: int = 2) -> None:
    core = SessionCore.create(state, sid, title=sid)
    previous = "ROOT"
    for index in range(turns):
        node = core.append({"role": ["user", "assistant"][index % 2], "predecessor": previous,
                            "content": f"Team {sid} number {index} prefers tea. "
                                       "We decided to ship it."},
                           created_at=created_at + index)
        previous = node["id"]
    core.close()


def test_status_names_the_due_sessions_and_the_oldest_age(tmp_path: Path) -> None:
    now = time.time()
    _session(tmp_path, "stale", now - HOUR - 600)  # idle for an hour and ten minutes
    _session(tmp_path, "fresh", now)  # owed, not due
    done = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["summary"]["sessions"] == 2 and doc["summary"]["owing"] == 2
    assert doc["summary"]["due"] == 1 and doc["summary"]["owed_turns"] == 4
    assert doc["sessions"]["fresh"]["oldest_due_age"] is None
    assert 590 < doc["sessions"]["stale"]["oldest_due_age"] < 700
    assert doc["summary"]["oldest_due_age"] == doc["sessions"]["stale"]["oldest_due_age"]
    text = CliRunner().invoke(main, ["status", "--state", str(tmp_path)])
    assert text.exit_code == 0
    lines = text.output.splitlines()
    assert lines[0].startswith("4 turn(s) owed in 2 of 2 session(s); 1 due, the oldest for")
    assert lines[1].split()[0] == "stale" and "not due" in lines[2]  # oldest first


def test_what_run_once_wrote_is_no_longer_owed(tmp_path: Path) -> None:
    _session(tmp_path, "stale", time.time() - HOUR - 600)
    _session(tmp_path, "fresh", time.time())
    done = CliRunner().invoke(main, ["run", "--once", "--json", "--state", str(tmp_path)])
    assert done.exit_code == 0, done.output
    status = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    assert status.exit_code == 0, status.output
    summary = json.loads(status.stdout)["summary"]
    assert (summary["owing"], summary["owed_turns"], summary["due"]) == (0, 0, 0)
    assert summary["oldest_due_age"] is None


def test_status_exits_1_naming_a_session_it_cannot_read(tmp_path: Path) -> None:
    _session(tmp_path, "good", time.time())
    _session(tmp_path, "bad", time.time())
    [path, *_] = (tmp_path / "sessions" / "bad" / "history").glob("*.json")
    path.write_text("{not json")
    done = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    assert done.exit_code == 1
    assert "session 'bad' not read" in done.stderr
    doc = json.loads(done.stdout)
    assert list(doc["errors"]) == ["bad"] and list(doc["sessions"]) == ["good"]


def test_lag_event_is_the_log_line_of_statistics_lag() -> None:
    assert lag_event(MemoryLag(1.23456, 3, 5, (1, 4))) == {
        "event": "lag", "oldest_due_age": 1.235, "due_waiting": 3, "in_flight": 5,
        "recent_groups": [1, 4]}
    assert lag_event(MemoryLag(None, 0, 0, ()))["oldest_due_age"] is None


def test_run_logs_its_lag_periodically(tmp_path: Path) -> None:
    """A real ``scriptorium run`` (stopped by SIGTERM) prints ``lag`` lines at the interval."""
    _session(tmp_path, "s", time.time())
    daemon = subprocess.Popen(
        [sys.executable, "-c", "from memory.cli._cli import main; main()", "run", "--log-json",
         "--lag-interval", "0.2", "--state", str(tmp_path)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    lags = []
    try:
        assert daemon.stderr is not None
        for line in daemon.stderr:
            event = json.loads(line)
            if event["event"] == "lag":
                lags.append(event)
                if len(lags) == 2:
                    break
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert daemon.returncode == 0
    assert set(lags[0]) == {"event", "at", "oldest_due_age", "due_waiting", "in_flight",
                            "recent_groups"}


def test_status_counts_what_other_tips_owe_below_the_threshold(tmp_path: Path) -> None:
    """After the head is written, a short side branch still owes: status says so, qualified."""
    core = SessionCore.create(tmp_path, "s", title="s")
    root = core.append({"role": "user", "predecessor": "ROOT",
                        "content": "Team s prefers tea. We decided to ship it."})
    for answer in ("coffee", "tea"):
        core.append({"role": "assistant", "predecessor": root["id"],
                     "content": f"An answer: we decided to ship {answer}."})
    [side] = [row["head_msg_id"] for row in core.list_branches() if row["head_msg_id"] != core.head]
    core.close()
    done = CliRunner().invoke(main, ["run", "--once", "--json", "--state", str(tmp_path)])
    assert done.exit_code == 0, done.output
    pending = CliRunner().invoke(main, ["memory", "pending", "s", "--tip", side, "--json",
                                        "--state", str(tmp_path)])
    assert json.loads(pending.stdout)["pending"] == [side]
    status = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    assert status.exit_code == 0, status.output
    doc = json.loads(status.stdout)
    assert doc["summary"]["owed_turns"] == 0
    assert doc["summary"]["other_tips_below_threshold_turns"] == 1
    assert doc["summary"]["other_tips_at_boundary_turns"] == 0
    assert doc["sessions"]["s"]["other_tips_below_threshold_turns"] == 1
    text = CliRunner().invoke(main, ["status", "--state", str(tmp_path)]).output.splitlines()
    assert text[0].startswith("0 turn(s) owed in 0 of 1 session(s); 0 due on head branches")
    assert text[1] == ("0 turn(s) on other tips written at the next boundary; 1 turn(s) on "
                       "other tips below the threshold: not written until they reach it")


def test_status_counts_a_merged_heads_turns_as_written_at_the_boundary(tmp_path: Path) -> None:
    """A sub-agent's merged head is written whole at the boundary, however short (SPEC §6.6)."""
    core = SessionCore.create(tmp_path, "s", title="s")
    root = core.append({"role": "user", "predecessor": "ROOT", "content": "Find the invoice."})
    for answer in ("found", "lost"):
        core.append({"role": "assistant", "predecessor": root["id"],
                     "content": f"The sub-agent {answer} the invoice."})
    [side] = [row["head_msg_id"] for row in core.list_branches() if row["head_msg_id"] != core.head]
    core.close()
    meta_path = tmp_path / "sessions" / "s" / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "merged_heads": [side]}))
    status = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    assert status.exit_code == 0, status.output
    summary = json.loads(status.stdout)["summary"]
    assert summary["owed_turns"] == 2  # the root is counted once, on the head branch
    assert summary["other_tips_at_boundary_turns"] == 1
    assert summary["other_tips_below_threshold_turns"] == 0
