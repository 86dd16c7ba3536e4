"""What Linux offers a durable write that ``os`` does not: an atomic swap, one flush for many files.

:mod:`store._durable` is the seam every durable write passes through, built
from the portable steps (write, ``fsync``, ``os.replace``). Two of its
operations are faster or only possible with calls ``os`` lacks, reached
here through the C library: ``renameat2(RENAME_EXCHANGE)`` swaps two files
atomically (a journal replay that must keep the other writer's version),
and ``syncfs`` flushes a whole filesystem in one call (a checkpoint of many
files), shared by concurrent callers (:class:`SharedFilesystemSync`).

Both are found once per process and turned off for it when the kernel, the
filesystem or a sandbox refuses them; callers then take the portable way.
Nothing here writes a file: the seam calls :func:`exchange` and
:func:`syncfs` inside its own injectable steps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

__all__ = [
    "BULK_FILESYSTEMS",
    "BULK_SYNC_FILES",
    "ExchangeUnsupported",
    "SharedFilesystemSync",
    "bulk_sync_device",
    "can_exchange",
    "exchange",
    "refuse_syncfs",
    "shared_sync",
    "syncfs",
]


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


def shared_sync(device: int) -> SharedFilesystemSync:
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


def can_exchange() -> bool:
    """Whether :func:`exchange` may work here (False once it was refused)."""
    return _RENAMEAT2 is not None


def exchange(temp: str, final: str) -> None:
    """Swap ``temp`` and ``final`` atomically (both must exist); ExchangeUnsupported if we cannot."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        raise ExchangeUnsupported(final)
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(temp), _AT_FDCWD, os.fsencode(final),
                  _RENAME_EXCHANGE) != 0:
        error = ctypes.get_errno()
        if error in _NO_EXCHANGE:
            _RENAMEAT2 = None
            raise ExchangeUnsupported(final)
        raise OSError(error, os.strerror(error), final)


def syncfs(fd: int, path: str) -> None:
    """One ``syncfs`` of the filesystem holding the open ``fd`` (``path`` names it in errors)."""
    if _SYNCFS is None:
        raise OSError(errno.ENOSYS, "syncfs is not available", path)
    if _SYNCFS(fd) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error), path)


def refuse_syncfs(failure: BaseException) -> None:
    """After a failed ``syncfs``: a refusal (a sandbox filtering the call) turns it off for the process."""
    global _SYNCFS
    if isinstance(failure, OSError) and failure.errno in _NO_SYNCFS:
        _SYNCFS = None
