"""The end of a simulated run: the session boundary for every session, until it holds.

Split from :mod:`memory.simulate._simulate` (the run) so that module stays
small. The boundary rounds are most of a long run's time (a minute of
``--faults all``), so each round is announced as a stage and counts its
flushed sessions for the command's progress display.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio

from memory._errors import BoundaryError
from memory.runtime._runtime import MemoryRuntime
from memory.simulate._faults import FaultPlan, is_injected
from store import list_sessions
from store.lowlevel import run_durable

__all__ = ["SETTLE_ROUNDS", "Stage", "flush_tolerating_injected", "settle"]

SETTLE_ROUNDS = 8  # boundary rounds at most; a round without a failure ends it

Stage = Callable[[str, str, int | None], None]
"""``stage(what, unit, total)``: the run moves on to ``what``, counted in ``unit``."""


async def settle(
    rt: MemoryRuntime,
    sessions: Sequence[str],
    outside: dict[str, object] | None,  # None: no outside writer runs
    plan: FaultPlan,
    before: dict[str, float],
    after: dict[str, float],
    *,
    stage: Stage,
    progress: Callable[[int, int], None] | None,
) -> None:
    """The session boundary for every session, first with faults on, then off, then drain.

    The first round runs under the faults (a crash here reopens the runtime
    and settles again); the later rounds run without them and release any
    quarantined batch, as an operator would, so the oracle sees the end state.
    """
    if outside is not None:  # the outside writer runs: wait for its report
        while not outside:
            await anyio.sleep(0.05)
    await rt.drain()
    before.update(await _updated_at(rt, sessions))
    for round_number in range(SETTLE_ROUNDS):
        failures_before = _failures(rt)
        injected: list[str] = []
        stage(f"boundary round {round_number + 1}", "sessions", len(sessions))
        flushed: list[str] = []
        async with anyio.create_task_group() as tg:
            for session in sessions:
                tg.start_soon(_flush, rt, session, injected, flushed, len(sessions), progress)
        await rt.drain()
        plan.enabled = False
        # A batch that failed this round waits on a retry timer, which drain()
        # does not count: only a round in which nothing failed ends the boundary.
        if (round_number > 0 and _failures(rt) == failures_before and not rt.quarantined
                and not injected):
            break
        if rt.quarantined:
            await rt.release()
    after.update(await _updated_at(rt, sessions))


async def flush_tolerating_injected(rt: MemoryRuntime, session: str, injected: list[str]) -> None:
    """``rt.flush``; a boundary the plan's own I/O fault stopped is noted in ``injected``.

    An injected fault (e.g. ``actor-crash-after-claim``) ends the boundary
    with an error, as a real one would; the next round, faults off, runs it
    again, as for every other injected fault. A boundary error without an
    injected cause is the runtime's and fails the run.
    """
    try:
        await rt.flush(session)
    except BoundaryError as error:
        if not is_injected(error):
            raise
        injected.append(session)


async def _flush(rt: MemoryRuntime, session: str, injected: list[str], flushed: list[str],
                 total: int, progress: Callable[[int, int], None] | None) -> None:
    await flush_tolerating_injected(rt, session, injected)
    flushed.append(session)
    if progress is not None:
        progress(len(flushed), total)


def _failures(rt: MemoryRuntime) -> int:
    return sum(count for result, count in rt.statistics().outcomes.items()
               if result != "written")


async def _updated_at(rt: MemoryRuntime, sessions: Sequence[str]) -> dict[str, float]:
    """``updated_at`` of ``sessions`` only: a shard's snapshot of another's would be stale."""
    rows = await run_durable(list_sessions, rt.state_dir, None, set(sessions).__contains__)
    return {row["id"]: row["updated_at"] for row in rows}
