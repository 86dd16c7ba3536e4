"""The message loop: replies, expected errors, crashes, redelivery, poison, stop.

Redelivery is opt-in: only an ``Idempotent`` message is delivered again
after it crashed the actor; any other reaches its caller as ``ActorCrashedError``
(a cast goes to the dead-letter callback), never a second time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from actors import (
    Actor,
    ActorCrashedError,
    ActorRestartingError,
    ActorStoppedError,
    Backpressure,
    Idempotent,
    MailboxOptions,
    PoisonMessageError,
    StopKind,
    StopReason,
    open_actor,
    redeliverable,
)
from actors.lowlevel import ActorCell, ActorState


class BadInput(ValueError):
    pass


@dataclass
class Journal:
    """What every incarnation of a test actor saw, shared across restarts."""

    handled: list[Any] = field(default_factory=list)
    started: int = 0
    stopped: list[StopReason] = field(default_factory=list)
    crash_once: set[Any] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Retryable(Idempotent):
    """The same requests as the tuples, declared safe to deliver again."""

    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class RetryableIf(Idempotent):
    """Idempotent or not by content, as an append is with or without its own id."""

    kind: str
    detail: str
    safe: bool

    @property
    def idempotent(self) -> bool:
        return self.safe


class Worker(Actor[object]):
    expected_errors = (BadInput,)

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    async def on_start(self) -> None:
        self.journal.started += 1

    async def handle(self, message: Any) -> Any:
        if isinstance(message, (Retryable, RetryableIf)):
            return await self.handle((message.kind, message.detail))
        match message:
            case ("bad", detail):
                raise BadInput(detail)
            case ("crash", detail):
                raise RuntimeError(detail)
            case ("crash-once", detail) if message not in self.journal.crash_once:
                self.journal.crash_once.add(message)
                raise RuntimeError(detail)
            case ("gate", event):
                await event.wait()
        self.journal.handled.append(message)
        return ("ok", message)

    async def on_stop(self, reason: StopReason) -> None:
        self.journal.stopped.append(reason)


async def run_restarting(cell: ActorCell[object], crashes: list[Exception], limit: int = 10) -> None:
    """A minimal supervisor: restart after every crash, up to ``limit`` crashes."""
    while True:
        try:
            await cell.run_incarnation()
            cell.close(None)
            return
        except Exception as exc:  # noqa: BLE001 - a supervisor's catch-all
            crashes.append(exc)
            if len(crashes) >= limit:
                cell.close(exc)
                return


async def test_call_replies_and_casts_keep_their_order() -> None:
    journal = Journal()
    async with open_actor(Worker(journal), name="w") as ref:
        for i in range(5):
            await ref.cast(i)
        ref.cast_nowait(5)
        assert await ref.call("last") == ("ok", "last")
    assert journal.handled == [0, 1, 2, 3, 4, 5, "last"]
    assert journal.stopped == [StopReason(StopKind.STOP)]
    assert ref.statistics().state is ActorState.STOPPED


async def test_expected_error_reaches_the_caller_and_the_actor_keeps_running() -> None:
    journal = Journal()
    async with open_actor(Worker(journal), name="w") as ref:
        with pytest.raises(BadInput, match="no such node"):
            await ref.call(("bad", "no such node"))
        assert await ref.call("next") == ("ok", "next")
        stats = ref.statistics()
    assert (stats.crashes, stats.incarnations, journal.started) == (0, 1, 1)


async def test_crash_is_raised_out_of_open_actor_and_callers_learn_why() -> None:
    journal = Journal()
    gate = anyio.Event()
    outcomes: dict[str, BaseException] = {}
    with pytest.raises(RuntimeError, match="disk on fire") as raised:
        async with open_actor(Worker(journal), name="w") as ref:

            async def caller(key: str, message: Any) -> None:
                try:
                    await ref.call(message)
                except Exception as exc:  # noqa: BLE001 - recorded and checked below
                    outcomes[key] = exc

            await ref.cast(("gate", gate))
            async with anyio.create_task_group() as tg:
                tg.start_soon(caller, "crashed", ("crash", "disk on fire"))
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(caller, "queued", "after")
                await anyio.wait_all_tasks_blocked()
                gate.set()
    crash = raised.value
    assert isinstance(outcomes["crashed"], ActorCrashedError)
    assert outcomes["crashed"].__cause__ is crash
    assert isinstance(outcomes["queued"], ActorStoppedError)
    assert outcomes["queued"].__cause__ is crash
    assert journal.stopped == [StopReason(StopKind.CRASH, crash)]  # on_stop saw the crash
    with pytest.raises(ActorStoppedError) as late:
        await ref.call("too late")
    assert late.value.__cause__ is crash


async def test_a_crashed_idempotent_message_is_redelivered_to_the_next_incarnation() -> None:
    journal = Journal()
    cell = ActorCell(lambda: Worker(journal), name="w")
    crashes: list[Exception] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_restarting, cell, crashes)
        reply = await cell.ref.call(Retryable("crash-once", "flaky"))
        await cell.ref.stop()
    assert reply == ("ok", ("crash-once", "flaky"))
    assert [str(c) for c in crashes] == ["flaky"]
    assert journal.started == 2
    assert cell.statistics().restarts == 1


async def test_a_call_that_crashed_the_actor_is_not_redelivered_and_its_caller_gets_the_crash(
) -> None:
    journal = Journal()
    dead: list[tuple[Any, BaseException]] = []
    cell = ActorCell(lambda: Worker(journal), name="w", options=MailboxOptions(
        dead_letter=lambda message, exc: dead.append((message, exc))))
    crashes: list[Exception] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_restarting, cell, crashes)
        with pytest.raises(ActorCrashedError, match="not idempotent") as raised:
            await cell.ref.call(("crash-once", "after the effect"))
        assert await cell.ref.call("next") == ("ok", "next")  # restarted, still serving
        await cell.ref.stop()
    assert [str(c) for c in crashes] == ["after the effect"]
    assert raised.value.__cause__ is crashes[0]
    assert raised.value.redeliverable is False
    assert journal.handled == ["next"]  # the crashed message was never handled again
    assert dead == [(("crash-once", "after the effect"), crashes[0])]
    stats = cell.statistics()
    assert (stats.dead_letters, stats.crashes, stats.incarnations) == (1, 1, 2)


async def test_a_cast_that_crashed_the_actor_is_dropped_to_the_dead_letters() -> None:
    journal = Journal()
    dead: list[tuple[Any, BaseException]] = []
    cell = ActorCell(lambda: Worker(journal), name="w", options=MailboxOptions(
        dead_letter=lambda message, exc: dead.append((message, exc))))
    crashes: list[Exception] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_restarting, cell, crashes)
        await cell.ref.cast(("crash-once", "cast"))
        await cell.ref.cast("after")
        assert await cell.ref.call("last") == ("ok", "last")
        await cell.ref.stop()
    assert journal.handled == ["after", "last"]
    assert [m for m, _ in dead] == [("crash-once", "cast")]
    assert dead[0][1] is crashes[0]


async def test_idempotence_can_depend_on_the_message_content() -> None:
    journal = Journal()
    cell = ActorCell(lambda: Worker(journal), name="w")
    crashes: list[Exception] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_restarting, cell, crashes)
        assert await cell.ref.call(RetryableIf("crash-once", "safe", True)) == (
            "ok", ("crash-once", "safe"))
        with pytest.raises(ActorCrashedError) as raised:
            await cell.ref.call(RetryableIf("crash-once", "unsafe", False))
        await cell.ref.stop()
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert journal.handled == [("crash-once", "safe")]


def test_a_declaration_that_raises_is_no_declaration() -> None:
    class Broken(Idempotent):
        __slots__ = ()

        @property
        def idempotent(self) -> bool:
            raise KeyError("id")

    assert redeliverable(Retryable("a", "b"))
    assert not redeliverable(("a", "b"))
    assert not redeliverable(Broken())
    assert not redeliverable(RetryableIf("a", "b", False))


async def test_poison_message_goes_to_dead_letters_and_processing_continues() -> None:
    journal = Journal()
    dead: list[tuple[Any, BaseException]] = []
    cell = ActorCell(
        lambda: Worker(journal),
        name="w",
        options=MailboxOptions(
            poison_threshold=3, dead_letter=lambda message, exc: dead.append((message, exc))
        ),
    )
    crashes: list[Exception] = []
    poison = Retryable("crash", "always")
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_restarting, cell, crashes)
        await cell.ref.cast("before")
        async with anyio.create_task_group() as callers:
            poisoned: list[BaseException] = []

            async def call_poison() -> None:
                try:
                    await cell.ref.call(poison)
                except PoisonMessageError as exc:
                    poisoned.append(exc)

            callers.start_soon(call_poison)
            await anyio.wait_all_tasks_blocked()
            await cell.ref.cast("after")
        assert await cell.ref.call("last") == ("ok", "last")
        await cell.ref.stop()
    assert len(crashes) == 3
    assert journal.handled == ["before", "after", "last"]
    assert [m for m, _ in dead] == [poison]
    assert dead[0][1] is crashes[-1]
    assert poisoned[0].__cause__ is crashes[-1]
    stats = cell.statistics()
    assert (stats.dead_letters, stats.crashes, stats.incarnations) == (1, 3, 4)


async def test_between_incarnations_fail_fast_raises_and_wait_queues() -> None:
    journal = Journal()
    cell = ActorCell(lambda: Worker(journal), name="w",
                     options=MailboxOptions(backpressure=Backpressure.FAIL_FAST))

    async def run_once() -> None:
        with pytest.raises(RuntimeError, match="once"):
            await cell.run_incarnation()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_once)
        await cell.ref.cast(Retryable("crash", "once"))
    assert cell.state is ActorState.RESTARTING
    with pytest.raises(ActorRestartingError):
        await cell.ref.cast("x")
    with pytest.raises(ActorRestartingError):
        cell.ref.cast_nowait("x")
    await cell.ref.cast("queued", backpressure=Backpressure.WAIT)
    assert cell.statistics().mailbox_depth == 2  # the crashed message and "queued"
    cell.close(None)


async def test_stop_finishes_the_current_message_and_fails_queued_calls() -> None:
    journal = Journal()
    gate = anyio.Event()
    failures: list[BaseException] = []
    async with open_actor(Worker(journal), name="w") as ref:

        async def call(message: Any) -> None:
            try:
                await ref.call(message)
            except ActorStoppedError as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, ("gate", gate))
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(call, "queued-1")
            tg.start_soon(call, "queued-2")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(ref.stop)
            await anyio.wait_all_tasks_blocked()
            gate.set()
        with pytest.raises(ActorStoppedError):
            await ref.cast("after stop")
    assert journal.handled == [("gate", gate)]
    assert len(failures) == 2 and all(f.__cause__ is None for f in failures)
    assert journal.stopped == [StopReason(StopKind.STOP)]


async def test_cancellation_is_never_caught_by_the_loop() -> None:
    journal = Journal()
    cell = ActorCell(lambda: Worker(journal), name="w")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cell.run_incarnation)
            await cell.ref.cast(("gate", anyio.Event()))
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert scope.cancelled_caught
    assert cell.statistics().crashes == 0  # a cancellation is not a crash


async def test_a_failing_factory_is_a_crash_not_a_hang() -> None:
    def broken() -> Actor[object]:
        raise OSError("cannot rebuild the index")

    cell = ActorCell(broken, name="w")
    with pytest.raises(OSError, match="cannot rebuild"):
        await cell.run_incarnation()
    assert (cell.state, cell.statistics().crashes) == (ActorState.RESTARTING, 1)


class ClosesItsOwnCell(Actor[object]):
    """Its cell is closed while a message is being handled (the handler then returns)."""

    async def handle(self, message: Any) -> Any:
        if message == "close me":
            assert self._ref is not None
            self._ref.cell.close(None)  # as a supervisor giving the key up would
            return "handled"
        if message == "close me and crash":
            assert self._ref is not None
            self._ref.cell.close(None)
            raise RuntimeError("crashed after the close")
        return message


async def test_a_cell_closed_while_a_message_is_handled_ends_cleanly() -> None:
    """The queued callers are failed by the close; the handled one is not popped twice."""
    with pytest.raises(ActorStoppedError):  # the close, not an IndexError from the loop
        async with open_actor(ClosesItsOwnCell(), name="closing") as ref:
            with pytest.raises(ActorStoppedError):
                await ref.call("close me")
            await ref.call("after")


async def test_a_cell_closed_while_a_message_crashes_its_actor_ends_with_the_crash() -> None:
    with pytest.raises(RuntimeError, match="crashed after the close"):  # not an IndexError
        async with open_actor(ClosesItsOwnCell(), name="closing") as ref:
            with pytest.raises(ActorStoppedError):
                await ref.call("close me and crash")
