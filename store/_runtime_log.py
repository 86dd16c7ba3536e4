"""The runtime log: one write-ahead log for every session a process owns, with group commit.

The problem: a session journal (:mod:`store._journal`) makes each mutation
durable with one ``fdatasync`` of that session's journal, so a runtime that
owns a thousand sessions pays one flush per mutation per session. The
runtime log holds the records of every session the process owns; concurrent
mutations of any sessions are acknowledged by one ``fdatasync``: the first
waiter flushes for everyone whose record was written before its flush began
(leader and followers, a group commit).

**Exclusive ownership**, the rule the rest rests on. A session written
through a runtime log is held exclusively: its
:class:`~store._session.SessionCore` takes ``<sid>/.lock`` at a mutation and
keeps it until the session's next checkpoint (a burst, as SQLite's exclusive
locking mode keeps it for a connection), instead of per mutation. So every record of a session after its last retirement in a log is
that owner's, written in order while no other lock holder could write the
session: replaying them in order is what a session journal's replay is, with
the same rule for the reference agent, which takes no lock (an entry's
``before`` tells a state our records account for from someone else's write).

Layout, under ``<state>/.scriptorium/wal/``:

- ``<owner>.lock``: the owner holds an exclusive ``flock`` on it for its life,
  so whether the owner lives is a non-blocking shared ``flock`` away (the
  kernel releases it when the process dies, SIGKILL included);
- ``<owner>.recovery``: taken by whoever recovers a dead owner's records;
- ``<owner>.<n>.log``: the segments, in order of ``n``.

A record is :func:`~store._journal.frame` of ``M <sid>\\n`` and the session
journal's entries (a mutation), or of ``R <sid>\\n`` (a *retirement*: every
earlier mutation of ``sid`` in this owner's log is checkpointed, its files
synced).

The rules:

1. **Commit**: the mutation's record is appended and flushed (shared), then
   the caller installs its files unsynced and acknowledges.
2. **Checkpoint** of a session: its outstanding files are synced, then its
   retirement is appended (made durable by the next flush). When the core
   lets go of the lock (at that checkpoint, or closing) it makes it durable
   *before* the lock is released: another owner may write the session next,
   and our older records must never be replayed over its writes.
3. A segment past :data:`SEGMENT_BYTES` is sealed and later records go to a
   new one. The oldest segment is deleted once no session has a mutation in
   it that a durable retirement does not cover. Oldest first, so a
   retirement is never deleted before a mutation it covers.
4. **Recovery**: whoever takes a session's lock (a session journal's owner
   too) first recovers that session's *live* records (after its last
   retirement) from the logs of dead owners: replays them, syncs the files,
   and adds a durable retirement in a new segment of the dead owner's. A dead
   owner with nothing live left is deleted. An owner that is alive has
   nothing live of a session whose lock someone else holds (rule 2).

Failures: a record whose write or flush failed may or may not be on disk.
A failed write is cut off the segment durably (or, if even that fails, the
segment is sealed: nothing is appended after a possibly torn record); after a
failed ``fdatasync`` the segment is sealed (nothing is trusted to a second
one). The session's owner replays the session's live records from this log before its
next mutation (:meth:`RuntimeLog.live_records`) and checkpoints them, so the
operation ends up whole or not at all, as with a session journal.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ._damage import warn_damaged
from ._durable import FILE_MODE, DurableFiles
from ._journal import JournalEntry, decode_entries, encode_entries, frame, read_frames
from ._lock import LOCK_TIMEOUT, SessionLock, wait_for_flock

__all__ = [
    "SEGMENT_BYTES",
    "WAL_DIR",
    "RuntimeLog",
    "dead_live_records",
    "dead_sessions",
    "discard_dead",
    "retire_dead",
]

WAL_DIR = os.path.join(".scriptorium", "wal")
SEGMENT_BYTES = 4 * 1024 * 1024
MAGIC = b"scriptorium-log 1 "
_MUTATION, _RETIREMENT = b"M", b"R"


def _record(kind: bytes, session: str, body: bytes = b"") -> bytes:
    return frame(MAGIC, b"%s %s\n%s" % (kind, session.encode(), body))


@dataclass
class _Segment:
    """One open segment of this owner's log and what its records still owe."""

    index: int
    path: str
    fd: int
    written: int = 0  # bytes appended
    durable: int = 0  # bytes a finished flush covered
    flushing: bool = False
    sealed: bool = False  # nothing more is appended (full, or a write or flush failed)
    failure: BaseException | None = None  # a flush failed: nothing here is trusted to another
    last_mutation: dict[str, int] = field(default_factory=dict)  # session -> end of its last M


class RuntimeLog:
    """This process's write-ahead log for the sessions it holds; thread-safe.

    Open with :meth:`open`, pass it to every :class:`~store._session.SessionCore`
    this process opens (``log=``), and :meth:`close` it after they closed.
    """

    def __init__(self, state_dir: str | os.PathLike[str], files: DurableFiles,
                 owner: str, lock_fd: int, segment_bytes: int) -> None:
        self.state_dir = os.fspath(state_dir)
        self.directory = os.path.join(self.state_dir, WAL_DIR)
        self.owner = owner
        self._files = files
        self._lock_fd: int | None = lock_fd
        self._segment_bytes = segment_bytes
        self._cond = threading.Condition()
        self._segments: list[_Segment] = []
        self._next_index = 0
        self._retirements: list[tuple[_Segment, int, str]] = []  # (segment, end, session)
        self._held: set[SessionLock] = set()  # the session locks this log's cores hold
        # Locks a core could not let go of (its checkpoint failed, or its actor
        # crashed, SessionCore.abandon): records of the session are live here, so the lock stays
        # held until the session's next core in this process takes it over.
        self._orphans: dict[str, SessionLock] = {}
        self.flushes = 0  # fdatasync calls made (the group commit's figure)
        self.records = 0
        _LOGS.add(self)

    @classmethod
    def open(cls, state_dir: str | os.PathLike[str], *, files: DurableFiles | None = None,
             segment_bytes: int = SEGMENT_BYTES) -> RuntimeLog:
        """Start a log for this process: a fresh owner id whose lock it holds until :meth:`close`.

        The lock file is locked under a temporary name and then renamed into
        place, so nobody ever sees it unlocked and takes the owner for dead.
        """
        files = files if files is not None else DurableFiles()
        directory = os.path.join(os.fspath(state_dir), WAL_DIR)
        files.make_dirs(directory)
        owner = f"{os.getpid()}-{secrets.token_hex(4)}"
        temp = os.path.join(directory, f".{owner}.lock.new")
        fd = os.open(temp, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(temp, os.path.join(directory, f"{owner}.lock"))
        except BaseException:
            os.close(fd)
            raise
        return cls(state_dir, files, owner, fd, segment_bytes)

    @property
    def files(self) -> DurableFiles:
        """The durable seam this log writes through (the sessions it holds use the same)."""
        return self._files

    # -- the sessions this process holds -------------------------------------

    def hold(self, session: str, session_dir: str, timeout: float | None) -> SessionLock:
        """Take ``session``'s lock for a core of this log: an orphan's if one is left, else a new one.

        A new lock is its own open file, so a second core of the same
        session in this process waits for the first as another process would.
        """
        with self._cond:
            lock = self._orphans.pop(session, None)
        if lock is not None:
            lock.timeout = timeout
            return lock
        lock = SessionLock(session_dir, timeout=timeout)
        lock.__enter__()
        with self._cond:
            self._held.add(lock)
        return lock

    def let_go(self, session: str, lock: SessionLock) -> bool:
        """Release ``lock`` unless records of ``session`` are still live here; True if released.

        Live records (a close that failed) keep the lock held, as an orphan
        the session's next core takes over (:meth:`hold`) and replays first;
        at the latest the log's close lets go of it.
        """
        with self._cond:
            if self._is_live(session):
                self._orphans[session] = lock
                return False
            self._held.discard(lock)
        _unlock(lock)
        return True

    def is_live(self, session: str) -> bool:
        """Whether a mutation of ``session`` here is not covered by a durable retirement."""
        with self._cond:
            return self._is_live(session)

    def _is_live(self, session: str) -> bool:
        return any(session in segment.last_mutation for segment in self._segments)

    # -- records ---------------------------------------------------------------

    @staticmethod
    def record_of(data: bytes) -> tuple[str, str] | None:
        """``(kind, session)`` of a record as :meth:`commit` or :meth:`retire` writes it, else None.

        ``kind`` is ``"M"`` (a mutation) or ``"R"`` (a retirement); for a
        fault-injecting double that must tell which session a write is for.
        """
        frames, _ = read_frames(data, (MAGIC,))
        if len(frames) != 1:
            return None
        line = frames[0][2].split(b"\n", 1)[0].decode("utf-8", "replace")
        kind, _, session = line.partition(" ")
        return kind, session

    def commit(self, session: str, entries: list[JournalEntry]) -> None:
        """Append one mutation of ``session`` and return once it is durable (shared flush)."""
        self._append(_MUTATION, session, encode_entries(entries), flush=True)

    def retire(self, session: str, *, durable: bool) -> None:
        """Record that ``session``'s files are synced; ``durable``: flushed before return."""
        with self._cond:
            if not self._is_live(session):
                return
        self._append(_RETIREMENT, session, b"", flush=durable)

    def _append(self, kind: bytes, session: str, body: bytes, *, flush: bool) -> None:
        data = _record(kind, session, body)
        with self._cond:
            if self._lock_fd is None:
                raise RuntimeError(f"the runtime log {self.owner} is closed")
            segment = self._writable()
            try:
                self._files.append_to(segment.fd, segment.path, data)
            except OSError:
                # the record may be torn: cut it off, durably, or append nothing after it
                try:
                    self._files.cut_log(segment.fd, segment.path, segment.written)
                except OSError:
                    segment.sealed = True
                raise
            except BaseException:
                segment.sealed = True
                raise
            segment.written += len(data)
            self.records += 1
            end = segment.written
            if kind == _MUTATION:
                segment.last_mutation[session] = end
            else:
                self._retirements.append((segment, end, session))
            if segment.written >= self._segment_bytes:
                segment.sealed = True
                flush = True  # a sealed segment is flushed by nobody else
        if flush:
            self._flush_through(segment, end)

    def _writable(self) -> _Segment:
        if self._segments and not self._segments[-1].sealed:
            return self._segments[-1]
        index = self._next_index
        self._next_index += 1  # before the file exists: a failed creation never reuses the name
        path = os.path.join(self.directory, f"{self.owner}.{index}.log")
        fd = self._files.create_log(path)
        segment = _Segment(index, path, fd)
        self._segments.append(segment)
        return segment

    def _flush_through(self, segment: _Segment, end: int) -> None:
        """Return once ``segment`` is durable up to ``end``: flush it, or wait for a flush that covers it.

        A flush that began before the bytes were written may have missed
        them, so a waiter whose bytes came after a running flush's target
        waits for the next one, which every waiter meanwhile shares.
        """
        with self._cond:
            while segment.durable < end:
                if segment.failure is not None:
                    raise OSError(errno.EIO, f"the runtime log could not be flushed "
                                  f"({segment.failure}); the record may be lost", segment.path)
                if segment.flushing:
                    self._cond.wait()
                    continue
                segment.flushing = True
                target = segment.written
                self._cond.release()
                failure: BaseException | None = None
                try:
                    self._files.flush_log(segment.fd, segment.path)
                except BaseException as exc:
                    failure = exc
                    raise
                finally:
                    self._cond.acquire()
                    segment.flushing = False
                    if failure is None:
                        segment.durable = max(segment.durable, target)
                        self.flushes += 1
                    else:
                        segment.failure = failure
                        segment.sealed = True
                        # its retirements can never be trusted durable; each
                        # session's next retirement covers the same records
                        self._retirements = [r for r in self._retirements if r[0] is not segment]
                    self._cond.notify_all()
            self._apply_retirements()

    def _apply_retirements(self) -> None:
        """Under the condition: settle durable retirements, then delete the oldest settled segments."""
        waiting: list[tuple[_Segment, int, str]] = []
        for segment, end, session in self._retirements:
            if segment.durable < end:
                waiting.append((segment, end, session))
                continue
            for older in self._segments:
                if older.index > segment.index:
                    break
                if older.last_mutation.get(session, end) < end or older.index < segment.index:
                    older.last_mutation.pop(session, None)
        self._retirements = waiting
        while (len(self._segments) > 1 and self._segments[0].sealed
               and not self._segments[0].last_mutation and not self._segments[0].flushing
               and not any(s is self._segments[0] for s, _, _ in self._retirements)):
            done = self._segments.pop(0)
            os.close(done.fd)
            self._files.unlink(done.path)
            _forget_cached(done.path)

    def flush(self) -> None:
        """Make everything appended so far durable (pending retirements included)."""
        with self._cond:
            pending = [(s, s.written) for s in self._segments if s.durable < s.written]
        for segment, end in pending:
            if segment.failure is None:
                self._flush_through(segment, end)

    def live_records(self, session: str) -> list[list[JournalEntry]]:
        """``session``'s mutations in this log after its last retirement, read back from disk.

        For an owner whose write failed part-way: only the disk knows which
        of its records made it.
        """
        with self._cond:  # no segment is deleted while they are read
            paths = [segment.path for segment in self._segments]
            return _live_in(_read_segments(paths, self.directory), session)

    # -- the end -----------------------------------------------------------------

    def close(self) -> None:
        """Flush, delete the log if nothing is live, and let go: owner lock first, then sessions.

        A session still live (its close failed) leaves the log behind as a
        dead owner's: the next holder of that session recovers it (rule 4).
        The owner lock goes before the session locks, so nobody takes such a
        session while this owner still looks alive.
        """
        if self._lock_fd is None:
            return
        try:
            self.flush()
        except OSError:
            pass  # what is not durable stays live and is left to recovery
        with self._cond:
            segments, self._segments = self._segments, []
            live = any(segment.last_mutation for segment in segments)
            held, self._held, self._orphans = list(self._held), set(), {}
            lock_fd, self._lock_fd = self._lock_fd, None
        try:
            for segment in segments:
                os.close(segment.fd)
            if not live:
                for segment in segments:  # oldest first, as in rule 3
                    self._files.unlink(segment.path)
                _unlink_owner_files(self.directory, self.owner)
        finally:
            os.close(lock_fd)
            _LOGS.discard(self)
            for lock in held:
                _unlock(lock)

    def abandon(self) -> None:
        """Die as a killed process does (tests): every descriptor closed, nothing flushed or deleted."""
        with self._cond:
            segments, self._segments = self._segments, []
            held, self._held, self._orphans = list(self._held), set(), {}
            lock_fd, self._lock_fd = self._lock_fd, None
        _LOGS.discard(self)
        for segment in segments:
            os.close(segment.fd)
        if lock_fd is not None:
            os.close(lock_fd)
        for lock in held:
            _unlock(lock)

    def _forget_in_child(self) -> None:
        """In a child forked from this process: close, not unlock, every descriptor it inherited.

        ``flock`` belongs to the open file, which the child shares: a child
        that lived on after this process was killed would keep its sessions
        locked and its log looking alive. Closing the child's copies leaves
        the parent's locks as they are.
        """
        fds = [segment.fd for segment in self._segments]
        fds += [lock.fd for lock in self._held if lock.fd is not None]
        if self._lock_fd is not None:
            fds.append(self._lock_fd)
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for lock in self._held:
            lock.forget()
        self._segments, self._held, self._orphans, self._lock_fd = [], set(), {}, None


# -- other owners' logs ---------------------------------------------------------------

# (kind, session, body, rel, offset): a record as read, its entries decoded
# only for the session asked about, so one damaged record is its session's
# problem alone.
Record = tuple[bytes, str, bytes, str, int]
_CACHE: dict[str, tuple[tuple[int, int, int], list[Record]]] = {}
_CACHE_LOCK = threading.Lock()
_LOGS: weakref.WeakSet[RuntimeLog] = weakref.WeakSet()


def _forget_logs_in_child() -> None:
    for log in list(_LOGS):
        log._forget_in_child()
    _LOGS.clear()


os.register_at_fork(after_in_child=_forget_logs_in_child)


def _unlock(lock: SessionLock) -> None:
    while lock.held:
        lock.__exit__(None, None, None)


def _forget_cached(path: str) -> None:
    with _CACHE_LOCK:
        _CACHE.pop(path, None)


def _read_segment(path: str, directory: str) -> list[Record]:
    """The valid records of one segment (cached while the file is unchanged); [] if it is gone."""
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            with _CACHE_LOCK:
                cached = _CACHE.get(path)
            if cached is not None and cached[0] == key:
                return cached[1]
            data = handle.read()
    except FileNotFoundError:
        _forget_cached(path)
        return []
    rel = os.path.relpath(path, os.path.dirname(os.path.dirname(directory)))
    records: list[Record] = []
    frames, end = read_frames(data, (MAGIC,))
    warn_damaged(rel, end, len(data))
    for _, offset, payload in frames:
        line_end = payload.find(b"\n")
        kind, _, name = payload[:line_end].partition(b" ")
        records.append((kind, name.decode("utf-8", "replace"), payload[line_end + 1:], rel,
                        offset))
    with _CACHE_LOCK:
        _CACHE[path] = (key, records)
    return records


def _read_segments(paths: Iterable[str], directory: str) -> list[Record]:
    return [record for path in paths for record in _read_segment(path, directory)]


def _live_in(records: list[Record], session: str) -> list[list[JournalEntry]]:
    """``session``'s mutations after its last retirement, decoded (JournalFileError if not ours)."""
    live: list[Record] = []
    for record in records:
        if record[1] != session:
            continue
        if record[0] == _RETIREMENT:
            live.clear()
        else:
            live.append(record)
    return [decode_entries(body, rel, offset) for _, _, body, rel, offset in live]


@contextlib.contextmanager
def _reading(directory: str, owner: str, *, timeout: float | None = LOCK_TIMEOUT,
             shared: bool = True) -> Iterator[None]:
    """Hold ``<owner>.recovery``: shared to read a dead owner's log, exclusive to change it.

    Deletion goes oldest segment first, so a reader that listed the segments
    and then found a later one gone would take a retired record for live.
    """
    recovery = os.path.join(directory, f"{owner}.recovery")
    fd = os.open(recovery, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        wait_for_flock(fd, timeout, lambda waited, holder: OSError(
            errno.EAGAIN, f"another process (pid {holder}) has been recovering this runtime "
            f"log for {waited:.0f} s", recovery), shared=shared)
        yield
    finally:
        os.close(fd)


def _owners(directory: str) -> dict[str, list[str]]:
    """Each owner with files in ``directory`` and its segment paths in order."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    owners: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        if name.startswith("."):
            continue
        parts = name.split(".")
        if len(parts) == 2 and parts[1] in ("lock", "recovery"):
            owners.setdefault(parts[0], [])
        elif len(parts) == 3 and parts[2] == "log" and parts[1].isdigit():
            owners.setdefault(parts[0], []).append((int(parts[1]), os.path.join(directory, name)))
    return {owner: [path for _, path in sorted(found)] for owner, found in owners.items()}


def _alive(directory: str, owner: str) -> bool:
    """Whether ``owner`` holds its lock (a process that died holds none)."""
    try:
        fd = os.open(os.path.join(directory, f"{owner}.lock"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def dead_live_records(
    state_dir: str | os.PathLike[str], session: str, files: DurableFiles, *,
    exclude: str | None = None,
) -> list[tuple[str, list[list[JournalEntry]]]]:
    """Per dead owner (not ``exclude``): ``session``'s live records in its log, in order.

    One ``stat`` where no runtime log was ever used. A dead owner with
    nothing live left for any session is deleted on the way.
    """
    directory = os.path.join(os.fspath(state_dir), WAL_DIR)
    if not os.path.isdir(directory):
        return []
    found: list[tuple[str, list[list[JournalEntry]]]] = []
    for owner in _owners(directory):
        if owner == exclude or _alive(directory, owner):
            continue
        with _reading(directory, owner):
            records = _read_segments(_owners(directory).get(owner, []), directory)
        live = _live_in(records, session)
        if live:
            found.append((owner, live))
        elif not _live_sessions(records):
            retire_dead(state_dir, owner, [], files)  # deletes what is left
    return found


def _live_sessions(records: list[Record]) -> list[str]:
    """The sessions whose last record here is a mutation (no retirement after it)."""
    last: dict[str, bool] = {}
    for kind, name, *_ in records:
        last[name] = kind == _MUTATION
    return [name for name, live in last.items() if live]


def dead_sessions(state_dir: str | os.PathLike[str], files: DurableFiles, *,
                  exclude: str | None = None) -> list[str]:
    """Every session with live records in a dead owner's log (for a sweep at start).

    A dead owner with nothing live is deleted on the way.
    """
    directory = os.path.join(os.fspath(state_dir), WAL_DIR)
    sessions: dict[str, None] = {}
    for owner in _owners(directory):
        if owner == exclude or _alive(directory, owner):
            continue
        with _reading(directory, owner):
            live = _live_sessions(_read_segments(_owners(directory).get(owner, []), directory))
        sessions.update(dict.fromkeys(live))
        if not live:
            retire_dead(state_dir, owner, [], files)  # deletes what is left
    return list(sessions)


def retire_dead(state_dir: str | os.PathLike[str], owner: str, sessions: list[str],
                files: DurableFiles, *, timeout: float | None = LOCK_TIMEOUT) -> None:
    """Record durably that ``sessions`` were recovered from dead ``owner``'s log; delete it if all were.

    Under ``<owner>.recovery``, so recoverers of its other sessions take
    turns. The retirements go in a new segment: the last one may end in a
    torn record, after which nothing could be read.
    """
    directory = os.path.join(os.fspath(state_dir), WAL_DIR)
    with _reading(directory, owner, timeout=timeout, shared=False):
        paths = _owners(directory).get(owner, [])
        if sessions:
            last = int(os.path.basename(paths[-1]).split(".")[1]) if paths else -1
            path = os.path.join(directory, f"{owner}.{last + 1}.log")
            files.write_atomic(path, b"".join(_record(_RETIREMENT, s) for s in sessions))
            paths.append(path)
        if not _live_sessions(_read_segments(paths, directory)):
            for path in paths:  # oldest first: a retirement outlives what it covers
                files.unlink(path)
                _forget_cached(path)
            _unlink_owner_files(directory, owner)


def discard_dead(state_dir: str | os.PathLike[str], session: str, files: DurableFiles) -> None:
    """Retire ``session``'s live records in every dead log unreplayed: the session is gone.

    For a session deleted, or created anew under the id of a deleted one:
    a dead runtime's records of the old one must never reach the new one.
    """
    directory = os.path.join(os.fspath(state_dir), WAL_DIR)
    if not os.path.isdir(directory):
        return
    for owner in _owners(directory):
        if _alive(directory, owner):
            continue
        with _reading(directory, owner):
            records = _read_segments(_owners(directory).get(owner, []), directory)
        live = session in _live_sessions(records)
        if live:
            retire_dead(state_dir, owner, [session], files)


def _unlink_owner_files(directory: str, owner: str) -> None:
    for suffix in ("lock", "recovery"):
        try:
            os.unlink(os.path.join(directory, f"{owner}.{suffix}"))
        except FileNotFoundError:
            pass
