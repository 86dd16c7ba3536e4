"""``scriptorium memory ...``: the ledger and the write side, run from the command line.

``pending`` reads the ledger alone; ``write``, ``release``, ``migrate``,
``backfill`` and ``audit --repair`` start the runtime for one piece of work
and report it (exit 1 when work is left undone or a problem is found). The
recall commands (``search``, ``context``, ``reindex``) are
``memory.cli._recall_commands``'s.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import click

from memory._errors import LedgerError
from memory.cli._options import (
    LOCK_TIMEOUT_OPTION,
    _config,
    _guard,
    _open_session,
    _report_writes,
    _say_writer,
    _short,
    _with_runtime,
    _writer,
    _writer_document,
    emit_json,
    runtime_options,
    state_options,
    timing_options,
    writer_options,
)
from memory.cli._progress import QUIET_OPTION, ProgressView
from memory.ledger._ledger import owed_tokens, records_from_branch, unwritten_turns
from memory.maintenance import audit, read_audit_inputs, repair_runtime_state
from memory.maintenance._audit_inputs import read_topics
from memory.runtime._headless import SessionReport, run_once, run_triggers
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig
from memory.workspace._workspace_id import read_workspace_id
from memory.writers.model import read_model_usage
from store import SessionNotFoundError, StoreError, list_sessions
from store.lowlevel import validate_id


@click.command("pending")
@click.argument("sid")
@click.option("--tip", default=None, help="The branch's tip (default: the head).")
@state_options
def memory_pending(sid: str, tip: str | None, state_dir: str, as_json: bool) -> None:
    """The owed turns of a branch: its contiguous tail not marked by this workspace."""
    core = _open_session(state_dir, sid)
    branch = _guard(lambda: core.get_branch(tip))
    workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    try:
        records = records_from_branch(sid, branch)
    except LedgerError as exc:  # SPEC §6.1: a refused branch says which node and why
        raise click.ClickException(str(exc)) from None
    owed = unwritten_turns(records, workspace) if workspace is not None else records
    document = {
        "session": sid,
        "tip": tip if tip is not None else core.head,
        "pending": [record.message_id for record in owed],
        "tokens": owed_tokens(owed),
    }
    if as_json:
        emit_json(document)
        return
    click.echo(f"{len(owed)} owed turns, {document['tokens']} tokens")
    for record in owed:
        click.echo(f"  {record.message_id} [{record.role}] {_short(record.content)}")



@click.command("write")
@click.argument("sid", required=False)
@click.option("--force", is_flag=True, help="Run the session boundary (SPEC §6.6), not the trigger.")
@QUIET_OPTION
@LOCK_TIMEOUT_OPTION
@writer_options
@runtime_options
@timing_options
@state_options
def memory_write(sid: str | None, force: bool, quiet: bool, lock_timeout: float,
                 threshold: int | None,
                 workers: int, backend: str, state_dir: str, as_json: bool,
                 writer: str | None, base_url: str | None, model: str | None,
                 provider: str | None, **timings: float | None) -> None:
    """Run the write cycle now, for SID or every session.

    Prints each session's outcome and why: written (nothing the command
    covers is still owed), not due (the trigger rule does not call for a
    write; --force writes anyway), owed, no progress, quarantined, failed or
    error, then which writer wrote (chosen as for ``scriptorium run``).
    Exits 1 unless every session is written or not due.
    """
    if sid is not None:  # '' is not "every session"
        validate_id(sid, "session id")

    async def body(rt: MemoryRuntime) -> dict[str, SessionReport]:
        sessions = None if sid is None else [sid]
        if force:
            return await run_once(rt, sessions)
        if sessions is None:  # a session without meta.json is reported, not skipped
            unlisted: dict[str, StoreError] = {}
            sessions = [row["id"] for row in list_sessions(state_dir, unlisted)]
            sessions += sorted(unlisted)
        return await run_triggers(rt, sessions)

    view = ProgressView("writing memory", counted=False, quiet=quiet)
    config = _config(state_dir, workers, {"threshold": threshold, **timings},
                     lock_timeout=lock_timeout, on_event=view.on_event)
    model_writer = _writer(state_dir, {"writer": writer, "base_url": base_url, "model": model,
                                       "provider": provider}, view.on_event)
    with view:
        reports = _with_runtime(state_dir, config, backend, body, model_writer)
    _say_writer(model_writer, as_json)
    _report_writes(reports, as_json, model_writer)


@click.command("release")
@click.argument("sid", required=False)
@state_options
def memory_release(sid: str | None, state_dir: str, as_json: bool) -> None:
    """Release quarantined batches of SID (or of every session), to be written again."""
    if sid is not None:
        validate_id(sid, "session id")
        if not os.path.isdir(os.path.join(state_dir, "sessions", sid)):
            raise SessionNotFoundError(sid, f"sessions/{sid}")

    async def body(rt: MemoryRuntime) -> list[dict[str, Any]]:
        released = await rt.release(sid)
        return [{"session": e.session, "nodes": list(e.node_ids), "error": e.error}
                for e in released]

    released = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    if as_json:
        emit_json({"released": released})
    else:
        click.echo(f"released {len(released)} batch(es)")



@click.command("migrate")
@QUIET_OPTION
@runtime_options
@state_options
def memory_migrate(quiet: bool, threshold: int | None, workers: int, backend: str,
                   state_dir: str, as_json: bool) -> None:
    """Turn runtime.json's legacy position cursors into markers (SPEC §6.7).

    The runtime also does this by itself at every start; this command runs it
    alone and prints what it marked.
    """
    progress = ProgressView("migrating cursors to markers", "sessions", quiet=quiet)

    async def body(rt: MemoryRuntime) -> dict[str, Any]:
        report = rt.migration
        if report is not None and report.had_cursors and not report.cursors_removed:
            with progress:  # the start attempt failed: try once more
                report = await rt.migrate(progress)
        if report is None:
            return {"marked": {}, "cursors_removed": False}
        for line in (*report.problems, *report.errors):
            click.echo(f"scriptorium: {line}", err=True)
        return report.as_json()

    config = _config(state_dir, workers, {"threshold": threshold})
    document = _with_runtime(state_dir, config, backend, body)
    if as_json:
        emit_json(document)
    else:
        marked = sum(len(ids) for ids in document["marked"].values())
        click.echo(f"marked {marked} turn(s) in {len(document['marked'])} session(s); "
                   f"cursors removed: {document['cursors_removed']}")


@click.command("backfill")
@QUIET_OPTION
@writer_options
@runtime_options
@state_options
def memory_backfill(quiet: bool, threshold: int | None, workers: int, backend: str, state_dir: str,
                    as_json: bool, writer: str | None, base_url: str | None, model: str | None,
                    provider: str | None) -> None:
    """Write every trusted archived source that no topic cites yet (SPEC §6.8).

    The writer is chosen as for ``scriptorium run`` and named in the output.
    """
    progress = ProgressView("backfilling uncited sources", "sources", quiet=quiet)

    async def body(rt: MemoryRuntime) -> dict[str, Any]:
        with progress:
            report = await rt.backfill(progress)
        for line in (*report.problems, *report.errors):
            click.echo(f"scriptorium: {line}", err=True)
        return report.as_json()

    config = _config(state_dir, workers, {"threshold": threshold}, on_event=progress.on_event)
    model_writer = _writer(state_dir, {"writer": writer, "base_url": base_url, "model": model,
                                       "provider": provider}, progress.on_event)
    document = _with_runtime(state_dir, config, backend, body, model_writer)
    _say_writer(model_writer, as_json)
    if as_json:
        emit_json({**document, "writer": _writer_document(model_writer)})
    else:
        click.echo(" ".join(f"{k}={v}" for k, v in document.items()))
    if document.get("status") != "ok":
        sys.exit(1)


@click.command("audit")
@click.option("--repair", is_flag=True,
              help="Set lost markers again and repair runtime.json's orders and counters first "
                   "(starts the runtime; writes no memory).")
@state_options
def memory_audit(repair: bool, state_dir: str, as_json: bool) -> None:
    """Check markers against the archive and citations against sources; exit 1 on a problem."""
    workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    if workspace is None:
        raise click.ClickException(
            f"{state_dir}/memory has no workspace id yet; nothing was ever written there")
    report = audit(read_audit_inputs(state_dir, workspace))
    if repair:
        runtime = None
        if report["unordered_blocks"] or report["runtime_backwards"]:
            memory_dir = os.path.join(state_dir, "memory")
            runtime = repair_runtime_state(memory_dir, read_topics(memory_dir))
            report = audit(read_audit_inputs(state_dir, workspace))
        report = {**_repair_lost_markers(state_dir, report, workspace),
                  "repaired_runtime": runtime}
    elif report["lost_markers"] and not as_json:
        click.echo(f"scriptorium: {len(report['lost_markers'])} lost marker(s): "
                   f"'scriptorium memory audit --repair' sets them again (writes no memory)",
                   err=True)
    # What model writers spent on this workspace (totals per model, today's tokens).
    report["model_usage"] = read_model_usage(os.path.join(state_dir, "memory"))
    if as_json:
        emit_json(report)
    else:
        for problem in report["problems"]:
            click.echo(f"{problem['kind']}: {problem['count']}")
            for item in report[problem["kind"]][:20]:
                click.echo(f"  {item}")
            click.echo(f"  what to do: {problem['what_to_do']}")
        click.echo("ok" if report["ok"] else "problems found")
    if not report["ok"]:
        sys.exit(1)


def _repair_lost_markers(state_dir: str, report: dict[str, Any],
                         workspace: str) -> dict[str, Any]:
    """``audit --repair``: each session with lost markers repairs them; then audit again."""
    sessions = sorted({item["session"] for item in report["lost_markers"]})
    if not sessions:
        return {**report, "repaired": []}

    async def body(rt: MemoryRuntime) -> list[dict[str, str]]:
        return [{"session": session, "node": node}
                for session in sessions for node in await rt.repair_markers(session)]

    repaired = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    return {**audit(read_audit_inputs(state_dir, workspace)), "repaired": repaired}

