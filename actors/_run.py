"""open_actor: run one actor without a supervisor, scoped like a nursery.

Tests and simple embeddings want an actor without building a supervision
tree. Structured concurrency decides the rest: the actor lives exactly as
long as the ``async with`` block, and if it crashes the block is cancelled
and the crash is raised out of it (nobody restarts an unsupervised actor).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio

from actors._actor import Actor
from actors._cell import ActorCell, ActorState
from actors._options import MailboxOptions
from actors._ref import ActorRef

M = TypeVar("M")


def as_factory(actor: Actor[M] | Callable[[], Actor[M]]) -> Callable[[], Actor[M]]:
    """An Actor instance serves one incarnation; a factory serves every restart."""
    if isinstance(actor, Actor):
        instance = actor
        return lambda: instance
    return actor


@contextlib.asynccontextmanager
async def open_actor(
    actor: Actor[M] | Callable[[], Actor[M]],
    *,
    name: str | None = None,
    options: MailboxOptions = MailboxOptions(),
    shutdown_timeout: float | None = 5.0,
) -> AsyncIterator[ActorRef[M]]:
    """Start ``actor`` (an instance or a zero-argument factory) for the block's duration.

    On a normal exit of the block the actor is stopped gracefully (it
    finishes its current message and runs ``on_stop``) within
    ``shutdown_timeout`` seconds, then cancelled. If the actor crashes, the
    block is cancelled, callers get ``ActorCrashedError``/``ActorStoppedError`` and the
    original exception is raised out of the ``async with``.
    """
    factory = as_factory(actor)
    cell: ActorCell[M] = ActorCell(
        factory,
        name=name or (type(actor).__name__ if isinstance(actor, Actor) else "actor"),
        options=options,
    )
    crash: Exception | None = None
    body_error: BaseException | None = None
    finished = anyio.Event()

    async with anyio.create_task_group() as tg:

        async def run() -> None:
            nonlocal crash
            if cell.closed:
                return  # stopped before it ever ran
            try:
                await cell.run_incarnation()
            except Exception as exc:  # noqa: BLE001 - re-raised out of the block
                crash = exc
                cell.close(exc)
                tg.cancel_scope.cancel()
            else:
                cell.close(None)
            finally:
                finished.set()

        tg.start_soon(run)
        try:
            yield cell.ref
        except BaseException as exc:  # noqa: BLE001 - re-raised below, unwrapped
            # Raised after the task group, so it is not wrapped in an ExceptionGroup;
            # when the actor crashed, the body's error is a consequence of the crash.
            body_error = exc
            if isinstance(exc, Exception) and cell.state is ActorState.RESTARTING:
                # The actor crashed and is tearing down; the body failed because of it
                # (e.g. a child registry shut down). Let the crash land: it is the cause.
                with anyio.move_on_after(shutdown_timeout):
                    await finished.wait()
            tg.cancel_scope.cancel()
        else:
            with anyio.move_on_after(shutdown_timeout):
                await cell.stop()
            tg.cancel_scope.cancel()
    if not cell.closed:
        cell.close(crash)
    if crash is not None:
        raise crash
    if body_error is not None:
        raise body_error
