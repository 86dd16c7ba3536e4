"""``scriptorium run``: the whole tree headless, beside agents in other processes.

Agents append to sessions from their own processes (the reference agent
does, through its own store). The runtime notices those appends with a
cheap scan, not a file watcher (see docs/decisions.md): every
``scan_interval`` seconds it reads each session's ``meta.json``
``updated_at`` and asks the session actors whose value moved to reconsider
what they owe. The idle watchdog's own disk poll does the rest.

SIGINT/SIGTERM stop the scan, let in-flight jobs finish within
``drain_timeout`` and stop the tree in reverse order; an interrupted job is
simply owed again at the next start (markers come last). ``--once`` runs
the session boundary of every session, waits for the jobs, and exits.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import anyio

from memory._runtime import MemoryRuntime, RuntimeConfig, open_runtime
from memory._session_actor import BoundaryOutcome, Reconsider
from store import StoreError, list_sessions, run_durable

__all__ = ["run_headless", "run_once", "scan_sessions"]


def scan_sessions(
    rows: list[dict[str, Any]], seen: dict[str, object]
) -> list[str]:
    """Pure: the sessions whose ``updated_at`` differs from ``seen`` (which it updates)."""
    changed = []
    for row in rows:
        value = row.get("updated_at")
        if seen.get(row["id"], object()) != value:
            seen[row["id"]] = value
            changed.append(row["id"])
    return changed


async def run_once(rt: MemoryRuntime, *, parallel: int = 16) -> dict[str, str]:
    """The session boundary of every session, ``parallel`` at a time; then drain."""
    outcomes: dict[str, str] = {}
    limiter = anyio.CapacityLimiter(parallel)

    async def boundary(session: str) -> None:
        async with limiter:
            try:
                outcome = await rt.flush(session)
            except Exception as exc:  # noqa: BLE001 - reported per session, others go on
                outcomes[session] = f"error: {exc}"
                return
            outcomes[session] = outcome.value

    unlisted: dict[str, StoreError] = {}
    rows = await run_durable(list_sessions, rt.state_dir, unlisted)
    for name, problem in unlisted.items():  # e.g. history/ without meta.json: not writable
        outcomes[name] = f"error: {problem}"
    async with anyio.create_task_group() as tg:
        for row in rows:
            tg.start_soon(boundary, row["id"])
    await rt.drain()
    return outcomes


async def run_headless(
    state_dir: str,
    *,
    config: RuntimeConfig,
    scan_interval: float = 2.0,
    drain_timeout: float = 30.0,
    log: Callable[[dict[str, Any]], None],
    ready: Callable[[], None] | None = None,
) -> None:
    """Run until SIGINT or SIGTERM; see the module docstring."""
    async with open_runtime(state_dir, config=config) as rt:
        log({"event": "started", "state": state_dir, "workspace": rt.workspace_id})
        seen: dict[str, object] = {}
        reported: dict[str, str] = {}
        async with anyio.create_task_group() as tg:

            async def scan() -> None:
                await rt.poll_idle()
                while True:
                    unlisted: dict[str, StoreError] = {}
                    rows = await run_durable(list_sessions, state_dir, unlisted)
                    for name, problem in unlisted.items():
                        if reported.get(name) != str(problem):  # once, not every scan
                            reported[name] = str(problem)
                            log({"event": "session_skipped", "session": name,
                                 "error": str(problem)})
                    for session in scan_sessions(rows, seen):
                        try:
                            await rt.session_ref(session).cast(Reconsider())
                        except Exception as exc:  # noqa: BLE001 - one bad session never stops the scan
                            log({"event": "scan_error", "session": session, "error": str(exc)})
                    await anyio.sleep(scan_interval)

            tg.start_soon(scan)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                if ready is not None:
                    ready()
                async for signum in signals:
                    log({"event": "stopping", "signal": signal.Signals(signum).name,
                         "in_flight": rt.statistics()["in_flight"]})
                    break
            tg.cancel_scope.cancel()
        with anyio.move_on_after(drain_timeout) as scope:
            await rt.drain()
        log({"event": "stopped", "drained": not scope.cancelled_caught,
             "outcomes": rt.statistics()["outcomes"]})


BOUNDARY_OK = {BoundaryOutcome.WRITTEN.value, BoundaryOutcome.NO_PROGRESS.value,
               BoundaryOutcome.QUARANTINED.value}
