"""Virtual time for asyncio, so timing rules are tested on both backends.

trio ships ``MockClock(autojump_threshold=0)``: when every task is blocked, the
clock jumps to the next deadline instead of sleeping. asyncio has no such
clock, so this module gives it one: an event loop whose ``time()`` is virtual
and whose selector, when nothing is ready and a timer is pending, waits only
``cushion`` real seconds for I/O (worker threads report through the loop's
self-pipe) and then jumps virtual time to that timer.

With ``cushion=0`` it behaves like trio's autojump with threshold 0: a timer
can fire while a worker thread is still running. Tests that put timeouts
around real thread work pass a small cushion, like trio's threshold.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


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
        if timeout is None:
            return self._real.select(None)
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

    def __init__(self, cushion: float = 0.0) -> None:
        self.cushion = cushion
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
