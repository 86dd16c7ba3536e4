"""Migration and backfill as the runtime runs them (SPEC §6.7, §6.8), through its actors.

:mod:`memory.maintenance` holds both procedures over plain callables; here
they are bound to the workspace actor (runtime state, snapshots, cited
sources), the session actors (markers merged by each session's owner) and
the write cycle, so neither touches a file another actor owns.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors import ActorRef
from memory.ledger._records import MARKER_KEY
from memory.maintenance._backfill import BackfillReport, backfill
from memory.maintenance._migrate import MigrationReport, Progress, migrate
from memory.runtime._config import RuntimeConfig
from memory.runtime._events import EventHook, Migrated
from memory.runtime._sessions import Sessions
from memory.runtime._workspace_actor import (
    CitedSources,
    DropCursors,
    ReadRuntimeState,
    TakeSnapshot,
    WorkspaceMessage,
)
from memory.runtime._write_cycle import WriteCycle
from memory.workspace._edits import WorkspaceSnapshot
from memory.workspace._runtime_state import RuntimeState
from memory.workspace._topic_ids import handle_key

__all__ = ["backfill_sources", "migrate_cursors"]


async def migrate_cursors(workspace: ActorRef[WorkspaceMessage], sessions: Sessions, workspace_id: str,
                          memory_dir: str, events: EventHook,
                          progress: Progress | None = None) -> MigrationReport:
    """SPEC §6.7: position cursors in runtime.json become markers (no-op without cursors)."""

    async def read_state() -> RuntimeState:
        state: RuntimeState = await workspace.call(ReadRuntimeState())
        return state

    async def drop_cursors() -> object:
        return await workspace.call(DropCursors())

    async def mark(session: str, node_ids: Sequence[str]) -> object:
        return await sessions.merge_node_metadata_batch(
            session, {node: {MARKER_KEY: workspace_id} for node in node_ids})

    report = await migrate(memory_dir, get_branch=sessions.get_branch, mark=mark,
                           read_state=read_state, drop_cursors=drop_cursors, progress=progress)
    if report.had_cursors:
        events.emit(Migrated(marked={s: len(ids) for s, ids in report.marked.items()},
                             cursors_removed=report.cursors_removed, errors=tuple(report.errors)))
    return report


async def backfill_sources(workspace: ActorRef[WorkspaceMessage], cycle: WriteCycle, memory_dir: str,
                           config: RuntimeConfig,
                           progress: Progress | None = None) -> BackfillReport:
    """SPEC §6.8: write every trusted archived source no topic cites yet (markers ignored)."""
    cited: frozenset[str] = await workspace.call(CitedSources())

    async def revision() -> str:
        view: WorkspaceSnapshot = await workspace.call(TakeSnapshot())
        return view.revision

    return await backfill(
        memory_dir, write_batch=cycle.write, cited=lambda s: handle_key(s) in cited,
        revision=revision, threshold=config.policy.threshold,
        counter=config.counter, progress=progress)
