"""The errors the actor kernel raises to the code that talks to an actor.

Two kinds of failure must never look alike: *you* did something the actor
cannot accept (you called a stopped actor, its mailbox is full) and *it* broke (the actor crashed while handling your message). The
second kind always carries the actor's own exception in ``__cause__``, so a
crash is never reduced to a message string.

The tree::

    ActorError
    ├── ActorStoppedError      you sent to an actor that is stopped (cause: its crash, if any)
    ├── ActorCrashedError      it crashed on your message and will not retry it (cause: the crash);
    │                          the effect may or may not have happened
    ├── ActorRestartingError   fail-fast send while it is between incarnations
    ├── MailboxFull            (also an anyio.WouldBlock) cast_nowait or fail-fast send, mailbox full
    ├── PoisonMessageError     your message crashed it N times in a row (cause: the last crash)
    └── UnhandledMessageError  it has no handler for your message's type (it keeps running)

No error of the kernel's says "too slow": as in trio, a caller that will
not wait longer ends its own wait with a cancel scope (``anyio.fail_after``
raises ``TimeoutError`` there), and a reply that comes later is dropped.
"""

from __future__ import annotations

import anyio


class ActorError(Exception):
    """Root of every error raised by the actor kernel."""


class ActorStoppedError(ActorError):
    """You sent to, or were waiting on, an actor that has stopped.

    If it stopped because it crashed, that crash is ``__cause__``.
    """

    def __init__(self, name: str, detail: str = "") -> None:
        self.name = name
        super().__init__(
            f"actor {name!r} is stopped{detail}; get a fresh reference from its supervisor "
            "or registry, or start it again"
        )


class ActorCrashedError(ActorError):
    """The actor crashed while handling your message and will not retry it.

    Either the message is not :class:`~actors.Idempotent` (``redeliverable``
    is False: delivering it again could repeat an effect that happened
    before the crash), or the actor was not restarted. The message's effect
    may or may not have happened. The actor's own exception is ``__cause__``.
    """

    def __init__(self, name: str, message: object, *, redeliverable: bool = True) -> None:
        self.name = name
        self.message = message
        self.redeliverable = redeliverable
        if redeliverable:
            detail = " and was not restarted to finish it"
        else:
            detail = (
                "; the message is not idempotent (actors.Idempotent), so it was not delivered "
                "again and may or may not have taken effect: check before resending it"
            )
        super().__init__(
            f"actor {name!r} crashed while handling {_short(message)}{detail}; see __cause__ "
            "for the crash"
        )


class ActorRestartingError(ActorError):
    """A fail-fast send reached an actor between two incarnations."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"actor {name!r} is restarting after a crash; retry later, or send with "
            "backpressure=Backpressure.WAIT to queue the message until it is back"
        )


class MailboxFull(ActorError, anyio.WouldBlock):
    """A send that may not wait found the actor's mailbox at capacity (it is overloaded).

    Raised by ``cast_nowait`` and by ``Backpressure.FAIL_FAST`` sends; an
    ``anyio.WouldBlock`` too, like trio's ``*_nowait`` errors.
    """

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        super().__init__(
            f"mailbox of actor {name!r} is full ({capacity} messages); shed the load, retry "
            "later, or await cast/call with backpressure=Backpressure.WAIT to wait for space"
        )


class PoisonMessageError(ActorError):
    """Your message crashed the actor several times in a row and was set aside.

    It went to the dead-letter callback instead of crashing the actor again;
    the last crash is ``__cause__``.
    """

    def __init__(self, name: str, message: object, crashes: int) -> None:
        self.name = name
        self.message = message
        self.crashes = crashes
        super().__init__(
            f"{_short(message)} crashed actor {name!r} {crashes} times in a row and was handed "
            "to the dead-letter callback; fix the message or the handler, do not resend it as is"
        )


class UnhandledMessageError(ActorError):
    """The actor does not handle messages of this type; nothing happened.

    An actor's ``handle`` raises it for a message it has no case for (the
    base ``Actor.handle`` does for every message). It is never a crash: the
    kernel hands it to a ``call``'s caller, and sets a ``cast`` aside to the
    dead letters (the ``MailboxOptions.dead_letter`` callback, else a log line).
    """

    def __init__(self, name: str, message: object, hint: str = "") -> None:
        self.name = name
        self.message = message
        self.message_type = type(message).__name__
        super().__init__(
            f"actor {name!r} does not handle {self.message_type} messages ({_short(message)}); "
            + (hint or "send one of the messages its handle() matches, or add a case for this one")
        )


def _short(message: object) -> str:
    text = repr(message)
    return text if len(text) <= 80 else text[:77] + "..."
