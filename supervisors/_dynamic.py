"""DynamicSupervisor: supervises keyed actors, one per key, started on first use.

Sessions come and go by the thousand, so they cannot be static children:
the dynamic supervisor owns a registry of keyed actors (see
``actors.Registry``), which activates an actor on its first message and
passivates it when idle; the supervisor decides what a crash means.

Restart intensity is applied **per child** by default: a session that
keeps crashing is stopped and reported (its callers get ``ActorCrashedError`` /
``ActorStoppedError`` with the crash as ``__cause__``) while the thousands of
other sessions are unaffected. The next message for that key starts a fresh
activation. ``escalate=True`` gives OTP's behaviour instead: one intensity
for all children, and exceeding it crashes the supervisor.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Never, TypeVar

import anyio

from actors import (
    Actor,
    ActorRef,
    MailboxOptions,
    Registry,
    Request,
    StopReason,
    UnhandledMessageError,
)
from actors.lowlevel import ActorCell, ActorState
from supervisors._backoff import Backoff, BackoffStreak
from supervisors._errors import RestartIntensityExceededError
from supervisors._intensity import Intensity, RestartHistory
from supervisors._spec import Restart

K = TypeVar("K", bound=Hashable)
M = TypeVar("M")
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)
M_co = TypeVar("M_co", covariant=True)


@dataclass(frozen=True, slots=True)
class _ActivateChild(Request[ActorRef[M_co]], Generic[K_contra, M_co]):
    """Typed by the supervisor's key and its children's messages (a ``DynamicSupervisor[K, M]``)."""

    key: K_contra


async def activate_child(
    supervisor: ActorRef[DynamicSupervisorMessage[K, M]], key: K
) -> ActorRef[M]:
    """The reference of the keyed child for ``key``, its actor started now, not on first send."""
    request: _ActivateChild[K, M] = _ActivateChild(key)
    return await supervisor.call(request)


@dataclass(frozen=True)
class DynamicSupervisorStatistics:
    name: str
    state: ActorState
    children: int  # live activations
    activations: int
    passivations: int
    restarts: int
    given_up: tuple[Hashable, ...]  # keys stopped for exceeding their intensity, latest last


@dataclass(frozen=True)
class _GaveUp:
    key: Hashable
    crash: Exception


# What a DynamicSupervisor[K, M]'s mailbox takes; code outside uses activate_child.
DynamicSupervisorMessage = _ActivateChild[K, M] | _GaveUp


@dataclass
class _KeyHistory:
    restarts: RestartHistory = field(default_factory=RestartHistory)
    backoff: BackoffStreak = field(default_factory=BackoffStreak)


class DynamicSupervisor(Actor[DynamicSupervisorMessage[K, M]], Generic[K, M]):
    """Keyed children (``TRANSIENT`` or ``TEMPORARY``) accepting ``M``; see the module doc."""

    def __init__(
        self,
        factory: Callable[[K], Actor[M]],
        *,
        restart: Restart = Restart.TRANSIENT,
        idle_timeout: float | None = 300.0,
        intensity: Intensity = Intensity(),
        escalate: bool = False,
        backoff: Backoff = Backoff(),
        shutdown_timeout: float | None = 5.0,
        options: MailboxOptions = MailboxOptions(),
        on_give_up: Callable[[K, Exception], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if restart is Restart.PERMANENT:
            raise ValueError(
                "keyed children come back on their next message; use Restart.TRANSIENT "
                "(restart after a crash) or Restart.TEMPORARY (never restart)"
            )
        self.factory = factory
        self.restart = restart
        self.idle_timeout = idle_timeout
        self.intensity = intensity
        self.escalate = escalate
        self.backoff = backoff
        self.shutdown_timeout = shutdown_timeout
        self.options = options  # the mailbox of every keyed child
        self.on_give_up = on_give_up
        self.rng = rng or random.Random()
        self._registry: Registry[K, M] | None = None
        self._history: dict[K, _KeyHistory] = {}
        self._shared = _KeyHistory()
        self.restarts = 0
        self.given_up: list[Hashable] = []

    @property
    def registry(self) -> Registry[K, M]:
        if self._registry is None:
            raise RuntimeError("the dynamic supervisor's registry exists once it has started")
        return self._registry

    def child(self, key: K) -> ActorRef[M]:
        """The reference for ``key`` (synchronous; it activates on the first send)."""
        return self.registry.ref(key)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        crash: Exception | None = None
        async with anyio.create_task_group() as tg:
            self._registry = Registry(
                self.factory,
                task_group=tg,
                on_crash=self._on_crash,
                on_forget=self._forget,
                name=self.ref.name,
                idle_timeout=self.idle_timeout,
                options=self.options,
            )
            try:
                yield
            except Exception as exc:  # noqa: BLE001 - re-raised below, not wrapped in a group
                crash = exc
            finally:
                tg.cancel_scope.cancel()
                self.registry.close()
        if crash is not None:
            raise crash

    async def on_stop(self, reason: StopReason) -> None:
        await self.registry.shutdown(self.shutdown_timeout)

    async def handle(self, message: DynamicSupervisorMessage[K, M]) -> object:
        match message:
            case _ActivateChild(key):
                return self.registry.activate(key)
            case _GaveUp(key, crash):
                if self.escalate:
                    raise RestartIntensityExceededError(
                        self.ref.name, str(key), self.intensity.max_restarts, self.intensity.within
                    ) from crash
                self.given_up.append(key)
                if self.on_give_up is not None:
                    self.on_give_up(key, crash)  # type: ignore[arg-type]
                return None
            case _:
                raise UnhandledMessageError(
                    self.ref.name, message, "use activate_child(ref, key), or talk to a "
                    "keyed child through its own reference, child(key)"
                )

    def inspect(self) -> object:
        return self.statistics()

    def children(self) -> Iterable[tuple[str, ActorCell[Never]]]:
        return [(str(key), cell) for key, cell in self.registry.items()]

    def statistics(self) -> DynamicSupervisorStatistics:
        registry = self.registry
        return DynamicSupervisorStatistics(
            name=self.ref.name,
            state=self.ref.cell.state,
            children=len(registry),
            activations=registry.activations,
            passivations=registry.passivations,
            restarts=self.restarts,
            given_up=tuple(self.given_up),
        )

    def _forget(self, key: K) -> None:
        self._history.pop(key, None)

    def _on_crash(self, key: K, cell: ActorCell[Never], crash: Exception) -> float | None:
        """The registry asks: restart ``key`` after how long, or stop it (None)?"""
        if self.restart is Restart.TEMPORARY:
            return None
        now = anyio.current_time()
        if self.escalate:
            history = self._shared
        else:
            history = self._history.get(key) or self._history.setdefault(key, _KeyHistory())
        if not history.restarts.allows(self.intensity, now):
            self.ref.cell.post_system(_GaveUp(key, crash))
            return None
        history.restarts.record(self.intensity, now)
        self.restarts += 1
        return history.backoff.next_delay(self.backoff, now, self.rng)
