"""ConsolidationJob: the runtime's automatic consolidation passes (issue 23).

A supervised child (permanent) that every ``check_interval`` seconds reads
``runtime.json``'s counters through the workspace actor and, when
:func:`~memory.consolidation.due_scope` says a pass is due, runs one:

1. a snapshot of the topics (one workspace message);
2. the plan, in a worker thread, outside the workspace actor: appends and
   write commits go on meanwhile;
3. one ``CommitConsolidation`` message: the pass is a compare-and-set on the
   snapshot's revision, so a write that landed meanwhile wins and the pass
   **yields** (``ConcurrentUpdateError``: planned again at the next check).

With a model writer and ``ConsolidationPolicy.model``, the model proposes the pass
(:class:`~memory.consolidation.ModelConsolidator`) and the same check judges
it. A pass refused by the loss check changes nothing and is reported
(``consolidation`` event, ``outcome="refused"``); its counters stay, so it
is tried again at the next check (a refusal is a bug to see, not to hide).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from actors import Actor, ActorError, ActorRef, Idempotent, Request, UnhandledMessageError
from memory._errors import (
    ConcurrentUpdateError,
    ConsolidationRefusedError,
    ScriptoriumMemoryError,
    describe_error,
)
from memory.consolidation import (
    ConsolidationPolicy,
    Consolidator,
    ModelConsolidator,
    PreparedPass,
    Scope,
    consolidate_offline,
    due_scope,
    prepare_pass,
)
from memory.consolidation._pass import read_topics
from memory.runtime._config import RuntimeConfig
from memory.runtime._events import ConsolidationPass, EventHook
from memory.runtime._workspace_actor import (
    CommitConsolidation,
    ReadRuntimeState,
    TakeSnapshot,
    WorkspaceMessage,
)
from memory.workspace._edits import WorkspaceSnapshot
from memory.workspace._runtime_state import RuntimeState
from memory.writers._writer import Writer
from memory.writers.model import ModelWriter

__all__ = ["CheckConsolidation", "ConsolidationJob"]


@dataclass(frozen=True, slots=True)
class CheckConsolidation(Idempotent, Request[str | None]):
    """Run the pass that is due now (or ``scope``, forced); the outcome, None if none was due."""

    scope: Scope | None = None


class ConsolidationJob(Actor[CheckConsolidation]):
    """See the module docstring."""

    def __init__(
        self, config: RuntimeConfig, workspace: Callable[[], ActorRef[WorkspaceMessage]],
        writer: Callable[[], Writer], events: EventHook,
        consolidator: Consolidator = consolidate_offline,
    ) -> None:
        # Its parts, not the runtime: the config, the workspace actor's (stable) reference
        # and the writer, read when a pass runs, and the event hook.
        self.config = config
        self.workspace = workspace
        self.writer = writer
        self.events = events
        self.consolidator = consolidator
        self.passes = 0
        self.yielded = 0

    @property
    def policy(self) -> ConsolidationPolicy:
        return self.config.consolidation

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            if self.policy.enabled:
                tg.start_soon(self._timer)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    def inspect(self) -> object:
        return {"passes": self.passes, "yielded": self.yielded}

    async def _timer(self) -> None:
        while True:
            await anyio.sleep(self.policy.check_interval)
            await self.ref.cast(CheckConsolidation())

    async def handle(self, message: Any) -> Any:
        match message:
            case CheckConsolidation(scope):
                return await self._check(scope)
        raise UnhandledMessageError(self.ref.name, message)

    async def _check(self, forced: Scope | None) -> str | None:
        workspace = self.workspace()
        now = self.config.clock()
        scope = forced
        if scope is None:
            state: RuntimeState = await workspace.call(ReadRuntimeState())
            scope = due_scope(state, self.policy, now)
        if scope is None:
            return None
        snapshot: WorkspaceSnapshot = await workspace.call(TakeSnapshot())
        try:
            consolidator = self.consolidator
            writer = self.writer()
            if isinstance(writer, ModelWriter) and self.policy.model:  # the same check judges
                topics = await anyio.to_thread.run_sync(read_topics, snapshot)
                plan = await ModelConsolidator(writer.endpoint).plan(topics)
                consolidator = lambda _: plan
            prepared: PreparedPass = await anyio.to_thread.run_sync(
                lambda: prepare_pass(snapshot, consolidator, scope=scope, now=now))
            await workspace.call(CommitConsolidation(prepared, now))
        except ConcurrentUpdateError:
            self.yielded += 1
            self.events.emit(ConsolidationPass(scope=scope, outcome="yielded"))
            return "yielded"
        except ConsolidationRefusedError as error:
            self.events.emit(ConsolidationPass(scope=scope, outcome="refused",
                                               problems=tuple(error.problems)))
            return "refused"
        except (ScriptoriumMemoryError, ActorError, OSError) as error:
            # The model's endpoint, or the disk under the commit, failed: said, tried at the next
            # check (not a crash of this job counted against the root's restart intensity).
            self.events.emit(ConsolidationPass(scope=scope, outcome="failed",
                                               error=describe_error(error)))
            return "failed"
        self.passes += 1
        self.events.emit(ConsolidationPass(scope=scope, outcome="done",
                                           actions=len(prepared.record["actions"]),
                                           record=prepared.record_path))
        return "done"
