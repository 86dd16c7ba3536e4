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
from typing import TYPE_CHECKING, Generic, TypeVar, cast, overload

import anyio
import anyio.lowlevel

from actors._mailbox import Backpressure, Envelope, ReplySlot
from actors._request import Asks

if TYPE_CHECKING:
    from actors._cell import ActorCell, ActorStatistics


# The messages the actor accepts: a reference that takes more may stand
# where one that takes fewer is expected (anyio's ``ObjectSendStream[T]``).
M_contra = TypeVar("M_contra", contravariant=True)
R = TypeVar("R")


class ActorRef(Generic[M_contra]):
    """Send to an actor that accepts ``M``: ``call`` (request/reply), ``cast``, control.

    ``ActorRef[M]`` takes only ``M`` messages, checked by ``mypy --strict``;
    ``call`` with a :class:`~actors.Request` ``[R]`` returns an ``R``.

    As in trio, nothing times out here: a ``call`` waits for its reply until
    it comes or the caller's own cancel scope (``anyio.fail_after``,
    ``move_on_after``) ends the wait; a reply that arrives later is dropped.
    ``backpressure`` overrides the actor's ``MailboxOptions.backpressure``
    for one send.
    """

    __slots__ = ("_cell", "_resolve")

    def __init__(
        self,
        cell: ActorCell[M_contra],
        resolve: Callable[[], ActorCell[M_contra]] | None = None,
    ) -> None:
        self._cell = cell
        self._resolve = resolve

    @property
    def name(self) -> str:
        return self._cell.name

    @property
    def cell(self) -> ActorCell[M_contra]:
        """The live cell behind this reference (re-resolved after a passivation)."""
        cell = self._cell
        if cell.detached and self._resolve is not None:
            cell = self._cell = self._resolve()
        return cell

    @overload
    async def call(
        self, message: Asks[M_contra, R], *, backpressure: Backpressure | None = None
    ) -> R: ...

    @overload
    async def call(
        self, message: M_contra, *, backpressure: Backpressure | None = None
    ) -> object: ...

    async def call(
        self,
        message: M_contra | Asks[M_contra, object],
        *,
        backpressure: Backpressure | None = None,
    ) -> object:
        """Send ``message`` and wait for the reply of ``handle``.

        A :class:`~actors.Request` ``[R]`` returns an ``R``; any other message
        returns ``object`` (the reply type is unknown to the type checker).

        Raises what ``handle`` raised if its type is in ``expected_errors``;
        ``ActorStoppedError``, ``ActorCrashedError``, ``PoisonMessageError``,
        ``MailboxFull`` or ``ActorRestartingError`` otherwise. Cancelled by
        the caller's cancel scope like any checkpoint: the message is then
        skipped if still queued, and its reply dropped if it comes later.
        """
        cell = self.cell
        slot = ReplySlot()
        try:
            # An Asks[M, R] is an M (its own class is one), which the types cannot say.
            await cell.put(Envelope(cast("M_contra", message), slot), backpressure)
            await slot.event.wait()
        finally:
            slot.abandoned = not slot.done
        if slot.error is not None:
            raise slot.error
        return slot.value

    async def cast(
        self, message: M_contra, *, backpressure: Backpressure | None = None
    ) -> None:
        """Queue ``message`` without waiting for it to be handled.

        A checkpoint, as in trio: it yields to other tasks even when the
        mailbox has room, and if the caller is cancelled on entry the message
        is not sent. It waits only for space (``Backpressure.WAIT``).
        """
        await anyio.lowlevel.checkpoint()
        await self.cell.put(Envelope(message, None), backpressure)

    def cast_nowait(self, message: M_contra) -> None:
        """Queue ``message`` now, or raise ``MailboxFull`` instead of waiting for space.

        Never yields (not a checkpoint). ``MailboxFull`` is also an
        ``anyio.WouldBlock``, the error trio's ``*_nowait`` calls raise. Also
        raises ``ActorStoppedError``, and ``ActorRestartingError`` under ``FAIL_FAST``.
        """
        self.cell.put_nowait(Envelope(message, None))

    async def inspect(self) -> object:
        """The actor's ``inspect()`` snapshot, taken between two messages (control lane).

        Waits for the running handler to finish, or until the caller's cancel
        scope ends the wait.
        """
        cell = self.cell
        slot = ReplySlot()
        try:
            cell.request_inspect(slot)
            await slot.event.wait()
        finally:
            slot.abandoned = not slot.done
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
