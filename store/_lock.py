"""The cross-process advisory lock on ``<sid>/.lock``.

Inside one process the session actor serialises every mutation; another
process (a second agent, ``scriptorium run`` next to an embedded runtime)
has its own actor. SPEC §1, §4: a cross-process lock covers those writers.
Each mutation holds an exclusive ``flock`` on ``<sid>/.lock`` for its whole
duration, and after taking it re-checks the index fingerprint, retires
journals left by others, and only then reads what it rewrites.

``flock`` locks belong to an open file description, so two owners in one
process (two cores, as in the tests) also exclude each other. The lock file
is opened read-only (created empty, owner-only, if missing): it carries no
data, so nothing but :class:`~store._durable.DurableFiles` ever writes.

A holder that is stuck (a stopped process, a debugger, a hung NFS client)
must not hang every owner behind it: the lock is taken with ``LOCK_NB`` and
polled until ``timeout`` seconds have passed, then
:class:`~store._errors.SessionLockTimeoutError` names the session, the lock file
and, when ``/proc/locks`` tells, the holder's pid. The poll sleeps through
the event loop when it runs in an anyio worker thread (``run_durable``), so
the wait follows the loop's clock (virtual time in tests) and a cancelled
caller stops waiting; elsewhere it sleeps the thread.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import anyio
import anyio.from_thread

from ._durable import FILE_MODE
from ._errors import SessionLockTimeoutError

__all__ = ["LOCK_NAME", "LOCK_TIMEOUT", "SessionLock", "lock_holder", "wait_for_flock"]

LOCK_NAME = ".lock"
# Long enough for any real mutation of another owner (a journal flush, a
# checkpoint of many files); short enough that a stuck holder is reported.
LOCK_TIMEOUT = 30.0
_POLL_FIRST = 0.001
_POLL_MAX = 0.25  # a stuck holder is polled four times a second


def _loop_time() -> tuple[Callable[[], float], Callable[[float], None]]:
    """The clock and sleep to wait with: the event loop's from a worker thread, else the thread's."""
    try:
        anyio.from_thread.run_sync(anyio.current_time)
    except RuntimeError:  # not in an anyio worker thread (or on the loop itself)
        return time.monotonic, time.sleep

    def now() -> float:
        return anyio.from_thread.run_sync(anyio.current_time)

    def sleep(seconds: float) -> None:
        anyio.from_thread.run(anyio.sleep, seconds)

    return now, sleep


def lock_holder(fd: int) -> int | None:
    """The pid holding a ``flock`` on ``fd``'s file, from ``/proc/locks`` (None if unknown)."""
    stat = os.fstat(fd)
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; waiters carry "->" and are skipped
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            try:
                return int(fields[4])
            except ValueError:
                return None
    return None


def wait_for_flock(fd: int, timeout: float | None, on_timeout: Callable[[float, int | None], Exception],
                   *, shared: bool = False) -> None:
    """Take an exclusive (or ``shared``) ``flock`` on ``fd``, polling until ``timeout`` (None: forever).

    Raises ``on_timeout(waited, holder_pid)`` when the bound passes; see the
    module docstring for which clock the wait follows.
    """
    operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    try:
        fcntl.flock(fd, operation)
        return
    except BlockingIOError:
        pass
    now, sleep = _loop_time()
    started = now()
    delay = _POLL_FIRST
    while True:
        waited = now() - started
        if timeout is not None and waited >= timeout:
            raise on_timeout(waited, lock_holder(fd))
        sleep(delay if timeout is None else min(delay, max(timeout - waited, 0.0)))
        delay = min(delay * 2, _POLL_MAX)
        try:
            fcntl.flock(fd, operation)
            return
        except BlockingIOError:
            continue


class SessionLock:
    """Reentrant (per instance) exclusive flock on one session's ``.lock``, waited for at most ``timeout``."""

    def __init__(self, session_dir: str, *, timeout: float | None = LOCK_TIMEOUT) -> None:
        self._path = os.path.join(session_dir, LOCK_NAME)
        self._session = os.path.basename(os.path.normpath(session_dir))
        self.timeout = timeout
        self._fd: int | None = None
        self._depth = 0

    @property
    def held(self) -> bool:
        return self._depth > 0

    @property
    def fd(self) -> int | None:
        """The open lock file while held."""
        return self._fd

    def forget(self) -> None:
        """Drop the lock without unlocking (a forked child closed its copy of the file)."""
        self._fd, self._depth = None, 0

    def __enter__(self) -> Self:
        if self._depth == 0:
            fd = os.open(self._path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            try:
                wait_for_flock(fd, self.timeout, self._timed_out)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        self._depth += 1
        return self

    def _timed_out(self, waited: float, holder: int | None) -> SessionLockTimeoutError:
        return SessionLockTimeoutError(self._session, f"sessions/{self._session}/{LOCK_NAME}",
                                  waited, holder)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
