"""MailboxOptions: one validated value for a mailbox, wherever one is made."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from actors import Actor, Backpressure, MailboxOptions, open_actor, open_registry


def test_defaults_are_the_documented_ones() -> None:
    options = MailboxOptions()
    assert (options.capacity, options.backpressure, options.poison_threshold) == (
        1000, Backpressure.WAIT, 3)
    assert options.dead_letter is None


@pytest.mark.parametrize(
    ("fields", "error", "says"),
    [
        ({"capacity": 0}, ValueError, "capacity must be at least 1, got 0"),
        ({"capacity": 2.5}, TypeError, "capacity must be a whole number"),
        ({"capacity": True}, TypeError, "capacity must be a whole number"),
        ({"backpressure": "wait"}, TypeError, "Backpressure.WAIT or Backpressure.FAIL_FAST"),
        ({"poison_threshold": 0}, ValueError, "poison_threshold must be at least 1"),
        ({"dead_letter": "log"}, TypeError, "dead_letter must be a callable"),
    ],
)
def test_a_bad_option_is_refused_once_saying_what_to_pass(
    fields: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        MailboxOptions(**fields)


def test_replace_makes_a_variant_and_validates_it_again() -> None:
    base = MailboxOptions(capacity=10)
    variant = dataclasses.replace(base, backpressure=Backpressure.FAIL_FAST)
    assert (variant.capacity, variant.backpressure) == (10, Backpressure.FAIL_FAST)
    assert base.backpressure is Backpressure.WAIT  # frozen: the base is unchanged
    with pytest.raises(ValueError, match="capacity"):
        dataclasses.replace(base, capacity=-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.capacity = 5  # type: ignore[misc]


class Idle(Actor[object]):
    async def handle(self, message: Any) -> Any:
        return message


async def test_open_actor_and_open_registry_give_their_cells_the_options() -> None:
    options = MailboxOptions(capacity=1, backpressure=Backpressure.FAIL_FAST)
    async with open_actor(Idle(), options=options) as ref:
        assert ref.cell.options is options
    def factory(key: str) -> Actor[object]:
        return Idle()

    async with open_registry(factory, options=options) as registry:
        ref = registry.ref("k")
        assert ref.cell.options is options
        assert await ref.call("one") == "one"
