"""A private recall index, for a state this process cannot write.

Reading memory must not need write access: a state on a read-only mount, a
backup, or another user's state opened read-only is still searched. The
shared index (``.scriptorium/recall.sqlite``) is derived data, so when it
cannot be opened for writing (EACCES, EPERM, EROFS, or SQLite's "readonly" /
"cannot open") the index lives in memory instead, for this process only:

- it starts as a copy of the shared file when that can be read (SQLite's
  backup API over an ``immutable`` read-only open: no ``-wal``/``-shm`` file is
  made). A copy that fails or has another schema starts empty. The copy is
  then synced with the files like any index: its ``files`` table says which
  files changed since, so only those are read again;
- its sync takes ``write.lock`` when the lock file can be opened, and reads
  without it when it cannot (a process that cannot create the lock file
  cannot be the one installing a commit there).

Nothing is written to the state. Detection is by the error a write attempt
returns, never by ``os.access`` (which says yes to root on a read-only
mount's neighbour and cannot see a read-only filesystem at all).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from urllib.parse import quote

from memory.workspace import workspace_lock
from memory.workspace._install_journal import LOCK
from store import DurableFiles

__all__ = ["cannot_write", "empty_private", "private_copy", "reading_lock"]

_CANNOT_WRITE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
# SQLite's primary result codes for "not here": SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN.
_SQLITE_CANNOT_WRITE = frozenset({3, 8, 14})


def cannot_write(error: BaseException) -> bool:
    """Whether ``error`` says this process may not write there (not a full or broken disk)."""
    if isinstance(error, OSError):
        return error.errno in _CANNOT_WRITE
    if isinstance(error, sqlite3.OperationalError):
        code = getattr(error, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in _SQLITE_CANNOT_WRITE
    return False


# SQLITE_BUSY, LOCKED, NOMEM, IOERR, FULL: the disk or a neighbour, not the index, is the trouble.
_SQLITE_NOT_DAMAGE = frozenset({5, 6, 7, 10, 13})


def not_damage(error: sqlite3.DatabaseError) -> bool:
    """Whether ``error`` is a full or failing disk or a held lock rather than a damaged index.

    Such an error is raised (the caller names the file), never answered by
    deleting the index and rebuilding it on the same full disk.
    """
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:  # raised by hand (a hook): judged by SQLite's own wording
        return any(words in str(error) for words in ("locked", "disk is full", "disk I/O"))
    return code & 0xFF in _SQLITE_NOT_DAMAGE


def private_copy(path: str) -> sqlite3.Connection:
    """An in-memory database holding a copy of the index at ``path`` (empty if it cannot be read)."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        source = sqlite3.connect(f"file:{quote(path)}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error:
        return db
    try:
        source.backup(db)
    except sqlite3.Error:  # unreadable or torn: start empty, the sync fills it
        db.close()
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    finally:
        source.close()
    return db


def empty_private() -> sqlite3.Connection:
    """A new, empty in-memory database for a private index."""
    return sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)


@contextlib.contextmanager
def reading_lock(memory_dir: str, files: DurableFiles, timeout: float | None, *,
                 create: bool = True) -> Iterator[None]:
    """``write.lock`` for a private index's sync; none if the lock file cannot be made here.

    ``create=False`` (a reader that must change nothing, the inspector) takes
    the lock only where the file already exists: no writer ever made it then.
    """
    if not create and not os.path.exists(os.path.join(memory_dir, LOCK)):
        yield
        return
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(workspace_lock(memory_dir, files, timeout=timeout))
        except OSError as error:
            if not cannot_write(error):
                raise
        yield
