"""Sending through a reference: cancel scopes, late replies, backpressure, the control lane."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actors import (
    Actor,
    ActorStoppedError,
    Backpressure,
    MailboxFull,
    MailboxOptions,
    _ref,
    open_actor,
)
from actors._mailbox import ReplySlot


class Gated(Actor[object]):
    """Handles ("wait", event) by waiting for it; replies with the message."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def handle(self, message: Any) -> Any:
        if isinstance(message, tuple) and message[0] == "wait":
            await message[1].wait()
        self.seen.append(message)
        return message

    def inspect(self) -> object:
        return list(self.seen)


async def late_reply_scenario() -> tuple[object, int]:
    """A caller gives up on a call; its reply arrives later; what does the next call get?"""
    gate = anyio.Event()
    async with open_actor(Gated(), name="g") as ref:
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1.0):
                await ref.call(("wait", gate))
        gate.set()
        with anyio.fail_after(1.0):
            second = await ref.call("second")
        return second, ref.statistics().dropped_replies


@pytest.mark.virtual_time
async def test_a_late_reply_is_dropped_never_delivered_to_the_next_call() -> None:
    second, dropped = await late_reply_scenario()
    assert second == "second"
    assert dropped == 1


class _SharedSlot(ReplySlot):
    """The planted fault: one reply slot per actor, reset by each call."""

    shared: _SharedSlot | None = None

    def __new__(cls) -> _SharedSlot:  # noqa: PYI034 - deliberately not a new object
        if cls.shared is None:
            cls.shared = super().__new__(cls)
        return cls.shared

    def __init__(self) -> None:
        if not getattr(self, "done", True) and not getattr(self, "abandoned", True):
            return  # still in use: the next call finds the slot as it is
        super().__init__()


@pytest.mark.virtual_time
async def test_the_late_reply_test_catches_a_shared_reply_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _SharedSlot.shared = None
    monkeypatch.setattr(_ref, "ReplySlot", _SharedSlot)
    second, _ = await late_reply_scenario()
    assert second != "second"  # the stale reply leaked into the next call


@pytest.mark.virtual_time
async def test_a_call_whose_caller_gave_up_is_skipped() -> None:
    gate = anyio.Event()
    actor = Gated()
    async with open_actor(actor, name="g") as ref:
        await ref.cast(("wait", gate))
        with anyio.move_on_after(2.0) as scope:
            await ref.call("abandoned")
        assert scope.cancelled_caught
        gate.set()
        assert await ref.call("next") == "next"
        assert ref.statistics().dropped_expired == 1
    assert "abandoned" not in actor.seen


class Slow(Actor[object]):
    """Replies after sleeping the number of seconds it is sent."""

    async def handle(self, message: Any) -> Any:
        await anyio.sleep(message)
        return message


@pytest.mark.virtual_time
async def test_a_call_has_no_default_timeout_it_waits_for_the_reply() -> None:
    async with open_actor(Slow(), name="slow") as ref:
        start = anyio.current_time()
        assert await ref.call(3600.0) == 3600.0  # an hour: far past any old default
        assert anyio.current_time() - start == pytest.approx(3600.0, abs=0.01)
        assert await ref.inspect() is None  # nor does inspect


@pytest.mark.virtual_time
async def test_a_caller_bounds_a_call_with_its_own_cancel_scope() -> None:
    async with open_actor(Slow(), name="slow") as ref:
        start = anyio.current_time()
        with pytest.raises(TimeoutError):
            with anyio.fail_after(2.0):
                await ref.call(10.0)
        assert anyio.current_time() - start == pytest.approx(2.0, abs=0.01)
        assert await ref.call(0.0) == 0.0  # the late reply went nowhere
        assert ref.statistics().dropped_replies == 1


async def test_cast_is_a_checkpoint_even_with_room_in_the_mailbox() -> None:
    actor = Gated()
    async with open_actor(actor, name="g") as ref:
        with anyio.CancelScope() as scope:
            scope.cancel()
            await ref.cast("cancelled before it was sent")
        assert scope.cancelled_caught  # a cancel point: nothing was sent
        handled_while_casting: list[int] = []
        for i in range(50):  # never blocks: capacity 1000
            await ref.cast(i)
            handled_while_casting.append(len(actor.seen))
        assert handled_while_casting[-1] > 0  # a schedule point: the actor ran meanwhile
        assert await ref.call("last") == "last"
    assert "cancelled before it was sent" not in actor.seen


async def test_cast_nowait_on_a_full_mailbox_raises_would_block() -> None:
    gate = anyio.Event()
    async with open_actor(Gated(), name="g", options=MailboxOptions(capacity=1)) as ref:
        await ref.cast(("wait", gate))
        with pytest.raises(anyio.WouldBlock) as raised:
            ref.cast_nowait("no room")
        assert isinstance(raised.value, MailboxFull)
        gate.set()


async def test_a_cancelled_caller_never_receives_its_reply() -> None:
    gate = anyio.Event()
    async with open_actor(Gated(), name="g") as ref:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ref.call, ("wait", gate))
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
        gate.set()
        assert await ref.call("after") == "after"
        assert ref.statistics().dropped_replies == 1


async def test_fail_fast_on_a_full_mailbox_and_wait_for_space() -> None:
    gate = anyio.Event()
    actor = Gated()
    async with open_actor(actor, name="g", options=MailboxOptions(capacity=2)) as ref:
        await ref.cast(("wait", gate))  # being handled: still at the mailbox head
        await ref.cast("q1")
        with pytest.raises(MailboxFull, match="full \\(2 messages\\)"):
            ref.cast_nowait("no room")
        with pytest.raises(MailboxFull):
            await ref.cast("no room", backpressure=Backpressure.FAIL_FAST)
        record: list[str] = []

        async def blocked_sender() -> None:
            await ref.cast("q2")
            record.append("q2 sent")

        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_sender)
            await anyio.wait_all_tasks_blocked()
            assert record == []  # WAIT: the sender waits for space
            gate.set()
        assert await ref.call("last") == "last"
    assert record == ["q2 sent"]
    assert actor.seen == [("wait", gate), "q1", "q2", "last"]


async def test_control_lane_overtakes_a_full_mailbox() -> None:
    gate = anyio.Event()
    actor = Gated()
    snapshots: list[object] = []
    async with open_actor(actor, name="g", options=MailboxOptions(capacity=3)) as ref:
        await ref.cast(("wait", gate))
        await ref.cast("q1")
        await ref.cast("q2")
        await anyio.wait_all_tasks_blocked()  # the handler is running, waiting on the gate
        assert ref.statistics().mailbox_depth == 3  # full

        async def take_snapshot() -> None:
            snapshots.append(await ref.inspect())

        async with anyio.create_task_group() as tg:
            tg.start_soon(take_snapshot)
            await anyio.wait_all_tasks_blocked()
            assert ref.statistics().control_depth == 1
            gate.set()  # the running handler finishes; inspect runs next
        # Inspect ran after the running handler and before q1 and q2.
        assert snapshots == [[("wait", gate)]]
        stopper_gate = anyio.Event()
        await ref.cast(("wait", stopper_gate))
        await ref.cast("never")
        await anyio.wait_all_tasks_blocked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.stop)
            await anyio.wait_all_tasks_blocked()
            stopper_gate.set()
    assert "never" not in actor.seen


@pytest.mark.virtual_time
async def test_inspect_waits_for_the_running_handler_or_the_callers_scope() -> None:
    async with open_actor(Gated(), name="g") as ref:
        gate = anyio.Event()
        await ref.cast(("wait", gate))
        await anyio.wait_all_tasks_blocked()
        with anyio.move_on_after(2.0) as scope:
            await ref.inspect()
        assert scope.cancelled_caught
        gate.set()
        assert await ref.inspect() == [("wait", gate)]  # the abandoned snapshot went nowhere


async def test_inspect_and_stop_of_a_stopped_actor() -> None:
    async with open_actor(Gated(), name="g") as ref:
        await ref.stop()
        with pytest.raises(ActorStoppedError, match="'g' is stopped"):
            await ref.inspect()
        await ref.stop()  # idempotent
