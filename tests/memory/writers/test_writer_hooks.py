"""A writer's optional hooks are declared Protocols the runtime checks with isinstance.

``exclusive``, ``deferral``, ``admit`` and ``statistics`` were read with
``getattr(writer, ...)``: a misspelt hook was silently never called. Now each
is a runtime-checkable Protocol in :mod:`memory.writers._writer`, a writer
implements those it needs (structurally, no base class), and mypy checks the
signature where a writer is passed as one.
"""

from __future__ import annotations

from memory.simulate._faults import FaultPlan, FaultyWriter
from memory.workspace import TopicEdit, WorkspaceSnapshot
from memory.writers import (
    AdmittingWriter,
    Batch,
    DeferringWriter,
    ExclusiveWriter,
    ExtractiveWriter,
    ReportingWriter,
    WriterOutput,
    is_exclusive,
)
from memory.writers.model import ModelSettings, ModelWriter


class Plain:
    """A writer with no hooks: written at once, concurrently, reporting nothing."""

    async def write(self, batch: Batch, workspace: WorkspaceSnapshot) -> WriterOutput:
        return [TopicEdit("topics/notes.md", "A note.\n")]


class Budgeted(Plain):
    """A writer with every hook, by its methods' names alone (no base class)."""

    exclusive = False

    async def deferral(self, batch: Batch) -> float:
        return 60.0

    async def admit(self, batch: Batch) -> None:
        return None

    def statistics(self) -> dict[str, object]:
        return {"calls": 0}


def test_the_hooks_are_found_by_their_protocols() -> None:
    hooks = (ExclusiveWriter, DeferringWriter, AdmittingWriter, ReportingWriter)
    assert [isinstance(Plain(), hook) for hook in hooks] == [False] * 4
    assert [isinstance(Budgeted(), hook) for hook in hooks] == [True] * 4
    model = ModelWriter(ModelSettings(base_url="http://model.test/v1", model="m-1"))
    assert [isinstance(model, hook) for hook in hooks] == [True] * 4
    assert [isinstance(ExtractiveWriter(), hook) for hook in hooks] == [
        True, False, False, False]


def test_only_a_writer_that_says_so_is_exclusive() -> None:
    assert is_exclusive(ExtractiveWriter())
    assert not is_exclusive(Budgeted()) and not is_exclusive(Plain())
    # A wrapper keeps the flag of what it wraps (the simulator's faulty writer).
    assert is_exclusive(FaultyWriter(ExtractiveWriter(), FaultPlan(frozenset(), seed=1)))
    assert not is_exclusive(FaultyWriter(Plain(), FaultPlan(frozenset(), seed=1)))
