"""The quarantine as the runtime keeps it: parked batches in memory and in the workspace.

SPEC §7: a batch that kept failing is parked until its session changes or
an operator releases it. The entries live in the workspace's
``quarantine.jsonl`` (the workspace actor writes it) and, for the planner's
check after every append, in memory here. Session actors park batches
(:class:`~memory.runtime._session_state.ParkedBatches`); the runtime loads
and releases them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from actors import ActorRef
from memory.runtime._events import EventHook
from memory.runtime._workspace_actor import (
    QuarantineBatch,
    ReadQuarantine,
    ReleaseQuarantine,
    WorkspaceMessage,
)
from memory.workspace._quarantine import QuarantineEntry

__all__ = ["Quarantine"]


class Quarantine:
    """See the module docstring; ``outcomes`` counts each parked batch as ``quarantined``."""

    def __init__(self, workspace: Callable[[], ActorRef[WorkspaceMessage]], outcomes: Counter[str],
                 events: EventHook) -> None:
        self._workspace = workspace
        self._outcomes = outcomes
        self._events = events
        self.entries: list[QuarantineEntry] = []

    async def load(self) -> None:
        """Read the parked batches from the workspace (at start)."""
        self.entries = list(await self._workspace().call(ReadQuarantine()))

    async def park(self, entry: QuarantineEntry) -> None:
        """Park ``entry`` durably, then in memory; raises if the workspace refuses it."""
        await self._workspace().call(QuarantineBatch(entry))
        self.entries.append(entry)
        self._outcomes["quarantined"] += 1
        self._events.emit("quarantined", session=entry.session, nodes=list(entry.node_ids),
                          error=entry.error)

    async def release(self, session: str | None) -> list[QuarantineEntry]:
        """Release ``session``'s parked batches (every session's with None); the entries."""
        released: list[QuarantineEntry] = await self._workspace().call(
            ReleaseQuarantine(session))
        gone = {(e.session, e.node_ids) for e in released}
        self.entries = [e for e in self.entries if (e.session, e.node_ids) not in gone]
        return released
