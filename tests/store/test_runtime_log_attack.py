"""Attacks on the runtime log (store/_runtime_log.py) and the sessions written through it.

Each test names the property it tries to break. Fifteen of them failed on
the first version of the log (each finding is fixed, and its test now guards
the fix; docs/decisions.md, "The runtime log: what the attack found"); the
others are properties that held under the attack, kept because they are
cheap and not covered elsewhere.

fsync is skipped (``NoSyncFiles``) where the property is about bookkeeping,
not durability; real processes killed with SIGKILL where it is about
processes.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from store import SessionOptions
from store._durable import TEMP_SUFFIX, DurableFiles
from store._errors import JournalFileError, SessionLockTimeoutError
from store._runtime_log import WAL_DIR, RuntimeLog
from store._session import SessionCore, recover_dead_runtimes
from tests.faults import (
    FaultyFiles,
    FlushTracking,
    NoSyncFiles,
    SimulatedCrash,
    count_steps,
    hold_flock,
    let_go,
)

REPO = Path(__file__).resolve().parents[2]
MARK = "memory_written_scriptorium"
CLOCK = 1_700_000_000.25  # a fixed clock: every record of a cycle has the same size


def _segments(state: Path) -> list[str]:
    if not (state / WAL_DIR).is_dir():
        return []
    return sorted(n for n in os.listdir(state / WAL_DIR) if n.endswith(".log"))


def _flock_free(path: Path) -> bool:
    """Whether another process could take an exclusive flock on ``path`` now (a real probe)."""
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "try:\n"
             "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "    print('free')\n"
             "except BlockingIOError:\n"
             "    print('held')\n")
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True,
                         text=True, check=True).stdout
    return out == "free\n"


# -- growth without bound ----------------------------------------------------------------


def test_an_idle_retirement_that_seals_its_segment_never_becomes_durable_and_the_log_grows(
    tmp_path: Path,
) -> None:
    """Rule 3 (segments are deleted once retired) breaks when a retirement fills its segment.

    An idle checkpoint appends the session's retirement without flushing it
    (``retire(durable=False)``): the next commit's flush is meant to carry
    it. But when that retirement is the record that takes its segment past
    ``segment_bytes``, the segment is sealed and every later commit flushes
    the *new* segment; nothing ever flushes the sealed one again
    (``_flush_through`` flushes only the committer's segment; ``flush`` runs
    only at close). The retirement stays pending in ``_retirements`` for
    ever, and ``_apply_retirements`` never deletes a segment with a pending
    retirement, nor (oldest first) any segment after it: the log, and its
    open file descriptors, grow with every sealed segment until the runtime
    exits. Here the segment size is chosen so that every retirement is the
    sealing record; with the default 4 MB it happens whenever the idle
    retirement is the record that crosses 4 MB, after which the log never
    shrinks again.
    """
    state = tmp_path / "state"
    files = NoSyncFiles()
    SessionCore.create(state, "s", options=SessionOptions(files=files, clock=lambda: CLOCK))
    # measure one cycle's records: a commit (M) and an idle retirement (R)
    probe = RuntimeLog.open(state, files=files)
    core = SessionCore.open(state, "s", options=SessionOptions(
        files=files, log=probe, clock=lambda: CLOCK))
    core.append({"role": "user", "content": "x"})
    mutation = os.path.getsize(state / WAL_DIR / _segments(state)[0])
    core.retire_journals()
    retirement = os.path.getsize(state / WAL_DIR / _segments(state)[0]) - mutation
    core.close()
    probe.close()

    # M alone stays under the bound, M + R crosses it: R seals each segment
    log = RuntimeLog.open(state, files=files, segment_bytes=mutation + retirement // 2)
    core = SessionCore.open(state, "s", options=SessionOptions(
        files=files, log=log, clock=lambda: CLOCK))
    for _ in range(30):
        core.append({"role": "user", "content": "x"})
        core.retire_journals()  # what the session actor does when its mailbox is idle
    assert len(_segments(state)) <= 3, _segments(state)
    core.close()
    log.close()


class _FailingLogFlush(NoSyncFiles):
    """The runtime log's next ``fdatasync`` fails (EIO) once ``armed`` is set."""

    def __init__(self) -> None:
        self.armed = False

    def flush_log(self, fd: int, path: str) -> None:
        if self.armed:
            self.armed = False
            raise OSError(errno.EIO, "injected I/O error", path)
        super().flush_log(fd, path)


def test_after_one_failed_flush_no_segment_is_ever_deleted_again(tmp_path: Path) -> None:
    """An fsync error must not stop the log from shrinking for the rest of the runtime's life.

    After a failed ``fdatasync`` the segment is sealed with ``failure`` set
    and is never flushed again (rightly: nothing is trusted to a second
    flush). But a retirement appended to it before the failure (an idle
    checkpoint's, not flushed) can then never become durable, so it stays
    in ``_retirements`` for ever and ``_apply_retirements`` refuses to
    delete that segment, and, deleting oldest first, every segment after
    it. The session itself is fine (its later retirements cover it), but
    one transient EIO makes the log grow without bound until the process
    exits. Here: one session, an idle retirement, one failed flush; then
    sixty open/append/close cycles (each retired durably) with small
    segments: the log should stay at a couple of segments.
    """
    state = tmp_path / "state"
    files = _FailingLogFlush()
    SessionCore.create(state, "s", options=SessionOptions(files=files))
    log = RuntimeLog.open(state, files=files, segment_bytes=2048)
    core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    core.append({"role": "user", "content": "a"})
    core.retire_journals()  # the idle retirement: appended, not flushed
    files.armed = True
    with pytest.raises(OSError):
        core.append({"role": "user", "content": "b"})
    for i in range(60):
        core.append({"role": "user", "content": f"turn {i}"})
        core.close()
        core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    assert len(_segments(state)) <= 3, _segments(state)
    core.close()
    log.close()


# -- a transient error that wedges the log ---------------------------------------------------


class _FailingWalDirSync(NoSyncFiles):
    """The next fsync of the ``wal`` directory fails (EIO) once ``armed`` is set."""

    def __init__(self) -> None:
        self.armed = False

    def fsync_dir(self, directory: str) -> None:
        if self.armed and os.path.basename(directory) == "wal":
            self.armed = False
            raise OSError(errno.EIO, "injected I/O error", directory)
        super().fsync_dir(directory)


def test_one_failed_directory_sync_while_creating_a_segment_wedges_the_log_for_good(
    tmp_path: Path,
) -> None:
    """A transient error may fail one mutation; the next, on a healthy disk, must succeed.

    ``RuntimeLog._writable`` creates ``<owner>.<n>.log`` with ``create_log``
    (``O_CREAT | O_EXCL``, then an fsync of the directory) and only then
    increments ``_next_index``. When the directory fsync fails, the file
    already exists but the index stays: every later ``_writable`` tries the
    same name and ``O_EXCL`` answers ``FileExistsError``, so every mutation
    of every session of the runtime fails from then on, though the disk is
    healthy again. A session journal recovers from the same error at the
    next mutation.
    """
    state = tmp_path / "state"
    files = _FailingWalDirSync()
    SessionCore.create(state, "s", options=SessionOptions(files=files))
    log = RuntimeLog.open(state, files=files)
    core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    files.armed = True  # the first segment is created by the first commit
    with pytest.raises(OSError):
        core.append({"id": "n1", "role": "user", "content": "lost to EIO"})
    core.append({"id": "n2", "role": "user", "content": "the disk is fine again"})
    assert "n2" in [n.id for n in core.nodes()]
    core.close()
    log.close()


# -- locks -------------------------------------------------------------------------------------


def test_startup_recovery_leaves_its_zero_lock_timeout_on_the_session_for_good(
    tmp_path: Path,
) -> None:
    """A session's lock timeout is the one its core asked for, not the startup sweep's 0 s.

    ``recover_dead_runtimes`` opens each session with live records in a dead
    log with ``lock_timeout=0.0`` (skip a session another process holds).
    ``RuntimeLog.session_lock`` keeps the ``SessionLock`` it made for that
    open in ``_held`` (``_holding`` takes the lock outside its ``try``, so
    a failed take never reaches ``release``). Every later core of the
    session in this runtime gets that lock object back, timeout 0 s
    included: while the other process holds the session a moment longer,
    the runtime's own open fails at once instead of waiting its
    ``lock_timeout`` (30 s by default).
    """
    state = tmp_path / "state"
    SessionCore.create(state, "s")
    dead = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=dead))
    core.append({"id": "n1", "role": "user", "content": "left live by a killed runtime"})
    dead.abandon()  # dies as a SIGKILL would: its records of s are live
    holder = hold_flock(state / "sessions" / "s" / ".lock")  # another process holds s
    log = RuntimeLog.open(state)
    later = threading.Timer(0.3, let_go, [holder])  # ... for 0.3 s more
    try:
        assert recover_dead_runtimes(state, log) == []  # s skipped: held
        later.start()
        core = SessionCore.open(state, "s", options=SessionOptions(log=log, lock_timeout=20.0))
    finally:
        later.cancel()
        if later.ident is not None:
            later.join()
        if holder.poll() is None:
            let_go(holder)
    assert "n1" in [n.id for n in core.nodes()]
    core.close()
    log.close()


def test_two_cores_of_one_session_in_one_process_do_not_exclude_each_other(
    tmp_path: Path,
) -> None:
    """Exclusive ownership: while a core holds a session, nobody else may write it.

    ``store/_lock.py``: flock belongs to an open file description, so two
    cores in one process exclude each other. With a runtime log they share
    one ``SessionLock`` object (``RuntimeLog.session_lock``), which is
    reentrant: a second core of the session opens at once, both write, and
    the first one's ``close`` lets go of the lock completely
    (``release``: ``while lock.held: lock.__exit__``) while the second is
    still open and believes it holds the session exclusively. Another
    process can then take the lock and write; the open core never adopts
    what it wrote (it is caught up, ``on_disk`` answers its own stamp).
    """
    state = tmp_path / "state"
    SessionCore.create(state, "s")
    log = RuntimeLog.open(state)
    first = SessionCore.open(state, "s", options=SessionOptions(log=log))
    try:
        second = SessionCore.open(state, "s", options=SessionOptions(log=log, lock_timeout=0.0))
    except SessionLockTimeoutError:
        second = None  # refused, as two cores without a log are
    if second is not None:
        first.append({"role": "user", "content": "from the first core"})
        first.close()
        # the second core is open: the session must still be held
        assert not _flock_free(state / "sessions" / "s" / ".lock")
        second.close()
    else:
        first.close()
    log.close()


# -- stale records ---------------------------------------------------------------------------


def test_a_dead_runtimes_records_of_a_deleted_session_reappear_in_a_new_session_of_that_id(
    tmp_path: Path,
) -> None:
    """Replay must never install records into a session they were not written for.

    A session journal lives in its session's directory and goes with it. A
    runtime log names the session by id only: a runtime killed with live
    records of ``s`` leaves them in ``wal/``; ``s`` is deleted (by its user,
    or the agent); the startup sweep cannot open it and keeps the records
    "for the next holder" (``recover_dead_runtimes``). The next holder is a
    *new* session created with the same id: its first lock replays the
    dead session's append (the node file's ``before`` is ``absent``, and it
    is absent), so the new, empty session shows a turn it never had, as
    its head. The dead log is also kept, and read at every session-journal
    mutation of every session, for as long as the id is not reused.
    """
    state = tmp_path / "state"
    SessionCore.create(state, "s")
    dead = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=dead))
    core.append({"id": "old1", "role": "user", "content": "a turn of the deleted session"})
    dead.abandon()
    shutil.rmtree(state / "sessions" / "s")
    log = RuntimeLog.open(state)
    recover_dead_runtimes(state, log)
    fresh = SessionCore.create(state, "s", options=SessionOptions(log=log))
    assert [n.id for n in fresh.nodes()] == []
    fresh.close()
    log.close()


# -- a crash at every step (FaultyFiles), then recovery ------------------------------------------

_runs = itertools.count()
TURNS = ["u0", "a1", "u2", "a3", "u4", "a5"]


def _six_turns(tmp_path: Path) -> Path:
    state = tmp_path / f"run{next(_runs)}"
    core = SessionCore.create(state, "s")
    for i, node_id in enumerate(TURNS):
        core.append({"id": node_id, "role": ["user", "assistant"][i % 2], "content": f"t{i}"})
    core.close()
    return state


def _shared_owner(state: Path, files: DurableFiles, acked: list[str]) -> None:
    """A runtime on the shared log: every kind of record, an idle checkpoint, then close.

    ``acked`` gets the name of each operation once it returned; on a
    :class:`SimulatedCrash` the log dies as a killed process (``abandon``).
    """
    log: RuntimeLog | None = None
    try:
        log = RuntimeLog.open(state, files=files)
        core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
        core.append({"id": "u6", "role": "user", "content": "new", "predecessor": "a5"})
        acked.append("append")
        core.merge_node_metadata_batch({"u0": {MARK: "w-1"}, "a3": {MARK: "w-1"}})
        acked.append("merge")
        core.retire_journals()  # idle: the retirement is not flushed
        core.set_head("a3")
        acked.append("head")
        core.append({"id": "u7", "role": "user", "content": "newer", "predecessor": "a3"})
        acked.append("append2")
        core.close()
        log.close()
        acked.append("closed")
    except SimulatedCrash:
        if log is not None:
            log.abandon()  # a close that died part-way has let go of the owner lock already
        raise


def _check_recovered(state: Path, core: SessionCore, acked: list[str]) -> None:
    root = state / "sessions" / "s"
    assert core.problems == []
    assert not [p for p in root.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
    ids = [n.id for n in core.nodes()]
    assert ids[:6] == TURNS
    if "append" in acked:
        assert "u6" in ids
    if "merge" in acked:
        assert core.node("u0").metadata.get(MARK) == core.node("a3").metadata.get(MARK) == "w-1"
    else:  # one record: both markers or neither
        marks = {n: core.node(n).metadata.get(MARK) for n in ("u0", "a3")}
        assert marks in ({"u0": None, "a3": None}, {"u0": "w-1", "a3": "w-1"})
    if "append2" in acked:
        assert "u7" in ids and core.head == "u7"
    elif "head" in acked:
        assert core.head in ("a3", "u7")
    if "u7" in ids:  # its record holds node and head together
        assert core.head == "u7"


@pytest.mark.parametrize("recoverer", ["session", "shared"])
def test_a_shared_owner_killed_at_every_step_loses_nothing_acknowledged(
    tmp_path: Path, recoverer: str
) -> None:
    """Held: a crash between any two steps of the shared log (open, commit, install,
    idle retirement, close's durable retirement, segment and owner deletion) loses no
    acknowledged operation, tears no file, and the next holder (a session-journal
    process, or a shared runtime's startup sweep) recovers it and empties ``wal/``."""
    def run(files: DurableFiles) -> None:
        _shared_owner(_six_turns(tmp_path), files, [])

    total = count_steps(run)
    assert total > 20
    for k in range(total + 1):
        state = _six_turns(tmp_path)
        acked: list[str] = []
        try:
            _shared_owner(state, FaultyFiles(crash_at=k), acked)
        except SimulatedCrash:
            pass
        assert ("closed" in acked) == (k >= total), k
        if recoverer == "session":
            core = SessionCore.open(state, "s")
        else:
            log = RuntimeLog.open(state)
            recover_dead_runtimes(state, log)
            core = SessionCore.open(state, "s", options=SessionOptions(log=log))
        _check_recovered(state, core, acked)
        core.close()
        if recoverer == "shared":
            log.close()
        _sweep(state)
        assert _segments(state) == [], (k, _segments(state))


def _sweep(state: Path) -> None:
    """What a shared runtime does at start and end: sweep dead logs, then go."""
    log = RuntimeLog.open(state)
    recover_dead_runtimes(state, log)
    log.close()


def _dead_with_live_records(tmp_path: Path) -> Path:
    """A shared owner killed after an append and a marker batch, both acknowledged, both live."""
    state = _six_turns(tmp_path)
    log = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=log))
    core.append({"id": "u6", "role": "user", "content": "new", "predecessor": "a5"})
    core.merge_node_metadata_batch({"u0": {MARK: "w-1"}, "a3": {MARK: "w-1"}})
    log.abandon()
    return state


@pytest.mark.parametrize("recoverer", ["session", "shared"])
def test_a_recoverer_killed_at_every_step_leaves_the_dead_owners_records_recoverable(
    tmp_path: Path, recoverer: str
) -> None:
    """Held: the recoverer of a dead owner's records dies at any step of its recovery
    (replay, sync, the retirement segment, the deletion of the dead log); the next
    holder still finds every acknowledged record of the first owner, and ``wal/`` ends empty."""
    def recover(state: Path, files: DurableFiles) -> None:
        if recoverer == "session":
            SessionCore.open(state, "s", options=SessionOptions(files=files)).close()
            return
        log: RuntimeLog | None = None
        try:
            log = RuntimeLog.open(state, files=files)
            recover_dead_runtimes(state, log)
            log.close()
        except SimulatedCrash:
            if log is not None:
                log.abandon()
            raise

    total = count_steps(lambda files: recover(_dead_with_live_records(tmp_path), files))
    assert total > 5
    for k in range(total + 1):
        state = _dead_with_live_records(tmp_path)
        try:
            recover(state, FaultyFiles(crash_at=k))
        except SimulatedCrash:
            pass
        core = SessionCore.open(state, "s")
        _check_recovered(state, core, ["append", "merge"])
        core.close()
        _sweep(state)
        assert _segments(state) == [], (k, _segments(state))


# -- real processes killed with SIGKILL -------------------------------------------------------

SESSIONS = ["s0", "s1", "s2", "s3"]
SHARED_OWNER = ("import sys; from tests.store.test_runtime_log_attack import shared_main; "
                "shared_main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])")


def shared_main(state: str, mode: str, prefix: str, sessions: list[str]) -> None:
    """A runtime: one thread per session, appending and marking until killed.

    ``mode`` "shared": on one runtime log (group commit: the threads'
    records share flushes), after the startup sweep; "session": each
    session on its own journal. Prints ``append <sid> <node>`` and ``mark
    <sid> <node>`` once each is acknowledged, and ``idle <sid>`` after an
    idle checkpoint (in the log, its retirement not flushed). Node ids
    start with ``prefix``.
    """
    log = RuntimeLog.open(state) if mode == "shared" else None
    if log is not None:
        recover_dead_runtimes(state, log)
    said = threading.Lock()

    def say(line: str) -> None:
        with said:
            print(line, flush=True)

    def work(sid: str) -> None:
        core = SessionCore.open(state, sid, options=SessionOptions(log=log))
        for i in itertools.count():
            node = core.append({"id": f"{prefix}{i}", "role": ["user", "assistant"][i % 2],
                                "content": f"turn {i} of {sid}"})
            say(f"append {sid} {node['id']}")
            if i % 3 == 2:
                target = f"{prefix}{i - 2}"
                core.merge_node_metadata_batch({target: {MARK: f"w-{i}"}})
                say(f"mark {sid} {target}")
            if i % 5 == 4:
                core.retire_journals()
                say(f"idle {sid}")

    for sid in sessions:
        threading.Thread(target=work, args=(sid,), daemon=True).start()
    threading.Event().wait()


def _kill_shared_owner(state: Path, sessions: list[str], *, acks: int, mode: str = "shared",
                       prefix: str = "k") -> list[list[str]]:
    """Run :func:`shared_main` in a real process; SIGKILL it after ``acks`` acknowledgements."""
    owner = subprocess.Popen(
        [sys.executable, "-c", SHARED_OWNER, str(state), mode, prefix, *sessions],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    seen: list[list[str]] = []
    guard = threading.Timer(60.0, owner.kill)
    guard.start()
    try:
        assert owner.stdout is not None
        while len(seen) < acks:
            line = owner.stdout.readline()
            assert line, "the owner ended before it was killed"
            seen.append(line.split())
    finally:
        guard.cancel()
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert owner.returncode == -signal.SIGKILL
    return seen


def _sessions_with_six_turns(state: Path, sessions: list[str]) -> None:
    for sid in sessions:
        core = SessionCore.create(state, sid)
        for i, node_id in enumerate(TURNS):
            core.append({"id": node_id, "role": ["user", "assistant"][i % 2],
                         "content": f"t{i}"})
        core.close()


def _node_file(state: Path, sid: str, node_id: str) -> Path:
    history = state / "sessions" / sid / "history"
    (name,) = [n for n in os.listdir(history) if n.endswith(f"-{node_id}.json")]
    return history / name


@pytest.mark.parametrize("recoverer", ["session", "shared"])
def test_a_killed_shared_runtime_loses_no_acknowledged_record_and_reverts_no_agent_write(
    tmp_path: Path, recoverer: str
) -> None:
    """Held: four sessions group-committed by one real process, SIGKILLed mid-stream; then
    the reference agent (no lock) merges a key into a node the dead runtime appended and
    marked, and moves a head. Recovery (a session-journal process, or a shared
    runtime's startup sweep) keeps every acknowledged append and marker and the
    agent's key and head, and leaves ``wal/`` empty."""
    from memory.simulate._outside import agent_merge, agent_write

    state = tmp_path / "state"
    _sessions_with_six_turns(state, SESSIONS)
    seen = _kill_shared_owner(state, SESSIONS, acks=80)
    marked = [(sid, node) for kind, sid, *rest in seen if kind == "mark" for node in rest]
    assert marked and _segments(state)  # the dead runtime's log is left behind
    sid, node = marked[-1]
    agent_merge(str(_node_file(state, sid, node)), {"agent_note": "from the agent"})
    meta_path = state / "sessions" / sid / "meta.json"
    meta = json.loads(meta_path.read_bytes())
    meta["head_id"] = "a5"
    agent_write(str(meta_path), meta)
    agent_meta = meta_path.read_bytes()

    if recoverer == "shared":
        _sweep(state)
    cores = {s: SessionCore.open(state, s) for s in SESSIONS}
    for kind, s, *rest in seen:
        if kind == "append":
            assert rest[0] in {n.id for n in cores[s].nodes()}, (s, rest)
        elif kind == "mark":
            assert cores[s].node(rest[0]).metadata.get(MARK), (s, rest)
    assert cores[sid].node(node).metadata["agent_note"] == "from the agent"
    assert meta_path.read_bytes() == agent_meta
    for core in cores.values():
        assert core.problems == []
        core.close()
    _sweep(state)
    assert _segments(state) == []


RECOVERER = ("import sys; from tests.store.test_runtime_log_attack import recoverer_main; "
             "recoverer_main(sys.argv[1], sys.argv[2], sys.argv[3:])")


def recoverer_main(state: str, mode: str, sessions: list[str]) -> None:
    """Wait for a line on stdin, then take each session once (recovering it) and append to it."""
    sys.stdin.readline()
    log = RuntimeLog.open(state) if mode == "shared" else None
    for sid in sessions:
        core = SessionCore.open(state, sid, options=SessionOptions(log=log))
        core.append({"id": f"r-{sid}", "role": "user", "content": "after recovery"})
        core.close()
    if log is not None:
        log.close()
    print("done", flush=True)


def test_recoverers_in_several_processes_at_once_each_recover_and_the_dead_log_goes(
    tmp_path: Path,
) -> None:
    """Held: three real processes (two session-journal, one shared) take the sessions of
    one dead runtime at the same moment, in different orders; each session is recovered
    exactly once before its new append, and the dead log is deleted by the last one."""
    state = tmp_path / "state"
    sessions = [f"s{i}" for i in range(6)]
    _sessions_with_six_turns(state, sessions)
    seen = _kill_shared_owner(state, sessions, acks=60)
    procs = [subprocess.Popen([sys.executable, "-c", RECOVERER, str(state), mode, *order],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for mode, order in (("session", sessions), ("session", sessions[::-1]),
                                 ("shared", sessions[2:] + sessions[:2]))]
    for proc in procs:  # start together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert out == "done\n"
    cores = {s: SessionCore.open(state, s) for s in sessions}
    for kind, s, *rest in seen:
        if kind == "append":
            assert rest[0] in {n.id for n in cores[s].nodes()}, (s, rest)
        elif kind == "mark":
            assert cores[s].node(rest[0]).metadata.get(MARK), (s, rest)
    for s, core in cores.items():
        assert "r-" + s in {n.id for n in core.nodes()}
        core.close()
    assert _segments(state) == [], _segments(state)


# -- what a retirement may cover; a torn last record ----------------------------------------------


class _RetirementWatch(FlushTracking):
    """Records, at each retirement written (the log's or a recoverer's), what was still unflushed."""

    def __init__(self) -> None:
        super().__init__()
        self.at_retirement: list[set[str]] = []

    def append_to(self, fd: int, path: str, data: bytes) -> None:
        if b"\nR " in data[:80]:  # the frame's header line, then "R <sid>"
            self.at_retirement.append({p for p in self.unflushed if "/sessions/" in p})
        super().append_to(fd, path, data)

    def _replace(self, temp: str, final: str) -> None:
        if final.endswith(".log"):  # retire_dead's segment of retirements
            self.at_retirement.append({p for p in self.unflushed if "/sessions/" in p})
        super()._replace(temp, final)


def test_no_retirement_is_written_while_a_file_it_covers_is_unflushed(tmp_path: Path) -> None:
    """Held: every retirement (an idle checkpoint's, a close's, a recoverer's) is appended
    only after every file its session's records installed was flushed, so power loss
    after it loses nothing a retirement says is synced."""
    state = _six_turns(tmp_path)
    files = _RetirementWatch()
    log = RuntimeLog.open(state, files=files)
    core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    core.append({"id": "u6", "role": "user", "content": "new", "predecessor": "a5"})
    core.merge_node_metadata_batch({"u0": {MARK: "w-1"}, "a3": {MARK: "w-1"}})
    core.retire_journals()
    core.set_head("a3")
    core.rewind_to("u2")
    core.close()  # retires durably
    core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    core.append({"id": "u7", "role": "user", "content": "left live"})
    log.abandon()
    SessionCore.open(state, "s", options=SessionOptions(
        files=files)).close()  # a recoverer's retirement
    assert len(files.at_retirement) >= 3
    assert all(not unflushed for unflushed in files.at_retirement), files.at_retirement


def test_a_dead_log_torn_in_its_last_record_is_recovered_up_to_the_tear(tmp_path: Path) -> None:
    """Held: a dead runtime's last record cut at any byte (a crash during its write) is
    ignored, every record before it is replayed, the recoverer's retirement goes to a
    new segment (nothing is appended after a tear), and the dead log is deleted."""
    base = _six_turns(tmp_path)
    log = RuntimeLog.open(base)
    core = SessionCore.open(base, "s", options=SessionOptions(log=log))
    core.append({"id": "u6", "role": "user", "content": "new", "predecessor": "a5"})
    (segment,) = _segments(base)
    whole = os.path.getsize(base / WAL_DIR / segment)
    core.append({"id": "u7", "role": "user", "content": "newer", "predecessor": "u6"})
    log.abandon()
    size = os.path.getsize(base / WAL_DIR / segment)
    for cut in range(whole, size, 11):
        state = tmp_path / f"torn{cut}"
        shutil.copytree(base, state)
        (state / "sessions" / "s" / "history" / _node_file(base, "s", "u7").name).unlink()
        meta = json.loads((state / "sessions" / "s" / "meta.json").read_bytes())
        with open(state / WAL_DIR / segment, "r+b") as handle:
            handle.truncate(cut)  # u7's record torn: its installs never happened
        (state / "sessions" / "s" / "meta.json").write_bytes(
            json.dumps({**meta, "head_id": "u6"}).encode())
        core = SessionCore.open(state, "s")
        assert [n.id for n in core.nodes()] == [*TURNS, "u6"]
        assert core.head == "u6"
        core.close()
        assert _segments(state) == [], cut


# -- blast radius of one bad record; what a failed close keeps ------------------------------------


def test_a_foreign_record_of_one_session_in_a_dead_log_blocks_that_session_only(
    tmp_path: Path,
) -> None:
    """A record that is not ours refuses changes to *its* session only (store/_journal.py).

    With a session journal that is so by place: the journal lies in the
    session's directory. A dead runtime log holds every session's records,
    and one record of ``s1`` naming a file outside its session (checksum
    valid; damage or a file not written by scriptorium) used to make every
    lock-take of every session raise ``JournalFileError`` (the log's records
    were decoded whatever session the caller took): an unrelated ``s2``
    could not be opened and a shared runtime could not start. Records are
    decoded per session now: ``s2`` opens and changes in either journal
    mode, a runtime starts, and ``s1`` alone refuses changes with an error
    naming the dead log, which is left as it was (the evidence).
    """
    from store._runtime_log import _MUTATION, _record

    state = tmp_path / "state"
    SessionCore.create(state, "s1")
    SessionCore.create(state, "s2")
    wal = state / WAL_DIR
    wal.mkdir(parents=True)
    body = b"history/../../../outside.json\nabsent 0 2\n{}\nend\n"
    dead = wal / "1234-deadbeef.0.log"
    dead.write_bytes(foreign := _record(_MUTATION, "s1", body))
    (wal / "1234-deadbeef.lock").write_bytes(b"")
    core = SessionCore.open(state, "s2")
    core.append({"id": "n1", "role": "user", "content": "s2 has nothing to do with s1"})
    core.close()
    log = RuntimeLog.open(state)
    recover_dead_runtimes(state, log)  # a shared runtime's start-up
    core = SessionCore.open(state, "s2", options=SessionOptions(log=log))
    core.append({"id": "n2", "role": "user", "content": "nor in a shared runtime"})
    core.close()
    for shared in (None, log):
        with pytest.raises(JournalFileError, match="1234-deadbeef.0.log"):
            s1 = SessionCore.open(state, "s1", options=SessionOptions(log=shared))
            s1.append({"id": "m1", "role": "user", "content": "s1 must refuse this"})
    log.close()
    assert dead.read_bytes() == foreign
    assert [n.id for n in SessionCore.open(state, "s2").nodes()] == ["n1", "n2"]
    assert not list((state / "sessions" / "s1" / "history").glob("*-m1.json"))


class _FailingWalUnlink(NoSyncFiles):
    """The next unlink under ``wal/`` fails (EIO) once ``armed`` is set."""

    def __init__(self) -> None:
        self.armed = False

    def unlink(self, path: str, *, missing_ok: bool = True) -> None:
        if self.armed and f"{os.sep}wal{os.sep}" in path:
            self.armed = False
            raise OSError(errno.EIO, "injected I/O error", path)
        super().unlink(path, missing_ok=missing_ok)


def test_a_failed_unlink_in_the_logs_close_keeps_every_lock_it_holds_for_the_process_life(
    tmp_path: Path,
) -> None:
    """Closing the log lets go of the owner lock and every session lock, whatever fails.

    ``RuntimeLog.close`` takes the owner fd and the held session locks out
    of the log, then deletes the segments (nothing live), and only then
    closes the owner fd and releases the session locks. An ``OSError`` from
    one unlink ends ``close`` there: the owner lock stays held (the owner
    looks alive to everyone for the rest of the process) and so does the
    lock of every session still held (a core not closed: an actor that
    crashed, whose ``on_stop`` skips ``close``), with nothing left to
    release them: other processes time out on those sessions until this
    process exits. (In ``open_runtime`` the exception also skips closing
    the recall index and the CPU worker.)
    """
    state = tmp_path / "state"
    files = _FailingWalUnlink()
    SessionCore.create(state, "s", options=SessionOptions(files=files))
    log = RuntimeLog.open(state, files=files)
    core = SessionCore.open(state, "s", options=SessionOptions(
        files=files, log=log))  # held to the end, never closed
    core.append({"role": "user", "content": "a"})
    core.retire_journals()  # so close() finds nothing live and deletes the log
    files.armed = True
    with pytest.raises(OSError):
        log.close()
    assert _flock_free(state / "sessions" / "s" / ".lock")
    assert _flock_free(state / WAL_DIR / f"{log.owner}.lock")


def test_release_all_at_exit_waits_on_a_session_lock_its_own_log_still_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime's exit releases its claims at once, not after a lock timeout per session.

    ``open_runtime`` called ``claims.release_all()`` before it closed the
    runtime log; it now closes the log first, as this test does. A session whose close failed (its durable retirement could
    not be flushed) stays locked by the log until the log closes;
    ``release_claim`` takes ``<sid>/.lock`` with a *new* ``SessionLock``, a
    second open file description, which the log's own flock excludes: the
    exit waits the full lock timeout (30 s) for each such session on a lock
    this process holds, then gives up (the error is suppressed) and leaves
    the claim for other runtimes to wait out its lease. The lock timeout is
    cut to 1 s here to keep the test short.
    """
    import functools

    import memory.runtime._claims as claims
    from store.lowlevel import SessionLock

    monkeypatch.setattr(claims, "SessionLock", functools.partial(SessionLock, timeout=1.0))
    state = tmp_path / "state"
    files = _FailingLogFlush()
    SessionCore.create(state, "s", options=SessionOptions(files=files))
    log = RuntimeLog.open(state, files=files)
    core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    core.append({"id": "n1", "role": "user", "content": "a"})
    ledger = claims.ClaimsLedger(str(state), files, writer_timeout=60.0, margin=5.0)
    assert claims.SessionClaims(core, files).claim_batch(
        ["n1"], ledger.instance_id, CLOCK, ledger.lease)
    ledger.taken("s")
    files.armed = True
    with pytest.raises(OSError):
        core.close()  # the durable retirement fails: the log keeps s locked
    log.close()  # as open_runtime does on exit, before the claims
    started = time.monotonic()
    ledger.release_all()
    waited = time.monotonic() - started
    holder = claims.ClaimFile(str(state / "sessions" / "s"), files).holder("another", CLOCK)
    assert holder is None and waited < 0.5, (holder, waited)


def test_shared_and_session_journal_owners_killed_in_turn_keep_every_ack_and_agent_write(
    tmp_path: Path,
) -> None:
    """Held (mixed deployment): on one state directory, real processes take turns and are
    each SIGKILLed mid-stream: a shared runtime (records live in its log), then a
    session-journal process (records live in each ``.journal``), three times over; after
    each kill the reference agent merges a key, unlocked, into a node the killed process
    had just marked, and moves a head. Each next owner recovers what the last one left
    (the dead log, or the journals) before writing, so no acknowledged append or marker
    is lost and no agent write is reverted."""
    from memory.simulate._outside import agent_merge, agent_write

    state = tmp_path / "state"
    sessions = SESSIONS[:3]
    _sessions_with_six_turns(state, sessions)
    seen: list[list[str]] = []
    agent: list[tuple[str, str, str]] = []
    metas: dict[str, bytes] = {}
    for round_number, mode in enumerate(["shared", "session"] * 3):
        acked = _kill_shared_owner(state, sessions, acks=45, mode=mode,
                                   prefix=f"r{round_number}x")
        seen.extend(acked)
        marked = [(sid, rest[0]) for kind, sid, *rest in acked if kind == "mark"]
        for sid, node in {sid: (sid, node) for sid, node in marked}.values():
            key = f"agent_{round_number}"
            agent_merge(str(_node_file(state, sid, node)), {key: round_number})
            agent.append((sid, node, key))
            meta_path = state / "sessions" / sid / "meta.json"
            meta = json.loads(meta_path.read_bytes())
            meta["title"] = f"agent {round_number}"
            agent_write(str(meta_path), meta)
            metas[sid] = meta_path.read_bytes()
    _sweep(state)
    cores = {s: SessionCore.open(state, s) for s in sessions}
    for kind, s, *rest in seen:
        if kind == "append":
            assert rest[0] in {n.id for n in cores[s].nodes()}, (s, rest)
        elif kind == "mark":
            assert cores[s].node(rest[0]).metadata.get(MARK), (s, rest)
    for s, node, key in agent:
        assert key in cores[s].node(node).metadata, (s, node, key)
    for core in cores.values():
        assert core.problems == []
        core.close()
    assert _segments(state) == []


class _FullDisk(NoSyncFiles):
    """While ``full``, an append to the log writes half its bytes, then fails with ENOSPC."""

    def __init__(self) -> None:
        self.full = False

    def append_to(self, fd: int, path: str, data: bytes) -> None:
        if self.full:
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        super().append_to(fd, path, data)


def full_disk_main(state: str) -> None:
    """A full disk for 100 mutations under a limit of 64 descriptors, then a healthy one."""
    import resource

    files = _FullDisk()
    SessionCore.create(state, "s", options=SessionOptions(files=files))
    log = RuntimeLog.open(state, files=files)
    core = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
    core.append({"role": "user", "content": "before the disk filled"})
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    files.full = True
    for _ in range(100):
        try:
            core.append({"role": "user", "content": "refused: the disk is full"})
        except OSError:
            pass
    print("open segments during the outage:", len(_segments(Path(state))), flush=True)
    files.full = False
    core.append({"id": "after", "role": "user", "content": "the disk has room again"})
    print("recovered", flush=True)


def test_a_full_disk_opens_one_segment_per_failed_mutation_until_descriptors_run_out(
    tmp_path: Path,
) -> None:
    """A disk-full outage must cost the runtime nothing once it ends.

    Every failed append seals its segment (nothing after a torn record), so
    the next attempt creates a new segment, and keeps it open: they are
    deleted only after the next *successful* flush. A runtime that keeps
    receiving turns while the disk is full opens one file descriptor per
    failed mutation; at the process's limit the segment creation itself
    fails with EMFILE after ``O_EXCL`` created the file, which wedges the
    log (the ``_next_index`` defect above), so even once the disk has room
    again no mutation succeeds. Run in a real process with a 64-descriptor
    limit.
    """
    state = tmp_path / "state"
    program = ("import sys; from tests.store.test_runtime_log_attack import full_disk_main; "
               "full_disk_main(sys.argv[1])")
    done = subprocess.run([sys.executable, "-c", program, str(state)], check=False, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert "recovered" in done.stdout, done.stdout + done.stderr[-600:]
    assert len(_segments(state)) <= 3, done.stdout


FORKING_OWNER = ("import sys; from tests.store.test_runtime_log_attack import forking_main; "
                 "forking_main(sys.argv[1])")


def forking_main(state: str) -> None:
    """A shared runtime that holds ``s`` and forks a child (as an embedding agent's worker pool may)."""
    log = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=log))
    core.append({"id": "n1", "role": "user", "content": "acknowledged before the kill"})
    child = os.fork()
    if child == 0:  # the child does nothing with the store; it just lives on
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
    threading.Event().wait()


def test_a_child_forked_by_a_killed_runtime_keeps_its_sessions_and_its_log_locked(
    tmp_path: Path,
) -> None:
    """A process that dies lets go of every session it held (``store/_runtime_log.py``: the
    kernel releases the lock when the process dies, SIGKILL included).

    Not when it forked: ``flock`` locks belong to the open file description,
    which a forked child shares (``O_CLOEXEC`` only acts on ``exec``). A
    shared runtime holds every active session's lock and its owner lock for
    its whole life, so a child forked at any moment (an embedding agent's
    ``multiprocessing`` pool: fork is the default start method on Linux
    before Python 3.14) keeps all of them after the runtime is killed:
    every other process times out on those sessions, and the dead
    runtime's records are not recovered (the owner looks alive), for as
    long as the child lives. With a session journal the lock is held only
    during a mutation. (SQLite's POSIX locks are per process and not
    inherited; closing the lock descriptors in the child with
    ``os.register_at_fork(after_in_child=...)`` would do here.)
    """
    state = tmp_path / "state"
    SessionCore.create(state, "s")
    owner = subprocess.Popen([sys.executable, "-c", FORKING_OWNER, str(state)], cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    child = int(owner.stdout.readline())
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    try:
        core = SessionCore.open(state, "s", options=SessionOptions(lock_timeout=1.0))
        assert "n1" in [n.id for n in core.nodes()]
        core.close()
    finally:
        os.kill(child, signal.SIGKILL)


# -- lesser leftovers -----------------------------------------------------------------------------


def test_a_dead_log_with_nothing_live_is_never_deleted_by_session_journal_processes(
    tmp_path: Path,
) -> None:
    """Low severity. A dead log whose every record is retired is garbage and should go.

    It is left when its owner died inside ``close`` after its last
    retirement, or a recoverer died between writing its retirement segment
    and deleting the dead log (both seen in the crash-at-every-step runs).
    Only ``dead_sessions`` (a shared runtime's startup sweep) deletes it;
    ``dead_live_records``, which every session-journal lock-take runs,
    skips owners with nothing live without deleting them. In a deployment
    of session-journal processes the files stay for ever and are listed,
    probed (open + flock) and stat'ed at every mutation of every session.
    """
    state = _dead_with_live_records(tmp_path)
    SessionCore.open(state, "s").close()  # recovers and deletes: the ordinary path
    assert _segments(state) == []
    # the same, with the recoverer killed right after its retirement segment
    state = _dead_with_live_records(tmp_path)
    steps = FaultyFiles()
    SessionCore.open(state, "s", options=SessionOptions(files=steps)).close()
    rename = next(i for i, (step, path) in enumerate(steps.steps)
                  if step == "rename" and path.endswith(".log"))
    state = _dead_with_live_records(tmp_path)
    with pytest.raises(SimulatedCrash):
        SessionCore.open(state, "s", options=SessionOptions(files=FaultyFiles(crash_at=rename + 1)))
    for i in range(3):
        core = SessionCore.open(state, "s")
        core.append({"id": f"later{i}", "role": "user", "content": "more"})
        core.close()
    assert _segments(state) == [], _segments(state)


def test_the_segment_cache_keeps_every_deleted_segment_for_the_process_life(
    tmp_path: Path,
) -> None:
    """Low severity. ``_read_segment`` caches each segment's decoded records (every file's
    full bytes) by path in the module-level ``_CACHE``, which nothing evicts: every
    dead log a long-lived process recovers, and every own segment it re-read after a
    failed write, stays in memory after the file is deleted."""
    from store import _runtime_log

    state = _six_turns(tmp_path)
    log = RuntimeLog.open(state)
    core = SessionCore.open(state, "s", options=SessionOptions(log=log))
    core.append({"id": "big", "role": "user", "content": "x" * 200_000})
    log.abandon()
    paths = [str(state / WAL_DIR / name) for name in _segments(state)]
    SessionCore.open(state, "s").close()
    assert _segments(state) == []
    assert not [p for p in paths if p in _runtime_log._CACHE]


def _two_sessions(tmp_path: Path) -> Path:
    state = tmp_path / f"run{next(_runs)}"
    for sid in ("s", "t"):
        core = SessionCore.create(state, sid)
        for i, node_id in enumerate(TURNS):
            core.append({"id": node_id, "role": ["user", "assistant"][i % 2], "content": f"t{i}"})
        core.close()
    return state


def _interleaved_owner(state: Path, files: DurableFiles, acked: list[str]) -> None:
    """Two sessions interleaved in one log of small segments: rotation and deletion mid-run."""
    log: RuntimeLog | None = None
    try:
        log = RuntimeLog.open(state, files=files, segment_bytes=700)
        s = SessionCore.open(state, "s", options=SessionOptions(files=files, log=log))
        t = SessionCore.open(state, "t", options=SessionOptions(files=files, log=log))
        s.append({"id": "s6", "role": "user", "content": "s new", "predecessor": "a5"})
        acked.append("s6")
        t.append({"id": "t6", "role": "user", "content": "t new", "predecessor": "a5"})
        acked.append("t6")
        s.merge_node_metadata_batch({"u0": {MARK: "w-s"}})
        acked.append("s-mark")
        s.retire_journals()
        t.append({"id": "t7", "role": "user", "content": "t newer", "predecessor": "t6"})
        acked.append("t7")
        s.close()
        t.merge_node_metadata_batch({"a1": {MARK: "w-t"}})
        acked.append("t-mark")
        t.retire_journals()
        t.append({"id": "t8", "role": "user", "content": "t newest", "predecessor": "t7"})
        acked.append("t8")
        t.close()
        log.close()
        acked.append("closed")
    except SimulatedCrash:
        if log is not None:
            log.abandon()  # a close that died part-way has let go of the owner lock already
        raise


def test_two_sessions_in_one_log_of_small_segments_killed_at_every_step_lose_nothing(
    tmp_path: Path,
) -> None:
    """Held: with segments rotating and being deleted during the run (two sessions
    interleaved, 700-byte segments), a crash between any two steps loses no acknowledged
    operation of either session, and the startup sweep empties ``wal/``."""
    total = count_steps(lambda files: _interleaved_owner(_two_sessions(tmp_path), files, []))
    for k in range(total + 1):
        state = _two_sessions(tmp_path)
        acked: list[str] = []
        try:
            _interleaved_owner(state, FaultyFiles(crash_at=k), acked)
        except SimulatedCrash:
            pass
        _sweep(state)
        s = SessionCore.open(state, "s")
        t = SessionCore.open(state, "t")
        for node in ("s6",):
            assert (node in acked) <= (node in {n.id for n in s.nodes()}), (k, node)
        for node in ("t6", "t7", "t8"):
            assert (node in acked) <= (node in {n.id for n in t.nodes()}), (k, node)
        if "s-mark" in acked:
            assert s.node("u0").metadata.get(MARK) == "w-s", k
        if "t-mark" in acked:
            assert t.node("a1").metadata.get(MARK) == "w-t", k
        assert s.problems == [] and t.problems == []
        s.close()
        t.close()
        assert _segments(state) == [], (k, _segments(state))


class _FailingNthLogFlush(NoSyncFiles):
    """The ``n``-th ``fdatasync`` of the runtime log fails (EIO); every other one succeeds."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.flushes = 0
        self.counting = threading.Lock()

    def flush_log(self, fd: int, path: str) -> None:
        with self.counting:
            self.flushes += 1
            fail = self.flushes == self.n
        if fail:
            time.sleep(0.01)  # let followers queue behind the failing leader
            raise OSError(errno.EIO, "injected I/O error", path)
        super().flush_log(fd, path)


@pytest.mark.parametrize("failing", [3, 8, 15])
def test_a_failed_group_flush_fails_its_followers_and_every_session_carries_on(
    tmp_path: Path, failing: int
) -> None:
    """Held: four threads group-commit appends of four sessions; one shared flush fails
    (EIO). Every append whose flush it was answers an error (none is acknowledged on a
    failed flush), no thread hangs, each session's next appends succeed (replaying what
    the failed flush may have left), and after a kill every acknowledged turn is there."""
    state = tmp_path / "state"
    _sessions_with_six_turns(state, SESSIONS)
    files = _FailingNthLogFlush(failing)
    log = RuntimeLog.open(state, files=files)
    acked: dict[str, list[str]] = {sid: [] for sid in SESSIONS}
    failed: dict[str, list[str]] = {sid: [] for sid in SESSIONS}
    start = threading.Barrier(len(SESSIONS))

    def work(sid: str) -> None:
        core = SessionCore.open(state, sid, options=SessionOptions(files=files, log=log))
        start.wait()
        for i in range(8):
            node = f"{sid}-{i}"
            try:
                core.append({"id": node, "role": "user", "content": node})
            except OSError:
                failed[sid].append(node)
            else:
                acked[sid].append(node)

    threads = [threading.Thread(target=work, args=(sid,)) for sid in SESSIONS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a committer hangs"
    assert sum(len(f) for f in failed.values()) >= 1
    assert log.flushes < log.records  # the group commit shared flushes
    log.abandon()
    for sid in SESSIONS:
        core = SessionCore.open(state, sid)
        present = {n.id for n in core.nodes()}
        assert set(acked[sid]) <= present, sid
        assert acked[sid][-1] == core.head or core.head in failed[sid], sid
        assert core.problems == []
        core.close()


def test_a_recoverer_reading_a_dead_log_while_another_deletes_it_replays_retired_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay must never install a record a retirement already covers (rule 4).

    ``dead_live_records`` reads a dead owner's segments one by one, without
    ``<owner>.recovery``, while a recoverer of *another* session of the same
    owner may hold it and delete the whole log (``retire_dead``: nothing
    live is left, since this session was retired long ago). Reading the
    first segment (``M s2``), then finding the next one (``R s2``, written
    by the earlier recovery) already gone, the reader takes ``s2``'s old
    record for live and replays it. Replay only protects by ``before``
    digests, and a head move back to an earlier head restores meta.json
    byte for byte (``set_head`` does not move ``updated_at``): the stale
    record's head is installed over the later one. The schedule of the two
    processes is fixed here by starting the other recoverer between the
    reader's two segment reads, as a barrier would: with readers holding
    ``<owner>.recovery`` shared it must wait for the read to end.
    """
    import threading

    from store import _runtime_log

    state = tmp_path / "state"
    _sessions_with_six_turns(state, ["s1", "s2"])
    dead = RuntimeLog.open(state)
    s2 = SessionCore.open(state, "s2", options=SessionOptions(log=dead))
    s2.set_head("a3")  # the dead runtime's last word on s2's head
    s1 = SessionCore.open(state, "s1", options=SessionOptions(log=dead))
    s1.append({"id": "s1-new", "role": "user", "content": "keeps the dead log alive"})
    dead.abandon()
    core = SessionCore.open(state, "s2")  # recovers s2 (head a3) and retires it: R s2
    assert core.head == "a3"
    core.set_head("a5")  # a later head move, back to the head s2 had before
    core.close()

    real_read = _runtime_log._read_segment
    armed = [True]

    other = threading.Thread(target=lambda: SessionCore.open(state, "s1").close())

    def read_then_let_the_other_recoverer_run(path: str, directory: str) -> list[Any]:
        records = real_read(path, directory)
        if armed[0] and path.endswith(f"{dead.owner}.0.log"):
            armed[0] = False
            other.start()  # recovers s1: nothing live is left, so it deletes the log
            other.join(timeout=0.5)  # it may run now, if nothing stops it
        return records

    monkeypatch.setattr(_runtime_log, "_read_segment", read_then_let_the_other_recoverer_run)
    core = SessionCore.open(state, "s2")
    assert not armed[0]  # the schedule happened
    other.join(timeout=30)
    assert not other.is_alive()
    assert core.head == "a5"
    core.close()


def test_creating_a_session_that_this_runtimes_log_holds_waits_out_the_lock_timeout(
    tmp_path: Path,
) -> None:
    """Low severity. ``create`` of an existing id answers SessionExistsError at once.

    ``MemoryRuntime.sessions.create`` (memory/runtime/_runtime.py) creates
    with a session-journal ``SessionCore.create``, which takes ``<sid>/.lock``
    with its own ``SessionLock`` *before* it finds meta.json taken. When
    the same runtime's log holds that session (its actor is active), the
    runtime waits on its own lock for the full timeout (30 s by default)
    and answers ``SessionLockTimeoutError``, naming its own pid as the
    holder. Cut to 1 s here.
    """
    from store._errors import SessionExistsError

    state = tmp_path / "state"
    SessionCore.create(state, "s")
    log = RuntimeLog.open(state)
    held = SessionCore.open(state, "s", options=SessionOptions(
        log=log))  # the active session's actor
    started = time.monotonic()
    try:
        with pytest.raises(SessionExistsError):
            SessionCore.create(state, "s", options=SessionOptions(lock_timeout=1.0))
    finally:
        held.close()
        log.close()
    assert time.monotonic() - started < 0.5
