"""Virtual time for asyncio, so timing rules are tested on both backends.

trio ships ``MockClock(autojump_threshold=0)``: when every task is blocked, the
clock jumps to the next deadline instead of sleeping. asyncio has no such
clock, so this module gives it one: an event loop whose ``time()`` is virtual
and whose selector, when nothing is ready and a timer is pending, waits only
``cushion`` real seconds for I/O (worker threads report through the loop's
self-pipe) and then jumps virtual time to that timer.

With ``cushion=0`` it behaves like trio's autojump with threshold 0: a timer
can fire while a worker thread is still running. That is what a test of a
timer firing *during* thread work wants; a test that puts timeouts around
real thread work (disk writes, a second runtime's hops) wants the opposite.
A cushion (trio's threshold) only makes the jump unlikely: a thread hop on
a loaded machine outlasts any fixed window. :class:`WorkerThreads` is the
handshake instead: while an ``anyio.to_thread`` call is doing real work the
clock does not jump at all, and it jumps again as soon as the thread hands
its result back (or waits on the loop through ``anyio.from_thread.run``, as
the session lock's poll does). Virtual time then sees disk work as taking no
time, on both backends.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from anyio.lowlevel import RunVar


class _AutojumpSelector(selectors.BaseSelector):
    def __init__(self, loop: VirtualTimeEventLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or (timeout > 0 and self._loop.threads.busy):
            return self._real.select(None)  # a thread's result wakes the loop (self-pipe)
        ready = self._real.select(min(timeout, self._loop.cushion) if timeout > 0 else 0)
        if not ready and timeout > 0:
            self._loop.advance(timeout)
        return ready

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualTimeEventLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock starts at 0 and moves only by jumps."""

    _clock_resolution: float  # set by asyncio's BaseEventLoop; typeshed does not declare it

    def __init__(self, cushion: float = 0.0, threads: WorkerThreads | None = None) -> None:
        self.cushion = cushion
        self.threads = threads or WorkerThreads()
        self._virtual_now = 0.0
        super().__init__(selector=_AutojumpSelector(self))
        # A timer is due when its time is below now + resolution. Jumps of a day
        # at a time (a far timer pending while a thread works) take virtual time
        # past 2**24 s, where a 1 ns resolution is lost in rounding: the timer due
        # now never fired and the loop spun. 1 µs holds up to ~10**10 s.
        self._clock_resolution = max(self._clock_resolution, 1e-6)

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds


class _Unlimited:
    """A limiter per event loop that never makes a thread wait (the token is taken outside)."""

    def __init__(self) -> None:
        self._var: RunVar[anyio.CapacityLimiter] = RunVar("virtual_time_unlimited")

    def get(self) -> anyio.CapacityLimiter:
        try:
            return self._var.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(math.inf)
            self._var.set(limiter)
            return limiter


_UNLIMITED = _Unlimited()


class WorkerThreads:
    """How many ``anyio.to_thread`` calls are doing real work right now.

    :meth:`install` wraps ``anyio.to_thread.run_sync`` (counted from the call
    until its result is back on the loop) and ``anyio.from_thread.run`` (a
    thread waiting on the loop does not count meanwhile). Both wrappers run
    on the loop's thread, so ``on_change`` (trio: hold or free the autojump)
    is called there.
    """

    def __init__(self) -> None:
        self.busy = 0
        self.on_change: Callable[[int], None] = lambda busy: None

    def _enter(self) -> None:
        self.busy += 1
        if self.busy == 1:
            self.on_change(self.busy)

    def _leave(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self.on_change(self.busy)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        to_thread, from_thread = anyio.to_thread.run_sync, anyio.from_thread.run

        async def run_sync(func: Callable[..., Any], *args: Any, **options: Any) -> Any:
            # A call waiting for a token of its limiter is not working: it is
            # counted from the moment it holds one (else a call queued behind
            # a thread that waits on virtual time would stop the clock).
            limiter = options.pop("limiter", None) or anyio.to_thread.current_default_thread_limiter()
            async with limiter:
                self._enter()
                try:
                    return await to_thread(func, *args, limiter=_UNLIMITED.get(), **options)
                finally:
                    self._leave()

        def run(func: Callable[..., Awaitable[Any]], *args: Any, **options: Any) -> Any:
            async def waiting_on_the_loop() -> Any:
                self._leave()
                try:
                    return await func(*args)
                finally:
                    self._enter()

            return from_thread(waiting_on_the_loop, **options)

        monkeypatch.setattr(anyio.to_thread, "run_sync", run_sync)
        monkeypatch.setattr(anyio.from_thread, "run", run)


def trio_clock(threads: WorkerThreads | None, cushion: float) -> Any:
    """trio's ``MockClock`` autojumping after ``cushion``, held while ``threads`` are busy."""
    from trio.testing import MockClock

    clock = MockClock(autojump_threshold=cushion)
    if threads is not None:
        def hold(busy: int) -> None:
            clock.autojump_threshold = math.inf if busy else cushion

        threads.on_change = hold
    return clock
