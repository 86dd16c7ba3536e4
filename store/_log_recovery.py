"""Dead owners' runtime logs: finding them, reading them in turn, retiring what was recovered.

Rule 4 of :mod:`store._runtime_log`: whoever takes a session's lock first
recovers that session's live records from the logs of owners that died
(SIGKILL included: an owner lives exactly as long as its ``flock`` on
``<owner>.lock``). The session's owner replays them
(:class:`~store._session_journal.LoggedJournal`); this module finds them,
reads them under ``<owner>.recovery`` so recoverers of one dead log take
turns, writes the retirements that say they were recovered, and deletes a
dead log once nothing in it is live.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator

from ._durable import FILE_MODE, DurableFiles
from ._journal import JournalEntry
from ._lock import LOCK_TIMEOUT, wait_for_flock
from ._log_records import (
    RETIREMENT,
    WAL_DIR,
    forget_cached,
    live_in,
    live_sessions,
    owners,
    read_segments,
    record,
    unlink_owner_files,
)

__all__ = [
    "dead_live_records",
    "dead_sessions",
    "discard_dead",
    "retire_dead",
]


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
    for owner in owners(directory):
        if owner == exclude or _alive(directory, owner):
            continue
        with _reading(directory, owner):
            records = read_segments(owners(directory).get(owner, []), directory)
        live = live_in(records, session)
        if live:
            found.append((owner, live))
        elif not live_sessions(records):
            retire_dead(state_dir, owner, [], files)  # deletes what is left
    return found


def dead_sessions(state_dir: str | os.PathLike[str], files: DurableFiles, *,
                  exclude: str | None = None) -> list[str]:
    """Every session with live records in a dead owner's log (for a sweep at start).

    A dead owner with nothing live is deleted on the way.
    """
    directory = os.path.join(os.fspath(state_dir), WAL_DIR)
    sessions: dict[str, None] = {}
    for owner in owners(directory):
        if owner == exclude or _alive(directory, owner):
            continue
        with _reading(directory, owner):
            live = live_sessions(read_segments(owners(directory).get(owner, []), directory))
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
        paths = owners(directory).get(owner, [])
        if sessions:
            last = int(os.path.basename(paths[-1]).split(".")[1]) if paths else -1
            path = os.path.join(directory, f"{owner}.{last + 1}.log")
            files.write_atomic(path, b"".join(record(RETIREMENT, s) for s in sessions))
            paths.append(path)
        if not live_sessions(read_segments(paths, directory)):
            for path in paths:  # oldest first: a retirement outlives what it covers
                files.unlink(path)
                forget_cached(path)
            unlink_owner_files(directory, owner)


def discard_dead(state_dir: str | os.PathLike[str], session: str, files: DurableFiles) -> None:
    """Retire ``session``'s live records in every dead log unreplayed: the session is gone.

    For a session deleted, or created anew under the id of a deleted one:
    a dead runtime's records of the old one must never reach the new one.
    """
    directory = os.path.join(os.fspath(state_dir), WAL_DIR)
    if not os.path.isdir(directory):
        return
    for owner in owners(directory):
        if _alive(directory, owner):
            continue
        with _reading(directory, owner):
            records = read_segments(owners(directory).get(owner, []), directory)
        live = session in live_sessions(records)
        if live:
            retire_dead(state_dir, owner, [session], files)
