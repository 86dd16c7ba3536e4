"""``scriptorium memory consolidate`` and ``memory history``: a diff first, then a recorded pass."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from memory.cli._cli import main
from memory.workspace._edits import TopicEdit
from memory.workspace._transaction import Transactions
from tests.fixture import copy_fixture
from tests.model_server import ScriptedModel

ARCHIVE = {"openprogram/demo/u1": True, "openprogram/demo/a2": True}


def _state(tmp_path: Path) -> str:
    """The fixture with one fact stated twice in two topic files."""
    state = copy_fixture(tmp_path / "state")
    tx = Transactions(str(state / "memory"), archived=ARCHIVE.get)
    edits = [TopicEdit(f"topics/{name}.md", f"# {name}\n\nThe cat is called Tom.[^e1]\n\n"
                       f"[^e1]: Time: `2025-05-01`; Sources: {source}\n")
             for name, source in [("a", "openprogram/demo/u1"), ("b", "openprogram/demo/a2")]]
    tx.commit(edits, base_revision=tx.revision(), batch_sources=set(ARCHIVE))
    return str(state)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_dry_run_prints_the_diff_then_the_pass_is_recorded_and_shown(tmp_path: Path) -> None:
    state = _state(tmp_path)
    code, out = run("memory", "consolidate", "--dry-run", "--state", state)
    assert code == 0, out
    assert "--- a/topics/b.md" in out and "1 compact, 1 merge; would change 2 topic file(s)" in out
    code, out = run("memory", "history", "--state", state)
    assert (code, out) == (0, "no consolidation pass yet\n")
    code, out = run("memory", "consolidate", "--state", state, "--json")
    assert code == 0, out
    record = orjson.loads(out)
    assert [a["kind"] for a in record["actions"]] == ["merge", "compact"]
    assert record["dry_run"] is False
    assert not (Path(state) / "memory/topics/b.md").exists()
    code, out = run("memory", "history", "--state", state)
    assert code == 0 and f"pass {record['pass']}: 2 action(s)" in out
    assert "merge topics/a.md" in out and "The cat is called Tom." in out
    code, out = run("memory", "consolidate", "--state", state)
    assert (code, out) == (0, "nothing to consolidate\n")
    code, out = run("memory", "history", "--state", state, "--json")
    assert [r["pass"] for r in orjson.loads(out)] == [record["pass"]]


def test_with_a_model_writer_the_model_proposes_and_a_drop_is_refused(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with ScriptedModel(default="consolidate_drop").running() as server:
        code, out = run("memory", "consolidate", "--writer", "model", "--base-url",
                        server.base_url, "--model", "scripted-1", "--state", state)
    assert code == 1 and "consolidation refused, nothing was changed" in out, out
    assert "would no longer be cited" in out and len(out.strip().splitlines()) == 1
    with ScriptedModel(default="consolidate").running() as server:
        code, out = run("memory", "consolidate", "--writer", "model", "--base-url",
                        server.base_url, "--model", "scripted-1", "--state", state, "--json")
    assert code == 0, out
    record = orjson.loads(out)
    assert [(a["kind"], a["reason"]) for a in record["actions"]] == [
        ("merge", "proposed by the model")]
