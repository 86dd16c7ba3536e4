"""Supervisor: an actor that starts children, watches them, and restarts them.

Why is a supervisor itself an actor? Child exits and management calls
(start, terminate, list) must be handled one at a time, in the order they
happened, or two crashes handled concurrently could restart a child twice.
A mailbox gives that order for free, exactly as in OTP; and because a
supervisor is an actor, a supervisor can be a child, so supervisors nest
into trees and a supervisor that gives up is just a crashed child to its
parent.

Contract:

- Children start in spec order, each after the previous one's ``on_start``
  returned. They are stopped in reverse start order, each within its
  ``shutdown_timeout`` and then cancelled.
- A child exit arrives as a runtime message on the control lane; the
  strategy and restart type decide what restarts. Restarts are counted
  against the restart intensity (``Intensity``); beyond it the
  supervisor stops its children and crashes with ``RestartIntensityExceededError``
  (the last child crash in ``__cause__``).
- A restart after a backoff delay is scheduled on a timer task, so the
  supervisor keeps serving its mailbox meanwhile; the child's cell is
  ``RESTARTING`` (sends queue, or fail fast with ``ActorRestartingError``).
- A child's cell (mailbox, references) survives its restarts. If the
  supervisor itself is restarted, its new incarnation starts new cells:
  references to the old children then raise ``ActorStoppedError``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Never, TypeVar, cast, overload

import anyio
from anyio.abc import TaskGroup, TaskStatus

from actors import Actor, ActorRef, MailboxOptions, Request, StopReason, UnhandledMessageError
from actors.lowlevel import ActorCell, ActorState
from supervisors._backoff import Backoff, BackoffStreak
from supervisors._errors import (
    ChildNotFoundError,
    DuplicateChildError,
    RestartIntensityExceededError,
)
from supervisors._intensity import Intensity, RestartHistory
from supervisors._spec import ChildSpec, Restart, Strategy

M = TypeVar("M")
M_contra = TypeVar("M_contra", contravariant=True)

# -- management (functions over private request messages) ----------------------


@dataclass(frozen=True, slots=True)
class _StartChild(Request[ActorRef[M_contra]], Generic[M_contra]):
    spec: ChildSpec[M_contra]


@dataclass(frozen=True, slots=True)
class _TerminateChild(Request[None]):
    id: str


@dataclass(frozen=True, slots=True)
class _RestartChild(Request[ActorRef[Never]]):
    id: str


@dataclass(frozen=True, slots=True)
class _DeleteChild(Request[None]):
    id: str


@dataclass(frozen=True, slots=True)
class _WhichChildren(Request["list[ChildInfo]"]):
    pass


@dataclass(frozen=True, slots=True)
class _GetChild(Request[ActorRef[Never]]):
    id: str
    spec: ChildSpec[Never] | None = None  # if given, the child must run from this spec


async def start_child(supervisor: SupervisorRef, spec: ChildSpec[M]) -> ActorRef[M]:
    """Add a child and start it; its reference, once its ``on_start`` has returned.

    Raises ``DuplicateChildError`` if the id is taken.
    """
    request: _StartChild[M] = _StartChild(spec)
    return await supervisor.call(request)


async def terminate_child(supervisor: SupervisorRef, child_id: str) -> None:
    """Stop a child (orderly, within its shutdown timeout); its spec is kept (OTP).

    A temporary child is forgotten. Raises ``ChildNotFoundError``.
    """
    await supervisor.call(_TerminateChild(child_id))


async def restart_child(supervisor: SupervisorRef, child_id: str) -> ActorRef[Never]:
    """Start again a child that was terminated or exited without restart; its reference.

    A child that is running is left as it is. Raises ``ChildNotFoundError``.
    """
    return await supervisor.call(_RestartChild(child_id))


async def delete_child(supervisor: SupervisorRef, child_id: str) -> None:
    """Stop a child if it runs, and forget its spec. Raises ``ChildNotFoundError``."""
    await supervisor.call(_DeleteChild(child_id))


async def which_children(supervisor: SupervisorRef) -> list[ChildInfo]:
    """One ``ChildInfo`` per child, in start order."""
    return await supervisor.call(_WhichChildren())


@overload
async def get_child(supervisor: SupervisorRef, child: ChildSpec[M]) -> ActorRef[M]: ...


@overload
async def get_child(supervisor: SupervisorRef, child: str) -> ActorRef[Never]: ...


async def get_child(
    supervisor: SupervisorRef, child: ChildSpec[M] | str
) -> ActorRef[M] | ActorRef[Never]:
    """The reference of one child, by its spec or its id. Raises ``ChildNotFoundError``.

    By id, the child's messages are unknown (``ActorRef[Never]``: it can be
    stopped and inspected, not sent to); by the ``ChildSpec[M]`` it was
    started from, it is an ``ActorRef[M]``, and a child of that id started
    from another spec is not found.
    """
    if isinstance(child, str):
        return await supervisor.call(_GetChild(child))
    ref = await supervisor.call(_GetChild(child.id, child))
    # The supervisor checked that the child runs from ``child``, a ChildSpec[M].
    return cast("ActorRef[M]", ref)


@dataclass(frozen=True)
class ChildInfo:
    id: str
    ref: ActorRef[Never]  # what it accepts is known to whoever holds its spec
    state: ActorState
    restart: Restart


@dataclass(frozen=True)
class ChildStatistics:
    id: str
    state: ActorState
    restart: Restart
    restarts: int
    mailbox_depth: int


@dataclass(frozen=True)
class SupervisorStatistics:
    """What ``statistics()`` (sync) and ``await ref.inspect()`` return for a supervisor."""

    name: str
    state: ActorState
    strategy: Strategy
    children: tuple[ChildStatistics, ...]
    restarts: int  # restarts this incarnation performed
    recent_restarts: int  # inside the intensity window, as of the last restart


# -- runtime messages (control lane) ------------------------------------------


@dataclass(frozen=True)
class _ChildExited:
    id: str
    generation: int
    crash: Exception | None


@dataclass(frozen=True)
class _RestartDue:
    ids: tuple[tuple[str, int], ...]


# What a supervisor's mailbox takes: the management functions' requests and
# its children's exits. Only this module builds them; code outside holds an
# ``ActorRef[SupervisorMessage]`` and uses the functions above.
SupervisorMessage = (
    _StartChild[Never] | _TerminateChild | _RestartChild | _DeleteChild | _WhichChildren
    | _GetChild | _ChildExited | _RestartDue
)
SupervisorRef = ActorRef[SupervisorMessage]


class _Child:
    __slots__ = (
        "backoff",
        "cell",
        "done",
        "generation",
        "last_crash",
        "restarts",
        "running",
        "scope",
        "spec",
    )

    def __init__(self, spec: ChildSpec[Never], cell: ActorCell[Never]) -> None:
        self.spec = spec
        self.cell = cell
        self.generation = 0  # bumped when the supervisor stops or restarts it on purpose
        self.running = False
        self.scope: anyio.CancelScope | None = None
        self.done = anyio.Event()
        self.restarts = 0
        self.backoff = BackoffStreak()
        self.last_crash: Exception | None = None


class Supervisor(Actor[SupervisorMessage]):
    """A static supervisor (OTP ``supervisor``); see the module doc."""

    expected_errors = (ChildNotFoundError, DuplicateChildError)

    def __init__(
        self,
        children: Sequence[ChildSpec[Never]] = (),
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        intensity: Intensity = Intensity(),
        backoff: Backoff = Backoff(),
        options: MailboxOptions = MailboxOptions(),
        rng: random.Random | None = None,
    ) -> None:
        self.specs = list(children)
        self.strategy = strategy
        self.intensity = intensity
        self.history = RestartHistory()
        self.backoff = backoff
        self.options = options  # the mailbox of a child whose spec names none
        self.rng = rng or random.Random()
        self._children: dict[str, _Child] = {}
        self._tg: TaskGroup | None = None
        self.restarts = 0
        self._recent = 0

    # -- actor hooks -----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        crash: Exception | None = None
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            except Exception as exc:  # noqa: BLE001 - re-raised below, not wrapped in a group
                crash = exc
            finally:
                tg.cancel_scope.cancel()  # pending restart timers
                for child in self._children.values():
                    if not child.cell.closed:
                        child.cell.close(None)
        if crash is not None:
            raise crash

    async def on_start(self) -> None:
        for spec in self.specs:
            await self._add(spec)

    async def on_stop(self, reason: StopReason) -> None:
        for child in reversed(list(self._children.values())):
            await self._stop(child)
            if not child.cell.closed:
                child.cell.close(None)

    def inspect(self) -> object:
        return self.statistics()

    def children(self) -> Iterable[tuple[str, ActorCell[Never]]]:
        return [(child_id, child.cell) for child_id, child in self._children.items()]

    async def handle(self, message: SupervisorMessage) -> object:
        match message:
            case _ChildExited():
                await self._child_exited(message)
            case _RestartDue(ids):
                for child_id, generation in ids:
                    child = self._children.get(child_id)
                    if child is not None and child.generation == generation and not child.running:
                        await self._start(child)
            case _StartChild(spec):
                return (await self._add(spec)).cell.ref
            case _TerminateChild(child_id):
                child = self._child(child_id)
                await self._stop(child)
                if child.spec.restart is Restart.TEMPORARY:
                    self._remove(child)
            case _RestartChild(child_id):
                child = self._child(child_id)
                if not child.running:
                    await self._start(child)
                return child.cell.ref
            case _DeleteChild(child_id):
                child = self._child(child_id)
                await self._stop(child)
                self._remove(child)
            case _WhichChildren():
                return [
                    ChildInfo(c.spec.id, c.cell.ref, c.cell.state, c.spec.restart)
                    for c in self._children.values()
                ]
            case _GetChild(child_id, spec):
                child = self._child(child_id)
                if spec is not None and child.spec is not spec:
                    raise ChildNotFoundError(self.ref.name, child_id)
                return child.cell.ref
            case _:
                raise UnhandledMessageError(
                    self.ref.name, message, "manage a supervisor with start_child, "
                    "terminate_child, restart_child, delete_child, which_children or get_child"
                )
        return None

    def statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(
            name=self.ref.name,
            state=self.ref.cell.state,
            strategy=self.strategy,
            children=tuple(
                ChildStatistics(
                    c.spec.id, c.cell.state, c.spec.restart, c.restarts, len(c.cell.mailbox)
                )
                for c in self._children.values()
            ),
            restarts=self.restarts,
            recent_restarts=self._recent,
        )

    # -- children ------------------------------------------------------------

    def _child(self, child_id: str) -> _Child:
        child = self._children.get(child_id)
        if child is None:
            raise ChildNotFoundError(self.ref.name, child_id)
        return child

    async def _add(self, spec: ChildSpec[Never]) -> _Child:
        if spec.id in self._children:
            raise DuplicateChildError(self.ref.name, spec.id)
        cell: ActorCell[Never] = ActorCell(
            spec.start,
            name=f"{self.ref.name}/{spec.id}",
            options=spec.options if spec.options is not None else self.options,
        )
        child = self._children[spec.id] = _Child(spec, cell)
        await self._start(child)
        return child

    def _remove(self, child: _Child) -> None:
        if not child.cell.closed:
            child.cell.close(None)
        del self._children[child.spec.id]

    async def _start(self, child: _Child) -> None:
        """Start one incarnation and wait until its ``on_start`` has returned."""
        assert self._tg is not None
        if child.cell.closed:  # terminated for good earlier: a fresh cell, same id
            old = child.cell
            child.cell = ActorCell(old.factory, name=old.name, options=old.options)
        child.running = True
        child.done = anyio.Event()
        await self._tg.start(self._run, child, child.generation)

    def _start_soon(self, child: _Child) -> None:
        assert self._tg is not None
        child.running = True
        child.done = anyio.Event()
        self._tg.start_soon(self._run, child, child.generation)

    async def _run(
        self,
        child: _Child,
        generation: int,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        started = False

        def mark_started() -> None:
            nonlocal started
            started = True
            task_status.started()

        crash: Exception | None = None
        try:
            with anyio.CancelScope() as scope:
                child.scope = scope
                try:
                    await child.cell.run_incarnation(on_started=mark_started)
                except Exception as exc:  # noqa: BLE001 - reported to the supervisor below
                    crash = exc
                    if not started:
                        task_status.started()
        finally:
            if child.generation == generation:
                child.running = False
            child.done.set()
        child.last_crash = crash
        self.ref.cell.post_system(_ChildExited(child.spec.id, generation, crash))

    async def _stop(self, child: _Child) -> None:
        """Stop a child on purpose: orderly within its timeout, then cancel."""
        child.generation += 1  # its exit notice, and any pending restart, are now stale
        if not child.running:
            if child.cell.state is ActorState.RESTARTING:  # a restart was pending
                child.cell.close(child.last_crash)
            return
        with anyio.move_on_after(child.spec.shutdown_timeout):
            await child.cell.stop()
            await child.done.wait()
        if not child.done.is_set():
            if child.scope is not None:
                child.scope.cancel()
            await child.done.wait()
        child.running = False

    async def _child_exited(self, exited: _ChildExited) -> None:
        child = self._children.get(exited.id)
        if child is None or child.generation != exited.generation:
            return  # stopped on purpose, or already handled by a group restart
        if not child.spec.restart.restarts_after(exited.crash):
            child.cell.close(exited.crash)
            if child.spec.restart is Restart.TEMPORARY:
                del self._children[child.spec.id]
            return
        now = anyio.current_time()
        if not self.history.allows(self.intensity, now):
            raise RestartIntensityExceededError(
                self.ref.name, exited.id, self.intensity.max_restarts, self.intensity.within
            ) from exited.crash
        self.history.record(self.intensity, now)
        self._recent = self.history.recent(self.intensity, now)
        group = self._group(child)
        # Stop the rest of the group, latest started first; temporary siblings go for good.
        for sibling in reversed(group):
            if sibling is not child:
                await self._stop(sibling)
                if sibling.spec.restart is Restart.TEMPORARY:
                    self._remove(sibling)
        group = [c for c in group if c.spec.id in self._children]
        for member in group:
            member.generation += 1
            member.restarts += 1
            self.restarts += 1
            if member.cell.state is not ActorState.RESTARTING and not member.cell.closed:
                member.cell.state = ActorState.RESTARTING
        delay = child.backoff.next_delay(self.backoff, now, self.rng)
        if delay <= 0:
            if len(group) == 1:
                self._start_soon(child)  # nothing to order: do not wait for its on_start
                return
            for member in group:
                await self._start(member)
            return
        due = _RestartDue(tuple((m.spec.id, m.generation) for m in group))
        assert self._tg is not None
        self._tg.start_soon(self._restart_later, due, delay)

    async def _restart_later(self, due: _RestartDue, delay: float) -> None:
        await anyio.sleep(delay)
        self.ref.cell.post_system(due)

    def _group(self, child: _Child) -> list[_Child]:
        ordered = list(self._children.values())
        if self.strategy is Strategy.ONE_FOR_ONE:
            return [child]
        if self.strategy is Strategy.ONE_FOR_ALL:
            return ordered
        return ordered[ordered.index(child) :]
