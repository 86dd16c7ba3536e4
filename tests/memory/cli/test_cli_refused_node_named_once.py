"""Every command names the same refused node: the oldest on the branch.

A branch with two turns stamped ``authority_schema`` without authority
(SPEC §6.1) is refused. ``pending`` and the audit walk it root to tip and
named the older one; the session actor walks back from the tip and named
the newer one, so ``write --force`` sent the user to another node than the
other two. Through the real command line, on both backends.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from memory.cli._cli import main
from store import SessionCore


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def refused_twice(tmp_path: Path) -> tuple[Path, str, str]:
    state = tmp_path / "state"
    core = SessionCore.create(state, "demo", title="demo")
    core.append({"role": "user", "content": "I prefer green tea."})
    core.append({"role": "assistant", "content": "Noted."})
    older = core.append({"role": "user", "content": "My goat is Billy.", "authority_schema": None})
    newer = core.append({"role": "assistant", "content": "A goat.", "authority_schema": ""})
    core.close()
    (state / "memory" / ".scriptorium").mkdir(parents=True)
    (state / "memory" / ".scriptorium" / "workspace-id").write_text("w-0000abcd\n")
    return state, older["id"], newer["id"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_pending_audit_and_write_name_the_oldest_refused_node(
    tmp_path: Path, backend: str,
) -> None:
    state, older, newer = refused_twice(tmp_path)
    named = f"node {older!r}: stamped with authority_schema"
    code, out, err = run("memory", "write", "demo", "--force", "--backend", backend,
                         "--state", str(state))
    assert code == 1 and named in out and newer not in out, out
    code, out, err = run("memory", "pending", "demo", "--state", str(state))
    assert code != 0 and named in err and newer not in err, err
    code, out, err = run("memory", "audit", "--json", "--state", str(state))
    [refused] = orjson.loads(out)["refused_branches"]
    assert code == 1 and named in refused["error"] and newer not in refused["error"]
