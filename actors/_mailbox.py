"""The mailbox: two deques, a wakeup and a reply slot per call.

Why not an anyio memory stream? A stream hands a message over and forgets
it; an actor's mailbox must keep the message being handled at its head, so
that a crash can redeliver it to the next incarnation if it is idempotent
(no queued message is lost because an incarnation crashed), and must let control
messages (stop, passivate, inspect) overtake ordinary ones. Two deques and an
event do both, with no allocation per message beyond the envelope and, for a
call, its reply slot.

Each call owns its reply slot. A caller that gives up (its cancel scope ends the wait)
marks its slot abandoned; a reply that arrives later lands in that slot and
is dropped, so it can never be taken by a later call.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Generic, TypeVar

import anyio

M = TypeVar("M")  # the messages of the actor the mailbox belongs to


class Backpressure(enum.Enum):
    """What a send does when the mailbox is full or the actor is restarting."""

    WAIT = "wait"  # wait for space; sends during a restart are queued
    FAIL_FAST = "fail_fast"  # raise MailboxFull / ActorRestartingError at once


class ReplySlot:
    """Where one call's reply lands; owned by exactly one call."""

    __slots__ = ("abandoned", "done", "error", "event", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.value: object = None
        self.error: BaseException | None = None
        self.done = False
        self.abandoned = False

    def resolve(self, value: object) -> bool:
        """Deliver a reply; False (dropped) if the caller already gave up."""
        if self.done or self.abandoned:
            return False
        self.value = value
        self.done = True
        self.event.set()
        return True

    def fail(self, error: BaseException) -> bool:
        """Deliver an error to raise in the caller; False if the caller gave up."""
        if self.done or self.abandoned:
            return False
        self.error = error
        self.done = True
        self.event.set()
        return True


class Envelope(Generic[M]):
    """One queued message, its reply slot (None for a cast) and its crash count."""

    __slots__ = ("crashes", "message", "slot")

    def __init__(self, message: M, slot: ReplySlot | None) -> None:
        self.message = message
        self.slot = slot
        self.crashes = 0  # consecutive crashes of this actor while handling it


class Stop:
    """Control: finish the current message, run on_stop, end the incarnation."""

    __slots__ = ()


class Passivate:
    """Control: end the incarnation if the mailbox is empty (keyed actors)."""

    __slots__ = ()


class Inspect:
    """Control: reply with the actor's ``inspect()`` between two messages."""

    __slots__ = ("slot",)

    def __init__(self, slot: ReplySlot) -> None:
        self.slot = slot


class Mailbox(Generic[M]):
    """Bounded ordinary lane, unbounded control lane, one waiting consumer.

    The control lane is unbounded because its producers are the runtime
    itself (supervisors, registries, inspection), never user traffic.
    """

    __slots__ = ("_space", "_wakeup", "capacity", "control", "ordinary")

    def __init__(self, capacity: int) -> None:  # validated by MailboxOptions
        self.ordinary: deque[Envelope[M]] = deque()
        self.control: deque[Stop | Passivate | Inspect | M] = deque()
        self.capacity = capacity
        self._wakeup: anyio.Event | None = None
        self._space: anyio.Event | None = None

    def __len__(self) -> int:
        return len(self.ordinary)

    def full(self) -> bool:
        return len(self.ordinary) >= self.capacity

    def empty(self) -> bool:
        return not self.ordinary and not self.control

    def put(self, envelope: Envelope[M]) -> None:
        self.ordinary.append(envelope)
        self.notify()

    def put_control(self, item: Stop | Passivate | Inspect | M) -> None:
        self.control.append(item)
        self.notify()

    def notify(self) -> None:
        """Wake the consumer if it is waiting."""
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    async def wait_for_message(self) -> None:
        """Return when either lane may hold something (the consumer re-checks)."""
        if self.ordinary or self.control:
            return
        wakeup = self._wakeup = anyio.Event()
        await wakeup.wait()

    def pop_head(self) -> Envelope[M]:
        """Remove the head of the ordinary lane and let one blocked sender in."""
        envelope = self.ordinary.popleft()
        space = self._space
        if space is not None:
            self._space = None
            space.set()
        return envelope

    async def wait_for_space(self) -> None:
        """Wait until the ordinary lane has shrunk (the sender re-checks)."""
        space = self._space
        if space is None:
            space = self._space = anyio.Event()
        await space.wait()

    def release_senders(self) -> None:
        """Wake every blocked sender (the mailbox was closed or drained)."""
        space = self._space
        if space is not None:
            self._space = None
            space.set()
