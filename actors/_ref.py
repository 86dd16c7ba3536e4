"""ActorRef: the handle other code holds to talk to an actor.

Why a handle and not the actor object? The actor object is one incarnation
and dies with a crash or a passivation; the reference points at the cell,
which outlives them, so it stays valid across restarts. A keyed actor's
reference also knows how to find its key again after the cell has left the
registry, so even a reference kept across a passivation reaches the one live
activation for that key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import anyio
import anyio.lowlevel

from actors._errors import CallTimeoutError
from actors._mailbox import Backpressure, Envelope, ReplySlot
from actors._request import Request

if TYPE_CHECKING:
    from actors._cell import ActorCell, ActorStatistics


R = TypeVar("R")


class ActorRef:
    """Send to an actor: ``call`` (request/reply), ``cast`` (fire and forget), control.

    As in trio, nothing times out by default: a ``call`` waits for its reply
    until it comes or the caller's cancel scope (``anyio.fail_after``) ends
    it. ``timeout`` (seconds) or ``deadline`` (an absolute
    ``anyio.current_time()``) bound one call and raise ``CallTimeoutError``, which
    names the actor; with both, whichever comes first. ``backpressure``
    overrides the actor's ``MailboxOptions.backpressure`` for one send.
    """

    __slots__ = ("_cell", "_resolve")

    def __init__(self, cell: ActorCell, resolve: Callable[[], ActorCell] | None = None) -> None:
        self._cell = cell
        self._resolve = resolve

    @property
    def name(self) -> str:
        return self._cell.name

    @property
    def cell(self) -> ActorCell:
        """The live cell behind this reference (re-resolved after a passivation)."""
        cell = self._cell
        if cell.detached and self._resolve is not None:
            cell = self._cell = self._resolve()
        return cell

    @overload
    async def call(
        self,
        message: Request[R],
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        backpressure: Backpressure | None = None,
    ) -> R: ...

    @overload
    async def call(
        self,
        message: object,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        backpressure: Backpressure | None = None,
    ) -> object: ...

    async def call(
        self,
        message: object,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        backpressure: Backpressure | None = None,
    ) -> object:
        """Send ``message`` and wait for the reply of ``handle``.

        A :class:`~actors.Request` ``[R]`` returns an ``R``; any other message
        returns ``object`` (the reply type is unknown to the type checker).

        Raises what ``handle`` raised if its type is in ``expected_errors``;
        ``CallTimeoutError``, ``ActorStoppedError``, ``ActorCrashedError``, ``PoisonMessageError``,
        ``MailboxFull`` or ``ActorRestartingError`` otherwise.
        """
        cell = self.cell
        slot = ReplySlot()
        envelope = Envelope(message, slot)
        if timeout is None and deadline is None:
            try:
                await cell.put(envelope, backpressure)
                await slot.event.wait()
            finally:
                slot.abandoned = not slot.done
        else:
            now = anyio.current_time()
            limit = now + timeout if timeout is not None else float("inf")
            if deadline is not None:
                limit = min(limit, deadline)
            with anyio.CancelScope(deadline=limit) as scope:
                try:
                    await cell.put(envelope, backpressure)
                    await slot.event.wait()
                finally:
                    slot.abandoned = not slot.done
            if scope.cancelled_caught and not slot.done:
                raise CallTimeoutError(cell.name, message, limit - now)
        if slot.error is not None:
            raise slot.error
        return slot.value

    async def cast(self, message: Any, *, backpressure: Backpressure | None = None) -> None:
        """Queue ``message`` without waiting for it to be handled.

        A checkpoint, as in trio: it yields to other tasks even when the
        mailbox has room, and if the caller is cancelled on entry the message
        is not sent. It waits only for space (``Backpressure.WAIT``).
        """
        await anyio.lowlevel.checkpoint()
        await self.cell.put(Envelope(message, None), backpressure)

    def cast_nowait(self, message: Any) -> None:
        """Queue ``message`` now, or raise ``MailboxFull`` instead of waiting for space.

        Never yields (not a checkpoint). ``MailboxFull`` is also an
        ``anyio.WouldBlock``, the error trio's ``*_nowait`` calls raise. Also
        raises ``ActorStoppedError``, and ``ActorRestartingError`` under ``FAIL_FAST``.
        """
        self.cell.put_nowait(Envelope(message, None))

    async def inspect(self, *, timeout: float | None = None) -> object:
        """The actor's ``inspect()`` snapshot, taken between two messages (control lane).

        Waits for the running handler to finish; ``timeout`` bounds the wait.
        """
        cell = self.cell
        slot = ReplySlot()
        with anyio.move_on_after(timeout) as scope:
            try:
                cell.request_inspect(slot)
                await slot.event.wait()
            finally:
                slot.abandoned = not slot.done
        if scope.cancelled_caught and not slot.done:
            raise CallTimeoutError(cell.name, "inspect()", timeout or 0.0)
        if slot.error is not None:
            raise slot.error
        return slot.value

    def passivate(self) -> None:
        """Ask a keyed actor to passivate now (control lane), e.g. from an idle watchdog.

        Ignored if messages are queued when the actor gets to it: it is not idle.
        For an actor outside a registry, passivating is a normal exit.
        """
        self.cell.request_passivate()

    async def stop(self) -> None:
        """Stop gracefully: finish the current message, run ``on_stop``; queued calls fail."""
        await self.cell.stop()

    def statistics(self) -> ActorStatistics:
        return self.cell.statistics()

    def __repr__(self) -> str:
        return f"<ActorRef {self.name!r} {self.cell.state.value}>"
