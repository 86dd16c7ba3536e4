"""``scriptorium import claude-code|codex|pi``: as a user runs it, then ``memory write`` and search.

0 when every file imported; 1 when a file was refused (one line on stderr
naming the file and the line) and the others imported; 2 for a path that
does not exist. After the import and ``memory write``, ``memory search``
finds a fact stated in each log: the built ones and every shared sample.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from memory.cli._cli_errors import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from memory.ledger import MARKER_KEY
from store import SessionCore
from tests.memory.importers._logs import (
    FACTS,
    SHARED,
    append_line,
    claude_code_session,
    codex_rollouts,
    iso,
    pi_sessions,
    raw_codex,
)

# A fact stated on the head branch of each shared sample, and the session it is in.
SHARED_FACTS = {
    "claude-code-s1": "Final answer",
    "claude-code-88a8d761-7b9a-4bf1-a8ca-c1febe6bf358": "sub-assistant research",
    "claude-code-55550000-0000-4000-8000-000000000001": "three scheduled jobs",
    "claude-code-55550000-0000-4000-8000-000000000002": "migration is safe",
    "codex-11111111-1111-4111-8111-111111111111": "synthetic files alpha.txt",
    "codex-22222222-2222-4222-8222-222222222222": "Spawn a synthetic researcher",
}


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def search(state: Path, query: str) -> list[dict[str, object]]:
    code, out, err = run("memory", "search", query, "--json", "--state", str(state))
    assert code == EXIT_OK, err
    hits: list[dict[str, object]] = json.loads(out)
    return hits


def test_import_write_search_each_agent(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    claude_code_session(logs / "claude")
    codex_rollouts(logs / "codex")
    pi_sessions(logs / "pi")
    state = tmp_path / "state"
    for agent, folder in (("claude-code", "claude"), ("codex", "codex"), ("pi", "pi")):
        code, out, err = run("import", agent, str(logs / folder), "--state", str(state))
        assert (code, err) == (EXIT_OK, ""), err
        assert "(new session): imported" in out
    code, _, err = run("memory", "write", "--force", "--state", str(state))
    assert code == EXIT_OK, err
    for agent, (query, fact) in FACTS.items():
        hits = search(state, query)
        assert any(fact in str(h["text"]) and str(h["session"]).startswith(agent + "-")
                   for h in hits), (agent, hits)


def _import_and_write(logs: Path, state: Path) -> tuple[list[str], dict[str, object]]:
    """Import ``logs`` and run the boundary; the session's merged heads and each turn's marker."""
    code, _, err = run("import", "claude-code", str(logs), "--state", str(state))
    assert (code, err) == (EXIT_OK, ""), err
    code, _, err = run("memory", "write", "--force", "--state", str(state))
    assert code == EXIT_OK, err
    core = SessionCore.open(state, "claude-code-cc-1")
    try:
        return (list(core.meta().get("merged_heads", [])),
                {n.id: n.metadata.get(MARKER_KEY) for n in core.nodes()})
    finally:
        core.close()


def test_a_sub_agents_work_is_written_at_the_boundary_and_found(tmp_path: Path) -> None:
    """A sub-agent's branch is a merged head: the boundary writes it whole, not only the head.

    Its turns are far below the tokens that would make a side branch worth a
    write of its own, so without the merged head they would stay owed.
    """
    state = tmp_path / "state"
    _, marks = _import_and_write(claude_code_session(tmp_path / "logs"), state)
    workspace = marks["a6"]  # the head's last turn
    assert workspace is not None
    sub_agents = ("f1", "f2", "sc1", "sc2")  # a subagents/ file and an inline sidechain
    assert {i: marks[i] for i in sub_agents} == dict.fromkeys(sub_agents, workspace)
    hits = search(state, "easyJet")  # said only by the flights agent (f2)
    assert any("easyJet" in str(h["text"]) and h["session"] == "claude-code-cc-1"
               for h in hits), hits


def _sub_agent_line(kind: str, uuid: str, parent: str, minute: int, text: str) -> dict[str, object]:
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "isSidechain": True,
            "agentId": "ag1", "sessionId": "cc-1", "timestamp": iso(minute),
            "message": {"role": kind, "content": [{"type": "text", "text": text}]}}


def test_a_sub_agent_branch_that_grew_is_written_on_the_next_pass(tmp_path: Path) -> None:
    """An incremental import merges the grown branch's new tip (through the session's actor)."""
    logs = claude_code_session(tmp_path / "logs")
    state = tmp_path / "state"
    _import_and_write(logs, state)
    agent_log = logs / "cc-1" / "subagents" / "agent-ag1.jsonl"
    append_line(agent_log, _sub_agent_line("user", "f3", "f2", 20, "Which one is cheapest?"))
    append_line(agent_log, _sub_agent_line("assistant", "f4", "f3", 21,
                                           "Ryanair is cheapest at forty-two euros."))
    merged, marks = _import_and_write(logs, state)
    assert merged[-1] == "f4"
    assert marks["f3"] is not None and marks["f4"] == marks["a6"]
    hits = search(state, "forty-two euros")
    assert any("forty-two" in str(h["text"]) for h in hits), hits


def test_a_second_run_says_nothing_new_and_a_dry_run_writes_nothing(tmp_path: Path) -> None:
    pi_sessions(tmp_path / "logs")
    state = tmp_path / "state"
    code, out, _ = run("import", "pi", str(tmp_path / "logs"), "--dry-run", "--json",
                       "--state", str(state))
    assert code == EXIT_OK
    document = json.loads(out)
    assert document["dry_run"] is True and document["imported"] == 11
    assert not (state / "sessions").exists() or not list((state / "sessions").iterdir())
    run("import", "pi", str(tmp_path / "logs"), "--state", str(state))
    code, out, _ = run("import", "pi", str(tmp_path / "logs"), "--state", str(state))
    assert code == EXIT_OK
    assert all(": imported 0 turn(s)" in line for line in out.splitlines())
    assert "unknown record types skipped: weird_entry x1" in out


def test_a_malformed_file_is_one_line_and_exit_1_the_others_imported(tmp_path: Path) -> None:
    codex_rollouts(tmp_path / "logs")
    bad = tmp_path / "logs" / "rollout-bad.jsonl"
    bad.write_text('{"type": "session_meta", "payload": {"id": "x"}}\n{oops\n')
    state = tmp_path / "state"
    code, out, err = run("import", "codex", str(tmp_path / "logs"), "--state", str(state))
    assert code == EXIT_PROBLEMS
    assert err.startswith(f"scriptorium: {bad}:2: not JSON") and len(err.splitlines()) == 1
    assert "codex-aaaaaaaa-0000-4000-8000-000000000001 (new session)" in out


def _within(check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.05)


def test_follow_imports_what_the_agent_appends_and_stops_cleanly_on_sigint(
        tmp_path: Path) -> None:
    files = codex_rollouts(tmp_path / "logs")
    state = tmp_path / "state"
    history = state / "sessions" / "codex-aaaaaaaa-0000-4000-8000-000000000001" / "history"

    def nodes() -> int:
        return len(list(history.glob("*.json"))) if history.is_dir() else 0

    follower = subprocess.Popen(
        [sys.executable, "-c", "from memory.cli._cli import main; main()", "import", "codex",
         str(tmp_path / "logs"), "--follow", "--poll", "0.2", "--state", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    stdout = follower.stdout
    assert stdout is not None
    threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True).start()
    try:
        first = sum(len(raw.turns) + raw.summaries for raw in raw_codex(files).values())
        _within(lambda: nodes() == first and len(lines) == 1, 60)
        append_line(files[0], {"timestamp": "2026-02-02T10:00:40.000Z", "type": "event_msg",
                               "payload": {"type": "agent_message", "message": "Late."}})
        _within(lambda: len(lines) == 2, 60)  # the pass that imported it said so
        assert nodes() == first + 1
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == EXIT_OK, err
    assert lines[0].startswith("codex-aaaaaaaa-0000-4000-8000-000000000001 (new session)")
    assert lines[1].startswith("codex-aaaaaaaa-0000-4000-8000-000000000001: imported 1 turn(s)")


def test_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run("import", "claude-code", str(tmp_path / "nowhere"),
                       "--state", str(tmp_path / "state"))
    assert code == EXIT_USAGE
    assert "nowhere: no such file or directory" in err


@pytest.mark.skipif(SHARED is None, reason="the shared fixtures are not beside the repository")
def test_every_shared_sample_is_found_by_search_after_import_and_write(tmp_path: Path) -> None:
    assert SHARED is not None
    logs = tmp_path / "shared"
    shutil.copytree(SHARED, logs)
    state = tmp_path / "state"
    code, _, err = run("import", "claude-code", str(logs / "claude-code"), "--state", str(state))
    assert (code, err) == (EXIT_OK, "")
    code, _, err = run("import", "codex", str(logs / "codex"), "--state", str(state))
    assert code == EXIT_PROBLEMS and "malformed" in err  # the sample that is malformed on purpose
    code, _, err = run("memory", "write", "--force", "--state", str(state))
    assert code == EXIT_OK, err
    for session, query in SHARED_FACTS.items():
        hits = search(state, query)
        assert any(h["session"] == session for h in hits), (session, query, hits)


def test_a_directory_without_logs_is_a_usage_error_not_silence(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out, err = run("import", "codex", str(tmp_path / "empty"),
                         "--state", str(tmp_path / "state"))
    assert code == EXIT_USAGE and out == ""
    assert "empty: no codex logs (*.jsonl) found there" in err


def test_a_session_the_store_refuses_stops_only_itself(tmp_path: Path) -> None:
    """A corrupt meta.json of one imported session: the others still import, the error names it."""
    first, forked = pi_sessions(tmp_path / "logs")
    state = tmp_path / "state"
    code, _, err = run("import", "pi", str(tmp_path / "logs"), "--state", str(state))
    assert code == EXIT_OK, err
    broken = "pi-11111111-aaaa-4aaa-8aaa-000000000001"
    (state / "sessions" / broken / "meta.json").write_text("{not json")
    for log, line in ((first, {"type": "message", "id": "e13", "parentId": "e11",
                               "timestamp": iso(8), "message": {"role": "user",
                                                                "content": "More."}}),
                      (forked, {"type": "message", "id": "f3", "parentId": "f2",
                                "timestamp": iso(22), "message": {"role": "user",
                                                                  "content": "And now?"}})):
        append_line(log, line)
    code, _, err = run("import", "pi", str(tmp_path / "logs"), "--state", str(state))
    assert code != EXIT_OK and f"session {broken!r}" in err
    fine = SessionCore.open(state, "pi-22222222-aaaa-4aaa-8aaa-000000000002")
    assert "f3" in [node.id for node in fine.nodes()]
    fine.close()
