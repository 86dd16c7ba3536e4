"""``memory audit`` on a full disk: it reads the sessions as found instead of failing.

Opening a session recovers it (replays or cuts its journal), which writes;
on a full disk that fails with ENOSPC at the durable seam. The audit then
reads the session without recovering it, says the journal was not
replayed, and still reports the rest (here: the journal's damaged tail).
"""

from __future__ import annotations

import errno
from pathlib import Path

from memory.maintenance import audit, read_audit_inputs
from tests.faults import RefusingFiles
from tests.fixture import copy_fixture

GARBAGE = b"scriptorium-journal 3 99 deadbeef\nnot a record"


def test_audit_reads_as_found_when_opening_a_session_cannot_write(tmp_path: Path) -> None:
    state = copy_fixture(tmp_path / "state")
    journal = state / "sessions" / "demo" / ".journal"
    journal.write_bytes(GARBAGE)  # opening would cut it off: a write
    workspace = (state / "memory" / ".scriptorium" / "workspace-id").read_text().strip()
    report = audit(read_audit_inputs(str(state), workspace, files=RefusingFiles(error=errno.ENOSPC)))
    assert report["sessions"] == 1 and report["marked"] > 0
    assert report["damaged_logs"] == [
        {"file": "sessions/demo/.journal", "offset": 0, "dropped_bytes": len(GARBAGE)}]
    [warning] = report["warnings"]
    assert warning.startswith("sessions/demo/.journal: not replayed") and "No space" in warning
    assert journal.read_bytes() == GARBAGE  # nothing was written
