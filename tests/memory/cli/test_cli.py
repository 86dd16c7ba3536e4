"""The command line's session and pending commands on a copy of the reference fixture."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from store import SessionCore
from tests.fixture import copy_fixture


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(copy_fixture(tmp_path / "state"))


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


def test_an_attach_row_first_under_the_trunk_is_listed_and_drawn(state: str) -> None:
    # SPEC §4: the trunk u1 -> a1 -> u2 -> a2 goes on through a2's first
    # registered child, an attach row a2 called; u3, registered after it,
    # continues the conversation. Built through the store's own API.
    core = SessionCore.open(state, "demo")
    core.append({"id": "at", "role": "assistant", "content": "sub-agent result",
                 "predecessor": "a2", "caller": "a2", "function": "attach"})
    core.append({"id": "u3", "content": "And jam.", "predecessor": "a2"})
    attach = core.node("at")
    core.close()
    code, out = run("session", "branches", "demo", "--state", state, "--json")
    assert code == 0
    rows = {row["head_msg_id"]: row for row in orjson.loads(out)}
    assert set(rows) == {"at", "u3", "sp1", "a2b"}
    assert (rows["at"]["created_at"], rows["at"]["updated_at"]) == (
        attach.created_at, attach.created_at)
    code, out = run("session", "show", "demo", "--state", state)
    assert code == 0 and any("at assistant" in line and "attach row of a2" in line
                             for line in out.splitlines())


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
    from memory.runtime._headless import scan_sessions

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


def test_migrate_backfill_audit_on_the_fixture(state: str) -> None:
    runtime_json = Path(state) / "memory" / ".scriptorium" / "runtime.json"
    legacy = orjson.loads(runtime_json.read_bytes())
    legacy["cursors"] = {"demo": {"message_id": "a2", "ordinal": 3}}
    runtime_json.write_bytes(orjson.dumps(legacy))
    code, out = run("memory", "migrate", "--state", state, "--json")
    assert code == 0, out
    report = orjson.loads(out)
    # the v2 archive holds u2, a2, u1; a2's real path is u1 a1 u2 a2 and a1 is not archived,
    # so only the contiguous prefix [u1] may be marked (SPEC §6.7)
    assert report == {"marked": {"demo": ["u1"]}, "cursors_removed": True}
    kept = orjson.loads(runtime_json.read_bytes())
    assert "cursors" not in kept and kept["local_batches"] == legacy["local_batches"]
    code, out = run("memory", "backfill", "--state", state, "--json")
    assert code == 0, out
    assert orjson.loads(out)["remaining"] == 0
    code, out = run("memory", "audit", "--state", state, "--json")
    assert code == 0, out
    assert orjson.loads(out)["ok"] is True


def test_audit_fails_on_a_marked_turn_missing_from_the_archive(state: str) -> None:
    from store import SessionCore

    SessionCore.open(state, "demo").merge_node_metadata_batch(
        {"a2b": {"memory_written_scriptorium": "w-aa116220"}})
    code, _ = run("memory", "audit", "--state", state, "--json")
    assert code == 1
