"""``scriptorium run``: the whole tree headless, beside agents in other processes.

Agents append to sessions from their own processes (the reference agent
does, through its own store). The runtime notices those appends with a
cheap scan, not a file watcher (see docs/decisions.md): every
``scan_interval`` seconds it reads each session's ``meta.json``
``updated_at`` and asks the session actors whose value moved to reconsider
what they owe. The idle watchdog's own disk poll does the rest.

Every ``lag_interval`` seconds it logs a ``lag`` event: how far memory is
behind (:class:`~memory.runtime._backlog.MemoryLag`), so an operator sees
the write side fall behind before an agent does.

SIGINT/SIGTERM stop the scan, let in-flight jobs finish within
``drain_timeout`` and stop the tree in reverse order; an interrupted job is
simply owed again at the next start (markers come last). ``--once`` runs
the session boundary of every session, waits for the jobs, and exits.

A session that cannot be written (a broken branch, an unreadable file, a
disk that refuses writes) is skipped: the runtime logs a ``skipped`` event
naming it and why, and serves the others. ``run --once`` and ``memory
write`` end with a :class:`SessionReport` per session: the outcome, its
reason, and what the command covers that is still owed, checked after the
jobs drained; ``written`` only when that is nothing.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from actors import ActorError
from memory._errors import describe_error
from memory.runtime._backlog import MemoryLag
from memory.runtime._config import held_by
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig, open_runtime
from memory.runtime._session_state import (
    SESSION_ERRORS,
    BoundaryOutcome,
    BoundaryReport,
    Reconsider,
)
from memory.writers import Writer
from store import StoreError, list_sessions
from store.lowlevel import run_durable

__all__ = ["SessionReport", "lag_event", "run_headless", "run_once", "run_triggers",
           "scan_sessions"]

WRITTEN = "written"
NOT_DUE = "not due"  # the trigger rule does not call for a write (memory write without --force)
OWED = "owed"  # the command ended, yet turns it covers are still owed
ERROR = BoundaryOutcome.ERROR.value


@dataclass(frozen=True)
class SessionReport:
    """How one session's write ended: ``outcome``, the ``reason``, and what is still ``owed``.

    ``outcome`` is ``written``, ``not due``, ``owed``, or a boundary outcome
    (``no progress``, ``quarantined``, ``failed``, ``error``); ``owed`` holds
    the node ids the command covers that are not marked after it, or None
    when they could not be computed (an ``error``: the session cannot be
    opened or walked), which is not "nothing owed". ``ok`` only for
    ``written`` and ``not due``: anything else leaves turns owed.
    """

    session: str
    outcome: str
    reason: str
    owed: tuple[str, ...] | None = ()

    @property
    def ok(self) -> bool:
        return self.outcome in (WRITTEN, NOT_DUE)


async def _covered_owed(rt: MemoryRuntime, session: str, *, boundary: bool) -> tuple[str, ...]:
    rows = await rt.still_owed(session, boundary=boundary)
    return tuple(node for _, nodes in rows for node in nodes)


async def _settle(
    rt: MemoryRuntime, session: str, outcome: str, reason: str, *, boundary: bool
) -> SessionReport:
    """After the jobs drained: ``written`` stays only if nothing the command covers is owed."""
    if outcome == ERROR:  # what is owed is unknown, not nothing
        return SessionReport(session, outcome, reason, None)
    try:
        owed = await _covered_owed(rt, session, boundary=boundary)
    except (*SESSION_ERRORS, ActorError) as exc:
        return SessionReport(session, ERROR, f"session {session!r}: {describe_error(exc)}", None)
    what = "the session boundary" if boundary else "the trigger rule"
    if outcome == WRITTEN and owed:
        return SessionReport(
            session, OWED,
            f"{reason}, but {len(owed)} turn(s) {what} covers are still owed (another runtime "
            "may be writing them, or turns were appended meanwhile); run the command again",
            owed)
    if outcome == WRITTEN:
        return SessionReport(session, outcome, f"{reason}; nothing {what} covers is owed")
    if owed:
        reason = f"{reason}; {len(owed)} turn(s) still owed"
    return SessionReport(session, outcome, reason, owed)


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


def lag_event(lag: MemoryLag) -> dict[str, Any]:
    """The ``lag`` log line of :func:`run_headless`: ages in seconds, to the millisecond."""
    age = lag.oldest_due_age
    return {"event": "lag", "oldest_due_age": None if age is None else round(age, 3),
            "due_waiting": lag.due_waiting, "in_flight": lag.in_flight,
            "recent_groups": list(lag.recent_groups)}


async def run_once(
    rt: MemoryRuntime, sessions: Sequence[str] | None = None, *, parallel: int = 16
) -> dict[str, SessionReport]:
    """The session boundary of ``sessions`` (default: every session), ``parallel`` at a time.

    Then drains the jobs and checks what each boundary covers is marked
    (see :class:`SessionReport`). One session's error never stops the others.
    """
    reports: dict[str, BoundaryReport] = {}
    limiter = anyio.CapacityLimiter(parallel)

    async def boundary(session: str) -> None:
        async with limiter:
            reports[session] = await rt.boundary(session)

    unlisted: dict[str, StoreError] = {}
    if sessions is None:
        rows = await run_durable(list_sessions, rt.state_dir, unlisted, held_by(rt.config.shard))
        sessions = [row["id"] for row in rows]
    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(boundary, session)
    await rt.drain()
    results = {session: await _settle(rt, session, reports[session].outcome.value,
                                      reports[session].reason, boundary=True)
               for session in sessions}
    for name, problem in unlisted.items():  # e.g. history/ without meta.json: not writable
        results[name] = SessionReport(name, ERROR, describe_error(problem), None)
    return results


async def run_triggers(rt: MemoryRuntime, sessions: Sequence[str]) -> dict[str, SessionReport]:
    """The trigger rule (SPEC §6.3) on each session now; then drain and report.

    ``not due`` when the rule does not call for a write (owed tokens under
    the threshold and not idle): nothing the command covers is owed.
    """
    started: dict[str, int] = {}
    errors: dict[str, str] = {}
    for session in sessions:
        try:
            reason = await rt.session_ref(session).call(Reconsider())
        except (*SESSION_ERRORS, ActorError) as exc:
            reason = f"session {session!r}: {describe_error(exc)}"
        if reason is not None:
            errors[session] = reason
        started[session] = rt.ledger(session).jobs
    await rt.drain()
    reports: dict[str, SessionReport] = {}
    for session in sessions:
        if session in errors:
            reports[session] = SessionReport(session, ERROR, errors[session], None)
            continue
        ledger = rt.ledger(session)
        ran = ledger.jobs - started[session]
        if ran and ledger.last_result != WRITTEN:
            outcome = BoundaryOutcome.FAILED.value
            reason = ledger.last_reason or str(ledger.last_result)
        elif ran:
            outcome, reason = WRITTEN, f"{ran} batch(es) written"
        else:
            outcome, reason = NOT_DUE, await _not_due(rt, session)
        report = await _settle(rt, session, outcome, reason, boundary=False)
        if report.outcome == NOT_DUE and report.owed:  # due after all (a retry is waiting)
            report = SessionReport(session, OWED, report.reason, report.owed)
        reports[session] = report
    return reports


async def _not_due(rt: MemoryRuntime, session: str) -> str:
    try:
        owed = await rt.pending(session)
    except (*SESSION_ERRORS, ActorError) as exc:
        return f"session {session!r}: {describe_error(exc)}"
    if not owed:
        return "nothing is owed"
    tokens = sum(record.tokens for record in owed)
    return (f"{len(owed)} turn(s), {tokens} token(s) owed: under the "
            f"{rt.config.policy.threshold}-token threshold and not idle; --force writes them now")


async def run_headless(
    state_dir: str,
    *,
    config: RuntimeConfig,
    scan_interval: float = 2.0,
    drain_timeout: float = 30.0,
    lag_interval: float = 30.0,
    log: Callable[[dict[str, Any]], None],
    ready: Callable[[], None] | None = None,
    writer: Writer | None = None,
    beside: Callable[[MemoryRuntime], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Run until SIGINT or SIGTERM; see the module docstring. ``writer``: None, the built-in one.

    ``beside(rt)`` runs next to the scan until the stop (``run --inspect``: the inspector).
    """
    async with open_runtime(state_dir, writer, config=config) as rt:
        log({"event": "started", "state": state_dir, "workspace": rt.workspace_id})
        seen: dict[str, object] = {}
        reported: dict[str, str] = {}
        async with anyio.create_task_group() as tg:

            async def scan() -> None:
                await rt.poll_idle()
                while True:
                    unlisted: dict[str, StoreError] = {}
                    rows = await run_durable(list_sessions, state_dir, unlisted,
                                             held_by(config.shard))
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

            async def report_lag() -> None:
                while True:
                    await anyio.sleep(lag_interval)
                    log(lag_event(rt.statistics().lag))

            tg.start_soon(scan)
            tg.start_soon(report_lag)
            if beside is not None:
                tg.start_soon(beside, rt)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                if ready is not None:
                    ready()
                async for signum in signals:
                    log({"event": "stopping", "signal": signal.Signals(signum).name,
                         "in_flight": rt.statistics().in_flight})
                    break
            tg.cancel_scope.cancel()
        with anyio.move_on_after(drain_timeout) as scope:
            await rt.drain()
        log({"event": "stopped", "drained": not scope.cancelled_caught,
             "outcomes": dict(rt.statistics().outcomes)})

