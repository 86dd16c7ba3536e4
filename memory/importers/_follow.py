"""``--follow``: keep importing an agent's logs as the agent writes them.

A :class:`Follower` actor runs one import pass, then waits for the logs to
change: with watchfiles (the ``follow`` extra) it wakes on the kernel's file
events, and at the latest after ``poll`` seconds (a pass also imports a
response whose last line was held back, and a half-written line once it is
whole); without watchfiles it polls every ``poll`` seconds. The follower is
the child of a supervisor (:func:`follow_logs`): a pass that crashes (the
state's disk full for a moment, a session actor that gave up) restarts it
with backoff, and the restarted follower's first pass appends what the
crashed one had not (a session is marked done only after its append).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Never

import anyio

from actors import Actor, open_actor
from memory.importers._sources import ImportPass, LogImporter
from supervisors import ChildSpec, Restart, Supervisor

if TYPE_CHECKING:
    from memory.runtime import MemoryRuntime

__all__ = ["Follower", "follow_logs", "watcher_available"]


def watcher_available() -> bool:
    """True when watchfiles (the ``follow`` extra) is installed."""
    return importlib.util.find_spec("watchfiles") is not None


class Follower(Actor[Never]):
    """One import pass per change of the logs (see the module docstring)."""

    def __init__(self, rt: MemoryRuntime, importer: LogImporter, *, poll: float,
                 watch: bool, on_pass: Callable[[ImportPass], None]) -> None:
        self.rt = rt
        self.importer = importer
        self.poll = poll
        self.watch = watch and watcher_available()
        self.on_pass = on_pass
        self.passes = 0
        # The watcher waits in a worker thread that a cancellation cannot reach; this stops it.
        self._stop = anyio.Event()

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run)
            try:
                yield
            finally:
                self._stop.set()
                tg.cancel_scope.cancel()

    def inspect(self) -> object:
        return {"passes": self.passes, "watching": self.watch}

    async def _pass(self) -> None:
        report = await self.importer.run(self.rt, hold_fresh_tails=True)
        self.passes += 1
        self.on_pass(report)

    async def _run(self) -> None:
        await self._pass()
        roots = [str(p) for p in self.importer.paths if p.exists()]
        if self.watch and roots:
            from watchfiles import awatch  # the optional extra, checked above

            async for _changes in awatch(*roots, rust_timeout=max(1, int(self.poll * 1000)),
                                         yield_on_timeout=True, stop_event=self._stop,
                                         debounce=200):
                await self._pass()
        while True:  # polling: no watcher, or nothing to watch yet
            await anyio.sleep(self.poll)
            await self._pass()


async def follow_logs(rt: MemoryRuntime, importer: LogImporter, *, poll: float = 2.0,
                      watch: bool = True,
                      on_pass: Callable[[ImportPass], None] = lambda _: None) -> None:
    """Follow ``importer``'s logs under a supervisor until cancelled."""
    def start() -> Follower:
        return Follower(rt, importer, poll=poll, watch=watch, on_pass=on_pass)

    supervisor = Supervisor([ChildSpec("follower", start, Restart.PERMANENT)])
    async with open_actor(supervisor, name="import-follow"):
        await anyio.sleep_forever()
