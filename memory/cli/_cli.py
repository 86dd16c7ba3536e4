"""The ``scriptorium`` command line (SPEC §8).

Every command takes ``--state DIR`` (default ``$SCRIPTORIUM_STATE`` or
``~/.scriptorium``), normalised once here, and ``--json``, which prints
exactly one JSON document on stdout and nothing else there. Errors go to
stderr as one line naming the session, node or file, with the exit codes of
``memory.cli._cli_errors`` (the traceback only with ``scriptorium --debug``).

click is the framework (see docs/decisions.md): it parses, documents and
tests commands. The long commands draw their progress on stderr through
``memory.cli._progress`` (off with ``--quiet`` or off a terminal).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import click
import orjson

from memory._errors import LedgerError, SettingsError
from memory.cli._cli_errors import (
    EXIT_USAGE,
    CliError,
    ReportingGroup,
    check_state_dir,
    remember_state,
)
from memory.cli._progress import QUIET_OPTION, ProgressView
from memory.cli._session_view import render_session_tree
from memory.ledger._ledger import (
    ALLOWED_THRESHOLDS,
    ReferenceThresholdWarning,
    owed_tokens,
    records_from_branch,
    unwritten_turns,
)
from memory.ledger._records import MARKER_KEY
from memory.maintenance._audit import audit, read_audit_inputs, read_topics
from memory.maintenance._runtime_audit import repair_runtime_state
from memory.recall import MAX_QUERY_CHARS, Context, Hit, SyncReport
from memory.runtime._config import apply_timings
from memory.runtime._headless import SessionReport, run_headless, run_once, run_triggers
from memory.runtime._runtime import MemoryRuntime, RuntimeConfig, open_runtime
from memory.runtime._settings import (
    MODEL_FLAGS,
    Timings,
    check_lock_timeout,
    check_model_flags,
    check_seconds,
    check_threshold,
    model_writer_for,
    read_settings,
    writer_kind,
)
from memory.simulate._command import PROGRESS_FACTORY, simulate
from memory.workspace._workspace_id import read_workspace_id
from memory.writers.model import ModelWriter, read_model_usage, redact_url
from store import (
    LOCK_TIMEOUT,
    ChainCycleError,
    Node,
    SessionCore,
    SessionNotFoundError,
    StoreError,
    list_sessions,
    predecessor_cycles,
    state_path,
    validate_id,
)

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _default_state() -> str:
    return os.environ.get("SCRIPTORIUM_STATE") or os.path.join(
        os.path.expanduser("~"), ".scriptorium"
    )


def _existing_state(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    state = state_path(value)
    remember_state(ctx, state)
    check_state_dir(state)
    return state


def _any_state(ctx: click.Context, _param: click.Parameter, value: str) -> str:
    state = state_path(value)
    remember_state(ctx, state)
    return state


def state_options(command: F, *, creates: bool = False) -> F:
    """``--state DIR`` and ``--json``, shared by every command.

    The path is normalised once here (see :func:`store._sessions.state_path`).
    Only commands that create state (``creates``) accept a directory that
    does not hold one yet; for the others it is a usage error.
    """
    command = click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of text."
    )(command)
    command = click.option(
        "--state",
        "state_dir",
        type=click.Path(file_okay=False, path_type=str),
        default=_default_state,
        show_default="$SCRIPTORIUM_STATE or ~/.scriptorium",
        callback=_any_state if creates else _existing_state,
        help="The state directory holding sessions/ and memory/"
        + (" (created if missing)." if creates else "."),
    )(command)
    return command


def creating_state_options(command: F) -> F:
    """:func:`state_options` of a command that may start on a new state directory."""
    return state_options(command, creates=True)


def emit_json(document: object) -> None:
    """``document`` on stdout, every byte of it, or ``BrokenPipeError`` (exit 141).

    One big write to a pipe whose reader has gone (``| head -c 100``) is cut
    short, and ``BufferedWriter.write`` returns the short count without an
    error: the rest was dropped and the command exited 0. So the bytes are
    written until none is left; the write after a short one meets the
    closed pipe.
    """
    data = memoryview(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()  # what click.echo wrote before goes first
    out = sys.stdout.buffer
    while data:
        data = data[out.write(data):]
    out.flush()


def runtime_options(command: F) -> F:
    """Options of the commands that start the runtime."""
    command = click.option(
        "--backend", type=click.Choice(["asyncio", "trio"]), default="asyncio",
        show_default=True, help="The async backend to run on.",
    )(command)
    command = click.option(
        "--threshold", type=int, default=None,
        help="Owed tokens that trigger a write (SPEC §6.3; default: scriptorium.toml's, or "
             f"16000). The reference agent accepts only {', '.join(map(str, ALLOWED_THRESHOLDS))}.",
    )(command)
    command = click.option(
        "--workers", type=click.IntRange(1, 64), default=4, show_default=True,
        help="Writer workers in the pool.",
    )(command)
    return command


def timing_options(command: F) -> F:
    """The agent's timing rules (SPEC §6.3, §6.6), over ``<state>/scriptorium.toml``'s."""
    for flag, what in reversed((
        ("--idle-after", "Idle seconds after which owed turns are written (default 3600)."),
        ("--session-idle", "Idle seconds after which a session's boundary runs (default 1800)."),
        ("--watchdog-poll", "Seconds between the idle watchdog's polls (default 300)."),
    )):
        command = click.option(flag, type=float, default=None, help=what)(command)
    return command


def _config(state_dir: str, workers: int, flags: dict[str, Any], **extra: Any) -> RuntimeConfig:
    """Defaults, then ``<state>/scriptorium.toml``, then the flags; one line per problem."""
    try:
        seconds: dict[str, Any] = {
            name: None if flags.get(name) is None
            else check_seconds(flags[name], f"--{name.replace('_', '-')}", name)
            for name in ("idle_after", "session_idle", "watchdog_poll")}
        given = Timings(
            threshold=(None if flags.get("threshold") is None
                       else check_threshold(flags["threshold"], "--threshold")),
            **seconds,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ReferenceThresholdWarning)
            config = apply_timings(RuntimeConfig(writer_workers=workers, **extra),
                                   given.over(read_settings(state_dir)))
    except SettingsError as exc:  # a bad flag or scriptorium.toml: usage (exit 2)
        raise CliError.of(exc) from None
    for warning in caught:
        click.echo(f"scriptorium: warning: {warning.message}", err=True)
    return config


def writer_options(command: F) -> F:
    """Which writer writes memory (``--writer model``: an HTTP model endpoint)."""
    for flag, kind, what in reversed((
        ("--writer", click.Choice(["extractive", "model"]),
         "The writer (default: $SCRIPTORIUM_WRITER, scriptorium.toml [writer] kind, or extractive)."),
        ("--base-url", str, "The model endpoint's base URL, e.g. http://127.0.0.1:8000/v1."),
        ("--model", str, "The model name sent to the endpoint."),
        ("--provider", click.Choice(["openai", "anthropic"]),
         "The wire format: OpenAI-compatible chat completions or Anthropic Messages."),
    )):
        command = click.option(flag, type=kind, default=None, help=what)(command)
    return command


def _writer(state_dir: str, flags: dict[str, Any],
            on_event: Callable[[dict[str, Any]], None] | None) -> ModelWriter | None:
    """The model writer the options ask for, or None (the built-in one); bad settings exit 2.

    The API key is read from the environment variable the settings name.
    """
    try:
        kind = writer_kind(state_dir, flags.get("writer"))
        check_model_flags(kind, flags)
        if kind != "model":
            return None
        return model_writer_for(state_dir, {k: flags.get(k) for k in MODEL_FLAGS},
                                on_event=on_event)
    except SettingsError as exc:
        raise CliError.of(exc) from None


def _writer_document(writer: ModelWriter | None) -> dict[str, Any]:
    """Which writer wrote, for a command's output (the base URL without its credentials)."""
    if writer is None:
        return {"kind": "extractive"}
    s = writer.settings
    return {"kind": "model", "model": s.model, "provider": s.provider,
            "base_url": redact_url(s.base_url)}


def _say_writer(writer: ModelWriter | None, as_json: bool) -> None:
    """Name the writer that wrote, on stderr (with ``--json`` it is in the document).

    After the run, not before: a command that fails says its one error line alone.
    """
    if as_json:
        return
    document = _writer_document(writer)
    line = ("extractive (built-in)" if document["kind"] != "model" else
            f"model {document['model']} ({document['provider']}) at {document['base_url']}")
    click.echo(f"scriptorium: writer: {line}", err=True)


def _with_runtime(
    state_dir: str, config: RuntimeConfig, backend: str,
    body: Callable[[MemoryRuntime], Awaitable[T]], writer: ModelWriter | None = None,
) -> T:
    async def main() -> T:
        try:
            async with open_runtime(state_dir, writer, config=config) as rt:
                return await body(rt)
        finally:
            if writer is not None:
                await writer.aclose()

    return anyio.run(main, backend=backend)  # errors: one line, by ReportingGroup


def _open_session(state_dir: str, session: str) -> SessionCore:
    try:
        return SessionCore.open(state_dir, session)
    except StoreError as exc:
        raise CliError.of(exc) from None


@click.group(cls=ReportingGroup)
@click.version_option(package_name="scriptorium")
def main() -> None:
    """Scriptorium: the long-term memory runtime of an agent whose conversations are DAGs.

    Exit codes: 0 ok; 1 a problem found or work left undone; 2 usage (bad
    option, unsafe or unknown id, --state not a state directory); 3 the
    state could not be read or written (corrupt file, I/O error).
    """
    click.get_current_context().meta[PROGRESS_FACTORY] = ProgressView  # simulate draws with it


# -- session -----------------------------------------------------------------------


@main.group()
def session() -> None:
    """Inspect the session DAGs under <state>/sessions."""


@session.command("list")
@state_options
def session_list(state_dir: str, as_json: bool) -> None:
    """Every session, most recently appended first; exit 1 if a session dir cannot be listed."""
    unlisted: dict[str, StoreError] = {}
    rows = list_sessions(state_dir, unlisted)
    if as_json:
        emit_json(rows)
    else:
        for row in rows:
            click.echo(f"{row['id']}  head={row['head_id']}  {row['title']}")
    for problem in unlisted.values():
        click.echo(f"scriptorium: not listed: {problem}", err=True)
    if unlisted:
        sys.exit(1)


@session.command("branches")
@click.argument("sid")
@state_options
def session_branches(sid: str, state_dir: str, as_json: bool) -> None:
    """The tips of SID's branches (SPEC §4 list_branches); exit 1 if part of SID is unreadable."""
    core = _open_session(state_dir, sid)
    rows = _guard(core.list_branches)
    if as_json:
        emit_json(rows)
    else:
        head = _head_or_note(core)
        for row in rows:
            mark = "*" if row["head_msg_id"] == head else " "
            name = f"  {row['name']}" if row.get("name") else ""
            click.echo(f"{mark} {row['head_msg_id']}{name}")
    _exit_if_not_shown(sid, core, _guard(core.nodes))


@session.command("branch")
@click.argument("sid")
@click.option("--tip", default=None, help="Walk back from this node (default: the head).")
@state_options
def session_branch(sid: str, tip: str | None, state_dir: str, as_json: bool) -> None:
    """The messages of one branch, root to tip."""
    core = _open_session(state_dir, sid)
    messages = _guard(lambda: core.get_branch(tip))
    if as_json:
        emit_json(messages)
        return
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        click.echo(f"{message['id']} [{message['role']}] {text}")


@session.command("show")
@click.argument("sid")
@state_options
def session_show(sid: str, state_dir: str, as_json: bool) -> None:
    """Draw SID's DAG: each turn's role, a short text, and written/owed for this workspace.

    What cannot be drawn (a node file that is not JSON, a predecessor loop)
    is named on stderr, and the command exits 1.
    """
    core = _open_session(state_dir, sid)
    workspace = read_workspace_id(os.path.join(state_dir, "memory"))
    nodes = _guard(core.nodes)
    head = _head_or_note(core)
    lines = render_session_tree(nodes, head=head, workspace_id=workspace)
    if as_json:
        emit_json({
            "session": sid,
            "head": head,
            "workspace": workspace,
            "nodes": [
                {"id": n.id, "role": n.role, "predecessor": n.predecessor, "caller": n.caller,
                 "written": workspace is not None
                 and n.metadata.get(MARKER_KEY) == workspace}
                for n in nodes
            ],
        })
    else:
        for line in lines:
            click.echo(line)
    _exit_if_not_shown(sid, core, nodes)


def _exit_if_not_shown(sid: str, core: SessionCore, nodes: list[Node]) -> None:
    """A look at a session names on stderr each part it could not show, then exits 1.

    Those are the node files the store skipped (not JSON) and the nodes on a
    predecessor loop (no root reaches them): the rest was shown, so this is
    "a problem found" (1), not "the state could not be read" (3).
    """
    problems = [str(problem) for problem in core.problems]
    problems += [str(ChainCycleError(sid, loop[0], loop[-1], tuple(loop)))
                 for loop in predecessor_cycles(nodes)]
    for problem in problems:
        click.echo(f"scriptorium: warning: not shown: {problem}", err=True)
    if problems:
        sys.exit(1)


# -- memory ------------------------------------------------------------------------


@main.group()
def memory() -> None:
    """The memory ledger: what each branch still owes."""


@memory.command("pending")
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


def _head_or_note(core: SessionCore) -> str | None:
    """The head for a drawing; an unusable head_id is said on stderr, not fatal to a look."""
    try:
        return core.head
    except StoreError as exc:
        click.echo(f"scriptorium: {exc}", err=True)
        return None


def _guard(read: Callable[[], T]) -> T:
    """Turn a store error into a clean CLI error (one line on stderr, its exit code)."""
    try:
        return read()
    except StoreError as exc:
        raise CliError.of(exc) from None


def _short(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _report_writes(reports: dict[str, SessionReport], as_json: bool,
                   writer: ModelWriter | None) -> None:
    """Per session its outcome and reason; exit 1 when any session still owes what was covered.

    ``--json``: ``{"sessions": {sid: outcome}, "reasons": {sid: reason},
    "owed": {sid: [node ids] or null}, "writer": {kind, ...}}`` (docs/decisions.md,
    "Boundaries end"; null: unknown, the session's ``error`` kept them from
    being computed). In text the writer is named on stderr once the run is
    done (:func:`_say_writer`), so stdout keeps one line per session.
    """
    ordered = sorted(reports.items())
    if as_json:
        emit_json({"sessions": {sid: r.outcome for sid, r in ordered},
                   "reasons": {sid: r.reason for sid, r in ordered},
                   "owed": {sid: None if r.owed is None else list(r.owed)
                            for sid, r in ordered},
                   "writer": _writer_document(writer)})
    else:
        for session, report in ordered:
            click.echo(f"{session}: {report.outcome}: {report.reason}")
    if not all(report.ok for report in reports.values()):
        sys.exit(1)


class LockSeconds(click.ParamType[float]):
    """``--lock-timeout``: finite seconds >= 0 (click's FloatRange lets NaN and inf through).

    Refused in one line with the usage exit code (2); NaN or infinity would
    make a wait for a held lock endless.
    """

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            bound = check_lock_timeout(float(value), "--lock-timeout")
        except (TypeError, ValueError):  # SettingsError is a ValueError
            raise CliError(f"--lock-timeout: {value!r} is not a finite number of seconds >= 0; "
                           "pass a bound such as 30", EXIT_USAGE) from None
        assert bound is not None
        return bound


LOCK_TIMEOUT_OPTION = click.option(
    "--lock-timeout", type=LockSeconds(), default=LOCK_TIMEOUT, show_default=True,
    help="Seconds to wait for a session lock another process holds, then report that session.")


@memory.command("write")
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


@memory.command("release")
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


@main.command("run")
@click.option("--once", is_flag=True, help="Write everything owed (every session boundary), then exit.")
@click.option("--log-json", is_flag=True, help="One JSON line per event on stderr.")
@click.option("--scan-interval", type=float, default=2.0, show_default=True,
              help="Seconds between scans for sessions other processes appended to.")
@click.option("--drain-timeout", type=float, default=30.0, show_default=True,
              help="On SIGINT/SIGTERM, how long in-flight jobs may take to finish.")
@LOCK_TIMEOUT_OPTION
@writer_options
@runtime_options
@timing_options
@creating_state_options
def run(once: bool, log_json: bool, scan_interval: float, drain_timeout: float,
        lock_timeout: float, threshold: int | None, workers: int, backend: str, state_dir: str,
        as_json: bool, writer: str | None, base_url: str | None, model: str | None,
        provider: str | None, **timings: float | None) -> None:
    """Run the memory runtime headless until SIGINT/SIGTERM (or, with --once, until done)."""

    def log(event: dict[str, Any]) -> None:
        event.setdefault("at", time.time())
        if log_json:
            sys.stderr.write(orjson.dumps(event, default=str).decode() + "\n")
        else:
            details = " ".join(f"{k}={v}" for k, v in event.items()  # None: nothing to say
                               if k not in ("event", "at") and v is not None)
            sys.stderr.write(f"scriptorium: {event['event']} {details}\n")
        sys.stderr.flush()

    config = _config(state_dir, workers, {"threshold": threshold, **timings}, on_event=log,
                     lock_timeout=lock_timeout)
    model_writer = _writer(state_dir, {"writer": writer, "base_url": base_url, "model": model,
                                       "provider": provider}, log)
    if once:
        reports = _with_runtime(state_dir, config, backend, run_once, model_writer)
        _say_writer(model_writer, as_json)
        _report_writes(reports, as_json, model_writer)
        return

    async def headless() -> None:
        try:
            await run_headless(state_dir, config=config, scan_interval=scan_interval,
                               drain_timeout=drain_timeout, log=log, writer=model_writer)
        finally:
            if model_writer is not None:
                await model_writer.aclose()

    try:
        anyio.run(headless, backend=backend)
    except StoreError as exc:
        raise CliError.of(exc) from None


@memory.command("migrate")
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


@memory.command("backfill")
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


@memory.command("audit")
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


# -- recall (issue 13): search, context, reindex ------------------------------------


def _recall_target(sid: str | None, tip: str | None, query: str) -> None:
    if len(query) > MAX_QUERY_CHARS:  # recall bounds it; say so rather than drop it silently
        click.echo(f"scriptorium: warning: the query is {len(query):,} characters; only its "
                   f"first {MAX_QUERY_CHARS:,} are searched", err=True)
    if tip is not None and sid is None:
        raise click.UsageError("--tip needs --session: a tip names a node of one session")
    if sid is not None:
        validate_id(sid, "session id")


@memory.command("search")
@click.argument("query")
@click.option("--k", "k", type=click.IntRange(1, 1000), default=8, show_default=True,
              help="How many hits.")
@click.option("--session", "sid", default=None, help="Rank this session's branch first.")
@click.option("--tip", default=None, help="The branch's tip (default: the head).")
@click.option("--include-pending", is_flag=True, help="Also sources of pending trust (labelled).")
@state_options
def memory_search(query: str, k: int, sid: str | None, tip: str | None, include_pending: bool,
                  state_dir: str, as_json: bool) -> None:
    """The best units of memory for QUERY: topic paragraphs and archived turns.

    Each line starts with the hit's score relative to the best hit (1.000):
    a raw score (BM25 times the ranking rules, ``"score"`` in --json) only
    compares hits of one query, and on a small memory it is near zero for
    every hit (BM25 gives little weight to a word most units hold).
    """
    _recall_target(sid, tip, query)

    async def body(rt: MemoryRuntime) -> list[Hit]:
        return await rt.recall(query, k=k, session=sid, tip=tip,
                               include_pending=include_pending)

    hits = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    best = max((hit.score for hit in hits), default=0.0)

    def relative(hit: Hit) -> float:
        return hit.score / best if best > 0 else 0.0

    if as_json:
        emit_json([{**hit.as_json(), "relative": round(relative(hit), 6)} for hit in hits])
        return
    for hit in hits:
        where = (f"{hit.file} ^{hit.block_id}" if hit.kind == "topic"
                 else f"{hit.session}/{hit.node_id} {hit.speaker}"
                 + (" (pending)" if hit.trust != "trusted" else ""))
        click.echo(f"{relative(hit):5.3f}  [{hit.time}] {where}: "
                   f"{' '.join(hit.text.split())[:200]}")
    if not hits:
        click.echo("no match")


@memory.command("context")
@click.argument("query")
@click.option("--budget", type=click.IntRange(1, 1_000_000), default=500, show_default=True,
              help="Most tokens the block may take (the ledger's counter).")
@click.option("--session", "sid", default=None, help="Rank this session's branch first.")
@click.option("--tip", default=None, help="The branch's tip (default: the head).")
@state_options
def memory_context(query: str, budget: int, sid: str | None, tip: str | None, state_dir: str,
                   as_json: bool) -> None:
    """A block for a prompt: the memory QUERY needs, within --budget tokens."""
    _recall_target(sid, tip, query)

    async def body(rt: MemoryRuntime) -> Context:
        return await rt.context(query, budget_tokens=budget, session=sid, tip=tip)

    context = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    if as_json:
        emit_json(context.as_json())
    else:
        click.echo(context.text if context.text else "(nothing found)")


@memory.command("reindex")
@QUIET_OPTION
@state_options
def memory_reindex(quiet: bool, state_dir: str, as_json: bool) -> None:
    """Rebuild the recall index (memory/.scriptorium/recall.sqlite) from the files."""

    async def body(rt: MemoryRuntime) -> SyncReport:
        with ProgressView("reindexing memory", "files", quiet=quiet) as progress:
            return await rt.reindex(progress)

    report = _with_runtime(state_dir, RuntimeConfig(), "asyncio", body)
    if as_json:
        emit_json({"units": report.added, "files": report.files, "revision": report.revision})
    else:
        click.echo(f"indexed {report.added} unit(s) from {report.files} file(s)")


main.add_command(simulate)
