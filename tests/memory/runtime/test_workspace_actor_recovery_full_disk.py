"""A full disk while the workspace actor finishes an interrupted install (issue 10, attack 6).

A commit that runs out of space after its journal's commit point crashes
the workspace actor; the next incarnation's start-up recovery replays the
journal onto the same full disk. That used to crash every restart until
the root supervisor gave up, and each session then read "registry
'runtime/sessions' is shut down", naming neither the file nor ENOSPC.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import anyio
import pytest

from memory.runtime._headless import run_once
from memory.runtime._runtime import open_runtime
from tests.faults import RefusingFiles
from tests.memory._runtime import HANG, build_session, marked, virtual_config

SESSIONS = ("s1", "s2", "s3")


@pytest.mark.virtual_time(wait_for_threads=True)
async def test_a_full_disk_at_recovery_names_the_file_and_enospc_and_heals(
    tmp_path: Path,
) -> None:
    for sid in SESSIONS:
        build_session(tmp_path, sid, [f"{sid}-{i}" for i in range(4)])
    # The journal (memory/.scriptorium/) lands; every topic file replace is refused.
    files = RefusingFiles(under=f"{os.sep}memory{os.sep}topics{os.sep}")
    journal = tmp_path / "memory" / ".scriptorium" / "install.journal"
    async with open_runtime(tmp_path, config=virtual_config(files=files)) as rt:
        files.error = errno.ENOSPC
        with anyio.fail_after(HANG):
            full = await run_once(rt, list(SESSIONS))
        assert journal.exists()  # past the commit point: recovery owes the install
        assert rt.root is not None
        workspace = next(c for c in (await rt.root.inspect()).children  # type: ignore[attr-defined]
                         if c.id == "workspace")
        assert workspace.restarts <= 1  # the crashed commit, then no crash loop
        for sid in SESSIONS:
            reason = full[sid].reason
            assert full[sid].outcome == "failed" and not full[sid].ok, (sid, reason)
            assert "memory/.scriptorium/install.journal" in reason, reason
            assert "No space left on device (ENOSPC)" in reason, reason
            assert f"{os.sep}memory{os.sep}topics{os.sep}" in reason, reason
            assert "shut down" not in reason
        files.error = None  # space freed: the next write finishes the install first
        with anyio.fail_after(HANG):
            healed = await run_once(rt, list(SESSIONS))
        assert {sid: healed[sid].outcome for sid in SESSIONS} == dict.fromkeys(
            SESSIONS, "written"), {sid: healed[sid].reason for sid in SESSIONS}
        await rt.drain()
    assert not journal.exists()
    for sid in SESSIONS:
        assert marked(tmp_path, sid) == {f"{sid}-{i}" for i in range(4)}
