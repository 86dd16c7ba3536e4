"""A damaged journal or runtime-log tail is dropped out loud (store._damage) and found again."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from store import DamagedLog, RuntimeLog, SessionCore, SessionOptions
from store._runtime_log import WAL_DIR
from store.lowlevel import find_damaged_logs

GARBAGE = b"scriptorium-journal 3 99 deadbeef\nnot a record"


def _session(state: Path) -> None:
    core = SessionCore.create(state, "s")
    core.append({"id": "u1", "role": "user", "content": "hello", "predecessor": "ROOT"})
    core.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "store" and r.levelno == logging.WARNING]


def test_a_damaged_session_journal_tail_is_named_in_a_warning_and_found_by_a_scan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    _session(tmp_path)
    journal = tmp_path / "sessions" / "s" / ".journal"
    kept = journal.read_bytes()
    journal.write_bytes(kept + GARBAGE)
    assert find_damaged_logs(tmp_path) == [
        DamagedLog("sessions/s/.journal", len(kept), len(GARBAGE))]
    with caplog.at_level(logging.WARNING, logger="store"):
        core = SessionCore.open(tmp_path, "s")
    [warning] = _warnings(caplog)
    assert "sessions/s/.journal" in warning.getMessage()
    assert warning.__dict__["file"] == "sessions/s/.journal"
    assert warning.__dict__["dropped_bytes"] == len(GARBAGE)
    assert [node.id for node in core.nodes()] == ["u1"]  # the valid records still count
    assert find_damaged_logs(tmp_path) == []  # opening cut the tail off


def test_a_damaged_runtime_log_segment_is_named_in_a_warning_and_found_by_a_scan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    _session(tmp_path)
    log = RuntimeLog.open(tmp_path)
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(log=log))
    core.append({"id": "a1", "role": "assistant", "content": "hi", "predecessor": "u1"})
    log.abandon()  # the runtime died before its checkpoint: a dead owner's live records
    [segment] = (tmp_path / WAL_DIR).glob("*.log")
    kept = segment.read_bytes()
    segment.write_bytes(kept + GARBAGE)
    rel = f"{WAL_DIR}/{segment.name}"
    assert DamagedLog(rel, len(kept), len(GARBAGE)) in find_damaged_logs(tmp_path)
    with caplog.at_level(logging.WARNING, logger="store"):
        recovered = SessionCore.open(tmp_path, "s")
    assert any(rel in warning.getMessage() for warning in _warnings(caplog))
    assert [node.id for node in recovered.nodes()] == ["u1", "a1"]  # what was whole is replayed
