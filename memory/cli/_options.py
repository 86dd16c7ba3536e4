"""What the ``scriptorium`` commands share: their options, the runtime they start, their output.

Every command takes ``--state DIR`` (default ``$SCRIPTORIUM_STATE`` or
``~/.scriptorium``), normalised once here, and ``--json``, which prints
exactly one JSON document on stdout and nothing else there (:func:`emit_json`).
The commands that start the runtime share its options (backend, threshold,
workers, timings, writer, lock timeout) and the way their flags become one
:class:`RuntimeConfig` over ``<state>/scriptorium.toml``; the command groups
(``_session_commands``, ``_memory_commands``, ...) build on this module so
that each reads as its commands alone.
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

from memory._errors import ReferenceThresholdWarning, SettingsError
from memory.cli._cli_errors import EXIT_USAGE, CliError, check_state_dir, remember_state
from memory.ledger._ledger import ALLOWED_THRESHOLDS
from memory.runtime._config import apply_timings
from memory.runtime._headless import SessionReport
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
from memory.writers import EventListener
from memory.writers.model import ModelWriter, redact_url
from store import LOCK_TIMEOUT, SessionCore, StoreError
from store.lowlevel import state_path

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
            on_event: EventListener | None) -> ModelWriter | None:
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
    "Session boundaries"; null: unknown, the session's ``error`` kept them from
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


def stderr_log(as_json: bool) -> Callable[[dict[str, Any]], None]:
    """A long-running command's event log on stderr: one JSON line, or one ``scriptorium:`` line.

    The JSON form is the documented ``--log-json`` interface (``{"event", "at", fields...}``).
    """

    def log(event: dict[str, Any]) -> None:
        event.setdefault("at", time.time())
        if as_json:
            sys.stderr.write(orjson.dumps(event, default=str).decode() + "\n")
        else:
            details = " ".join(f"{k}={v}" for k, v in event.items()  # None: nothing to say
                               if k not in ("event", "at") and v is not None)
            sys.stderr.write(f"scriptorium: {event['event']} {details}\n")
        sys.stderr.flush()

    return log
