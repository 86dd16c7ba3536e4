"""The install journal: the commit point of a transaction, and the recovery it makes possible.

A transaction's topic files are replaced one by one, so a crash part way
would leave some new and some old. What makes the set all-or-nothing is
written here: ``.scriptorium/install.journal``, its format, the steps after
it, and the recovery that finishes or discards an install. It lives apart
from :mod:`memory.workspace._transaction` (which decides *what* to install)
because the audit (:func:`read_install_journal`) and the workspace actor
read the journal without committing anything.

Install protocol, under ``.scriptorium/write.lock`` (:func:`workspace_lock`:
``fcntl.flock``, so it holds across processes and threads; waited for at
most ``lock_timeout``):

1. finish any earlier install (recovery, below);
2. check ``workspace_revision`` equals the base, else :class:`ConcurrentUpdateError`;
3. create missing topic directories (empty directories change nothing);
4. write ``.scriptorium/install.journal`` durably (temp, fsync, rename, dir
   fsync): the path and the full new text (or ``null`` for a deletion) of
   every changed file, and of ``runtime.json`` and its floor when the
   commit counts (``update_state``: issue 23, the counters move with the
   topics or not at all). **This rename is the commit point**;
5. replace each topic file unsynced (readers never see a torn file);
6. fsync every replaced file and its directory in one ``sync_paths`` call;
7. unlink the journal durably.

Recovery (:func:`replay_journal`, by ``Transactions.recover`` at start; the
journal check also runs before every commit, in case another process died
mid-install): no journal means the crash came before the commit point, so
every topic file is old; leftover temp files are deleted (roll back). A
journal means every new text is durable, so it is replayed from the top
(steps 5-7; replaying is idempotent, so a crash during recovery is
recovered the same way) and then removed (roll forward). At any crash each
topic file is whole, old or new (renames are atomic); once recovery ran,
the set is all-old or all-new.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import orjson

from memory._errors import (
    EditRejectedError,
    InstallJournalCorruptError,
    WorkspaceLockTimeoutError,
)
from memory.workspace._runtime_state import RUNTIME_FILES, is_record_path
from memory.workspace._topic_facts import check_topic_path
from store import LOCK_TIMEOUT, DurableFiles, UnsafeLinkError
from store.lowlevel import FILE_MODE, TEMP_SUFFIX, wait_for_flock, walk_files

__all__ = [
    "JOURNAL", "LOCK", "decode_journal", "encode_journal", "install_changes",
    "read_install_journal", "replay_journal", "workspace_lock",
]

JOURNAL = ".scriptorium/install.journal"
LOCK = ".scriptorium/write.lock"
# Temp files of the private files written only under LOCK: a crashed writer's are
# swept under it (a 242 KB runtime.json temp stayed behind before, issue 23).
_LOCKED_TEMPS = (".install.journal.", ".runtime.json.", ".runtime-floor.json.",
                 ".session-end.json.", ".quarantine.jsonl.")


@contextmanager
def workspace_lock(
    memory_dir: str, files: DurableFiles, *, timeout: float | None = LOCK_TIMEOUT,
) -> Iterator[None]:
    """``.scriptorium/write.lock``: every read-modify-write of the workspace, across processes.

    A stuck holder (a stopped process, a debugger) must not hang every write
    behind it: the lock is waited for at most ``timeout`` seconds (None:
    forever), by the session lock's poll (:func:`store.lowlevel.wait_for_flock`, on
    the event loop's clock from a worker thread), then
    :class:`~memory._errors.WorkspaceLockTimeoutError` names the lock file and,
    when ``/proc/locks`` tells, the holder's pid. Nothing was changed then.
    """
    # The lock file carries no data, so opening it read-only is enough for
    # flock and nothing but DurableFiles ever opens a file for writing.
    files.make_dirs(os.path.join(memory_dir, ".scriptorium"))
    path = os.path.join(memory_dir, LOCK)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        wait_for_flock(fd, timeout,
                       lambda waited, holder: WorkspaceLockTimeoutError(path, waited, holder))
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def replay_journal(memory_dir: str, files: DurableFiles, *, sweep: bool) -> bool:
    """Recovery, under the lock: True if a journal was there and is now replayed.

    ``sweep``: first delete the temp files a crashed install left behind.
    """
    if sweep:
        _remove_temp_files(memory_dir, files)
    try:
        with open(os.path.join(memory_dir, JOURNAL), "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return False
    install_changes(memory_dir, files, decode_journal(raw))
    return True


def _remove_temp_files(memory_dir: str, files: DurableFiles) -> None:
    try:
        found = walk_files(os.path.join(memory_dir, "topics"))
    except UnsafeLinkError:
        found = []  # a link loop: every commit reports it; recovery must not stop the start
    for relative, _ in found:
        if relative.endswith(TEMP_SUFFIX):
            files.unlink(os.path.join(memory_dir, "topics", relative))
    private = os.path.join(memory_dir, ".scriptorium")
    if os.path.isdir(private):
        for name in os.listdir(private):
            if name.startswith(_LOCKED_TEMPS) and name.endswith(TEMP_SUFFIX):
                files.unlink(os.path.join(private, name))


def install_changes(
    memory_dir: str, files: DurableFiles, changes: list[tuple[str, str | None]],
) -> None:
    """Steps 5-7: replace, sync once, retire the journal. Idempotent."""
    written: list[str] = []
    for path, text in changes:
        target = os.path.join(memory_dir, path)
        if text is None:
            files.unlink(target)
            continue
        files.make_dirs(os.path.dirname(target))
        files.replace_unsynced(target, text.encode("utf-8"))
        written.append(target)
    if written:
        files.sync_paths(written)
    files.unlink(os.path.join(memory_dir, JOURNAL))


def read_install_journal(memory_dir: str) -> list[str] | None:
    """The topic files of an interrupted install (its journal's paths), or None if there is none.

    A journal left in ``.scriptorium/`` means a crash (a full disk, a kill)
    came after the commit point: every new text is durable in it, some
    topic files are new and some still old until the next recovery replays
    it. Raises :class:`InstallJournalCorruptError` if it cannot be read.
    """
    try:
        with open(os.path.join(memory_dir, JOURNAL), "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    return [path for path, _ in decode_journal(raw)]


def encode_journal(changes: list[tuple[str, str | None]]) -> bytes:
    return orjson.dumps({"version": 1, "files": [[path, text] for path, text in changes]})


def decode_journal(raw: bytes) -> list[tuple[str, str | None]]:
    try:
        document = orjson.loads(raw)
        if not isinstance(document, dict) or document.get("version") != 1:
            raise ValueError("unknown journal version")
        changes: list[tuple[str, str | None]] = []
        for path, text in document["files"]:
            if not isinstance(path, str) or not (text is None or isinstance(text, str)):
                raise ValueError("malformed entry")
            if path not in RUNTIME_FILES and not is_record_path(path):
                check_topic_path(path)
            changes.append((path, text))
    except (ValueError, KeyError, TypeError, EditRejectedError) as error:
        raise InstallJournalCorruptError(JOURNAL, str(error)) from error
    return changes