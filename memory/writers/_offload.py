"""CpuWorker: the workspace's pure CPU work in a worker process, off the interpreter lock.

The extractive writer's extraction and a commit's normalisation are pure
CPU. In a worker thread they leave the event loop's thread, but not the
interpreter lock: while they run, every session actor, timer and marker
merge of the process waits for it, so one core is all the runtime gets. A
second process has its own lock, so on a machine with more than one core
that work and the event loop run at the same time.

Contract: ``worker(fn, *args)`` returns ``fn(*args)`` and raises what it
raises, exactly as calling it in this thread would; it blocks, so it is
called from a worker thread. ``fn`` must be a pure module-level function of
picklable arguments (it is sent by reference): it reads files at most and
writes none, so every durable write stays in this process, through
:class:`store.DurableFiles`.

Falling back: the runtime must keep writing whatever happens to the worker.
Where a process cannot be started, where one dies (a SIGKILL, the OOM
killer), or where the arguments cannot be sent, the call runs in this
thread instead and an event says so (``cpu_worker``, with ``state`` one of
``started``, ``lost``, ``fallback``, ``unavailable``). A dead worker is
replaced at the next call; after :data:`MAX_STARTS` starts that did not
last, the runtime stays in-thread. If ``fn`` raises in the worker, the call
is run again here, where it raises with its own type and traceback (the
functions are pure, so the second run is the same computation).

Cancellation: the caller's thread waits on the worker's result; a cancelled
caller abandons that thread (or, for a shielded durable step, waits), and a
result nobody reads changes nothing, since the work only computes.

A worker never outlives the runtime's process: killed with SIGKILL, that
process cannot stop it, and an orphaned worker would hold its inherited
stderr (and the forkserver) open for good. So each worker watches the
runtime's pid (a pidfd where Linux has one, else a poll) and exits with it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from memory.writers._events import (
    CpuWorkerFallback,
    CpuWorkerLost,
    CpuWorkerStarted,
    Event,
    EventListener,
)

__all__ = ["CPU_WORKER_MODES", "MAX_STARTS", "CpuWorker", "CpuWorkerMode"]

CpuWorkerMode = Literal["process", "thread"]
CPU_WORKER_MODES: tuple[CpuWorkerMode, ...] = ("process", "thread")

MAX_STARTS = 4
"""Worker processes started in one runtime's life before it stays in-thread."""

_Result = TypeVar("_Result")


def _guarded(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """In the worker: ``(True, result)``, or ``(False, None)`` if ``fn`` raised.

    An exception is not sent back: one whose constructor does not take its
    ``args`` fails to unpickle in the caller; the caller runs ``fn`` again in
    its own thread to raise it faithfully.
    """
    try:
        return True, fn(*args)
    except Exception:  # noqa: BLE001 (re-raised by the caller's own run)
        return False, None


PARENT_POLL = 0.2  # seconds between two looks at the runtime's pid, where no pidfd exists


def _exit_with(parent: int) -> None:
    """In the worker: a daemon thread that ends the worker when ``parent`` ends."""
    def watch() -> None:
        try:
            fd = os.pidfd_open(parent)
        except ProcessLookupError:
            os._exit(0)
        except (AttributeError, OSError):  # no pidfd here (an old kernel, not Linux)
            while True:
                time.sleep(PARENT_POLL)
                try:
                    os.kill(parent, 0)
                except ProcessLookupError:
                    os._exit(0)
                except PermissionError:
                    pass
        select.select([fd], [], [])  # readable once the process has exited
        os._exit(0)

    threading.Thread(target=watch, name="scriptorium-parent-watch", daemon=True).start()


def _context() -> Any:
    """A start method that never forks a parent with threads: forkserver, else spawn."""
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        # The server imports the workspace once; each worker is then a cheap fork of it.
        context.set_forkserver_preload(["memory.writers._offload", "memory.writers._extractive"])
        return context
    return multiprocessing.get_context("spawn")


def _serve(connection: Any, parent: int) -> None:
    """The worker process: answer ``(fn, args)`` with ``(ran, result)`` until the pipe closes."""
    _exit_with(parent)
    while True:
        try:
            fn, args = connection.recv()
        except (EOFError, OSError):
            return
        except Exception:  # noqa: BLE001 (a call that cannot be unpickled here: rerun there)
            connection.send((False, None))
            continue
        answer = _guarded(fn, args)
        try:
            connection.send(answer)
        except Exception:  # noqa: BLE001 (a result that cannot be sent: the caller reruns it)
            connection.send((False, None))


class _WorkerLost(Exception):
    """The worker process is gone (it died, or never came up)."""


class _Worker:
    """One worker process and the pipe to it: a call is one send and one receive.

    No helper threads: a thread waiting on a worker's result needs the
    interpreter lock once, to take it (a process pool's feeder and manager
    threads need it twice more, each wait up to a switch interval behind a
    busy event loop).
    """

    def __init__(self, context: Any) -> None:
        ours, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, os.getpid()),
                                       name="scriptorium-cpu", daemon=True)
        try:
            self.process.start()
        finally:
            theirs.close()  # the worker holds the only other end: its death is our EOF
        self.connection = ours
        self.lock = threading.Lock()  # one call at a time on the pipe

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
        with self.lock:
            try:
                self.connection.send((fn, args))  # pickled whole before a byte is written
            except (BrokenPipeError, ConnectionError, EOFError) as error:
                raise _WorkerLost(repr(error)) from error
            try:
                answer: tuple[bool, Any] = self.connection.recv()
            except (EOFError, OSError) as error:
                raise _WorkerLost(repr(error)) from error
            return answer

    def stop(self) -> None:
        self.process.kill()  # pure CPU work only: nothing to finish or flush
        self.process.join(10)
        with contextlib.suppress(OSError):
            self.connection.close()


class CpuWorker:
    """One long-lived worker process for pure CPU work; see the module docstring.

    ``on_event`` receives the ``cpu_worker`` events (``CpuWorkerStarted``,
    ``CpuWorkerLost``, ``CpuWorkerFallback``), on the calling thread.
    ``context`` is the multiprocessing context (tests plant a failing one).
    """

    def __init__(self, *, on_event: EventListener | None = None, context: Any = None,
                 max_starts: int = MAX_STARTS) -> None:
        self._on_event = on_event
        self._context = context
        self._max_starts = max_starts
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._starts = 0
        self._closed = False
        self.calls = 0  # calls that ran in the worker
        self.fallbacks = 0  # calls that ran in the caller's thread instead

    @property
    def available(self) -> bool:
        """Whether the next call may still run in a worker process."""
        return not self._closed and (self._worker is not None or self._starts < self._max_starts)

    def __call__(self, fn: Callable[..., _Result], /, *args: Any) -> _Result:
        worker = self._current()
        if worker is None:
            self.fallbacks += 1
            return fn(*args)
        try:
            ran, value = worker.call(fn, args)
        except _WorkerLost as error:  # it died (a SIGKILL, the OOM killer)
            if self._closed:
                raise
            self._lost(worker, error)
            self.fallbacks += 1
            return fn(*args)
        except Exception as error:  # noqa: BLE001 (arguments that cannot be sent)
            self._emit(CpuWorkerFallback(error=repr(error)))
            self.fallbacks += 1
            return fn(*args)
        if not ran:  # fn raised there: raise it here, with its own type
            self.fallbacks += 1
            return fn(*args)
        self.calls += 1
        result: _Result = value
        return result

    def worker_pid(self) -> int | None:
        """The worker process's pid (starting it if needed), None when calls run in-thread."""
        worker = self._current()
        return None if worker is None else int(worker.process.pid)

    def close(self) -> None:
        """Stop the worker; later calls run in the caller's thread. Blocks until it exits."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def _current(self) -> _Worker | None:
        with self._lock:
            if self._worker is not None or self._closed:
                return self._worker
            if self._starts >= self._max_starts:
                return None
            self._starts += 1
            try:
                self._worker = _Worker(self._context if self._context is not None
                                       else _context())
            except Exception as error:  # noqa: BLE001 (no process here: in-thread it is)
                final = self._starts >= self._max_starts
                self._emit(CpuWorkerLost(state="unavailable" if final else "lost",
                                         error=repr(error), starts=self._starts))
                return None
            self._emit(CpuWorkerStarted(starts=self._starts, pid=int(self._worker.process.pid)))
            return self._worker

    def _lost(self, worker: _Worker, error: BaseException) -> None:
        with self._lock:
            if self._worker is not worker:
                return  # another caller already replaced it
            self._worker = None
            final = self._starts >= self._max_starts
        self._emit(CpuWorkerLost(state="unavailable" if final else "lost", error=repr(error),
                                 starts=self._starts))
        with contextlib.suppress(Exception):
            worker.stop()

    def _emit(self, event: Event) -> None:
        if self._on_event is not None:
            with contextlib.suppress(Exception):  # an instrument never fails the work
                self._on_event(event)
