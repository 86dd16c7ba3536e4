"""The one seam every durable write passes through.

SPEC §2 and §7: a durable write is a private temp file, ``fsync``,
``os.replace``, ``fsync`` of the directory, all inside **one** worker-thread
hop, never torn by cancellation. Everything in ``store`` and ``memory`` that
makes a byte durable calls a method of :class:`DurableFiles`; nothing else
opens a file for writing.

Why one seam: crash safety is proven by killing an operation at each of its
steps. :class:`DurableFiles` performs every step through :meth:`_step`, so a
test double (``tests/faults.py``) can stop the world at step *k* or raise an
``OSError`` there, and every crash test exercises the same code production
runs. The methods are synchronous on purpose: a caller runs a whole durable
operation (for an append, node file and meta.json together) in one hop with
:func:`run_durable`.

The Linux calls two operations rest on (an atomic exchange, one ``syncfs``
for many files) live in :mod:`store._linux`; each is still called inside
one of this seam's steps.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from ._links import refuse_file_link
from ._linux import (
    BULK_FILESYSTEMS,
    BULK_SYNC_FILES,
    ExchangeUnsupported,
    SharedFilesystemSync,
    bulk_sync_device,
    can_exchange,
    exchange,
    refuse_syncfs,
    shared_sync,
    syncfs,
)
from ._threads import run_durable

__all__ = [
    "BULK_FILESYSTEMS",
    "BULK_SYNC_FILES",
    "DIR_MODE",
    "FILE_MODE",
    "TEMP_SUFFIX",
    "DurableFiles",
    "ExchangeUnsupported",
    "SharedFilesystemSync",
    "bulk_sync_device",
    "run_durable",
]

FILE_MODE = 0o600
DIR_MODE = 0o700
# Temp files start with "." and end with TEMP_SUFFIX so that scanners of
# history/ and topics/ can skip (and recovery can delete) leftovers of a
# crash between write and rename.
TEMP_SUFFIX = ".scriptorium-tmp"

T = TypeVar("T")


class DurableFiles:
    """Atomic, durable file writes built from individually injectable steps.

    Each public method is one durable operation. Subclasses change nothing but
    :meth:`_step`, which is called before every primitive step with the
    step's name and path.
    """

    def _step(self, step: str, path: str) -> None:
        """Hook before each primitive step; the fault-injecting double overrides it."""

    # -- primitive steps -------------------------------------------------

    def _open_temp(self, final: str) -> tuple[int, str]:
        directory, name = os.path.split(final)
        temp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        self._step("open", temp)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        return fd, temp

    def _write_all(self, fd: int, temp: str, data: bytes) -> None:
        self._step("write", temp)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def _flush(self, fd: int, path: str, *, data_only: bool = False) -> None:
        """Every fsync/fdatasync goes through here (a test double may skip the flush)."""
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)

    def _fsync_file(self, fd: int, temp: str) -> None:
        self._step("fsync", temp)
        self._flush(fd, temp)

    def _replace(self, temp: str, final: str) -> None:
        self._step("rename", final)
        os.replace(temp, final)

    def _exchange(self, temp: str, final: str) -> None:
        """Swap ``temp`` and ``final`` atomically (both must exist)."""
        self._step("rename", final)
        exchange(temp, final)

    def fsync_dir(self, directory: str) -> None:
        with _naming(directory):
            self._step("fsync_dir", directory)
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                self._flush(fd, directory)
            finally:
                os.close(fd)

    def _write_temp(self, final: str, data: bytes, *, sync: bool) -> str:
        refuse_file_link(final)  # the state directory's link rule (store/_links.py)
        fd, temp = self._open_temp(final)
        try:
            with _naming(final):
                self._write_all(fd, temp, data)
                if sync:
                    self._fsync_file(fd, temp)
        except BaseException:
            os.close(fd)
            _unlink_quietly(temp)
            raise
        os.close(fd)
        return temp

    # -- durable operations ----------------------------------------------

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data``: readers see all-old or all-new, durably."""
        self.write_atomic_many([(path, data)])

    def write_atomic_many(self, files: Iterable[tuple[str, bytes]]) -> None:
        """Install several files durably: each all-old or all-new, synced before return.

        All temp files are written and synced first, then renamed in order,
        then each distinct directory is synced once. A crash leaves every
        file either old or new (not necessarily all on the same side: a
        caller that needs "all files or none" journals first). From
        :data:`BULK_SYNC_FILES` files on, as in :meth:`sync_paths`, the temp
        files are synced by one shared ``syncfs`` before the renames, and
        the renames by another: two flushes instead of one per file and
        directory (a group's archive appends, one file per session).
        """
        files = list(files)
        device = (bulk_sync_device([os.path.dirname(path) or "." for path, _ in files])
                  if len(files) >= BULK_SYNC_FILES else None)
        pending: list[tuple[str, str]] = []
        try:
            for path, data in files:
                pending.append((self._write_temp(path, data, sync=device is None), path))
            if device is not None and not self._bulk_sync(device, pending[0][0]):
                device = None
                self._sync_each(temp for temp, _ in pending)
        except BaseException:
            for temp, _ in pending:
                _unlink_quietly(temp)
            raise
        for index, (temp, path) in enumerate(pending):
            try:
                self._replace(temp, path)
            except BaseException:
                for leftover, _ in pending[index:]:
                    _unlink_quietly(leftover)
                raise
        if device is not None and self._bulk_sync(device, pending[0][1]):
            return
        for directory in dict.fromkeys(os.path.dirname(path) or "." for _, path in pending):
            self.fsync_dir(directory)

    def replace_unsynced(self, path: str, data: bytes) -> None:
        """Atomically replace ``path`` without syncing it.

        Only for data already made durable elsewhere (a journal that recovery
        replays): readers still never see a torn file, and durability comes
        from the journal until :meth:`sync_paths` has run.
        """
        temp = self._write_temp(path, data, sync=False)
        try:
            self._replace(temp, path)
        except BaseException:
            _unlink_quietly(temp)
            raise

    def replace_unsynced_if(self, path: str, data: bytes, unchanged: Callable[[], bool]) -> bool:
        """:meth:`replace_unsynced`, unless ``unchanged()`` says ``path`` moved meanwhile.

        For a merge into a file another process rewrites without any lock
        (the reference agent's node files): the temp file is written first,
        then ``unchanged`` re-reads the target right before the rename, so
        the window in which the other writer's change is lost is the rename
        alone. False (and the temp file removed): the caller merges again.
        """
        temp = self._write_temp(path, data, sync=False)
        try:
            if not unchanged():
                _unlink_quietly(temp)
                return False
            self._replace(temp, path)
        except BaseException:
            _unlink_quietly(temp)
            raise
        return True

    def exchange_unsynced(self, path: str, data: bytes) -> bytes:
        """Install ``data`` at ``path`` by swapping it with the file there; returns the file swapped out.

        For a merge into a file another process rewrites without any lock
        (the reference agent's node files): :meth:`replace_unsynced_if`
        re-reads the target before its rename, but a write landing between
        that read and the rename is lost. A swap (``renameat2`` with
        ``RENAME_EXCHANGE``) hands back whatever the other writer installed up
        to that instant, and the caller, seeing it is not what it read,
        merges onto it again: no window loses a write. Unsynced, like
        :meth:`replace_unsynced`. :class:`ExchangeUnsupported` where the
        platform or filesystem cannot swap (nothing was changed: the caller
        falls back); ``FileNotFoundError`` if ``path`` does not exist.
        """
        if not can_exchange():
            raise ExchangeUnsupported(path)
        temp = self._write_temp(path, data, sync=False)
        try:
            self._exchange(temp, path)
        except BaseException:
            _unlink_quietly(temp)
            raise
        try:  # the temp name now holds what was at path (recovery drops it after a crash)
            with open(temp, "rb") as handle:
                return handle.read()
        finally:
            _unlink_quietly(temp)

    def sync_paths(self, paths: Iterable[str]) -> None:
        """Make existing files (and their directory entries) durable, e.g. to retire a journal.

        Few files: an fsync of each, then of each directory. From
        :data:`BULK_SYNC_FILES` files on, when they all lie on one filesystem
        whose ``syncfs`` is trusted (:func:`bulk_sync_device`), one ``syncfs``
        of it instead: one call flushes them all, their renames included, and
        concurrent callers in this process share it
        (:class:`SharedFilesystemSync`). A checkpoint of 32 node files costs
        one flush instead of 33. After a failed ``syncfs`` the files are
        flushed one by one, then and from then on.
        """
        paths = list(paths)
        device = bulk_sync_device(paths) if len(paths) >= BULK_SYNC_FILES else None
        if device is not None and self._bulk_sync(device, paths[0]):
            return
        self._sync_each(paths)
        for directory in dict.fromkeys(os.path.dirname(path) or "." for path in paths):
            self.fsync_dir(directory)

    def _sync_each(self, paths: Iterable[str]) -> None:
        for path in paths:
            self._flush_path("fsync", path, self._flush)

    def _flush_path(self, step: str, path: str, flush: Callable[[int, str], None]) -> None:
        """Open ``path`` read-only and flush it (a file, or its filesystem) as step ``step``."""
        with _naming(path):
            self._step(step, path)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                flush(fd, path)
            finally:
                os.close(fd)

    def _bulk_sync(self, device: int, path: str) -> bool:
        """One shared ``syncfs`` of ``device`` (``path`` is on it); False: sync file by file.

        False once a ``syncfs`` of the device failed, whoever ran it (see
        :class:`SharedFilesystemSync`): the device is flushed file by file
        from then on, and a refusal (a sandbox filtering the call) turns the
        bulk path off for the process.
        """
        failure = shared_sync(device).sync(lambda: self.sync_filesystem(path))
        if failure is None:
            return True
        refuse_syncfs(failure)
        return False

    def sync_filesystem(self, path: str) -> None:
        """One ``syncfs`` of the filesystem holding ``path`` (Linux only; see :meth:`sync_paths`)."""
        self._flush_path("syncfs", path, self._flush_filesystem)

    def _flush_filesystem(self, fd: int, path: str) -> None:
        """Every syncfs goes through here (a test double may skip it, as :meth:`_flush`)."""
        syncfs(fd, path)

    def append_synced(self, path: str, data: bytes) -> int:
        """Append ``data`` to ``path`` and ``fdatasync`` it; returns the file's new size.

        For a log whose records carry their own length and checksum (a torn
        tail is recognised and dropped by its reader): one flush per record
        instead of a temp file, two fsyncs and a rename. ``fdatasync`` is
        enough because the data and the size are what a reader needs;
        timestamps are not. A file this call creates also gets its directory
        synced, so the new entry is durable too.
        """
        self._step("open", path)
        created = False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL
                         | os.O_CLOEXEC, FILE_MODE)
            created = True
        try:
            with _naming(path):
                self._write_all(fd, path, data)
                self._step("fsync", path)
                self._flush(fd, path, data_only=True)
                size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if created:
            self.fsync_dir(os.path.dirname(path) or ".")
        return size

    def create_log(self, path: str) -> int:
        """Create ``path`` empty for appends and make its entry durable; returns the open fd.

        For a log kept open across many records (the runtime log): the caller
        appends with :meth:`append_to` and flushes with :meth:`flush_log`.
        """
        self._step("open", path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                     FILE_MODE)
        try:
            self.fsync_dir(os.path.dirname(path) or ".")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def append_to(self, fd: int, path: str, data: bytes) -> None:
        """Append ``data`` to the open log ``fd`` (``path`` names it) without flushing."""
        with _naming(path):
            self._write_all(fd, path, data)

    def cut_log(self, fd: int, path: str, size: int) -> None:
        """Cut the open log ``fd`` back to ``size`` bytes durably (a record whose write failed)."""
        with _naming(path):
            self._step("truncate", path)
            os.ftruncate(fd, size)
            self._step("fsync", path)
            self._flush(fd, path)

    def flush_log(self, fd: int, path: str) -> None:
        """``fdatasync`` the open log ``fd``: every byte appended before the call is durable."""
        with _naming(path):
            self._step("fsync", path)
            self._flush(fd, path, data_only=True)

    def truncate(self, path: str) -> None:
        """Empty an existing file durably (``ftruncate`` to 0, then ``fsync``)."""
        self._step("truncate", path)
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            with _naming(path):
                os.ftruncate(fd, 0)
                self._step("fsync", path)
                self._flush(fd, path)
        finally:
            os.close(fd)

    def unlink(self, path: str, *, missing_ok: bool = True) -> None:
        """Remove ``path`` durably (the directory is synced)."""
        self._step("unlink", path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            if not missing_ok:
                raise
            return
        self.fsync_dir(os.path.dirname(path) or ".")

    def make_dirs(self, path: str) -> None:
        """Create ``path`` and missing parents owner-only, syncing each new entry's parent."""
        missing: list[str] = []
        current = os.path.abspath(path)
        while not os.path.isdir(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for directory in reversed(missing):
            self._step("mkdir", directory)
            try:
                os.mkdir(directory, DIR_MODE)
            except FileExistsError:
                if not os.path.isdir(directory):
                    raise
                continue
            self.fsync_dir(os.path.dirname(directory))

    def install_dir(self, staged: str, final: str) -> None:
        """Make the directory ``staged`` (its contents synced) appear at ``final`` at once, durably.

        One rename: a crash leaves all of it or none of it at ``final``. Fails
        (EEXIST or ENOTEMPTY) when ``final`` holds anything; an empty
        directory there (a half-made one a crash left) is replaced.
        """
        with _naming(final):
            self._step("rename", final)
            os.rename(staged, final)
        self.fsync_dir(os.path.dirname(final))

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` only if it does not exist yet; True if this call made it.

        Used where concurrent first users (threads or processes) must agree on
        one value: the content is written and synced under a temp name and
        then hard-linked into place, which fails if another writer won.
        """
        temp = self._write_temp(path, data, sync=True)
        try:
            self._step("link", path)
            try:
                os.link(temp, path)
            except FileExistsError:
                return False
            except OSError as exc:  # filesystems without hard links
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
                except FileExistsError:
                    return False
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
        finally:
            _unlink_quietly(temp)
        self.fsync_dir(os.path.dirname(path) or ".")
        return True


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
    """Name ``path`` in an OSError raised on a file descriptor (a full disk says which file)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = path
        raise


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
