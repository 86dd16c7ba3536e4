"""IdleWatchdog: finds sessions whose conversation has stopped and asks them to finish.

SPEC §6.6: a session is idle when its ``updated_at`` is older than
``session_idle`` (30 min) and ``session-end.json[sid]`` is not that same
``updated_at``. The design document's own wish (layer 4) is that memory be
*told* when a tip stops moving instead of only polling; so session actors
report every append here (``watchdog_touch``), the watchdog keeps a
deadline per session and wakes exactly when the first one falls due. The
poll every ``watchdog_poll`` seconds (300) stays, as the safety net that
also sees sessions another process appended to.

The watchdog decides nothing itself: it casts ``CheckIdle`` to the session
actor, which re-checks against its own fresh meta inside its mailbox (the
idle check is serialised with appends, SPEC §1).

The same disk poll looks for lost markers (:mod:`memory.ledger._lost_markers`):
every session whose files changed since the previous poll (the store's
freshness fingerprint; at the first poll, every session) is asked to
``RepairMarkers``. An outside metadata merge moves no ``updated_at``, so the
idle rule alone would never look at such a session again.
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from actors import Actor, ActorError, ActorRef, Idempotent, Request, UnhandledMessageError
from memory.runtime._config import RuntimeConfig, held_by
from memory.runtime._session_state import CheckIdle, MemorySessionMessage, RepairMarkers
from memory.workspace._runtime_state import read_session_end
from store import StoreError, list_sessions
from store.lowlevel import Fingerprint, run_durable

__all__ = [
    "IdleWatchdog",
    "PollNow",
    "Touched",
    "changed_sessions",
    "idle_sessions",
    "is_idle",
    "session_fingerprints",
]


def is_idle(updated_at: float, processed: float | None, now: float, session_idle: float) -> bool:
    """SPEC §6.6, pure: old enough, and not already processed at this ``updated_at``."""
    return processed != updated_at and now - updated_at >= session_idle


def idle_sessions(
    rows: list[dict[str, Any]], processed: Mapping[str, float], now: float, session_idle: float
) -> list[tuple[str, float]]:
    """The ``(sid, updated_at)`` of every idle, unprocessed session among ``rows``."""
    found = []
    for row in rows:
        updated_at = row.get("updated_at")
        if isinstance(updated_at, (int, float)) and is_idle(
            float(updated_at), processed.get(row["id"]), now, session_idle
        ):
            found.append((row["id"], float(updated_at)))
    return found


def changed_sessions(
    fingerprints: Mapping[str, Fingerprint], seen: dict[str, Fingerprint]
) -> list[str]:
    """Pure: the sessions whose fingerprint differs from ``seen`` (which it updates)."""
    changed = []
    for session, fingerprint in fingerprints.items():
        if seen.get(session) != fingerprint:
            seen[session] = fingerprint
            changed.append(session)
    for session in set(seen) - set(fingerprints):
        del seen[session]  # gone: a session recreated under the id is new again
    return changed


def session_fingerprints(state_dir: str, sessions: list[str]) -> dict[str, Fingerprint]:
    """Blocking: each session's freshness fingerprint (``history/`` and ``meta.json`` stats)."""
    root = os.path.join(state_dir, "sessions")
    return {session: Fingerprint.of(os.path.join(root, session)) for session in sessions}


@dataclass(frozen=True, slots=True)
class Touched(Idempotent):
    """A session appended at ``updated_at`` (wall clock)."""

    session: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class PollNow(Idempotent, Request[int]):
    """Scan every session on disk now (tests, ``scriptorium run --once``)."""


# What the IdleWatchdog takes.
WatchdogMessage = Touched | PollNow


class IdleWatchdog(Actor[WatchdogMessage]):
    """See the module docstring."""

    def __init__(self, config: RuntimeConfig, state_dir: str, memory_dir: str,
                 sessions: Callable[[str], ActorRef[MemorySessionMessage]]) -> None:
        self.config = config
        self.state_dir = state_dir
        self.memory_dir = memory_dir
        self.session_ref = sessions  # a session's actor (activated by the message)
        self._deadlines: list[tuple[float, str, float]] = []  # (wall deadline, sid, updated_at)
        self._latest: dict[str, float] = {}
        self._wake = anyio.Event()
        self._fingerprints: dict[str, Fingerprint] = {}  # as of the last poll
        self.polls = 0
        self.checks = 0
        self.repairs = 0

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._timer)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    def inspect(self) -> object:
        return {"tracked": len(self._latest), "polls": self.polls, "checks": self.checks,
                "repairs": self.repairs}

    async def handle(self, message: WatchdogMessage) -> object:
        match message:
            case Touched(session, updated_at):
                self._latest[session] = updated_at
                deadline = updated_at + self.config.session_idle
                heapq.heappush(self._deadlines, (deadline, session, updated_at))
                self._wake.set()
                return None
            case PollNow():
                return await self._poll()
        raise UnhandledMessageError(self.ref.name, message)

    async def _timer(self) -> None:
        """Sleep until the next deadline or poll, whichever is first, then act."""
        config = self.config
        next_poll = anyio.current_time() + config.watchdog_poll
        while True:
            wall_now = config.clock()
            wait = next_poll - anyio.current_time()
            if self._deadlines:
                wait = min(wait, self._deadlines[0][0] - wall_now)
            self._wake = anyio.Event()
            with anyio.move_on_after(max(wait, 0.0)):
                await self._wake.wait()
                continue
            if anyio.current_time() >= next_poll:
                next_poll = anyio.current_time() + config.watchdog_poll
                await self.ref.cast(PollNow())
            await self._due(config.clock())

    async def _due(self, now: float) -> None:
        """Ask every session whose idle deadline passed (and did not move) to check itself."""
        due: list[tuple[str, float]] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, session, updated_at = heapq.heappop(self._deadlines)
            if self._latest.get(session) == updated_at:
                del self._latest[session]
                due.append((session, updated_at))
        if not due:
            return
        processed = await run_durable(read_session_end, self.memory_dir)
        for session, _ in due:
            self._check(session, processed.get(session), now)

    async def _poll(self) -> int:
        self.polls += 1
        now = self.config.clock()
        # A sharded runtime polls its own sessions only; another runtime polls the rest.
        rows = await run_durable(list_sessions, self.state_dir, None, held_by(self.config.shard))
        processed = await run_durable(read_session_end, self.memory_dir)
        found = idle_sessions(rows, processed, now, self.config.session_idle)
        for session, _ in found:
            self._check(session, processed.get(session), now)
        fingerprints = await run_durable(
            session_fingerprints, self.state_dir, [row["id"] for row in rows])
        for session in changed_sessions(fingerprints, self._fingerprints):
            self._repair(session)
        return len(found)

    def _repair(self, session: str) -> None:
        self.repairs += 1
        try:
            self.session_ref(session).cast_nowait(RepairMarkers(reload=True))
        except (ActorError, StoreError):
            self._fingerprints.pop(session, None)  # not asked: ask at the next poll

    def _check(self, session: str, processed: float | None, now: float) -> None:
        self.checks += 1
        try:
            self.session_ref(session).cast_nowait(CheckIdle(now, processed))
        except ActorError:
            pass  # a full or stopped session actor: the next poll asks again
