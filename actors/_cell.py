"""The actor cell: the mailbox and the message loop that outlive incarnations.

Why a cell apart from the actor object? A crash destroys the actor's state,
but not the messages waiting for it, nor the references other code holds.
The cell owns both; each incarnation (one ``Actor`` instance made by the
factory) only borrows them. So a reference stays valid across restarts and
passivation, and no queued message is lost because an incarnation crashed
(the one that crashed it is delivered again only if it declares itself
idempotent).

Contract with whoever runs a cell (``open_actor``, a supervisor, a registry):

- ``await cell.run_incarnation()`` runs one incarnation: ``on_start``, the
  message loop, ``on_stop``. It returns ``Exit.STOPPED`` (a stop was asked)
  or ``Exit.PASSIVATED`` (idle, mailbox empty), or raises the incarnation's
  crash. On a crash the cell is ``RESTARTING`` and the runner decides: run
  another incarnation, or ``close(crash)`` the cell for good. The message
  being handled stays at the head of the mailbox with its crash count only
  if it is :class:`~actors._idempotent.Idempotent` (redelivered, up to
  its options' ``poison_threshold``); any other is taken out and its caller gets
  ``ActorCrashedError``, since its effect may already have happened.
- Only ``Exception`` is caught; cancellation and other ``BaseException``
  always propagate.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

from actors._actor import PASSIVATION, STOP, Actor, StopReason
from actors._errors import (
    ActorCrashedError,
    ActorRestartingError,
    ActorStoppedError,
    MailboxFull,
    PoisonMessageError,
    UnhandledMessageError,
)
from actors._idempotent import redeliverable
from actors._mailbox import Backpressure, Envelope, Inspect, Mailbox, Passivate, ReplySlot, Stop
from actors._options import MailboxOptions
from actors._ref import ActorRef

_log = logging.getLogger("actors")

M_contra = TypeVar("M_contra", contravariant=True)  # the messages of the cell's actor

# A busy actor whose handler never awaits would otherwise keep the event loop
# until its mailbox is empty; yielding every few messages keeps it fair.
_FAIRNESS_BATCH = 32


class ActorState(enum.Enum):
    IDLE = "idle"  # no incarnation: not started yet, or passivated
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"  # crashed; its runner decides what comes next
    PASSIVATING = "passivating"  # idle; running on_stop, messages are still queued
    STOPPING = "stopping"  # a stop was taken; new sends are refused
    STOPPED = "stopped"


class Exit(enum.Enum):
    """How an incarnation ended without crashing."""

    STOPPED = "stopped"
    PASSIVATED = "passivated"


@dataclass(frozen=True)
class ActorStatistics:
    """A synchronous snapshot of one cell, for dashboards and tests."""

    name: str
    state: ActorState
    mailbox_depth: int  # ordinary messages queued, including the one being handled
    control_depth: int
    incarnations: int
    restarts: int
    processed: int
    crashes: int
    dropped_expired: int  # calls skipped because their caller gave up before dequeue
    dropped_replies: int  # replies that arrived after their caller gave up
    dead_letters: int  # set aside: by a crash (poison, not idempotent), or a cast nobody handles


class ActorCell(Generic[M_contra]):
    """The mailbox, the loop and the counters of one actor; see the module doc."""

    def __init__(
        self,
        factory: Callable[[], Actor[M_contra]],
        *,
        name: str,
        options: MailboxOptions = MailboxOptions(),
        idle_timeout: float | None = None,
    ) -> None:
        self.name = name
        self.factory = factory
        self.options = options
        self.mailbox: Mailbox[M_contra] = Mailbox(options.capacity)
        self.idle_timeout = idle_timeout
        self.state = ActorState.IDLE
        self.actor: Actor[M_contra] | None = None
        self.ref: ActorRef[M_contra] = ActorRef(self)
        # Set by a registry: called once when a send finds the cell IDLE.
        self.on_activate: Callable[[ActorCell[M_contra]], None] | None = None
        self.detached = False  # left its registry; refs re-resolve their key
        self.closed = False
        self.cause: BaseException | None = None
        self._current: Envelope[M_contra] | None = None
        self._ended: list[anyio.Event] = []
        self.incarnations = 0
        self.processed = 0
        self.crashes = 0
        self.dropped_expired = 0
        self.dropped_replies = 0
        self.dead_letters = 0

    # -- senders -----------------------------------------------------------

    def _refuse(self, backpressure: Backpressure) -> None:
        state = self.state
        if state is ActorState.STOPPED or state is ActorState.STOPPING:
            raise ActorStoppedError(self.name) from self.cause
        if state is ActorState.RESTARTING and backpressure is Backpressure.FAIL_FAST:
            raise ActorRestartingError(self.name)

    def _accept(self, envelope: Envelope[M_contra]) -> None:
        self.mailbox.put(envelope)
        if self.state is ActorState.IDLE and self.on_activate is not None:
            self.state = ActorState.STARTING
            self.on_activate(self)

    def put_nowait(self, envelope: Envelope[M_contra], backpressure: Backpressure | None = None) -> None:
        self._refuse(backpressure or self.options.backpressure)
        if self.mailbox.full():
            raise MailboxFull(self.name, self.mailbox.capacity)
        self._accept(envelope)

    async def put(self, envelope: Envelope[M_contra], backpressure: Backpressure | None = None) -> None:
        backpressure = backpressure or self.options.backpressure
        while True:
            self._refuse(backpressure)
            if not self.mailbox.full():
                self._accept(envelope)
                return
            if backpressure is Backpressure.FAIL_FAST:
                raise MailboxFull(self.name, self.mailbox.capacity)
            await self.mailbox.wait_for_space()

    def post_system(self, message: M_contra) -> None:
        """Queue a runtime message (e.g. a child exit) on the control lane for ``handle``.

        Dropped if the cell is closed: there is nobody left to tell.
        """
        if not self.closed:
            self.mailbox.put_control(message)

    def request_passivate(self) -> None:
        """Ask the running incarnation to passivate if its mailbox is empty then."""
        if self.state is ActorState.STARTING or self.state is ActorState.RUNNING:
            self.mailbox.put_control(Passivate())

    def request_inspect(self, slot: ReplySlot) -> None:
        self._refuse(Backpressure.WAIT)
        self.mailbox.put_control(Inspect(slot))

    async def stop(self) -> None:
        """Ask for a graceful stop and wait until the incarnation has ended."""
        if self.closed:
            return
        if self.state is ActorState.IDLE:
            if self.on_activate is None:
                self.close(None)  # never started: nothing to finish
            return  # a passivated keyed actor has nothing running to stop
        ended = anyio.Event()
        self._ended.append(ended)
        self.mailbox.put_control(Stop())
        await ended.wait()

    # -- runner side -------------------------------------------------------

    async def run_incarnation(self, on_started: Callable[[], None] | None = None) -> Exit:
        """Run one incarnation; see the module doc for the contract.

        ``on_started`` is called once ``on_start`` has returned, so a
        supervisor can start its children one after the other, as OTP does.
        """
        if self.closed:
            raise ActorStoppedError(self.name) from self.cause
        self.state = ActorState.STARTING
        self.incarnations += 1
        try:
            actor = self.factory()
        except Exception as exc:
            self._note_crash(exc)  # a factory that fails is a crash of this incarnation
            self._wake_stop_waiters()
            raise
        actor._ref = self.ref
        self.actor = actor
        try:
            if type(actor).lifespan is Actor.lifespan:  # the common case: skip a no-op context
                outcome = await self._live(actor, on_started)
            else:
                async with actor.lifespan():
                    outcome = await self._live(actor, on_started)
        finally:
            self._current = None
            self._wake_stop_waiters()
        if outcome is Exit.STOPPED:
            self.state = ActorState.STOPPED
            self._fail_queued(None)
        return outcome

    async def _live(self, actor: Actor[M_contra], on_started: Callable[[], None] | None) -> Exit:
        try:
            await actor.on_start()
            self.state = ActorState.RUNNING
            if on_started is not None:
                on_started()
            outcome = await self._loop(actor)
        except Exception as exc:
            self._note_crash(exc)
            await actor.on_stop(StopReason.crashed(exc))
            raise
        try:
            await actor.on_stop(STOP if outcome is Exit.STOPPED else PASSIVATION)
        except Exception as exc:
            self._note_crash(exc)
            raise
        return outcome

    def detach(self) -> None:
        """Leave the registry: passivated with an empty mailbox."""
        self.state = ActorState.IDLE
        self.actor = None
        self.detached = True

    def close(self, cause: BaseException | None) -> None:
        """Stop for good; fail every queued caller (``cause`` is their ``__cause__``)."""
        self.closed = True
        self.state = ActorState.STOPPED
        self.cause = cause
        self.actor = None
        self._fail_queued(cause)
        while self.mailbox.control:
            item = self.mailbox.control.popleft()
            if isinstance(item, Inspect):
                item.slot.fail(_with_cause(ActorStoppedError(self.name), cause))
        self._wake_stop_waiters()

    def statistics(self) -> ActorStatistics:
        return ActorStatistics(
            name=self.name,
            state=self.state,
            mailbox_depth=len(self.mailbox.ordinary),
            control_depth=len(self.mailbox.control),
            incarnations=self.incarnations,
            restarts=max(0, self.incarnations - 1),
            processed=self.processed,
            crashes=self.crashes,
            dropped_expired=self.dropped_expired,
            dropped_replies=self.dropped_replies,
            dead_letters=self.dead_letters,
        )

    # -- internals ---------------------------------------------------------

    async def _loop(self, actor: Actor[M_contra]) -> Exit:
        mailbox = self.mailbox
        ordinary = mailbox.ordinary
        control = mailbox.control
        handle = actor.handle
        # An unknown message is the sender's mistake, never a crash.
        expected: tuple[type[Exception], ...] = (UnhandledMessageError, *actor.expected_errors)
        idle_timeout = self.idle_timeout
        batch = 0
        while True:
            if control:
                item = control.popleft()
                if isinstance(item, Stop):
                    self.state = ActorState.STOPPING
                    return Exit.STOPPED
                if isinstance(item, Passivate):
                    if not ordinary:  # no await between this check and the decision
                        self.state = ActorState.PASSIVATING
                        return Exit.PASSIVATED
                    continue
                if isinstance(item, Inspect):
                    item.slot.resolve(actor.inspect())
                    continue
                await handle(item)  # a runtime message, e.g. a supervisor's child exit
                continue
            if ordinary:
                envelope = ordinary[0]
                slot = envelope.slot
                if slot is not None and slot.abandoned:
                    mailbox.pop_head()
                    self.dropped_expired += 1
                    continue
                self._current = envelope
                try:
                    reply = await handle(envelope.message)
                except expected as exc:
                    reply = None
                    if slot is None:
                        if isinstance(exc, UnhandledMessageError):
                            self._set_aside(envelope.message, exc)  # a cast nobody handles
                    elif not slot.fail(exc):
                        self.dropped_replies += 1
                        slot = None
                self._current = None
                if self.closed:  # closed while it was handled: its caller has been failed
                    return Exit.STOPPED
                mailbox.pop_head()
                self.processed += 1
                if slot is not None and not slot.done and not slot.resolve(reply):
                    self.dropped_replies += 1
                batch += 1
                if batch >= _FAIRNESS_BATCH:
                    batch = 1
                    await anyio.lowlevel.checkpoint()
                continue
            if batch:
                # Drained: yield once before sleeping. A sender that casts in a loop
                # (each cast a checkpoint) has usually queued the next message by
                # then, which saves a wakeup Event per message.
                batch = 0
                await anyio.lowlevel.checkpoint()
                continue
            if idle_timeout is None:
                await mailbox.wait_for_message()
            else:
                with anyio.move_on_after(idle_timeout):
                    await mailbox.wait_for_message()
                if not ordinary and not control:
                    self.state = ActorState.PASSIVATING
                    return Exit.PASSIVATED

    def _note_crash(self, exc: Exception) -> None:
        self.crashes += 1
        self.state = ActorState.RESTARTING
        envelope = self._current
        self._current = None
        if envelope is None:
            return  # crashed outside a message (on_start, on_stop, a runtime message)
        envelope.crashes += 1
        error: Exception
        if redeliverable(envelope.message):
            if envelope.crashes < self.options.poison_threshold:
                return  # stays at the head, redelivered to the next incarnation
            error = PoisonMessageError(self.name, envelope.message, envelope.crashes)
        else:
            # Its effect may have happened before the crash: never repeat it.
            error = ActorCrashedError(self.name, envelope.message, redeliverable=False)
        ordinary = self.mailbox.ordinary
        if not ordinary or ordinary[0] is not envelope:
            return  # the cell was closed meanwhile: the close failed its caller
        self.mailbox.pop_head()
        self.dead_letters += 1
        if envelope.slot is not None:
            envelope.slot.fail(_with_cause(error, exc))
        dead_letter = self.options.dead_letter
        if dead_letter is not None:
            dead_letter(envelope.message, exc)

    def _set_aside(self, message: object, error: BaseException) -> None:
        """A message nobody will handle: to the dead-letter callback, else a log line."""
        self.dead_letters += 1
        dead_letter = self.options.dead_letter
        if dead_letter is not None:
            dead_letter(message, error)
        else:
            _log.warning("%s", error)

    def _fail_queued(self, cause: BaseException | None) -> None:
        ordinary = self.mailbox.ordinary
        while ordinary:
            envelope = ordinary.popleft()
            slot = envelope.slot
            if slot is None:
                continue
            error: Exception
            if envelope.crashes and cause is not None:
                error = ActorCrashedError(self.name, envelope.message)
            else:
                error = ActorStoppedError(self.name)
            slot.fail(_with_cause(error, cause))
        self.mailbox.release_senders()

    def _wake_stop_waiters(self) -> None:
        ended, self._ended = self._ended, []
        for event in ended:
            event.set()


def _with_cause(error: Exception, cause: BaseException | None) -> Exception:
    error.__cause__ = cause
    return error
