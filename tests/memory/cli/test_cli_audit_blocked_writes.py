"""``memory audit`` never says ok while an install is half done or every write is refused.

A new user's attack found two states audit called ok (rc 0): a full disk
that stopped a topic install after its commit point (the install journal
left in ``memory/.scriptorium/``, part of the topic files new), and
``memory/topics`` moved to ``memory/real-topics`` with a link back, which
makes every write fail in the revision walk. Both run the real command line.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from memory.workspace._install_journal import JOURNAL, encode_journal
from store import SessionCore
from tests.memory.cli._states import FACTS


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def written_state(tmp_path: Path, backend: str) -> Path:
    """A state whose one session is written (audit ok), with its topic files."""
    state = tmp_path / "state"
    core = SessionCore.create(state, "demo", title="demo")
    for fact in FACTS:
        core.append({"role": "user", "content": fact})
        core.append({"role": "assistant", "content": "Noted."})
    core.close()
    code, out, err = run("memory", "write", "--force", "--threshold", "8000", "--backend",
                         backend, "--state", str(state))
    assert code == 0, (out, err)
    code, out, _ = run("memory", "audit", "--state", str(state))
    assert (code, out.strip()) == (0, "ok")
    return state


def _topics(state: Path) -> list[str]:
    memory = state / "memory"
    return sorted(str(p.relative_to(memory)) for p in (memory / "topics").rglob("*.md"))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_interrupted_install_is_reported_until_a_write_completes_it(
    tmp_path: Path, backend: str,
) -> None:
    state = written_state(tmp_path, backend)
    memory = state / "memory"
    first, *_ = _topics(state)
    # A crash right after the commit point: the journal holds the new texts of two
    # files, one of which (a new one) is not installed yet.
    old_text = (memory / first).read_text()
    new_text = "# Renamed" + old_text.partition("\n")[1] + old_text.partition("\n")[2]
    (memory / JOURNAL).write_bytes(encode_journal(
        [(first, new_text), ("topics/hobbies.md", "# Hobbies\n")]))
    code, out, err = run("memory", "audit", "--state", str(state))
    assert code == 1, (out, err)
    assert "interrupted_install: 1" in out and "memory/.scriptorium/install.journal" in out
    assert f"memory/{first}" in out and "memory/topics/hobbies.md" in out
    assert "scriptorium run --once" in out and out.strip().endswith("problems found")
    code, out, _ = run("memory", "audit", "--json", "--state", str(state))
    report = orjson.loads(out)
    assert [p["kind"] for p in report["problems"]] == ["interrupted_install"]
    assert report["interrupted_install"] == [{
        "journal": "memory/.scriptorium/install.journal",
        "files": [f"memory/{first}", "memory/topics/hobbies.md"]}]
    # What the audit says to do works: any write completes the install.
    code, out, err = run("run", "--once", "--backend", backend, "--state", str(state))
    assert code == 0, (out, err)
    assert not (memory / JOURNAL).exists() and (memory / first).read_text() == new_text
    assert (memory / "topics" / "hobbies.md").read_text() == "# Hobbies\n"
    code, out, _ = run("memory", "audit", "--state", str(state))
    assert (code, out.strip()) == (0, "ok")


def test_an_unreadable_install_journal_is_reported(tmp_path: Path) -> None:
    state = written_state(tmp_path, "asyncio")
    (state / "memory" / JOURNAL).write_bytes(b"{half a jour")
    code, out, _ = run("memory", "audit", "--json", "--state", str(state))
    report = orjson.loads(out)
    assert code == 1 and [p["kind"] for p in report["problems"]] == ["interrupted_install"]
    [entry] = report["interrupted_install"]
    assert entry["journal"] == "memory/.scriptorium/install.journal" and "error" in entry


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_second_name_for_topics_is_what_the_audit_and_every_write_refuse(
    tmp_path: Path, backend: str,
) -> None:
    state = written_state(tmp_path, backend)
    memory = state / "memory"
    shutil.move(memory / "topics", memory / "real-topics")
    os.symlink("real-topics", memory / "topics")
    core = SessionCore.open(state, "demo")
    core.append({"role": "user", "content": "My dog is named Rex."})
    core.close()
    code, out, err = run("memory", "write", "--force", "--backend", backend, "--threshold",
                         "8000", "--state", str(state))
    assert code == 1, (out, err)
    refusal = "memory/real-topics: the same directory as memory/topics"
    assert refusal in out
    code, out, _ = run("memory", "audit", "--state", str(state))
    assert code == 1 and "unwritable_workspace: 1" in out and refusal in out
    code, out, _ = run("memory", "audit", "--json", "--state", str(state))
    report = orjson.loads(out)
    assert [p["kind"] for p in report["problems"]] == ["unwritable_workspace"]
    [line] = report["unwritable_workspace"]
    assert line.startswith(refusal)
