"""Crash safety of the runtime log: every step of commit, install, checkpoint, rotation, recovery.

As ``test_session_crash.py`` does for the session journal: each operation runs on
:class:`tests.faults.FaultyFiles`, which raises :class:`SimulatedCrash`
before primitive step *k* (the process dies there), for every *k*. The
dead process's runtime log is then :meth:`~store.RuntimeLog.abandon`\\ ed (its
descriptors closed, as the kernel does for a killed process: its owner lock
is free) and the session is opened by a session-journal owner, which must
recover it from the dead log: every node parses, every file holds its old or
its new content, an acknowledged operation is complete, and nothing of the
dead log is left once a runtime has swept the directory.

Power loss (the log cut at any byte, unsynced installs lost) is simulated on
the files themselves at the end; real processes killed with SIGKILL are in
``test_runtime_log_kill.py``.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from store import SessionOptions
from store._durable import TEMP_SUFFIX, DurableFiles
from store._runtime_log import WAL_DIR, RuntimeLog
from store._session import SessionCore, recover_dead_runtimes
from tests.faults import FaultyFiles, NoSyncFiles, PowerLossLog, SimulatedCrash, count_steps
from tests.store._crash_cases import MARK, OPERATIONS, build, first_wins, node_files, state_of

TURNS = ["u0", "a1", "u2", "a3", "u4", "a5"]  # what _build appends


def _recover(state: Path, files: DurableFiles | None = None) -> SessionCore:
    """Open as a session-journal owner (it recovers the dead log), then sweep as a runtime would."""
    core = SessionCore.open(state, "s", options=SessionOptions(files=files))
    assert core.problems == []
    root = state / "sessions" / "s"
    assert not [p for p in root.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
    sweeper = RuntimeLog.open(state)
    recover_dead_runtimes(state, sweeper)
    sweeper.close()
    assert os.listdir(state / WAL_DIR) == []  # nothing of the dead runtime is left
    return core


def _owned(state: Path, files: DurableFiles, operation: Callable[[SessionCore], Any],
           segment_bytes: int) -> None:
    """Open ``s`` through a runtime log on ``files`` and run ``operation``; the process then dies."""
    log = RuntimeLog.open(state, files=files, segment_bytes=segment_bytes)
    try:
        operation(SessionCore.open(state, "s", options=SessionOptions(files=files, log=log)))
    finally:
        log.abandon()  # killed: after the ack, or at the crash


def _crash_everywhere(
    tmp_path: Path,
    operation: Callable[[SessionCore], Any],
    check: Callable[[Path, dict[str, bytes], SessionCore, bool], None],
    prepare: Callable[[Path], None] = lambda state: None,
    segment_bytes: int = 1 << 20,
) -> int:
    def run(files: DurableFiles) -> None:
        state = build(tmp_path)
        prepare(state)
        _owned(state, files, operation, segment_bytes)

    total = count_steps(run)
    assert total > 0
    for k in range(total + 1):
        state = build(tmp_path)
        prepare(state)
        before = node_files(state)
        try:
            _owned(state, FaultyFiles(crash_at=k), operation, segment_bytes)
            acknowledged = True
        except SimulatedCrash:
            acknowledged = False
        assert acknowledged == (k >= total), k
        check(state, before, _recover(state), acknowledged)
    return total


def _check_append(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
    ids = [n.id for n in core.nodes()]
    assert ids in (TURNS, [*TURNS, "u6"])
    appended = ids[-1] == "u6"  # one record: node file and meta.json together or not at all
    assert appended == (core.head == "u6")
    assert appended == ((state / "sessions" / "s" / "meta.json").read_bytes()
                        != before["meta.json"])
    if acked:
        assert appended
    after = node_files(state)
    for name, data in before.items():
        if name != "meta.json":
            assert after[name] == data


def test_append_crash_at_every_step(tmp_path: Path) -> None:
    steps = _crash_everywhere(
        tmp_path, lambda c: c.append({"id": "u6", "content": "new", "predecessor": "a5"}),
        _check_append)
    assert steps >= 9  # the lock file, the segment, the record and its flush, two installs


def _check_marks(value: str, nodes: list[str]) -> Callable[..., None]:
    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        marks = [core.node(n).metadata.get(MARK) for n in nodes]
        assert marks in ([None] * len(nodes), [value] * len(nodes))  # all or nothing
        if acked:
            assert marks == [value] * len(nodes)
        assert node_files(state)["meta.json"] == before["meta.json"]
    return check


def test_metadata_batch_crash_at_every_step(tmp_path: Path) -> None:
    nodes = ["u0", "a1", "u2", "a5"]
    _crash_everywhere(tmp_path, lambda c: c.merge_node_metadata_batch(
        {n: {MARK: "w-1"} for n in nodes}), _check_marks("w-1", nodes))


def test_rewind_crash_at_every_step(tmp_path: Path) -> None:
    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        stamped = [core.node(n).rewound for n in ("u4", "a5")]
        if acked or stamped[0]:
            assert stamped == [True, True] and core.head == "a3"
        else:
            assert stamped == [False, False] and core.head == "a5"

    _crash_everywhere(tmp_path, lambda c: c.rewind_to("u4"), check)


def test_checkpoint_crash_at_every_step(tmp_path: Path) -> None:
    """A merge, then the session's checkpoint: its files synced, its retirement written."""
    nodes = ["u0", "a1", "u2", "a3", "u4"]

    def merge_and_checkpoint(core: SessionCore) -> None:
        core.merge_node_metadata_batch({n: {MARK: "w-2"} for n in nodes})
        core.retire_journals()
        core.append({"id": "u6", "content": "after the checkpoint", "predecessor": "a5"})

    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        marks = [core.node(n).metadata.get(MARK) for n in nodes]
        assert marks in ([None] * 5, ["w-2"] * 5)
        if acked:
            assert marks == ["w-2"] * 5 and core.head == "u6"

    _crash_everywhere(tmp_path, merge_and_checkpoint, check)


def test_close_crash_at_every_step(tmp_path: Path) -> None:
    """A merge, then close (durable retirement, the lock let go) and the log's own close."""
    nodes = ["a1", "a3", "a5"]

    def merge_and_close(core: SessionCore) -> None:
        core.merge_node_metadata_batch({n: {MARK: "w-3"} for n in nodes})
        log = core._log
        core.close()
        assert log is not None
        log.close()

    _crash_everywhere(tmp_path, merge_and_close, _check_marks("w-3", nodes))


def test_rotation_and_segment_deletion_crash_at_every_step(tmp_path: Path) -> None:
    """Small segments: appends rotate them, a checkpoint retires them, the next flush deletes them."""
    extra = [f"x{i}" for i in range(5)]

    def appends(core: SessionCore) -> None:
        for node_id in extra[:4]:
            core.append({"id": node_id, "content": f"{node_id} " * 20})
        core.retire_journals()
        core.append({"id": extra[4], "content": "the flush that settles the retirement"})

    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        ids = [n.id for n in core.nodes()]
        assert ids[:6] == TURNS
        assert ids[6:] == extra[:len(ids) - 6]  # a prefix of the appends, each whole
        assert core.head == ids[-1]
        if acked:
            assert ids[6:] == extra

    def rotates(files: DurableFiles) -> None:
        state = build(tmp_path)
        log = RuntimeLog.open(state, files=files, segment_bytes=400)
        appends(SessionCore.open(state, "s", options=SessionOptions(files=files, log=log)))
        unlinked = [p for s, p in getattr(files, "steps", []) if s == "unlink"]
        assert any(p.endswith(".log") for p in unlinked)  # the test does cover a deletion
        log.abandon()

    rotates(FaultyFiles())
    _crash_everywhere(tmp_path, appends, check, segment_bytes=400)


def _dead_owner_left_records(state: Path) -> None:
    """A runtime appended u6 and marked three nodes, then died before any checkpoint."""
    log = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=log))
    core.append({"id": "u6", "content": "from the dead", "predecessor": "a5"})
    core.merge_node_metadata_batch({n: {MARK: "w-dead"} for n in ("u0", "u2", "u6")})
    log.abandon()


def test_recovering_a_dead_runtime_crash_at_every_step(tmp_path: Path) -> None:
    """The recoverer (a runtime itself) dies at every step of the recovery and of its own append."""

    def check(state: Path, before: dict[str, bytes], core: SessionCore, acked: bool) -> None:
        ids = [n.id for n in core.nodes()]
        assert ids[:7] == [*TURNS, "u6"]  # the dead runtime's acks hold
        assert [core.node(n).metadata.get(MARK) for n in ("u0", "u2", "u6")] == ["w-dead"] * 3
        assert ids[7:] in ([], ["a7"]) and (ids[7:] == ["a7"]) == (core.head == "a7")
        if acked:
            assert ids[7:] == ["a7"]

    _crash_everywhere(
        tmp_path, lambda c: c.append({"id": "a7", "role": "assistant", "content": "after"}),
        check, prepare=_dead_owner_left_records)


def test_a_crash_in_a_shared_flush_fails_every_waiter_and_hangs_none(tmp_path: Path) -> None:
    """Four sessions commit at once; the flush dies: every thread returns, every ack holds."""
    state = tmp_path / "state"
    for i in range(4):
        SessionCore.create(state, f"s{i}").close()
    for crash_at in range(8):
        shutil.rmtree(state / WAL_DIR, ignore_errors=True)
        files = FaultyFiles(crash_at=crash_at, only=frozenset({"fsync"}))
        log = RuntimeLog.open(state, files=files)
        cores = [SessionCore.open(state, f"s{i}", options=SessionOptions(
            files=files, log=log)) for i in range(4)]
        acked: list[tuple[str, str]] = []
        outcomes: list[BaseException | None] = []
        threads = [threading.Thread(target=_commit_three, args=(core, crash_at, acked, outcomes))
                   for core in cores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
            assert not thread.is_alive(), "a waiter hung behind a dead flush"
        assert len(outcomes) == 4
        log.abandon()
        for sid, node in acked:
            recovered = SessionCore.open(state, sid)
            assert node in {n.id for n in recovered.nodes()}, (crash_at, sid, node)


def _commit_three(core: SessionCore, run: int, acked: list[tuple[str, str]],
                  outcomes: list[BaseException | None]) -> None:
    try:
        for j in range(3):
            node = f"c{run}-{j}"
            core.append({"id": node, "content": f"{core.session} {j}"})
            acked.append((core.session, node))
        outcomes.append(None)
    except BaseException as exc:  # noqa: BLE001 - SimulatedCrash, or the waiters' OSError
        outcomes.append(exc)


# -- power loss: unsynced installs lost, the log cut anywhere ------------------------

def test_power_loss_with_the_log_cut_at_every_byte(tmp_path: Path) -> None:
    """The disk keeps only the log's first L bytes and none of the unsynced installs.

    For every L, recovery yields exactly the state after the operations
    whose records lie wholly in those L bytes: a prefix, never a mix, and
    every acknowledged operation (its record was flushed) survives.
    """
    state = build(tmp_path)
    before = node_files(state)
    log = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=log))
    expected = [state_of(core)]
    boundaries = [0]
    for operation in OPERATIONS:
        operation(core)
        expected.append(state_of(core))
        (grown,) = [p for p in (state / WAL_DIR).iterdir() if p.suffix == ".log"]
        boundaries.append(grown.stat().st_size)
    (segment,) = [p for p in (state / WAL_DIR).iterdir() if p.suffix == ".log"]
    data = segment.read_bytes()
    lock = state / WAL_DIR / f"{log.owner}.lock"
    log.abandon()
    root = state / "sessions" / "s"
    cuts = set(range(0, len(data) + 1, 17))
    for boundary in boundaries:
        cuts.update(c for c in range(boundary - 8, boundary + 48) if 0 <= c <= len(data))
    for cut in sorted(cuts):
        for path in [*root.rglob("*.json")]:
            path.unlink()
        for name, content in before.items():
            (root / name).write_bytes(content)
        (state / WAL_DIR).mkdir(parents=True, exist_ok=True)
        lock.touch()
        segment.write_bytes(data[:cut])
        complete = sum(1 for b in boundaries[1:] if b <= cut)
        recovered = SessionCore.open(state, "s", options=SessionOptions(files=NoSyncFiles()))
        assert recovered.problems == []
        assert state_of(recovered) == expected[complete], cut


def test_the_power_loss_check_catches_a_recovery_in_the_wrong_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (the first record naming a file wins): the cut test must fail."""
    import store._journal as journal_module

    monkeypatch.setattr(journal_module, "latest_per_file", first_wins)
    with pytest.raises(AssertionError):
        test_power_loss_with_the_log_cut_at_every_byte(tmp_path)


def test_every_acknowledged_operation_survives_losing_all_that_was_not_flushed(
    tmp_path: Path,
) -> None:
    """Power loss after the acks: the log keeps only what its flushes covered, installs are gone."""
    state = build(tmp_path)
    before = node_files(state)
    files = PowerLossLog()
    log = RuntimeLog.open(state, files=files)
    core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    for operation in OPERATIONS:
        operation(core)
    expected = state_of(core)
    log.abandon()
    files.lose_unflushed()
    root = state / "sessions" / "s"
    for path in [*root.rglob("*.json")]:
        path.unlink()
    for name, content in before.items():
        (root / name).write_bytes(content)
    assert state_of(_recover(state)) == expected


def test_the_flush_check_catches_a_commit_acknowledged_before_its_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant the fault (a commit returns without waiting for the flush): the test above fails."""
    import store._runtime_log as module

    monkeypatch.setattr(module.RuntimeLog, "_flush_through", lambda self, segment, end: None)
    with pytest.raises(AssertionError):
        test_every_acknowledged_operation_survives_losing_all_that_was_not_flushed(tmp_path)


def test_the_power_loss_check_catches_a_recovery_that_ignores_dead_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import store._session_journal as module

    monkeypatch.setattr(module, "dead_live_records", lambda *args, **kwargs: [])
    with pytest.raises(AssertionError):
        test_power_loss_with_the_log_cut_at_every_byte(tmp_path)
