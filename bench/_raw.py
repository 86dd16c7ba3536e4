"""The bare syscalls every floor and ceiling of the benchmarks is made of.

A floor written with the package's own file seam would measure the seam
against itself; these are the plain ``os`` calls, with nothing around them
but an optional *emulated* flush latency (a sleep after every fsync and
fdatasync, applied to the measured side and the floors alike).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import time

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
HAS_SYNCFS = hasattr(_LIBC, "syncfs")  # Linux: one call flushes a whole filesystem


class RawDisk:
    """Bare file operations, each flush followed by ``latency`` s of emulated sleep."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def flush(self, fd: int, *, data_only: bool = False) -> None:
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
        if self.latency:
            time.sleep(self.latency)

    def install(self, path: str, data: bytes, *, synced: bool) -> None:
        """temp file, write (fsync if ``synced``), rename; no directory sync."""
        directory, name = os.path.split(path)
        temp = os.path.join(directory, f".{name}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            if synced:
                self.flush(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)

    def sync_dir(self, directory: str) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.flush(fd)
        finally:
            os.close(fd)

    def sync_files(self, paths: list[str]) -> None:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                self.flush(fd)
            finally:
                os.close(fd)

    def syncfs(self, path: str) -> None:
        """Flush the whole filesystem holding ``path`` (files and directories) in one call.

        The cheapest way to make many installed files durable at once, where
        it exists; on a shared disk it also waits for other processes' writes.
        """
        fd = os.open(path, os.O_RDONLY)
        try:
            if _LIBC.syncfs(fd) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, os.strerror(errno), path)
        finally:
            os.close(fd)
        if self.latency:
            time.sleep(self.latency)

    def log_append(self, log: int, data: bytes) -> None:
        os.write(log, data)
        self.flush(log, data_only=True)

    def log_truncate(self, log: int) -> None:
        os.ftruncate(log, 0)
        self.flush(log)


def walk_files(root: str) -> list[str]:
    """Every regular file under ``root`` (scandir, no sorting, no filtering)."""
    found: list[str] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                found.append(entry.path)
    return found


def walk_and_stat(root: str) -> int:
    """Stat every file under ``root`` as a directory walk finds it; returns the count."""
    count = 0
    stack = [root]
    while stack:
        directory = stack.pop()
        for entry in os.scandir(directory):
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                entry.stat(follow_symlinks=False)
                count += 1
    return count


def read_and_hash(paths: list[str]) -> bytes:
    """sha256 of every file's bytes, then of the digests: a content revision from scratch."""
    digests = []
    for path in paths:
        with open(path, "rb") as handle:
            digests.append(hashlib.sha256(handle.read()).digest())
    return hashlib.sha256(b"".join(digests)).digest()


def durable_replace(disk: RawDisk, path: str, data: bytes) -> None:
    """One durable atomic replace: temp file, write, fsync, rename, directory fsync."""
    disk.install(path, data, synced=True)
    disk.sync_dir(os.path.dirname(path) or ".")
