"""The runtime log (store/_runtime_log.py): group commit, ownership, retirement, recovery.

Crash and power-loss tests at every step are in ``test_runtime_log_crash.py``;
real processes killed with SIGKILL in ``test_runtime_log_kill.py``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from store import SessionOptions
from store._durable import DurableFiles
from store._errors import SessionLockTimeoutError
from store._lock import SessionLock
from store._runtime_log import WAL_DIR, RuntimeLog, dead_sessions
from store._session import SessionCore, recover_dead_runtimes
from tests.faults import FaultyFiles, PowerLossLog

MARK = "memory_written_scriptorium"


def _wal(state: Path) -> list[str]:
    return sorted(os.listdir(state / WAL_DIR))


def _chain(core: SessionCore, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        core.append({"id": f"n{i}", "content": f"turn {i}"})


class OrderedFlushes(DurableFiles):
    """Numbers each log write, and records each flush: the writes done when it began, and when it ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written = 0
        self.flushes: list[tuple[int, int]] = []  # (writes done at its start, event number at end)
        self.events = 0
        self.mine = threading.local()  # the number of this thread's last write
        self.gate = threading.Event()
        self.gate.set()

    def append_to(self, fd: int, path: str, data: bytes) -> None:
        super().append_to(fd, path, data)
        with self._lock:
            self._written += 1
            self.events += 1
            self.mine.number = self._written

    def flush_log(self, fd: int, path: str) -> None:
        with self._lock:
            started = self._written
        self.gate.wait()
        super().flush_log(fd, path)
        with self._lock:
            self.events += 1
            self.flushes.append((started, self.events))


def test_concurrent_commits_share_flushes_and_none_returns_before_a_flush_that_covers_it(
    tmp_path: Path,
) -> None:
    """Group commit: fewer flushes than records, and every commit waits for a flush begun after it.

    A flush that began before a record was written may have missed it; a
    commit served by such a flush would be acknowledged undurable.
    """
    files = OrderedFlushes()
    log = RuntimeLog.open(tmp_path, files=files)
    cores = [SessionCore.create(tmp_path, f"s{i}", options=SessionOptions(
        log=log)) for i in range(8)]
    returned: list[tuple[int, int]] = []  # (this commit's write, events seen at its return)
    lock = threading.Lock()

    def work(core: SessionCore) -> None:
        for i in range(25):
            core.append({"id": f"n{i}", "content": str(i)})
            with lock, files._lock:
                returned.append((files.mine.number, files.events))

    files.gate.clear()  # the first flush waits until the other threads have written
    threads = [threading.Thread(target=work, args=(core,)) for core in cores]
    for thread in threads:
        thread.start()
    threading.Timer(0.2, files.gate.set).start()
    for thread in threads:
        thread.join()
    assert len(returned) == 8 * 25
    assert log.flushes <= log.records - 7  # the gated first flush served all eight threads
    for written, seen in returned:
        assert any(started >= written and ended <= seen for started, ended in files.flushes), (
            written, seen)
    for core in cores:
        core.close()
    log.close()


def test_the_group_commit_check_catches_a_commit_served_by_a_running_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (a waiter returns when the flush it waited for ends): the check fails."""
    import store._runtime_log as module

    def early(self: RuntimeLog, segment: module._Segment, end: int) -> None:
        with self._cond:
            if segment.flushing:
                while segment.flushing:
                    self._cond.wait()
                return
        original(self, segment, end)

    original = module.RuntimeLog._flush_through
    monkeypatch.setattr(module.RuntimeLog, "_flush_through", early)
    with pytest.raises(AssertionError):
        test_concurrent_commits_share_flushes_and_none_returns_before_a_flush_that_covers_it(
            tmp_path)


def test_a_session_is_held_until_its_checkpoint(tmp_path: Path) -> None:
    """Exclusive ownership: another owner waits for the lock until the log's core lets go."""
    SessionCore.create(tmp_path, "s").close()
    log = RuntimeLog.open(tmp_path)
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(log=log))
    with pytest.raises(SessionLockTimeoutError):
        SessionCore.open(tmp_path, "s", options=SessionOptions(lock_timeout=0.05))
    core.append({"id": "u1", "content": "mine"})
    core.close()
    other = SessionCore.open(tmp_path, "s", options=SessionOptions(lock_timeout=0.05))
    assert other.head == "u1"
    log.close()


def test_closing_retires_durably_so_a_dead_owner_is_not_replayed_over_later_writes(
    tmp_path: Path,
) -> None:
    """After close another owner writes; our log dies; nothing of ours is replayed over its write.

    The other owner moves the head back, so meta.json holds the very bytes
    our record replaced (a head move keeps ``updated_at``): only the durable
    retirement tells replay that our record is done.
    """
    core = SessionCore.create(tmp_path, "s")
    _chain(core, 3)
    core.close()
    files = PowerLossLog()
    log = RuntimeLog.open(tmp_path, files=files)
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(files=files, log=log))
    core.set_head("n0")
    core.close()
    later = SessionCore.open(tmp_path, "s", options=SessionOptions(lock_timeout=1.0))
    later.set_head("n2")
    later.close()  # checkpointed: its journal no longer stands behind the head move
    log.abandon()
    files.lose_unflushed()  # power loss: the log keeps what was flushed
    after = SessionCore.open(tmp_path, "s")
    assert after.head == "n2"
    assert not [n for n in _wal(tmp_path) if n.endswith(".log")]  # the dead log is gone


def test_the_durable_retirement_check_catches_a_close_that_retires_lazily(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (close lets go with its retirement unflushed): the test above fails."""
    from store import _session_journal

    checkpoint = _session_journal.LoggedJournal.checkpoint

    def lazy(self: _session_journal.LoggedJournal, *, torn: bool = False) -> None:
        self.closing = False
        checkpoint(self, torn=torn)

    def let_go(self: RuntimeLog, session: str, lock: SessionLock) -> bool:
        while lock.held:
            lock.__exit__(None, None, None)
        return True

    monkeypatch.setattr(_session_journal.LoggedJournal, "checkpoint", lazy)
    monkeypatch.setattr(RuntimeLog, "let_go", let_go)
    with pytest.raises(AssertionError):
        test_closing_retires_durably_so_a_dead_owner_is_not_replayed_over_later_writes(tmp_path)


def test_segments_rotate_and_retired_ones_are_deleted_oldest_first(tmp_path: Path) -> None:
    log = RuntimeLog.open(tmp_path, segment_bytes=2048)
    busy = SessionCore.create(tmp_path, "busy", options=SessionOptions(log=log))
    quiet = SessionCore.create(tmp_path, "quiet", options=SessionOptions(log=log))
    quiet.append({"id": "q0", "content": "kept live in segment 0"})
    _chain(busy, 30)
    segments = [n for n in _wal(tmp_path) if n.endswith(".log")]
    assert len(segments) > 2
    assert f"{log.owner}.0.log" in segments  # quiet's record is still live there
    busy.retire_journals()
    assert f"{log.owner}.0.log" in _wal(tmp_path)
    quiet.retire_journals()  # retirement appended, flushed with the next commit
    busy.append({"id": "n30", "content": "flushes the retirement"})
    left = [n for n in _wal(tmp_path) if n.endswith(".log")]
    assert left == [f"{log.owner}.{len(segments) - 1}.log"] or len(left) == 1, left
    busy.close()
    quiet.close()
    log.close()
    assert _wal(tmp_path) == []


def test_a_session_mode_owner_recovers_a_dead_runtimes_records(tmp_path: Path) -> None:
    """The installs were lost with the page cache; the dead log brings them back."""
    SessionCore.create(tmp_path, "s").close()
    log = RuntimeLog.open(tmp_path)
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(log=log))
    _chain(core, 3)
    core.merge_node_metadata_batch({"n0": {MARK: "w-1"}, "n2": {MARK: "w-1"}})
    before = {p.name: p.read_bytes() for p in (tmp_path / "sessions" / "s" / "history").iterdir()}
    log.abandon()
    history = tmp_path / "sessions" / "s" / "history"
    for path in history.iterdir():  # power loss: nothing installed after the log reached the disk
        path.unlink()
    (tmp_path / "sessions" / "s" / "meta.json").write_bytes(b'{"id": "s", "title": "", '
                                                           b'"created_at": 1, "updated_at": 1, '
                                                           b'"head_id": null}')
    recovered = SessionCore.open(tmp_path, "s")
    assert [n.id for n in recovered.nodes()] == ["n0", "n1", "n2"]
    assert recovered.head == "n2"
    assert recovered.node("n0").metadata[MARK] == "w-1"
    assert {p.name: p.read_bytes() for p in history.iterdir()} == before
    assert _wal(tmp_path) == []  # recovered, retired, deleted


def test_the_recovery_check_catches_an_owner_that_ignores_dead_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store import _session_journal

    monkeypatch.setattr(_session_journal, "dead_live_records", lambda *a, **k: [])
    with pytest.raises(AssertionError):
        test_a_session_mode_owner_recovers_a_dead_runtimes_records(tmp_path)


def test_a_live_owner_is_not_recovered_and_its_records_stay_its_own(tmp_path: Path) -> None:
    SessionCore.create(tmp_path, "s").close()
    log = RuntimeLog.open(tmp_path)
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(log=log))
    core.append({"id": "u1", "content": "live"})
    assert dead_sessions(tmp_path, DurableFiles()) == []
    core.close()
    assert dead_sessions(tmp_path, DurableFiles()) == []
    log.close()


def test_a_runtime_sweeps_every_dead_log_at_start(tmp_path: Path) -> None:
    for sid in ("a", "b", "c"):
        SessionCore.create(tmp_path, sid).close()
    dead = RuntimeLog.open(tmp_path)
    for sid in ("a", "b"):
        SessionCore.open(tmp_path, sid, options=SessionOptions(
            log=dead)).append({"id": f"{sid}1", "content": sid})
    dead.abandon()
    assert sorted(dead_sessions(tmp_path, DurableFiles())) == ["a", "b"]
    log = RuntimeLog.open(tmp_path)
    assert sorted(recover_dead_runtimes(tmp_path, log)) == ["a", "b"]
    assert [n for n in _wal(tmp_path) if not n.startswith(log.owner)] == []
    assert SessionCore.open(tmp_path, "a", options=SessionOptions(log=log)).head == "a1"
    log.close()


def test_a_failed_flush_seals_the_segment_and_the_session_ends_whole(tmp_path: Path) -> None:
    """An fdatasync error: the commit fails, the next mutation replays and checkpoints first."""
    SessionCore.create(tmp_path, "s").close()
    files = FaultyFiles()
    log = RuntimeLog.open(tmp_path, files=files)
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(files=files, log=log))
    core.append({"id": "u0", "content": "first"})
    files.fail_at = len(files.steps) + 2  # the append's record: write, then the flush
    files.only = None
    with pytest.raises(OSError):
        core.merge_node_metadata_batch({"u0": {MARK: "w-1"}})
    files.fail_at = None
    core.append({"id": "u1", "content": "after the failure"})
    assert core.node("u0").metadata.get(MARK) in (None, "w-1")
    segments = [n for n in _wal(tmp_path) if n.endswith(".log")]
    assert len(segments) >= 1
    core.close()
    log.close()
    reopened = SessionCore.open(tmp_path, "s")
    assert [n.id for n in reopened.nodes()] == ["u0", "u1"]
    assert reopened.node("u0").metadata.get(MARK) == core.node("u0").metadata.get(MARK)


def test_a_core_whose_close_failed_hands_its_held_lock_to_the_next_core(tmp_path: Path) -> None:
    SessionCore.create(tmp_path, "s").close()
    files = FaultyFiles()
    log = RuntimeLog.open(tmp_path, files=files)
    core = SessionCore.open(tmp_path, "s", options=SessionOptions(files=files, log=log))
    core.append({"id": "u0", "content": "first"})
    files.fail_at = len(files.steps)  # the close's first step
    with pytest.raises(OSError):
        core.close()
    files.fail_at = None
    assert log.is_live("s")
    again = SessionCore.open(tmp_path, "s", options=SessionOptions(
        files=files, log=log, lock_timeout=0.05))
    again.append({"id": "u1", "content": "second"})
    again.close()
    assert not log.is_live("s")
    log.close()
    assert SessionCore.open(tmp_path, "s").head == "u1"
