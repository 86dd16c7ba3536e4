"""A full disk under the recall index is one error naming the index file (not a bare OperationalError).

The disk is "full" for real as SQLite sees it: the sync's step hook caps
the database at the pages it has (``PRAGMA max_page_count``) and writes
more than fits, so SQLite fails with SQLITE_FULL, "database or disk is
full", exactly as on a full disk, and again after the sync's rebuild.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memory._errors import RecallIndexError
from memory.cli._cli_errors import EXIT_FAILURE, describe
from memory.recall import Recall
from tests.fixture import copy_fixture


def test_a_full_disk_under_the_index_is_one_error_naming_the_index_file(tmp_path: Path) -> None:
    memory = copy_fixture(tmp_path / "memory", "memory")
    recalls: list[Recall] = []

    def fill_the_disk(step: str) -> None:
        db = recalls[0].index.db
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count={pages}")
        # what the step would write next, larger than the pages left
        db.execute("INSERT OR REPLACE INTO meta VALUES('ballast', ?)", ("x" * 100_000,))

    recall = Recall(str(memory), step=fill_the_disk)
    recalls.append(recall)
    with pytest.raises(RecallIndexError) as caught:
        recall.recall_blocking("biscuits", k=8, view=None, since=None, until=None,
                               include_pending=False)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert "database or disk is full" in str(caught.value)
    message, code = describe(caught.value)
    assert code == EXIT_FAILURE
    assert message.startswith(f"{recall.index.path}: database or disk is full")
    assert "free disk space" in message and "\n" not in message
    recall.close()


def test_a_full_disk_does_not_delete_and_rebuild_the_index(tmp_path: Path) -> None:
    """SQLITE_FULL is the disk's trouble, not the index's: the index file is kept, not remade."""
    memory = copy_fixture(tmp_path / "memory", "memory")
    recall = Recall(str(memory))
    recall.recall_blocking("biscuits", k=8, view=None, since=None, until=None,
                           include_pending=False)  # the index, built and current
    def revision() -> str:
        with sqlite3.connect(recall.index.path) as db:
            return str(db.execute("SELECT value FROM meta WHERE key='revision'").fetchone()[0])

    built = revision()
    assert built
    calls: list[str] = []

    def fill_the_disk(step: str) -> None:
        calls.append(step)
        raise sqlite3.OperationalError("database or disk is full")

    recall.index.step = fill_the_disk
    (memory / "topics" / "new.md").write_text("# New\n\nA paragraph about biscuits.\n")
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        recall.index.sync(full=True)
    assert calls and revision() == built  # neither deleted nor made anew (a new one: '')
    recall.close()
