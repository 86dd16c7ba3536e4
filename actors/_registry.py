"""The registry of keyed ("virtual") actors: one activation per key, on demand.

A runtime with thousands of sessions cannot keep thousands of idle tasks,
nor ask callers to start an actor before they use it. So a keyed actor
exists as long as it has work: ``registry.ref(key)`` returns a reference at
once, the first send activates it, and after ``idle_timeout`` seconds
without messages it passivates (its incarnation ends) and leaves the
registry.

Two promises, and how they are kept without locks:

- *Never two live activations for one key.* One cell per key; a cell runs
  at most one incarnation at a time (its runner task runs them in sequence);
  the cell leaves the registry only once it is idle with an empty mailbox,
  and references re-resolve their key once their cell has left.
- *No message lost to a passivation.* The incarnation decides to passivate
  with no ``await`` between its empty-mailbox check and the decision; while
  it runs ``on_stop`` the cell keeps accepting messages into the same
  mailbox, and the runner starts a new incarnation of the same cell if any
  arrived. The check that the mailbox is empty and leaving the registry
  again happen with no ``await`` in between.

Crashes are not the registry's to judge: ``on_crash(key, cell, exc)``
returns a delay before the next incarnation, or ``None`` to stop the cell
for good (a supervisor's decision; see ``supervisors.DynamicSupervisor``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from typing import Generic, Never, TypeVar

import anyio
from anyio.abc import TaskGroup

from actors._actor import Actor
from actors._cell import ActorCell, ActorState, Exit
from actors._options import MailboxOptions
from actors._ref import ActorRef

K = TypeVar("K", bound=Hashable)

M = TypeVar("M")  # the messages the registry's actors accept

CrashHook = Callable[[K, ActorCell[Never], Exception], "float | None"]


class Registry(Generic[K, M]):
    """One actor per key, activated on first message, passivated when idle.

    Built by ``open_registry`` or by a dynamic supervisor, which passes the
    task group the activations run in and its ``on_crash`` decision.
    """

    def __init__(
        self,
        factory: Callable[[K], Actor[M]],
        *,
        task_group: TaskGroup,
        on_crash: CrashHook[K],
        name: str = "registry",
        idle_timeout: float | None = 300.0,
        options: MailboxOptions = MailboxOptions(),
        on_forget: Callable[[K], None] | None = None,
    ) -> None:
        self.name = name
        self._factory = factory
        self._task_group = task_group
        self._on_crash = on_crash
        self._on_forget = on_forget
        self.idle_timeout = idle_timeout
        self.options = options
        self._cells: dict[K, ActorCell[M]] = {}
        self._closed = False
        self.activations = 0
        self.passivations = 0

    def ref(self, key: K) -> ActorRef[M]:
        """A reference to the actor for ``key``; it activates on the first send."""
        return self.cell(key).ref

    def cell(self, key: K) -> ActorCell[M]:
        """The live cell for ``key``, created (idle) if there is none."""
        cell = self._cells.get(key)
        if cell is None:
            if self._closed:
                raise RuntimeError(
                    f"registry {self.name!r} is shut down; no new actor for key {key!r}"
                )
            factory = self._factory
            cell = ActorCell(
                lambda: factory(key),
                name=f"{self.name}[{key}]",
                options=self.options,
                idle_timeout=self.idle_timeout,
            )
            cell.ref = ActorRef(cell, lambda: self.cell(key))
            cell.on_activate = lambda activated: self._activate(key, activated)
            self._cells[key] = cell
        return cell

    def activate(self, key: K) -> ActorRef[M]:
        """The reference for ``key``, its actor started now rather than on the first send."""
        cell = self.cell(key)
        if cell.state is ActorState.IDLE:
            cell.state = ActorState.STARTING
            self._activate(key, cell)
        return cell.ref

    def __len__(self) -> int:
        return len(self._cells)

    def __contains__(self, key: object) -> bool:
        return key in self._cells

    def items(self) -> Iterator[tuple[K, ActorCell[M]]]:
        return iter(list(self._cells.items()))

    async def shutdown(self, timeout: float | None) -> None:
        """Stop every activation gracefully within ``timeout``, then cancel the rest.

        Keyed actors are independent, so they stop concurrently, not in order.
        """
        self._closed = True
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tg:
                for cell in list(self._cells.values()):
                    tg.start_soon(cell.stop)
        self.close()

    def close(self) -> None:
        """Stop for good now: fail every queued caller, and refuse new keys.

        Synchronous, for an owner torn down by cancellation. A key looked up
        afterwards must fail at once: a cell created now would be started in
        a cancelled task group and never run, and a caller that waits shielded
        (a report that must not be torn) would wait forever.
        """
        self._closed = True
        for key, cell in self.items():
            if not cell.closed:
                cell.close(None)
            self._forget(key, cell)

    def _activate(self, key: K, cell: ActorCell[M]) -> None:
        self.activations += 1
        self._task_group.start_soon(self._run, key, cell, name=cell.name)

    async def _run(self, key: K, cell: ActorCell[M]) -> None:
        while not cell.closed:
            try:
                outcome = await cell.run_incarnation()
            except Exception as exc:  # noqa: BLE001 - the crash goes to the supervisor's hook
                delay = self._on_crash(key, cell, exc)
                if delay is None:
                    cell.close(exc)  # its callers learn why; the key's next message starts afresh
                    break
                if delay > 0:
                    await anyio.sleep(delay)
                continue
            if outcome is Exit.STOPPED:
                cell.close(None)
                break
            # Passivated: leave only if nothing arrived while on_stop ran
            # (no await between this check and leaving).
            if cell.mailbox.empty():
                self.passivations += 1
                self._forget(key, cell)
                cell.detach()
                return
        self._forget(key, cell)
        cell.detached = True  # references re-resolve the key to a new cell

    def _forget(self, key: K, cell: ActorCell[M]) -> None:
        if self._cells.get(key) is cell:
            del self._cells[key]
            if self._on_forget is not None:
                self._on_forget(key)


@contextlib.asynccontextmanager
async def open_registry(
    factory: Callable[[K], Actor[M]],
    *,
    name: str = "registry",
    idle_timeout: float | None = 300.0,
    options: MailboxOptions = MailboxOptions(),
    shutdown_timeout: float | None = 5.0,
) -> AsyncIterator[Registry[K, M]]:
    """A registry of keyed actors without a supervisor, scoped like a nursery.

    Nobody restarts an unsupervised keyed actor: its crash cancels the block
    and is raised out of the ``async with`` (use a ``DynamicSupervisor`` to
    restart them).
    """
    crash: Exception | None = None
    body_error: BaseException | None = None
    async with anyio.create_task_group() as tg:

        def on_crash(key: K, cell: ActorCell[Never], exc: Exception) -> float | None:
            nonlocal crash
            crash = crash or exc
            tg.cancel_scope.cancel()
            return None

        registry: Registry[K, M] = Registry(
            factory,
            task_group=tg,
            on_crash=on_crash,
            name=name,
            idle_timeout=idle_timeout,
            options=options,
        )
        try:
            yield registry
        except BaseException as exc:  # noqa: BLE001 - re-raised below, unwrapped
            body_error = exc
            tg.cancel_scope.cancel()
        else:
            await registry.shutdown(shutdown_timeout)
            tg.cancel_scope.cancel()
    for key, cell in registry.items():
        cell.close(crash)
        registry._forget(key, cell)
    if crash is not None:
        raise crash
    if body_error is not None:
        raise body_error
