"""The command line's session and pending commands on a copy of the reference fixture."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory._cli import main
from tests.memory._fixture import FIXTURE


@pytest.fixture
def state(tmp_path: Path) -> str:
    target = tmp_path / "state"
    shutil.copytree(FIXTURE, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    return str(target)


def run(*args: str) -> tuple[int, str]:
    """Exit code and stdout (stderr is kept apart: --json prints one document on stdout)."""
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def test_session_list_and_branches_json(state: str) -> None:
    code, out = run("session", "list", "--state", state, "--json")
    assert code == 0
    assert [row["id"] for row in orjson.loads(out)] == ["demo"]
    code, out = run("session", "branches", "demo", "--state", state, "--json")
    assert code == 0
    rows = orjson.loads(out)
    assert {row["head_msg_id"] for row in rows} == {"sp1", "a2", "a2b"}
    assert set(rows[0]) == {"head_msg_id", "name", "created_at", "updated_at", "archived"}


def test_session_branch_is_message_dicts_root_to_tip(state: str) -> None:
    code, out = run("session", "branch", "demo", "--tip", "a2b", "--state", state, "--json")
    assert code == 0
    messages = orjson.loads(out)
    assert [m["id"] for m in messages] == ["u1", "a1", "a2b"]
    assert messages[0]["memory_written_scriptorium"] == "w-aa116220"  # metadata spread


def test_session_show_draws_forks_and_markers(state: str) -> None:
    code, out = run("session", "show", "demo", "--state", state)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("u1 user") and "written" in lines[0]
    assert "foreign marker" in lines[1] and "HEAD" in lines[1]
    assert any(line.startswith("│  └─ a2b") for line in lines)
    assert any("spawned by a1" in line for line in lines)


def test_memory_pending_shape(state: str) -> None:
    code, out = run("memory", "pending", "demo", "--state", state, "--json")
    assert code == 0
    assert orjson.loads(out) == {"session": "demo", "tip": "a1", "pending": ["a1"], "tokens": 3}


@pytest.mark.parametrize("sid", ["nosuch", "../etc", "a/b"])
def test_bad_session_ids_are_clean_errors(state: str, sid: str) -> None:
    code, out = run("session", "branch", sid, "--state", state)
    assert code != 0
    assert "Traceback" not in out
    assert "Error" in out


def test_scan_sessions_reports_each_change_once() -> None:
    from memory._headless import scan_sessions

    seen: dict[str, object] = {}
    rows = [{"id": "a", "updated_at": 1.0}, {"id": "b", "updated_at": 2.0}]
    assert scan_sessions(rows, seen) == ["a", "b"]
    assert scan_sessions(rows, seen) == []
    assert scan_sessions([{"id": "a", "updated_at": 3.0}, rows[1]], seen) == ["a"]


def test_run_once_writes_every_session_and_reports_json(state: str) -> None:
    from store import SessionCore

    core = SessionCore.create(state, "fresh", title="fresh")
    previous = "ROOT"
    for index in range(4):
        node = core.append({"role": ["user", "assistant"][index % 2], "predecessor": previous,
                            "content": f"I prefer tea number {index}. We decided to ship it."})
        previous = node["id"]
    code, out = run("run", "--once", "--json", "--state", state)
    assert code == 0, out
    outcomes = orjson.loads(out)
    assert outcomes["sessions"]["fresh"] == "written"
    code, out = run("memory", "pending", "fresh", "--state", state, "--json")
    assert orjson.loads(out)["pending"] == []


def test_memory_write_force_and_release_json(state: str) -> None:
    code, out = run("memory", "write", "demo", "--force", "--state", state, "--json")
    assert code == 0, out
    assert set(orjson.loads(out)["sessions"]) == {"demo"}
    code, out = run("memory", "release", "--state", state, "--json")
    assert code == 0, out
    assert orjson.loads(out) == {"released": []}
