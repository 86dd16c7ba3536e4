"""Timers: messages to session actors after a delay (retry backoff, claim rechecks).

A timer is a task in the runtime's timer group: it outlives the session
actor it will wake (a passivated actor activates on the message), and
leaving ``open_runtime``'s block cancels every one before the tree stops.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

from memory.runtime._session_state import ClaimRecheck, MemorySessionMessage, RetryDue
from supervisors import Backoff

__all__ = ["Timers"]


class Timers:
    """See the module docstring; ``cast`` sends a message to a session's actor."""

    def __init__(self, cast: Callable[[str, MemorySessionMessage], Awaitable[None]], *, rng: random.Random,
                 retry_backoff: Backoff, recheck_backoff: Backoff) -> None:
        self._cast = cast
        self._rng = rng
        self._retry = retry_backoff
        self._recheck = recheck_backoff
        self._group: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Timers may be set inside the block; leaving it cancels those still pending."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    def cast_later(self, session: str, message: MemorySessionMessage, delay: float) -> None:
        """Send ``message`` to ``session``'s actor after ``delay`` seconds (anyio's clock)."""

        async def later() -> None:
            await anyio.sleep(delay)
            with contextlib.suppress(Exception):
                await self._cast(session, message)

        if self._group is None:
            raise RuntimeError("the runtime's timers are not running")
        self._group.start_soon(later)

    def call_later(self, delay: float, action: Callable[[], None]) -> None:
        """Run ``action`` after ``delay`` seconds; RuntimeError when the timers are not running."""

        async def later() -> None:
            await anyio.sleep(delay)
            action()

        if self._group is None:
            raise RuntimeError("the runtime's timers are not running")
        self._group.start_soon(later)

    def retry(self, session: str, failures: int) -> None:
        """``RetryDue`` after the retry backoff for ``failures`` consecutive failures."""
        self.cast_later(session, RetryDue(), self._retry.delay(failures, self._rng))

    def recheck(self, session: str, attempt: int) -> None:
        """Another runtime holds the session's claim: ``ClaimRecheck`` after its backoff."""
        self.cast_later(session, ClaimRecheck(), self._recheck.delay(attempt, self._rng))
