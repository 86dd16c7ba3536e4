"""Broken sessions through the real command line: never "written", "ok" or silence.

A head_id that is not a node id, a session directory without meta.json and
a predecessor cycle each used to give a wrong answer with exit code 0. Each
test builds the damage by hand, as a crash or a hand edit leaves it, and
runs the commands a user would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from store import SessionCore
from tests.conftest import BACKENDS
from tests.faults import first_event
from tests.memory.cli._states import FACTS, owing_state


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def set_head(state: Path, value: object, sid: str = "demo") -> None:
    path = state / "sessions" / sid / "meta.json"
    meta = json.loads(path.read_text())
    meta["head_id"] = value
    path.write_text(json.dumps(meta))


def pending(state: Path) -> list[str]:
    code, out, err = run("memory", "pending", "demo", "--state", str(state), "--json")
    assert code == 0, err
    ids: list[str] = orjson.loads(out)["pending"]
    return ids


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_head_id_that_is_not_a_string_is_an_error_everywhere(
    tmp_path: Path, backend: str,
) -> None:
    state = owing_state(tmp_path)
    set_head(state, 42)
    code, out, err = run("memory", "write", "demo", "--force", "--backend", backend,
                         "--threshold", "8000", "--state", str(state))
    assert code != 0 and out.startswith("demo: error: ") and "demo: written" not in out
    code, out, err = run("memory", "pending", "demo", "--state", str(state))
    assert code != 0
    assert "sessions/demo/meta.json: head_id 42 is neither a node id nor null" in out + err
    code, out, err = run("memory", "audit", "--state", str(state))
    assert code != 0 and "head_id 42" in out and "what to do" in out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_null_head_id_means_the_trunk_tip_and_its_turns_are_written(
    tmp_path: Path, backend: str,
) -> None:
    state = owing_state(tmp_path)
    trunk = SessionCore.open(state, "demo").head
    set_head(state, None)
    assert len(pending(state)) == 6
    code, out, err = run("memory", "pending", "demo", "--state", str(state), "--json")
    assert orjson.loads(out)["tip"] == trunk
    code, out, err = run("memory", "write", "demo", "--force", "--backend", backend,
                         "--threshold", "8000", "--state", str(state))
    assert code == 0 and out.startswith("demo: written: "), out + err
    assert pending(state) == []


def test_a_head_id_naming_no_node_is_an_error_naming_meta_json(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    set_head(state, "nosuch")
    code, out, err = run("memory", "pending", "demo", "--state", str(state))
    assert code != 0 and "head_id 'nosuch' names no readable node" in out + err


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_without_meta_json_is_named_by_list_audit_and_run(
    tmp_path: Path, backend: str,
) -> None:
    state = owing_state(tmp_path, "kept")
    lost = SessionCore.create(state, "lost")
    lost.append({"role": "user", "content": FACTS[0]})
    lost.close()
    (state / "sessions" / "lost" / "meta.json").unlink()
    code, out, err = run("session", "list", "--state", str(state))
    assert code != 0 and out.startswith("kept ")
    assert "session 'lost' has node files but no meta.json" in err
    assert "1 node file(s)" in err and "Restore meta.json" in err
    code, out, err = run("run", "--once", "--backend", backend, "--threshold", "8000",
                         "--state", str(state), "--json")
    assert code != 0
    report = orjson.loads(out)
    assert report["sessions"] == {"kept": "written", "lost": "error"}
    assert "no meta.json" in report["reasons"]["lost"]
    code, out, err = run("memory", "audit", "--state", str(state))
    assert code != 0 and "session 'lost' has node files but no meta.json" in out


def test_a_predecessor_cycle_is_named_by_show_and_audit(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    core = SessionCore.open(state, "demo")
    nodes = core.nodes()
    first, last = nodes[0], nodes[-1]
    [path] = (state / "sessions" / "demo" / "history").glob(f"*-{first.id}.json")
    node = json.loads(path.read_text())
    node["predecessor"] = last.id
    path.write_text(json.dumps(node))
    (state / "memory" / ".scriptorium").mkdir(parents=True)
    (state / "memory" / ".scriptorium" / "workspace-id").write_text("w-0000abcd\n")
    code, out, err = run("session", "show", "demo", "--state", str(state))
    assert code != 0
    assert "loops back on itself" in out + err
    assert first.id in out + err and last.id in out + err
    code, out, err = run("session", "show", "demo", "--state", str(state), "--json")
    assert code == 1 and len(orjson.loads(out)["nodes"]) == len(nodes)  # the loop said on stderr
    assert "loops back on itself" in err
    code, out, err = run("memory", "audit", "--state", str(state))
    assert code != 0 and "loops back on itself" in out


def test_audit_fails_on_every_warning_and_says_what_to_do(tmp_path: Path) -> None:
    state = owing_state(tmp_path)
    code, _, err = run("memory", "write", "--force", "--threshold", "8000", "--state",
                       str(state))
    assert code == 0, err
    code, out, _ = run("memory", "audit", "--state", str(state))
    assert code == 0 and out.strip() == "ok"
    # A node file the store cannot read: reported as a warning, and now a failure.
    path = max((state / "sessions" / "demo" / "history").iterdir())
    path.write_text("{not json")
    code, out, _ = run("memory", "audit", "--state", str(state))
    assert code == 1
    assert path.name in out and "what to do:" in out
    assert out.strip().endswith("problems found")
    code, out, _ = run("memory", "audit", "--state", str(state), "--json")
    report = orjson.loads(out)
    assert report["ok"] is False
    assert [p["kind"] for p in report["problems"]] == ["warnings"]


def test_scriptorium_run_logs_the_session_it_cannot_see(tmp_path: Path) -> None:
    """The daemon names a session without meta.json (a real process, stopped by SIGTERM)."""
    state = owing_state(tmp_path, "kept")
    lost = SessionCore.create(state, "lost")
    lost.append({"role": "user", "content": FACTS[0]})
    lost.close()
    (state / "sessions" / "lost" / "meta.json").unlink()
    runtime = subprocess.Popen(
        [sys.executable, "-c", "from memory.cli._cli import main; main()", "run", "--log-json",
         "--scan-interval", "0.05", "--state", str(state)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        event = first_event(runtime, lambda event: event["event"] == "session_skipped")
    finally:
        runtime.send_signal(signal.SIGTERM)
        runtime.wait(timeout=30)
    assert event["session"] == "lost" and "no meta.json" in event["error"]
