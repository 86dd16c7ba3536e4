"""A state this process cannot write is still searched and audited, and nothing is written.

The state is made read-only to the user running the command (``chmod
a-w``); tests often run as root, whom ``chmod`` does not stop, so as root
the state is handed to ``nobody`` and the command runs as ``nobody``
(``setpriv``). Skipped where no such user can run this interpreter. The
same fallback is also proven at the durable seam, as root or not
(tests/memory/recall/test_private.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.fixture import copy_fixture

NOBODY = 65534


def _as_reader() -> list[str]:
    """The prefix that runs a command as a user the state's permissions stop."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and no setpriv to run the command as another user")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture
def read_only_state() -> Iterator[Path]:
    """A copy of the fixture state (without a recall index) that the reader cannot write."""
    top = Path(tempfile.mkdtemp(prefix="scriptorium-ro-"))
    os.chmod(top, 0o755)
    state = copy_fixture(top / "state")
    probe = subprocess.run([*_as_reader(), sys.executable, "-c", "import memory.cli"],
                           capture_output=True, cwd=top, check=False, env=_env())
    if probe.returncode != 0:
        shutil.rmtree(top)
        pytest.skip("no unprivileged user can run this interpreter here")
    for path in [state, *state.rglob("*")]:
        if os.geteuid() == 0:
            os.chown(path, NOBODY, NOBODY)
        path.chmod(0o555 if path.is_dir() else 0o444)
    yield state
    for path in [state, *state.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(top)


def scriptorium(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_as_reader(), sys.executable, "-c", "from memory.cli import main; main()", *args,
         "--state", str(state)],
        capture_output=True, text=True, check=False, cwd=state.parent, env=_env())


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}


def _files(state: Path) -> set[str]:
    return {str(path.relative_to(state)) for path in state.rglob("*")}


def test_a_read_only_state_is_searched_and_reindex_says_it_left_the_file(
    read_only_state: Path,
) -> None:
    before = _files(read_only_state)
    searched = scriptorium(read_only_state, "memory", "search", "biscuits", "--json")
    assert searched.returncode == 0, searched.stderr
    assert {hit["node_id"] for hit in orjson.loads(searched.stdout)} >= {"u2", "a2"}
    context = scriptorium(read_only_state, "memory", "context", "tea")
    assert context.returncode == 0, context.stderr
    assert "The owner prefers tea." in context.stdout
    reindexed = scriptorium(read_only_state, "memory", "reindex")
    assert reindexed.returncode == 1, reindexed.stderr
    assert reindexed.stdout == ("indexed 5 unit(s) from 2 file(s) in memory only "
                                "(recall.sqlite not rebuilt)\n")
    [line] = reindexed.stderr.splitlines()
    assert "recall.sqlite was not rebuilt" in line and "read-only" in line
    assert _files(read_only_state) == before  # nothing written anywhere


def test_a_read_only_state_is_audited(read_only_state: Path) -> None:
    before = _files(read_only_state)
    audited = scriptorium(read_only_state, "memory", "audit", "--json")
    assert audited.returncode == 0, audited.stderr
    report = orjson.loads(audited.stdout)
    assert report["ok"] and report["sessions"] == 1 and report["marked"] > 0
    assert _files(read_only_state) == before
