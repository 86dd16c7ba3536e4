"""The recall index goes private when the state refuses a write (memory.recall._private).

Injected at the durable seam, so it holds whoever runs the test (root
included): the seam refuses to make ``.scriptorium`` with EROFS, the error a
read-only mount returns.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from memory.recall import Recall
from tests.faults import RefusingFiles
from tests.fixture import copy_fixture


def test_an_index_that_cannot_be_made_on_disk_is_made_in_memory(tmp_path: Path) -> None:
    memory = copy_fixture(tmp_path / "memory", "memory")
    shutil.rmtree(memory / ".scriptorium")
    recall = Recall(str(memory), files=RefusingFiles(error=errno.EROFS))
    hits = recall.recall_blocking("biscuits", k=8, view=None, since=None, until=None,
                                  include_pending=False)
    assert {hit.node_id for hit in hits if hit.kind == "source"} >= {"u2", "a2"}
    assert recall.index.private is not None
    assert not (memory / ".scriptorium").exists()
    report = recall.rebuild_blocking()
    assert report.private and report.added == 5
    recall.close()
