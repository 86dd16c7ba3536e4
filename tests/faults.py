"""The fault-injecting double of the durable seam (``store._durable.DurableFiles``).

``FaultyFiles(crash_at=k)`` lets the first ``k`` primitive steps run and
raises :class:`SimulatedCrash` on step ``k + 1``: the process "dies" there,
so nothing after it runs and the disk holds exactly what a real crash at that
point would leave (for a process crash; page-cache contents survive).
``FaultyFiles(fail_at=k, error=...)`` raises an ``OSError`` instead, to test
the error paths that keep running.

``count_steps(operation)`` runs an operation on a plain counting double and
returns how many steps it takes, so a crash test can try every one.
:class:`NoSyncFiles` skips every flush (isolation tests, fast);
:class:`PowerLossLog` cuts the runtime log back to what its flushes covered.

Beside the disk: :class:`FaultyWriter`, the writer that fails the chosen way
on the chosen batches; :func:`hold_flock`, a real second process stuck
holding a lock; :func:`log_events` and :func:`first_event`, what a real
``scriptorium run --log-json`` says it did, the handshake its tests wait on.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from store._durable import DurableFiles

if TYPE_CHECKING:  # the store's tests use this module too, without memory
    from memory.workspace import WorkspaceSnapshot
    from memory.writers import Batch, WriterOutput


class SimulatedCrash(BaseException):
    """The process died here. A BaseException so no ``except Exception`` survives it."""


@dataclass
class FaultyFiles(DurableFiles):
    crash_at: int | None = None
    fail_at: int | None = None
    error: OSError = field(default_factory=lambda: OSError(errno.EIO, "injected I/O error"))
    only: frozenset[str] | None = None  # count only these step names
    steps: list[tuple[str, str]] = field(default_factory=list)

    def _step(self, step: str, path: str) -> None:
        if self.only is not None and step not in self.only:
            return
        index = len(self.steps)
        self.steps.append((step, path))
        if self.crash_at is not None and index == self.crash_at:
            raise SimulatedCrash(f"crash before {step} {path}")
        if self.fail_at is not None and index == self.fail_at:
            raise self.error


class FlushTracking(DurableFiles):
    """What no flush has covered yet: what a power loss could still take.

    Written temp files and the files installed from them stay in
    ``unflushed`` until an ``fsync`` of them or a ``syncfs`` covers them.
    ``renamed_unflushed`` lists the files installed by renaming a temp file
    no flush had covered; ``unflushed_at_truncate`` what was still unflushed
    each time a file was truncated (a journal retired); ``steps`` every step.
    """

    def __init__(self) -> None:
        self.unflushed: set[str] = set()
        self.renamed_unflushed: list[str] = []
        self.unflushed_at_truncate: list[set[str]] = []
        self.steps: list[str] = []

    def _step(self, step: str, path: str) -> None:
        self.steps.append(step)
        if step == "truncate":
            self.unflushed_at_truncate.append(set(self.unflushed))

    def _write_all(self, fd: int, temp: str, data: bytes) -> None:
        super()._write_all(fd, temp, data)
        self.unflushed.add(temp)

    def _flush(self, fd: int, path: str, *, data_only: bool = False) -> None:
        super()._flush(fd, path, data_only=data_only)
        self.unflushed.discard(path)

    def _flush_filesystem(self, fd: int, path: str) -> None:
        super()._flush_filesystem(fd, path)
        self.unflushed.clear()

    def _replace(self, temp: str, final: str) -> None:
        self._replace_tracked(temp, final)
        super()._replace(temp, final)

    def _exchange(self, temp: str, final: str) -> None:
        super()._exchange(temp, final)
        self._replace_tracked(temp, final)

    def _replace_tracked(self, temp: str, final: str) -> None:
        """A swap installs the temp file's bytes at ``final``, as a rename does."""
        if temp in self.unflushed:
            self.unflushed.discard(temp)
            self.renamed_unflushed.append(final)
            self.unflushed.add(final)


def count_steps(operation: Callable[[DurableFiles], object]) -> int:
    files = FaultyFiles()
    operation(files)
    return len(files.steps)


class NoSyncFiles(DurableFiles):
    """Every step runs except the flush itself: for tests of isolation, not durability."""

    def _flush(self, fd: int, path: str, *, data_only: bool = False) -> None:
        pass

    def _flush_filesystem(self, fd: int, path: str) -> None:
        pass


class PowerLossLog(DurableFiles):
    """Tracks each log's flushed size; :meth:`lose_unflushed` cuts the logs back to it."""

    def __init__(self) -> None:
        self.flushed: dict[str, int] = {}

    def create_log(self, path: str) -> int:
        self.flushed[path] = 0
        return super().create_log(path)

    def flush_log(self, fd: int, path: str) -> None:
        super().flush_log(fd, path)
        self.flushed[path] = os.fstat(fd).st_size

    def lose_unflushed(self) -> None:
        for path, size in self.flushed.items():
            if os.path.exists(path):
                os.truncate(path, size)


@dataclass
class RefusingFiles(DurableFiles):
    """A disk that refuses every step under ``under`` while ``error`` is set.

    ``error`` is an errno (``ENOSPC`` full, ``EROFS`` read-only, ``EACCES``
    no permission); set it, and clear it, while the runtime runs. The
    ``OSError`` raised names the path, as the kernel's does.
    """

    under: str = ""
    error: int | None = None
    refused: int = 0

    def _step(self, step: str, path: str) -> None:
        if self.error is not None and self.under in path:
            self.refused += 1
            raise OSError(self.error, os.strerror(self.error), path)


def hold_flock(lock: Path) -> subprocess.Popen[str]:
    """A real second process holding ``lock`` (flock, exclusive) until :func:`let_go`.

    The stuck holder of the lock-wait tests: a process, not a thread, because
    flock is per open file description and the wait under test polls it.
    """
    program = ("import fcntl, os, sys\n"
               f"fd = os.open({str(lock)!r}, os.O_RDONLY | os.O_CREAT, 0o600)\n"
               "fcntl.flock(fd, fcntl.LOCK_EX)\n"
               "print('held', flush=True)\n"
               "sys.stdin.readline()\n")
    holder = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def let_go(holder: subprocess.Popen[str]) -> None:
    """The holder releases its lock and exits."""
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait()



def log_events(stream: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The ``--log-json`` events in ``stream``; a line cut by a kill or a plain warning is skipped."""
    for line in stream:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def first_event(process: subprocess.Popen[str], wanted: Callable[[dict[str, Any]], bool], *,
                within: float = 60.0) -> dict[str, Any]:
    """The first event of a running ``scriptorium run --log-json`` that ``wanted`` picks.

    Read from its stderr as it comes; a guard kills the process after
    ``within`` real seconds, so a run that never says it fails the test
    instead of hanging the suite. The caller stops the process afterwards.
    """
    assert process.stderr is not None
    guard = threading.Timer(within, process.kill)
    guard.start()
    try:
        for event in log_events(process.stderr):
            if wanted(event):
                return event
    finally:
        guard.cancel()
    raise AssertionError(f"scriptorium run ended ({process.wait()}) without the event")


WriterFault = Literal["raise", "hang", "reject", "empty"]
ENDPOINT_ERROR = "model endpoint returned 500"


class FaultyWriter:
    """A model writer that fails: the extractive writer, except on the batches it is told.

    ``how`` a failing call does: ``"raise"`` (:data:`ENDPOINT_ERROR`), ``"hang"``
    (until cancelled), ``"reject"`` (an edit outside ``topics/``, which the
    transaction refuses), ``"empty"`` (no edit); None never fails. Only batches
    of ``session`` count (every session's if None); ``calls`` counts them, and
    the ones numbered in ``fail_calls`` (1-based; every one if None) fail.
    ``entered`` is set when a counted batch arrives; with ``gated`` the call
    then waits for ``gate`` first. Not a group writer: each batch on its own.
    """

    def __init__(self, how: WriterFault | None = "raise", *, session: str | None = None,
                 fail_calls: Container[int] | None = None, gated: bool = False) -> None:
        self.how = how
        self.session = session
        self.fail_calls = fail_calls
        self.calls = 0
        self.entered = anyio.Event()
        self.gate: anyio.Event | None = anyio.Event() if gated else None
        from memory.writers import ExtractiveWriter

        self.healthy = ExtractiveWriter()

    def open_gate(self) -> None:
        """Let the gated calls through (``gated=True``)."""
        assert self.gate is not None, "not a gated writer"
        self.gate.set()

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> WriterOutput:
        if self.session is not None and batch.session_id != self.session:
            return await self.healthy.write(batch, workspace)
        self.calls += 1
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.how is None or (self.fail_calls is not None and self.calls not in self.fail_calls):
            return await self.healthy.write(batch, workspace)
        if self.how == "raise":
            raise RuntimeError(ENDPOINT_ERROR)
        if self.how == "hang":
            await anyio.sleep_forever()
        if self.how == "reject":
            from memory.workspace import TopicEdit

            return [TopicEdit("notes/outside.md", "Outside topics.[^e1] ^\n")]
        return []  # "empty"
