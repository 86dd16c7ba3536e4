"""Introspection: a snapshot of the live actor tree.

An operator asking "why is this session slow?" needs the whole tree at one
instant: which supervisor holds what, each actor's state, mailbox depth and
restart count. The snapshot is taken synchronously from the cells (no
message is sent, so a stuck actor cannot block it) and is plain frozen data.

An actor that owns children (a supervisor, a dynamic supervisor's registry)
exposes them by defining ``children() -> Iterable[tuple[str, ActorCell]]``;
the kernel knows nothing else about supervision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Never, Protocol, runtime_checkable

from actors._cell import ActorCell, ActorState
from actors._ref import ActorRef


@runtime_checkable
class HasChildren(Protocol):
    def children(self) -> Iterable[tuple[str, ActorCell[Never]]]: ...


@dataclass(frozen=True)
class ActorSnapshot:
    id: str  # the child id under its parent (the name for the root)
    name: str
    kind: str  # the actor's class name
    state: ActorState
    mailbox_depth: int
    restarts: int
    children: tuple[ActorSnapshot, ...] = ()

    def walk(self) -> Iterable[ActorSnapshot]:
        """This node and every descendant, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def render(self, indent: str = "") -> str:
        """One line per actor, indented like the supervision tree."""
        line = (
            f"{indent}{self.id} ({self.kind}) {self.state.value} "
            f"mailbox={self.mailbox_depth} restarts={self.restarts}"
        )
        return "\n".join([line, *(c.render(indent + "  ") for c in self.children)])


def snapshot(root: ActorRef[Never] | ActorCell[Never], id: str | None = None) -> ActorSnapshot:
    """The tree under ``root`` as it is now."""
    cell = root.cell if isinstance(root, ActorRef) else root
    actor = cell.actor
    children: tuple[ActorSnapshot, ...] = ()
    if isinstance(actor, HasChildren):
        children = tuple(snapshot(child, child_id) for child_id, child in actor.children())
    return ActorSnapshot(
        id=cell.name if id is None else id,
        name=cell.name,
        kind=type(actor).__name__ if actor is not None else "-",
        state=cell.state,
        mailbox_depth=len(cell.mailbox.ordinary),
        restarts=max(0, cell.incarnations - 1),
        children=children,
    )
