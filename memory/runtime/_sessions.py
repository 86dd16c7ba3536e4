"""Session operations of the embedded API (``rt.sessions``), each through the session's actor.

SPEC §8: appends, reads, head moves, rewinds, spawned branches, summaries
and metadata merges of one session all go through its owner
(:class:`~memory.runtime._session_actor.MemorySessionActor`), one message
each; creating a session writes its directory before any actor exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from actors import ActorRef, Asks
from memory._errors import RecallError
from memory.recall import BranchView
from memory.runtime._config import RuntimeConfig
from memory.runtime._session_state import MemorySessionMessage
from store import (
    Append,
    GetBranch,
    InsertSummary,
    ListBranches,
    MergeHeads,
    MergeMetadata,
    RewindTo,
    SessionCore,
    SessionOptions,
    SetHead,
    SpawnBranch,
)
from store.lowlevel import run_durable

__all__ = ["Sessions", "branch_view"]

R = TypeVar("R")


class Sessions:
    """Session operations, each through the session's actor (SPEC §8)."""

    def __init__(self, state_dir: str, config: RuntimeConfig,
                 session_ref: Callable[[str], ActorRef[MemorySessionMessage]],
                 ensure_open: Callable[[str], None]) -> None:
        self._state_dir = state_dir
        self._config = config
        self._ref = session_ref
        self._ensure_open = ensure_open  # RuntimeClosedError once open_runtime's block ended

    async def create(self, title: str = "", session_id: str | None = None) -> str:
        self._ensure_open("rt.sessions.create")
        options = SessionOptions(files=self._config.files, clock=self._config.clock)
        core = await run_durable(lambda: SessionCore.create(
            self._state_dir, session_id, title=title, options=options))
        return core.session

    async def _call(self, session: str, message: Asks[MemorySessionMessage, R]) -> R:
        self._ensure_open(f"rt.sessions, {type(message).__name__}")
        return await self._ref(session).call(message)

    async def append(self, session: str, message: Mapping[str, Any], *,
                     created_at: float | None = None) -> dict[str, Any]:
        """Append one turn; ``created_at``: its own time for imported history (default now)."""
        node: dict[str, Any] = await self._call(session, Append(message, created_at))
        return node

    async def get_branch(self, session: str, tip: str | None = None) -> list[dict[str, Any]]:
        branch: list[dict[str, Any]] = await self._call(session, GetBranch(tip))
        return branch

    async def list_branches(self, session: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = await self._call(session, ListBranches())
        return rows

    async def set_head(self, session: str, node_id: str) -> None:
        await self._call(session, SetHead(node_id))

    async def merge_heads(self, session: str, node_ids: Sequence[str]) -> None:
        """Name ``node_ids`` merged heads: branches a boundary writes completely (a sub-agent's)."""
        await self._call(session, MergeHeads(tuple(node_ids)))

    async def rewind_to(self, session: str, user_turn: str) -> list[str]:
        stamped: list[str] = await self._call(session, RewindTo(user_turn))
        return stamped

    async def spawn_branch(
        self, session: str, caller_node: str, source: str, prompt: str, name: str | None = None
    ) -> dict[str, Any]:
        node: dict[str, Any] = await self._call(
            session, SpawnBranch(caller_node, source, prompt, name))
        return node

    async def insert_summary(self, session: str, covers_ids: Sequence[str], text: str) -> dict[str, Any]:
        node: dict[str, Any] = await self._call(session, InsertSummary(tuple(covers_ids), text))
        return node

    async def merge_node_metadata_batch(
        self, session: str, patches: Mapping[str, Mapping[str, Any]]
    ) -> list[str]:
        changed: list[str] = await self._call(session, MergeMetadata(patches))
        return changed


async def branch_view(sessions: Sessions, session: str | None,
                      tip: str | None) -> BranchView | None:
    """What recall may show for ``session`` at ``tip``: the branch, and every live tip's turns."""
    if session is None:
        if tip is not None:
            raise RecallError(f"tip {tip!r} was given without its session; add --session")
        return None
    branch = await sessions.get_branch(session, tip)  # unknown session or tip: raises
    on = frozenset(str(m["id"]) for m in branch if m.get("id") is not None)
    head = tip if tip is not None else (str(branch[-1]["id"]) if branch else "")
    live = set(on)
    for row in await sessions.list_branches(session):
        if row["head_msg_id"] not in live:  # a tip on the asked branch adds nothing
            live.update(str(m["id"]) for m in await sessions.get_branch(
                session, row["head_msg_id"]) if m.get("id") is not None)
    return BranchView(session, head, on, frozenset(live))
