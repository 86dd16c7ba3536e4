"""MailboxOptions: how one actor's mailbox behaves, as one validated value.

Every place that makes a mailbox (``open_actor``, ``open_registry``, a
``ChildSpec``, a ``Supervisor`` for its children, a ``DynamicSupervisor``
for its keyed children) takes the same knobs. Passing them as one frozen
value keeps their defaults and their validation in one place; a variant is
``dataclasses.replace(options, capacity=...)``, validated again.

Contract: constructing an invalid ``MailboxOptions`` raises ``ValueError``
(``TypeError`` for a wrong type) saying what to pass instead; a cell never
checks them again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actors._mailbox import Backpressure

# Called with a message set aside by a crash (not idempotent, or poison) and the crash.
DeadLetter = Callable[[object, BaseException], None]


@dataclass(frozen=True)
class MailboxOptions:
    """The mailbox of one actor (see the module doc).

    - ``capacity``: ordinary messages queued at most (the control lane is not bounded).
    - ``backpressure``: what a send does when the mailbox is full or the actor is
      restarting (``Backpressure.WAIT`` or ``FAIL_FAST``); one send may override it.
    - ``poison_threshold``: crashes in a row on one idempotent message before it is
      set aside as poison.
    - ``dead_letter``: called with each message a crash set aside, and the crash.
    """

    capacity: int = 1000
    backpressure: Backpressure = Backpressure.WAIT
    poison_threshold: int = 3
    dead_letter: DeadLetter | None = None

    def __post_init__(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int):
            raise TypeError(f"mailbox capacity must be a whole number, got {self.capacity!r}")
        if self.capacity < 1:
            raise ValueError(
                f"mailbox capacity must be at least 1, got {self.capacity}; a mailbox that "
                "holds nothing can never be sent to"
            )
        if not isinstance(self.backpressure, Backpressure):
            raise TypeError(
                f"backpressure must be Backpressure.WAIT or Backpressure.FAIL_FAST, got "
                f"{self.backpressure!r}"
            )
        if isinstance(self.poison_threshold, bool) or not isinstance(self.poison_threshold, int):
            raise TypeError(
                f"poison_threshold must be a whole number, got {self.poison_threshold!r}"
            )
        if self.poison_threshold < 1:
            raise ValueError(
                f"poison_threshold must be at least 1 (set aside after the first crash), got "
                f"{self.poison_threshold}"
            )
        if self.dead_letter is not None and not callable(self.dead_letter):
            raise TypeError(
                f"dead_letter must be a callable (message, crash) -> None, or None, got "
                f"{self.dead_letter!r}"
            )
