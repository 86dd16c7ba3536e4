"""A state this process cannot write is still searched (memory.recall._private).

Two ways in, since tests often run as root, whom ``chmod`` does not stop:

- at the seam: the durable seam refuses to make ``.scriptorium`` with EROFS,
  the error a read-only mount returns, so the index must go private;
- for real: the state is made read-only to the user running the command
  (``chmod a-w``; as root the state is handed to ``nobody`` and the command
  runs as ``nobody``, whom the permissions do stop). Skipped where no such
  user can run this interpreter.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from memory.recall import Recall
from store import DurableFiles
from tests.fixture import copy_fixture

NOBODY = 65534


def test_an_index_that_cannot_be_made_on_disk_is_made_in_memory(tmp_path: Path) -> None:
    memory = copy_fixture(tmp_path / "memory", "memory")
    shutil.rmtree(memory / ".scriptorium")
    recall = Recall(str(memory), files=ReadOnlyFiles())
    hits = recall.recall_blocking("biscuits", k=8, view=None, since=None, until=None,
                                  include_pending=False)
    assert {hit.node_id for hit in hits if hit.kind == "source"} >= {"u2", "a2"}
    assert recall.index.private is not None
    assert not (memory / ".scriptorium").exists()
    report = recall.rebuild_blocking()
    assert report.private and report.added == 5
    recall.close()


class ReadOnlyFiles(DurableFiles):
    """The durable seam on a read-only mount: every directory it would make is refused."""

    def _step(self, step: str, path: str) -> None:
        if step == "mkdir":
            raise OSError(errno.EROFS, "Read-only file system", path)


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
    assert reindexed.stdout == "indexed 5 unit(s) from 2 file(s)\n"
    [line] = reindexed.stderr.splitlines()
    assert "recall.sqlite was not rebuilt" in line and "read-only" in line
    assert _files(read_only_state) == before  # nothing written anywhere
