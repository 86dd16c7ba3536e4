"""``scriptorium status``: how far memory is behind, read from outside.

A running runtime says its lag in ``statistics()`` and in ``scriptorium
run``'s ``lag`` log lines (:mod:`memory.runtime._backlog`). This command
needs no runtime: it reads each session's head branch from the store and
applies the ledger's rules (SPEC §6.2, §6.3), so it can be asked while a
runtime runs elsewhere, or none does. What it can know from the files is
what is *owed* (the head branch's tail without this workspace's marker) and,
of that, since when the trigger rule has called for a write: the age of the
oldest owed due turn. What a runtime holds in memory (jobs in flight, group
sizes) it cannot see. Other tips are owed only at a session's boundary
(SPEC §6.6, :func:`boundary_branches`): their turns are counted apart, those
a boundary writes and those on tips below the threshold, which no boundary
writes until they reach it, so "0 owed" never hides owed turns.

Exit codes: 0, every session read; 1, a session could not be read (named
on stderr, and under ``errors`` with ``--json``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import click

from memory._errors import LedgerError
from memory.cli._options import _config, emit_json, state_options
from memory.ledger import (
    SourceRecord,
    WritePolicy,
    batch_due_at,
    first_batch,
    owed_tokens,
    records_from_branch,
    should_write,
    unwritten_turns,
)
from memory.ledger._plan import SessionView, boundary_branches
from memory.workspace._workspace_id import read_workspace_id
from store import SessionCore, StoreError, list_sessions

__all__ = ["SessionLag", "session_lag", "status"]


@dataclass(frozen=True)
class SessionLag:
    """One session's head branch: ``owed`` turns, their ``tokens``, and since when they are due."""

    owed: int
    tokens: int
    due_at: float | None  # None: the trigger rule does not call for a write yet
    # Turns owed on other tips and merged heads, not on the head branch:
    at_boundary: int = 0  # ones the session's next boundary writes
    below_threshold: int = 0  # ones on tips no boundary writes until they reach the threshold

    def age(self, now: float) -> float | None:
        """Seconds since the oldest owed turn became due (None: nothing is due)."""
        return None if self.due_at is None else max(0.0, now - self.due_at)


def session_lag(owed: Sequence[SourceRecord], now: float, policy: WritePolicy) -> SessionLag:
    """Pure: what ``owed`` (a head branch's owed tail, oldest first) says at ``now``.

    Due exactly when the runtime's incremental trigger would write (SPEC
    §6.3), and since when its first batch was due (:func:`batch_due_at`).
    """
    due_at = (batch_due_at(first_batch(owed, policy.threshold), policy)
              if should_write(owed, now, policy) else None)
    return SessionLag(len(owed), owed_tokens(owed), due_at)


def _merged_heads(core: SessionCore) -> list[str]:
    """Meta ``merged_heads`` that are nodes of the session (as the runtime reads them)."""
    merged = core.meta().get("merged_heads")
    if not isinstance(merged, list):
        return []
    found: list[str] = []
    for tip in dict.fromkeys(t for t in merged if isinstance(t, str)):
        try:
            core.node(tip)
        except StoreError:
            continue  # gone: owes nothing
        found.append(tip)
    return found


def _read(state_dir: str, session: str, workspace: str | None, now: float,
          policy: WritePolicy) -> SessionLag:
    core = SessionCore.open(state_dir, session)

    def owed(tip: str | None) -> list[SourceRecord]:
        records = records_from_branch(session, core.get_branch(tip))
        return unwritten_turns(records, workspace) if workspace is not None else records

    try:
        head = owed(None)
        tips = [str(row["head_msg_id"]) for row in core.list_branches()]
        merged = _merged_heads(core)
        view = SessionView(head=core.head, tips=lambda: tips, merged_heads=lambda: merged,
                           owed=owed, busy=frozenset)
        # Tips share turns with the head and each other: count each turn once.
        counted = {record.message_id for record in head}
        written = set(counted)
        for _, records in boundary_branches(view, owed, policy):
            written.update(record.message_id for record in records)
        below: set[str] = set()
        for tip in [*tips, *merged]:
            below.update(record.message_id for record in owed(tip))
    finally:
        core.close()
    below -= written
    lag = session_lag(head, now, policy)
    return replace(lag, at_boundary=len(written - counted), below_threshold=len(below))


def _elsewhere(at_boundary: int, below_threshold: int, *, indent: str) -> str:
    """The line on what other tips owe: never a bare "0 owed" while they owe turns."""
    return (f"{indent}{at_boundary} turn(s) on other tips written at the next boundary; "
            f"{below_threshold} turn(s) on other tips below the threshold: "
            "not written until they reach it")


@click.command("status")
@state_options
def status(state_dir: str, as_json: bool) -> None:
    """How far memory is behind: per session, the owed turns and the age of the oldest due one.

    Read from the files (no runtime needed); the threshold and idle time are
    <state>/scriptorium.toml's. Exit 1 if a session could not be read.
    """
    policy = _config(state_dir, 1, {}).policy
    now = time.time()
    workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    unlisted: dict[str, StoreError] = {}
    rows = list_sessions(state_dir, unlisted)
    lags: dict[str, SessionLag] = {}
    errors = {name: str(problem) for name, problem in unlisted.items()}
    for row in rows:
        try:
            lags[row["id"]] = _read(state_dir, row["id"], workspace, now, policy)
        except (StoreError, LedgerError) as exc:
            errors[row["id"]] = str(exc)
    ages = [age for lag in lags.values() if (age := lag.age(now)) is not None]
    at_boundary = sum(lag.at_boundary for lag in lags.values())
    below_threshold = sum(lag.below_threshold for lag in lags.values())
    summary = {
        "sessions": len(lags),
        "owing": sum(1 for lag in lags.values() if lag.owed),
        "due": len(ages),
        "owed_turns": sum(lag.owed for lag in lags.values()),
        "oldest_due_age": round(max(ages), 3) if ages else None,
        "other_tips_at_boundary_turns": at_boundary,
        "other_tips_below_threshold_turns": below_threshold,
    }
    if as_json:
        emit_json({
            "at": now, "threshold": policy.threshold, "idle_after": policy.idle_after,
            "summary": summary,
            "sessions": {sid: {"owed": lag.owed, "tokens": lag.tokens,
                               "oldest_due_age": None if (age := lag.age(now)) is None
                               else round(age, 3),
                               "other_tips_at_boundary_turns": lag.at_boundary,
                               "other_tips_below_threshold_turns": lag.below_threshold}
                         for sid, lag in sorted(lags.items())},
            "errors": errors,
        })
    else:
        oldest = summary["oldest_due_age"]
        click.echo(f"{summary['owed_turns']} turn(s) owed in {summary['owing']} of "
                   f"{summary['sessions']} session(s); {summary['due']} due"
                   + ("" if oldest is None else f", the oldest for {oldest:.1f} s")
                   + " on head branches")
        if at_boundary or below_threshold:
            click.echo(_elsewhere(at_boundary, below_threshold, indent=""))
        by_age = sorted(lags.items(), key=lambda item: -(item[1].age(now) or -1.0))
        for sid, lag in by_age:
            if lag.owed or lag.at_boundary or lag.below_threshold:
                age = lag.age(now)
                when = "not due" if age is None else f"due for {age:.1f} s"
                click.echo(f"  {sid}  {lag.owed} turn(s), {lag.tokens} token(s), {when}")
                if lag.at_boundary or lag.below_threshold:
                    click.echo(_elsewhere(lag.at_boundary, lag.below_threshold, indent="    "))
    for name, problem in errors.items():
        click.echo(f"scriptorium: session {name!r} not read: {problem}", err=True)
    if errors:
        sys.exit(1)
