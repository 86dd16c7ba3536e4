"""SPEC §6.4 on disk: archive evidence, then install topics, then mark.

The order is a crash-safety rule: a crash between install and mark writes
a batch twice (recoverable), a marker made durable before the install skips
it for good. So it is checked where a crash would cut it, in the order of the
durable steps the real runtime takes (every durable byte passes through the
``DurableFiles`` seam), not in the order of calls to injected steps.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from memory.ledger._records import MARKER_KEY
from memory.runtime._runtime import open_runtime
from memory.runtime._session_state import BoundaryOutcome
from memory.workspace._archive import archive_relpath
from tests.faults import FaultyFiles
from tests.memory._runtime import SENTENCES, chain, config, markers


class MarkerLog(FaultyFiles):
    """The real disk, its durable steps logged in order, and which writes carry a marker."""

    def __init__(self) -> None:
        super().__init__()
        self.marker_writes: list[int] = []  # indexes into ``steps``

    def _write_all(self, fd: int, temp: str, data: bytes) -> None:
        if MARKER_KEY.encode() in data:
            self.marker_writes.append(len(self.steps))
        super()._write_all(fd, temp, data)


async def test_a_marker_is_durable_only_after_its_batch_is_archived_and_installed(
    tmp_path: Path,
) -> None:
    files = MarkerLog()
    nodes = [f"m{i}" for i in range(len(SENTENCES))]
    with anyio.fail_after(60):
        async with open_runtime(tmp_path, config=config(files=files)) as rt:
            sid = await rt.sessions.create(title="order", session_id="order")
            await chain(rt, sid, "ROOT", nodes)
            assert await rt.flush(sid) is BoundaryOutcome.WRITTEN
            workspace = rt.workspace_id
            await rt.drain()
    assert markers(tmp_path, sid, workspace) == set(nodes)

    memory = str(tmp_path / "memory") + os.sep
    steps = files.steps
    [archived] = [i for i, (step, path) in enumerate(steps)
                  if step == "rename" and path == memory + archive_relpath(sid)]
    topics = [i for i, (step, path) in enumerate(steps)
              if step == "rename" and path.startswith(f"{memory}topics{os.sep}")]
    [installed] = [i for i, (step, path) in enumerate(steps)
                   if step == "unlink" and path.endswith(f"{os.sep}install.journal")]
    assert files.marker_writes, "no durable write carried a marker"
    first_marker = files.marker_writes[0]
    assert steps[first_marker][1].startswith(str(tmp_path / "sessions" / sid) + os.sep)
    # The evidence lands before any topic file, and the install (topic files
    # replaced, its journal retired) ends before the first marker byte is written.
    assert topics and archived < min(topics), steps
    assert max(topics) < installed < first_marker, steps
    archive = (tmp_path / "memory" / archive_relpath(sid)).read_text(encoding="utf-8")
    assert all(node in archive for node in nodes)
