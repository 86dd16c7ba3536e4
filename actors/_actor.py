"""The Actor base class: the four hooks a subclass writes.

An actor owns state that only one task ever touches, so it needs no locks:
the kernel delivers one message at a time to ``handle``. A subclass writes
the hooks below; everything else (mailbox, restarts, replies) is
the kernel's job (``_cell.py``). As in trio, nothing
times out on its own: a caller bounds its wait with its own cancel scope.

Errors follow "let it crash": an exception whose type is listed in
``expected_errors`` is the caller's problem (bad input) and is re-raised in
the caller's task while the actor keeps running; any other ``Exception``
crashes the incarnation, and the supervisor decides what happens next. The
message that crashed it is delivered to the next incarnation only if it is
``actors.Idempotent``; otherwise its caller gets ``ActorCrashedError``.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from actors._errors import UnhandledMessageError

if TYPE_CHECKING:
    from actors._ref import ActorRef

# The messages an actor accepts. Contravariant, as in a function's argument:
# an actor that takes any message stands where one taking fewer is expected.
M_contra = TypeVar("M_contra", contravariant=True)


class StopKind(enum.Enum):
    """Why an incarnation ended, as ``on_stop`` learns it."""

    STOP = "stop"  # a stop was asked: ref.stop(), its supervisor, a shutdown
    PASSIVATION = "passivation"  # idle with an empty mailbox (keyed actors); it may come back
    CRASH = "crash"  # on_start or handle raised; ``StopReason.crash`` is the exception


@dataclass(frozen=True, slots=True)
class StopReason:
    """What ``on_stop`` receives: the kind of ending, and the crash for ``CRASH``."""

    kind: StopKind
    crash: Exception | None = None

    @classmethod
    def crashed(cls, crash: Exception) -> StopReason:
        return cls(StopKind.CRASH, crash)


STOP = StopReason(StopKind.STOP)
PASSIVATION = StopReason(StopKind.PASSIVATION)


class Actor(Generic[M_contra]):
    """Base class of every actor; one instance is one incarnation.

    ``Actor[M]`` accepts the messages ``M`` (a class, or a union of them):
    its ``handle`` takes an ``M`` and its references are ``ActorRef[M]``.

    Hooks, all optional except ``handle``:

    - ``async on_start()``: runs before the first message of an incarnation;
      an exception here is a crash.
    - ``async handle(message) -> reply``: one message at a time; the return
      value is the reply of a ``call`` (ignored for a ``cast``). For a message
      it has no case for, raise ``UnhandledMessageError(self.ref.name, message)``
      (what the base class does): the caller gets it, the actor keeps running.
    - ``async on_stop(reason)``: runs when the incarnation ends; ``reason`` is
      a ``StopReason``: ``STOP``, ``PASSIVATION``, or ``CRASH`` with the exception.
    - ``inspect() -> object``: a domain snapshot, served on the control lane.
    - ``lifespan()``: an async context manager around the whole incarnation,
      for actors that own tasks (supervisors open their task group here).

    ``self.ref`` is this actor's own reference, set before ``on_start``.
    """

    expected_errors: ClassVar[tuple[type[Exception], ...]] = ()

    _ref: ActorRef[M_contra] | None = None

    @property
    def ref(self) -> ActorRef[M_contra]:
        if self._ref is None:
            raise RuntimeError(
                f"{type(self).__name__}.ref is set when the actor starts; use it from "
                "on_start or handle, not from __init__"
            )
        return self._ref

    async def on_start(self) -> None:
        return None

    async def handle(self, message: M_contra) -> object:
        raise UnhandledMessageError(self.ref.name, message)

    async def on_stop(self, reason: StopReason) -> None:
        return None

    def inspect(self) -> object:
        return None

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        yield
