"""open_actor raises the actor's crash, not the body's error that the crash caused.

A supervisor that gives up tears its children down before its incarnation
ends; a body calling into them meanwhile fails with a consequence ("registry
... is shut down"). That used to cancel the teardown and raise the
consequence, hiding the cause (issue 10, attack item 6: a full disk).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actors import Actor, StopReason, open_actor


class TearsDownSlowly(Actor[object]):
    def __init__(self, stopping: anyio.Event, body_failed: anyio.Event | None = None) -> None:
        self.stopping = stopping
        self.body_failed = body_failed

    async def handle(self, message: Any) -> Any:
        raise OSError(28, "No space left on device", "memory/topics/core.md")

    async def on_stop(self, reason: StopReason) -> None:
        self.stopping.set()
        if self.body_failed is not None:  # still stopping children when the body fails
            await self.body_failed.wait()
        await anyio.lowlevel.checkpoint()


async def test_the_crash_is_raised_when_the_body_fails_during_the_teardown() -> None:
    stopping, body_failed = anyio.Event(), anyio.Event()
    with pytest.raises(OSError, match="No space left on device"):
        async with open_actor(TearsDownSlowly(stopping, body_failed), name="root") as ref:
            ref.cast_nowait("write")
            await stopping.wait()
            body_failed.set()
            raise RuntimeError("registry 'root/children' is shut down")


async def test_a_body_error_of_a_running_actor_is_raised_as_it_is() -> None:
    with pytest.raises(RuntimeError, match="the body's own"):
        async with open_actor(TearsDownSlowly(anyio.Event()), name="root"):
            raise RuntimeError("the body's own")
