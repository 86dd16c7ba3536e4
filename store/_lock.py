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
"""

from __future__ import annotations

import fcntl
import os
from types import TracebackType
from typing import Self

from ._durable import FILE_MODE

__all__ = ["LOCK_NAME", "SessionLock"]

LOCK_NAME = ".lock"


class SessionLock:
    """Reentrant (per instance) exclusive flock on one session's ``.lock``."""

    def __init__(self, session_dir: str) -> None:
        self._path = os.path.join(session_dir, LOCK_NAME)
        self._fd: int | None = None
        self._depth = 0

    @property
    def held(self) -> bool:
        return self._depth > 0

    def __enter__(self) -> Self:
        if self._depth == 0:
            fd = os.open(self._path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        self._depth += 1
        return self

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
