"""Keyed actors: activation on first message, passivation, and the passivation race."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from actors import Actor, ActorStoppedError, StopReason, open_registry, snapshot
from actors._mailbox import Mailbox
from actors.lowlevel import ActorState


@dataclass
class Liveness:
    """Counts incarnations alive at once per key; the invariant is at most one."""

    live: Counter[str] = field(default_factory=Counter)
    most: int = 0
    started: Counter[str] = field(default_factory=Counter)
    handled: list[tuple[str, Any]] = field(default_factory=list)
    stop_gate: anyio.Event | None = None
    stopping: anyio.Event = field(default_factory=anyio.Event)


class Session(Actor[object]):
    def __init__(self, key: str, liveness: Liveness) -> None:
        self.key = key
        self.liveness = liveness
        self.count = 0

    async def on_start(self) -> None:
        self.liveness.live[self.key] += 1
        self.liveness.started[self.key] += 1
        self.liveness.most = max(self.liveness.most, self.liveness.live[self.key])

    async def handle(self, message: Any) -> Any:
        self.count += 1
        if isinstance(message, anyio.Event):
            await message.wait()
        self.liveness.handled.append((self.key, message))
        return (self.key, message, self.count)

    async def on_stop(self, reason: StopReason) -> None:
        self.liveness.stopping.set()
        if self.liveness.stop_gate is not None:
            await self.liveness.stop_gate.wait()  # a slow passivation
        self.liveness.live[self.key] -= 1


def session_factory(liveness: Liveness) -> Callable[[str], Actor[object]]:
    return lambda key: Session(key, liveness)


@pytest.mark.virtual_time
async def test_activated_by_the_first_message_and_passivated_when_idle() -> None:
    liveness = Liveness()
    async with open_registry(session_factory(liveness), idle_timeout=60.0) as registry:
        ref = registry.ref("s1")
        assert ref.statistics().state is ActorState.IDLE and liveness.started["s1"] == 0
        assert await ref.call("a") == ("s1", "a", 1)
        assert await registry.ref("s1").call("b") == ("s1", "b", 2)
        await anyio.sleep(59.0)
        assert "s1" in registry
        await anyio.sleep(2.0)
        assert "s1" not in registry and liveness.live["s1"] == 0
        # The old reference still works: it reaches a fresh activation.
        assert await ref.call("c") == ("s1", "c", 1)
        assert liveness.started["s1"] == 2
        assert registry.passivations == 1


@pytest.mark.virtual_time
async def test_messages_sent_during_passivation_are_all_processed_by_one_activation() -> None:
    liveness = Liveness()
    stop_gate = anyio.Event()
    liveness.stop_gate = stop_gate
    handled_during: list[Any] = []
    async with open_registry(session_factory(liveness), idle_timeout=10.0) as registry:
        ref = registry.ref("s1")
        await ref.call("first")
        await liveness.stopping.wait()  # virtual time jumps 10 s: passivation began
        assert ref.statistics().state is ActorState.PASSIVATING
        async with anyio.create_task_group() as tg:

            async def call(i: int) -> None:
                handled_during.append(await registry.ref("s1").call(i))

            for i in range(10):
                if i % 2:
                    await ref.cast(i)
                else:
                    tg.start_soon(call, i)
            await anyio.wait_all_tasks_blocked()
            liveness.stop_gate = None
            stop_gate.set()
        assert sorted(m for k, m in liveness.handled if m != "first") == list(range(10))
        assert [reply[1] for reply in sorted(handled_during, key=lambda r: r[1])] == [0, 2, 4, 6, 8]
    assert liveness.most == 1  # never two live incarnations for one key
    assert liveness.started["s1"] == 2


async def test_a_burst_of_first_messages_activates_the_key_once() -> None:
    liveness = Liveness()
    async with open_registry(session_factory(liveness)) as registry:
        for i in range(5):
            await registry.ref("s1").cast(i)  # all sent before the activation runs
        await registry.ref("s1").call("sync")
        assert registry.activations == 1
    assert liveness.started["s1"] == 1
    assert liveness.most == 1


@pytest.mark.virtual_time
async def test_the_passivation_race_test_catches_a_registry_that_ignores_late_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Mailbox, "empty", lambda self: True)  # the planted fault
    liveness = Liveness()
    stop_gate = anyio.Event()
    liveness.stop_gate = stop_gate
    async with open_registry(session_factory(liveness), idle_timeout=10.0) as registry:
        ref = registry.ref("s1")
        await ref.call("first")
        await liveness.stopping.wait()
        await ref.cast("sent during passivation")
        stop_gate.set()
        await anyio.sleep(100.0)
    assert ("s1", "sent during passivation") not in liveness.handled


async def test_keys_are_independent_and_show_in_the_snapshot() -> None:
    liveness = Liveness()
    async with open_registry(session_factory(liveness), name="sessions") as registry:
        replies = [await registry.ref(k).call("hi") for k in ("a", "b", "a")]
        assert replies == [("a", "hi", 1), ("b", "hi", 1), ("a", "hi", 2)]
        assert len(registry) == 2
        tree = snapshot(registry.ref("a"))
        assert (tree.name, tree.kind, tree.state) == ("sessions[a]", "Session", ActorState.RUNNING)
    assert len(registry) == 0


async def test_an_unsupervised_keyed_crash_is_raised_out_of_the_block() -> None:
    class Fragile(Actor[object]):
        async def handle(self, message: Any) -> Any:
            raise RuntimeError(f"cannot handle {message}")

    def fragile(key: str) -> Actor[object]:
        return Fragile()

    with pytest.raises(RuntimeError, match="cannot handle x"):
        async with open_registry(fragile) as registry:
            await registry.ref("k").cast("x")
            await anyio.sleep_forever()


async def test_passivate_on_request_only_when_idle() -> None:
    liveness = Liveness()
    async with open_registry(session_factory(liveness), idle_timeout=None) as registry:
        ref = registry.ref("s1")
        gate = anyio.Event()
        await ref.call("first")
        await ref.cast(gate)  # handled next: the actor is busy, then has "queued" waiting
        await ref.cast("queued")
        ref.passivate()  # taken after the gate message, with "queued" still waiting: ignored
        gate.set()
        assert await ref.call("sync") == ("s1", "sync", 4)
        assert "s1" in registry
        ref.passivate()
        await anyio.wait_all_tasks_blocked()
        assert "s1" not in registry and liveness.live["s1"] == 0


@pytest.mark.virtual_time
async def test_a_closed_registry_fails_its_callers_and_refuses_new_keys_at_once() -> None:
    """An owner torn down by cancellation closes it; a late (shielded) caller must not wait.

    A cell created after the close would start in a cancelled task group and
    never run: a writer's shielded report to it hung a whole runtime's exit.
    """
    liveness = Liveness()
    async with open_registry(session_factory(liveness)) as registry:
        ref = registry.ref("a")
        assert await ref.call("hello") == ("a", "hello", 1)
        with anyio.fail_after(5):
            registry.close()
            with pytest.raises(ActorStoppedError):
                await ref.call("late")
            with pytest.raises(RuntimeError, match="shut down"):
                registry.ref("b")
