"""The dynamic supervisor: keyed children, per-key intensity, escalation, passivation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from actors import (
    Actor,
    ActorCrashedError,
    ActorRef,
    ActorStoppedError,
    Idempotent,
    MailboxOptions,
    open_actor,
    snapshot,
)
from supervisors import (
    Backoff,
    DynamicSupervisor,
    DynamicSupervisorMessage,
    Intensity,
    Restart,
    RestartIntensityExceededError,
    activate_child,
)


@dataclass(frozen=True, slots=True)
class Crash(Idempotent):
    """A crash request the kernel delivers again after each crash (a crash loop)."""


CRASH = Crash()


class SessionProbe(Actor[object]):
    """Crashes on "crash" (dropped after one crash) and CRASH (redelivered); counts activations."""

    def __init__(self, key: str, starts: Counter[str]) -> None:
        self.key = key
        self.starts = starts

    async def on_start(self) -> None:
        self.starts[self.key] += 1

    async def handle(self, message: Any) -> Any:
        if message == "crash" or message == CRASH:
            raise RuntimeError(f"session {self.key} crashed")
        if isinstance(message, anyio.Event):
            await message.wait()
        return (self.key, message)


def probes(starts: Counter[str]) -> Callable[[str], Actor[object]]:
    return lambda key: SessionProbe(key, starts)


async def activate(sup: ActorRef[DynamicSupervisorMessage[str, object]], key: str
                   ) -> ActorRef[object]:
    ref = await activate_child(sup, key)
    return ref


@pytest.mark.virtual_time
async def test_a_session_that_keeps_crashing_is_stopped_alone() -> None:
    starts: Counter[str] = Counter()
    given_up: list[tuple[str, Exception]] = []
    sup_actor: DynamicSupervisor[str, object] = DynamicSupervisor(
        probes(starts),
        intensity=Intensity(3, 10.0),
        backoff=Backoff.none(),
        # the crashing message stays at the head: a crash loop
        options=MailboxOptions(poison_threshold=100),
        on_give_up=lambda key, exc: given_up.append((key, exc)),
    )
    async with open_actor(sup_actor, name="sessions") as sup:
        good = await activate(sup, "good")
        bad = await activate(sup, "bad")
        with pytest.raises(ActorCrashedError) as crashed:
            await bad.call(CRASH)
        assert str(crashed.value.__cause__) == "session bad crashed"
        assert starts["bad"] == 4  # first activation + 3 restarts, then it was stopped
        await anyio.wait_all_tasks_blocked()  # the give-up notice reaches the supervisor
        assert [key for key, _ in given_up] == ["bad"]
        assert await good.call("still here") == ("good", "still here")
        assert starts["good"] == 1
        stats = sup_actor.statistics()
        assert (stats.restarts, stats.given_up) == (3, ("bad",))
        # A later message for the key gets a fresh activation.
        assert await bad.call("hello") == ("bad", "hello")


@pytest.mark.virtual_time
async def test_a_queued_call_to_a_stopped_session_learns_the_cause() -> None:
    starts: Counter[str] = Counter()
    sup_actor: DynamicSupervisor[str, object] = DynamicSupervisor(
        probes(starts), intensity=Intensity(0), backoff=Backoff.none(),
        options=MailboxOptions(poison_threshold=100),
    )
    async with open_actor(sup_actor, name="sessions") as sup:
        bad = await activate(sup, "bad")
        outcomes: dict[str, BaseException] = {}

        async def call(message: str) -> None:
            try:
                await bad.call(message)
            except Exception as exc:  # noqa: BLE001 - recorded and checked below
                outcomes[message] = exc

        gate = anyio.Event()
        await bad.cast(gate)
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "crash")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(call, "queued")
            await anyio.wait_all_tasks_blocked()
            gate.set()
        assert type(outcomes["crash"]) is ActorCrashedError
        assert type(outcomes["queued"]) is ActorStoppedError
        assert all(str(o.__cause__) == "session bad crashed" for o in outcomes.values())


@pytest.mark.virtual_time
async def test_escalate_gives_otp_behaviour() -> None:
    starts: Counter[str] = Counter()
    sup_actor: DynamicSupervisor[str, object] = DynamicSupervisor(
        probes(starts), intensity=Intensity(2), escalate=True, backoff=Backoff.none(),
        options=MailboxOptions(poison_threshold=1),
    )
    with pytest.raises(RestartIntensityExceededError) as raised:
        async with open_actor(sup_actor, name="sessions") as sup:
            for key in ("a", "b", "c"):
                await (await activate(sup, key)).cast("crash")
            await anyio.sleep_forever()
    assert str(raised.value.__cause__) == "session c crashed"


@pytest.mark.virtual_time
async def test_a_crashed_session_is_restarted_after_its_backoff_and_gets_the_message_again() -> (
    None
):
    starts: Counter[str] = Counter()
    handled: list[float] = []

    class Flaky(SessionProbe):
        async def handle(self, message: Any) -> Any:
            if self.starts[self.key] == 2:  # the second incarnation crashes once more
                self.starts[self.key] += 1
                raise RuntimeError("again")
            if message == CRASH and self.starts[self.key] == 1:
                raise RuntimeError("first")
            handled.append(anyio.current_time())
            return message

    policy = Backoff(initial=2.0, jitter=0.0, reset_after=60.0)
    sup_actor: DynamicSupervisor[str, object] = DynamicSupervisor(
        lambda key: Flaky(key, starts), backoff=policy
    )
    async with open_actor(sup_actor, name="sessions") as sup:
        ref = await activate(sup, "s")
        start = anyio.current_time()
        assert await ref.call(CRASH) == CRASH
        assert handled[0] - start == pytest.approx(2.0, abs=0.05)  # 0 s, then 2 s backoff


@pytest.mark.virtual_time
async def test_idle_sessions_passivate_and_show_in_the_tree() -> None:
    starts: Counter[str] = Counter()
    sup_actor: DynamicSupervisor[str, object] = DynamicSupervisor(probes(starts), idle_timeout=30.0)
    async with open_actor(sup_actor, name="sessions") as sup:
        for key in ("s1", "s2"):
            await (await activate(sup, key)).call("hi")
        tree = snapshot(sup)
        assert [(c.id, c.state.value) for c in tree.children] == [
            ("s1", "running"),
            ("s2", "running"),
        ]
        await anyio.sleep(31.0)
        assert snapshot(sup).children == ()
        assert sup_actor.statistics().passivations == 2


async def test_temporary_sessions_are_never_restarted() -> None:
    starts: Counter[str] = Counter()
    sup_actor: DynamicSupervisor[str, object] = DynamicSupervisor(
        probes(starts), restart=Restart.TEMPORARY, options=MailboxOptions(poison_threshold=100)
    )
    async with open_actor(sup_actor, name="sessions") as sup:
        ref = await activate(sup, "t")
        with pytest.raises(ActorCrashedError):
            await ref.call("crash")
        assert starts["t"] == 1
    with pytest.raises(ValueError, match="Restart.TRANSIENT"):
        DynamicSupervisor(probes(starts), restart=Restart.PERMANENT)
