"""Which messages the kernel may deliver again after they crashed an actor.

The problem: a handler can crash *after* its durable effect (a turn
appended, a file installed) and before it replies. Delivering that message
to the next incarnation repeats the effect: the same turn appended twice.
Only the message's author knows whether handling it twice is the same as
handling it once, so redelivery is opt-in, declared on the message type.

Contract:

- A message whose class derives from :class:`Idempotent` (and whose
  :attr:`Idempotent.idempotent` is true) stays at the head of the mailbox
  when it crashes the actor and is delivered to the next incarnation, up to
  the cell's ``poison_threshold``; then its caller gets ``PoisonMessageError``.
- Any other message is taken out of the mailbox by the crash and never
  delivered again: its caller gets ``ActorCrashedError`` (the crash in
  ``__cause__``), a cast is dropped, and either goes to the dead-letter
  callback, as OTP and Akka do. Its effect may or may not have happened.

Declare a message idempotent only if a second delivery after a crash at any
point of its handler leaves the same state and gives the same reply as one
delivery: reads, "set X to V", merges of fixed values, operations keyed by
an id the caller chose.
"""

from __future__ import annotations

__all__ = ["Idempotent", "redeliverable"]


class Idempotent:
    """Marker base of a message that is safe to deliver again after a crash (module doc).

    Has no state (``__slots__ = ()``), so frozen and slotted dataclasses can
    derive from it. A message type whose safety depends on its content (an
    append is safe only with an id the caller chose) overrides
    :attr:`idempotent`; the property must not raise.
    """

    __slots__ = ()

    @property
    def idempotent(self) -> bool:
        """True: this message may be delivered again after it crashed the actor."""
        return True


def redeliverable(message: object) -> bool:
    """Whether the kernel may deliver ``message`` again after it crashed an actor."""
    if not isinstance(message, Idempotent):
        return False
    try:
        return bool(message.idempotent)
    except Exception:  # noqa: BLE001 - a faulty declaration is no declaration
        return False
