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
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

from ._links import refuse_file_link
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
        global _RENAMEAT2
        self._step("rename", final)
        if _RENAMEAT2 is None:
            raise ExchangeUnsupported(final)
        if _RENAMEAT2(_AT_FDCWD, os.fsencode(temp), _AT_FDCWD, os.fsencode(final),
                      _RENAME_EXCHANGE) != 0:
            error = ctypes.get_errno()
            if error in _NO_EXCHANGE:
                _RENAMEAT2 = None
                raise ExchangeUnsupported(final)
            raise OSError(error, os.strerror(error), final)

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
        if _RENAMEAT2 is None:
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
        global _SYNCFS
        failure = _shared_sync(device).sync(lambda: self.sync_filesystem(path))
        if failure is None:
            return True
        if isinstance(failure, OSError) and failure.errno in _NO_SYNCFS:
            _SYNCFS = None
        return False

    def sync_filesystem(self, path: str) -> None:
        """One ``syncfs`` of the filesystem holding ``path`` (Linux only; see :meth:`sync_paths`)."""
        self._flush_path("syncfs", path, self._flush_filesystem)

    def _flush_filesystem(self, fd: int, path: str) -> None:
        """Every syncfs goes through here (a test double may skip it, as :meth:`_flush`)."""
        if _SYNCFS is None:
            raise OSError(errno.ENOSYS, "syncfs is not available", path)
        if _SYNCFS(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), path)

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


class ExchangeUnsupported(OSError):
    """This platform or filesystem cannot swap two files atomically (see :meth:`DurableFiles.exchange_unsynced`)."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.ENOTSUP, "atomic exchange is not supported here", path)


def _libc(name: str) -> Any | None:
    """The C library's function ``name`` on Linux (errno kept), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    return getattr(libc, name, None)


def _find_renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    found = _libc("renameat2")
    if found is None:
        return None
    found.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                      ctypes.c_uint]
    found.restype = ctypes.c_int
    return cast("Callable[[int, bytes, int, bytes, int], int]", found)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_RENAMEAT2 = _find_renameat2()
# What renameat2 answers where the kernel, the filesystem or a sandbox cannot swap.
_NO_EXCHANGE = frozenset({errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP,
                          errno.EPERM})


class SharedFilesystemSync:
    """Concurrent ``syncfs`` requests for one filesystem, served by as few calls as is safe.

    A sync that *started* before a caller's request may have missed its
    writes, so the caller waits for it and then for the next one, which
    every caller waiting meanwhile shares (leader and followers, as a group
    commit). :meth:`sync` returns None once a sync that began after the
    request succeeded. After a failed sync it returns that failure to every
    caller, then and later: ``syncfs`` reports a writeback error once per
    filesystem, so a second one may answer 0 for data that never reached the
    disk, while each file's own ``fsync`` still reports it. The callers
    flush their own files from then on.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._started = self._completed = 0
        self._failure: OSError | None = None
        self._running = False
        self.calls = 0

    def sync(self, flush: Callable[[], None]) -> OSError | None:
        with self._cond:
            wanted = self._started + 1
            while True:
                if self._failure is not None:
                    return self._failure
                if self._completed >= wanted:
                    return None
                if self._running:
                    self._cond.wait()
                    continue
                self._running = True
                self._started += 1
                mine = self._started
                self._cond.release()
                failure: OSError | None = None
                done = False
                try:
                    flush()
                    done = True
                except OSError as exc:
                    failure = exc
                finally:  # not done and no failure: this thread dies (a crash)
                    self._cond.acquire()
                    self._running = False
                    if done:
                        self._completed = mine
                        self.calls += 1
                    elif failure is not None:
                        self._failure = failure
                    self._cond.notify_all()


def _find_syncfs() -> Callable[[int], int] | None:
    found = _libc("syncfs")
    if found is None:
        return None
    found.argtypes = [ctypes.c_int]
    found.restype = ctypes.c_int
    return cast("Callable[[int], int]", found)


# From this many files a checkpoint syncs their filesystem at once.
BULK_SYNC_FILES = 4


def _kernel_reports_syncfs_errors() -> bool:
    """Linux reports writeback errors from ``syncfs`` since 5.8; before, it answered 0."""
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


_SYNCFS = _find_syncfs() if _kernel_reports_syncfs_errors() else None
# What syncfs answers where a sandbox (seccomp, gVisor) refuses it rather than fails.
_NO_SYNCFS = frozenset({errno.ENOSYS, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP,
                        errno.EINVAL})
# Filesystems whose syncfs flushes and reports errors like their fsync; FUSE,
# network and overlay filesystems may answer 0 without flushing, so they sync
# file by file.
BULK_FILESYSTEMS = frozenset({"ext4", "xfs", "btrfs"})
_SYNCS: dict[int, SharedFilesystemSync] = {}
_FILESYSTEM_TYPES: dict[int, str | None] = {}
_SYNCS_LOCK = threading.Lock()


def _shared_sync(device: int) -> SharedFilesystemSync:
    with _SYNCS_LOCK:
        return _SYNCS.setdefault(device, SharedFilesystemSync())


def _filesystem_type(device: int) -> str | None:
    """The type of the filesystem mounted from ``device`` (``/proc/self/mountinfo``), if known."""
    with _SYNCS_LOCK:
        if device in _FILESYSTEM_TYPES:
            return _FILESYSTEM_TYPES[device]
    found: str | None = None
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 2 and fields[2] == wanted and " - " in line:
                    found = line.split(" - ", 1)[1].split()[0]
                    break
    except OSError:
        pass
    with _SYNCS_LOCK:
        _FILESYSTEM_TYPES[device] = found
    return found


def bulk_sync_device(paths: Iterable[str]) -> int | None:
    """The one device every path lies on, if one ``syncfs`` of it may stand for their fsyncs.

    None (flush each file) where there is no trusted ``syncfs``, the paths
    span several filesystems (a linked ``topics/`` on another disk), or
    their filesystem is not one of :data:`BULK_FILESYSTEMS`.
    """
    if _SYNCFS is None:
        return None
    devices = {os.stat(path).st_dev for path in paths}
    if len(devices) != 1:
        return None
    device = devices.pop()
    return device if _filesystem_type(device) in BULK_FILESYSTEMS else None


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
