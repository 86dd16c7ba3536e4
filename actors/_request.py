"""Request[R]: a message that says what its reply is.

``ActorRef[M].call`` must check two things about one argument: that the
actor takes it (it is an ``M``) and what its reply is. Python's types have
no intersection, and a method binds its reference's ``M`` before it looks
at the argument, so neither ``message: M`` nor ``message: Request[R]`` alone
does both. A message class that derives from ``Request[R]`` therefore
carries two typing-only members, one naming the message's own class and one
its reply, and ``call`` takes an :class:`Asks` ``[M, R]``: a message whose own
class is an ``M`` and whose reply is an ``R``. ``mypy --strict`` then refuses
a request the actor does not take and types the reply. The handler stays
responsible for replying with an ``R`` (the kernel does not check at run time).

A request has no state of its own (``__slots__ = ()``), so frozen and
slotted dataclasses can derive from it, together with ``Idempotent``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Protocol, Self, TypeVar

__all__ = ["Asks", "Request"]

R_co = TypeVar("R_co", covariant=True)
M_co = TypeVar("M_co", covariant=True)


class Request(Generic[R_co]):
    """Base of a message whose reply to ``call`` is an ``R_co`` (module doc)."""

    __slots__ = ()

    if TYPE_CHECKING:  # seen by the type checker only: no cost, nothing to call

        def _request_message(self) -> Self: ...

        def _request_reply(self) -> R_co: ...


class Asks(Protocol[M_co, R_co]):
    """A request that is an ``M_co`` and replies with an ``R_co``: what ``call`` takes.

    Every :class:`Request` subclass is one, for its own class and reply; user
    code names ``Request``, this only appears in the signature of ``call``.
    """

    def _request_message(self) -> M_co: ...

    def _request_reply(self) -> R_co: ...
