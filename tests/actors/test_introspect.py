"""Introspection: a synchronous snapshot of a live tree, even with a stuck actor."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio

from actors import Actor, open_actor, snapshot
from actors.lowlevel import ActorCell, ActorState


class Leaf(Actor[object]):
    async def handle(self, message: Any) -> Any:
        if isinstance(message, anyio.Event):
            await message.wait()  # stuck until the test lets it go
        return message


class Parent(Actor[object]):
    """Owns two leaf cells and exposes them the way supervisors do."""

    def __init__(self, leaves: list[ActorCell[object]]) -> None:
        self.leaves = leaves

    async def handle(self, message: Any) -> Any:
        return None

    def children(self) -> Iterable[tuple[str, ActorCell[object]]]:
        return [(f"leaf{i}", cell) for i, cell in enumerate(self.leaves)]


async def test_snapshot_shows_state_depth_and_restarts_without_asking_the_actors() -> None:
    leaves = [ActorCell(Leaf, name=f"parent/leaf{i}") for i in range(2)]
    gate = anyio.Event()
    async with open_actor(Parent(leaves), name="parent") as parent:
        async with anyio.create_task_group() as tg:
            for cell in leaves:
                tg.start_soon(cell.run_incarnation)
            await leaves[0].ref.cast(gate)  # leaf0 is stuck in its handler
            await leaves[0].ref.cast("queued")
            await anyio.wait_all_tasks_blocked()
            tree = snapshot(parent)
            assert tree.render().splitlines() == [
                "parent (Parent) running mailbox=0 restarts=0",
                "  leaf0 (Leaf) running mailbox=2 restarts=0",
                "  leaf1 (Leaf) running mailbox=0 restarts=0",
            ]
            assert [node.id for node in tree.walk()] == ["parent", "leaf0", "leaf1"]
            gate.set()
            for cell in leaves:
                await cell.ref.stop()
        tree = snapshot(parent)
        assert [c.state for c in tree.children] == [ActorState.STOPPED, ActorState.STOPPED]
