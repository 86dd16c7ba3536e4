"""The owed turns of every session, read through the session actors, for ``include_owed`` recall.

Each branch's owed tail (SPEC §6.2: the records after this workspace's
newest marker, :func:`~memory.ledger.unwritten_turns`) of every session in
the store; a turn on several branches counts once. A branch the ledger
refuses (a record without an id, incomplete authority) is skipped: nothing
of it is written either, and ``memory audit`` names it. Reading every
session's branches activates its actor, so this is a cost of asking for
owed turns only (recall leaves it off by default).
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from memory._errors import LedgerError
from memory.ledger import SourceRecord, TokenCounter, records_from_branch, unwritten_turns
from store import list_sessions

__all__ = ["Branches", "owed_records"]


class Branches(Protocol):
    """The runtime's session operations this needs (``MemoryRuntime.sessions``)."""

    async def list_branches(self, session: str) -> list[dict[str, Any]]: ...

    async def get_branch(self, session: str, tip: str | None = None) -> list[dict[str, Any]]: ...


async def owed_records(state_dir: str, workspace_id: str, sessions: Branches,
                       counter: TokenCounter) -> list[SourceRecord]:
    """Every owed turn in the store, session by session, each branch root to tip."""
    rows = await anyio.to_thread.run_sync(lambda: list_sessions(state_dir, {}))
    owed: dict[tuple[str, str], SourceRecord] = {}
    for row in rows:
        sid = row["id"]
        for branch in await sessions.list_branches(sid):
            messages = await sessions.get_branch(sid, branch["head_msg_id"])
            try:
                records = records_from_branch(sid, messages, counter=counter)
            except LedgerError:
                continue
            for record in unwritten_turns(records, workspace_id):
                owed.setdefault((sid, record.message_id), record)
    return list(owed.values())
