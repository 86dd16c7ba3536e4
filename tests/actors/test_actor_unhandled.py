"""One rule for a message an actor does not handle, and on_stop learning why it stopped."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from actors import (
    Actor,
    MailboxOptions,
    StopKind,
    StopReason,
    UnhandledMessageError,
    open_actor,
    open_registry,
)
from supervisors import ChildSpec, DynamicSupervisor, Supervisor, get_child


@dataclass(frozen=True)
class Ping:
    pass


@dataclass(frozen=True)
class Unknown:
    what: str = "?"


class Pinger(Actor[object]):
    def __init__(self) -> None:
        self.reasons: list[StopReason] = []

    async def handle(self, message: Any) -> Any:
        match message:
            case Ping():
                return "pong"
            case _:
                raise UnhandledMessageError(self.ref.name, message)

    async def on_stop(self, reason: StopReason) -> None:
        self.reasons.append(reason)


class Mute(Actor[object]):
    """Writes no handle at all: every message is unhandled."""


async def test_a_caller_gets_a_typed_error_naming_the_actor_and_the_type() -> None:
    for actor in (Pinger(), Mute()):
        async with open_actor(actor, name="p") as ref:
            with pytest.raises(UnhandledMessageError, match="'p' does not handle Unknown messages") as e:
                await ref.call(Unknown())
            assert (e.value.name, e.value.message_type) == ("p", "Unknown")
            stats = ref.statistics()
            assert (stats.crashes, stats.incarnations) == (0, 1)  # it never crashed
            if isinstance(actor, Pinger):
                assert await ref.call(Ping()) == "pong"


async def test_an_unhandled_cast_goes_to_the_dead_letters_not_a_crash() -> None:
    dead: list[tuple[Any, BaseException]] = []
    options = MailboxOptions(dead_letter=lambda message, error: dead.append((message, error)))
    async with open_actor(Pinger(), name="p", options=options) as ref:
        await ref.cast(Unknown("cast"))
        assert await ref.call(Ping()) == "pong"
        stats = ref.statistics()
    assert [m for m, _ in dead] == [Unknown("cast")]
    assert isinstance(dead[0][1], UnhandledMessageError)
    assert (stats.crashes, stats.incarnations, stats.dead_letters) == (0, 1, 1)


async def test_without_a_dead_letter_callback_an_unhandled_cast_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="actors"):
        async with open_actor(Pinger(), name="p") as ref:
            await ref.cast(Unknown("logged"))
            assert await ref.call(Ping()) == "pong"
    assert any("'p' does not handle Unknown messages" in r.getMessage() for r in caplog.records)


async def test_supervisors_refuse_an_unknown_message_and_keep_running() -> None:
    pinger = ChildSpec("p", Pinger)
    tree = Supervisor([pinger])
    async with open_actor(tree, name="sup") as sup:
        with pytest.raises(UnhandledMessageError, match="start_child"):
            await sup.call(Unknown())  # type: ignore[call-overload]  # refused by mypy too
        assert await (await get_child(sup, pinger)).call(Ping()) == "pong"
        assert sup.statistics().crashes == 0
    sessions: DynamicSupervisor[str, object] = DynamicSupervisor(lambda key: Pinger())
    async with open_actor(sessions, name="dyn") as dyn:
        with pytest.raises(UnhandledMessageError, match="activate_child"):
            await dyn.call(Unknown())  # type: ignore[call-overload]
        assert dyn.statistics().crashes == 0


async def test_on_stop_hears_stop() -> None:
    actor = Pinger()
    async with open_actor(actor, name="p") as ref:
        assert await ref.call(Ping()) == "pong"
    assert actor.reasons == [StopReason(StopKind.STOP)]


async def test_on_stop_hears_the_crash() -> None:
    class Crashes(Pinger):
        async def handle(self, message: Any) -> Any:
            raise RuntimeError("boom")

    actor = Crashes()
    with pytest.raises(RuntimeError, match="boom") as raised:
        async with open_actor(actor, name="p") as ref:
            await ref.cast("anything")
            await anyio.sleep_forever()
    assert [r.kind for r in actor.reasons] == [StopKind.CRASH]
    assert actor.reasons[0].crash is raised.value


@pytest.mark.virtual_time
async def test_on_stop_hears_passivation() -> None:
    actors: list[Pinger] = []

    def make(key: str) -> Pinger:
        actors.append(Pinger())
        return actors[-1]

    async with open_registry(make, idle_timeout=10.0) as registry:
        assert await registry.ref("k").call(Ping()) == "pong"
        await anyio.sleep(11.0)
        assert "k" not in registry
    assert actors[0].reasons == [StopReason(StopKind.PASSIVATION)]
