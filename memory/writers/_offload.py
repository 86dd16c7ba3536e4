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
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Literal, TypeVar

__all__ = ["CPU_WORKER_MODES", "MAX_STARTS", "CpuWorker", "CpuWorkerMode"]

CpuWorkerMode = Literal["process", "thread"]
CPU_WORKER_MODES: tuple[CpuWorkerMode, ...] = ("process", "thread")

MAX_STARTS = 4
"""Worker processes started in one runtime's life before it stays in-thread."""

_Result = TypeVar("_Result")
EventSink = Callable[..., None]


def _guarded(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """In the worker: ``(True, result)``, or ``(False, None)`` if ``fn`` raised.

    An exception is not sent back: one whose constructor does not take its
    ``args`` fails to unpickle in the parent and would break the pool; the
    caller runs ``fn`` again in its own thread to raise it faithfully.
    """
    try:
        return True, fn(*args)
    except Exception:  # noqa: BLE001 (re-raised by the caller's own run)
        return False, None


def _ready() -> int:
    return os.getpid()


PARENT_POLL = 0.2  # seconds between two looks at the runtime's pid, where no pidfd exists


def _exit_with(parent: int) -> None:
    """A worker's initializer: a daemon thread that ends the worker when ``parent`` ends."""
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


class CpuWorker:
    """One long-lived worker process for pure CPU work; see the module docstring.

    ``on_event(event, **fields)`` receives the ``cpu_worker`` events.
    ``context`` is the multiprocessing context (tests plant a failing one).
    """

    def __init__(self, *, on_event: EventSink | None = None, context: Any = None,
                 max_starts: int = MAX_STARTS) -> None:
        self._on_event = on_event
        self._context = context
        self._max_starts = max_starts
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._starts = 0
        self._closed = False
        self.calls = 0  # calls that ran in the worker
        self.fallbacks = 0  # calls that ran in the caller's thread instead

    @property
    def available(self) -> bool:
        """Whether the next call may still run in a worker process."""
        return not self._closed and (self._pool is not None or self._starts < self._max_starts)

    def __call__(self, fn: Callable[..., _Result], /, *args: Any) -> _Result:
        pool = self._current()
        if pool is None:
            self.fallbacks += 1
            return fn(*args)
        try:
            future: Future[tuple[bool, Any]] = pool.submit(_guarded, fn, args)
            ran, value = future.result()
        except BrokenProcessPool as error:  # the worker died (or never came up)
            self._lost(pool, error)
            self.fallbacks += 1
            return fn(*args)
        except Exception as error:
            if self._closed:
                raise
            self._emit("fallback", error=repr(error))
            if isinstance(error, OSError):  # starting the process failed
                self._lost(pool, error)
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
        pool = self._current()
        if pool is None:
            return None
        try:
            return pool.submit(_ready).result()
        except Exception as error:  # noqa: BLE001 (a start that failed: the next call falls back)
            self._lost(pool, error)
            return None

    def close(self) -> None:
        """Stop the worker; later calls run in the caller's thread. Blocks until it exits."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _current(self) -> ProcessPoolExecutor | None:
        with self._lock:
            if self._pool is not None or self._closed:
                return self._pool
            if self._starts >= self._max_starts:
                return None
            self._starts += 1
            try:
                context = self._context if self._context is not None else _context()
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context,
                                                 initializer=_exit_with,
                                                 initargs=(os.getpid(),))
            except Exception as error:  # noqa: BLE001 (no process here: in-thread it is)
                self._emit("unavailable", error=repr(error), starts=self._starts)
                self._starts = self._max_starts
                return None
            self._emit("started", starts=self._starts)
            return self._pool

    def _lost(self, pool: ProcessPoolExecutor, error: BaseException) -> None:
        with self._lock:
            if self._pool is not pool:
                return  # another caller already replaced it
            self._pool = None
            final = self._starts >= self._max_starts
        self._emit("unavailable" if final else "lost", error=repr(error), starts=self._starts)
        with contextlib.suppress(Exception):
            pool.shutdown(wait=False, cancel_futures=True)

    def _emit(self, state: str, **fields: Any) -> None:
        if self._on_event is not None:
            with contextlib.suppress(Exception):  # an instrument never fails the work
                self._on_event("cpu_worker", state=state, **fields)
