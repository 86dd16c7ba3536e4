"""Request[R]: a message that says what its reply is.

``handle`` takes any message and returns anything, so without help a
caller's ``await ref.call(message)`` is ``Any`` and a wrong reply type
surfaces far from the call. A message class that derives from
``Request[R]`` declares that its reply is an ``R``; ``ActorRef.call`` then
returns ``R`` and ``mypy --strict`` checks the caller. The handler stays
responsible for replying with an ``R`` (the kernel does not check at run time).

A request has no state of its own (``__slots__ = ()``), so frozen and
slotted dataclasses can derive from it, together with ``Idempotent``.
"""

from __future__ import annotations

from typing import Generic, TypeVar

R_co = TypeVar("R_co", covariant=True)


class Request(Generic[R_co]):
    """Base of a message whose reply to ``call`` is an ``R_co`` (module doc)."""

    __slots__ = ()
