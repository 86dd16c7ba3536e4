"""How the command line reports a failure: one line naming the file and the cause, an exit code.

An error inside the runtime reaches the command wrapped by the kernel: the
call to a crashed actor raises ``ActorStoppedError`` or ``PoisonMessageError``, a
supervisor that gave up raises ``RestartIntensityExceededError``, a task group
an ``ExceptionGroup``; the real cause (a full disk, a corrupt
``workspace-id``) sits in ``__cause__`` or inside the group. A person needs
that cause and the file, not the wrapper: :func:`root_cause` unwraps,
:func:`describe` turns the cause into one line and an exit code, and
:class:`ReportingGroup` applies both to every command. The traceback is
printed only with the global ``--debug`` flag.

Exit codes (also in README and docs/decisions.md):

- 0: done, nothing wrong found;
- 1: the command ran and found a problem or left work undone (audit
  problems, a session not written, an invariant that does not hold);
- 2: usage: a bad option or argument, an unsafe or unknown id, a ``--state``
  that is not a state directory, a bad ``<state>/scriptorium.toml`` (a file
  the user wrote, like a flag: the line names it);
- 3: the state could not be read or written: a corrupt file, an I/O error
  (a full disk, no permission, a read-only filesystem), a lock that stayed
  held, or an internal failure.

A closed stdout (``scriptorium memory audit --json | head -c 100``) is not an
error to report: the command exits quietly with 141 (128 + SIGPIPE, what a
shell shows for a tool the pipe's reader stopped), as other command-line
tools do.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from typing import Any

import click

from actors import ActorError
from memory._errors import InvalidThresholdError, RecallError, ScriptoriumMemoryError, SettingsError
from store import InvalidRequestError, SessionNotFoundError, StoreError
from supervisors import SupervisorError

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "EXIT_USAGE",
    "CliError",
    "ReportingGroup",
    "StateNotFoundError",
    "check_state_dir",
    "describe",
    "remember_state",
    "root_cause",
]

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_FAILURE = 3
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE: the reader of stdout went away

_DEBUG = "scriptorium.debug"
_STATE = "scriptorium.state"

# What to do about the common I/O failures.
_ADVICE = {
    errno.ENOSPC: "free disk space, then run the command again",
    errno.EDQUOT: "free space under your quota, then run the command again",
    errno.EACCES: "check the permissions of the state directory",
    errno.EPERM: "check the permissions of the state directory",
    errno.EROFS: "the filesystem is read-only; use a writable state directory",
}


class StateNotFoundError(Exception):
    """``--state`` names a directory that does not exist or holds no scriptorium state."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(
            f"{path} {reason}; pass --state DIR (or set SCRIPTORIUM_STATE) to the directory "
            "holding sessions/ and memory/"
        )


class CliError(Exception):
    """A one-line error with its exit code, already described (see :func:`describe`)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message, self.exit_code = message, exit_code

    @classmethod
    def of(cls, exc: BaseException) -> CliError:
        return cls(*describe(exc, _current_state()))


def root_cause(exc: BaseException) -> BaseException:
    """The error behind the kernel's wrappers and task-group exception groups."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, BaseExceptionGroup):
            causes = [root_cause(inner) for inner in exc.exceptions]
            # A sibling cancelled or stopped because of the real failure is not the cause.
            real = [c for c in causes if not isinstance(c, (ActorError, SupervisorError))]
            exc = (real or causes)[0]
            continue
        if isinstance(exc, (ActorError, SupervisorError)) and exc.__cause__ is not None:
            exc = exc.__cause__
            continue
        break
    return exc


def describe(exc: BaseException, state_dir: str | None = None) -> tuple[str, int]:
    """One line for a person (the file and the cause, what to do) and the exit code."""
    cause = root_cause(exc)
    if isinstance(cause, CliError):
        return cause.message, cause.exit_code
    if isinstance(cause, StateNotFoundError):
        return _line(str(cause)), EXIT_USAGE
    if isinstance(cause, SettingsError):  # names the flag or the file (an absolute path)
        return _line(str(cause)), EXIT_USAGE
    if isinstance(cause, (InvalidRequestError, SessionNotFoundError, InvalidThresholdError,
                          RecallError)):
        return _line(_in_state(str(cause), state_dir)), EXIT_USAGE
    if isinstance(cause, OSError):
        return _line(_os_error(cause)), EXIT_FAILURE
    if isinstance(cause, (StoreError, ScriptoriumMemoryError)):
        return _line(_in_state(str(cause), state_dir)), EXIT_FAILURE
    return _line(f"{type(cause).__name__}: {cause} (run with --debug for the traceback)"), \
        EXIT_FAILURE


def _os_error(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    what = exc.strerror or str(exc)
    where = f"{exc.filename}: " if exc.filename is not None else ""
    if exc.filename2 is not None:
        where = f"{exc.filename} -> {exc.filename2}: "
    advice = _ADVICE.get(exc.errno or 0)
    return f"{where}{what}{f' ({name})' if name else ''}{f'; {advice}' if advice else ''}"


def _in_state(message: str, state_dir: str | None) -> str:
    """Store and memory errors name files relative to the state directory: say which one."""
    if state_dir is None or state_dir in message:
        return message
    return f"{message} [state {state_dir}]"


def _line(message: str) -> str:
    return " ".join(message.split())


def _current_state() -> str | None:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_STATE) if ctx is not None else None


def remember_state(ctx: click.Context, state_dir: str) -> None:
    """Record the command's state directory for the error lines."""
    ctx.meta[_STATE] = state_dir


def check_state_dir(state_dir: str) -> None:
    """Raise :class:`StateNotFoundError` unless ``state_dir`` holds ``sessions/`` or ``memory/``."""
    if not os.path.isdir(state_dir):
        reason = "is not a directory" if os.path.exists(state_dir) else "does not exist"
        raise StateNotFoundError(state_dir, reason)
    if not any(os.path.isdir(os.path.join(state_dir, part)) for part in ("sessions", "memory")):
        raise StateNotFoundError(state_dir, "is not a scriptorium state directory (no sessions/ "
                                       "or memory/ in it)")


class ReportingGroup(click.Group):
    """The top-level group: a global ``--debug`` and one-line errors for every command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(click.Option(
            ["--debug"], is_flag=True, expose_value=False, is_eager=True,
            callback=lambda ctx, _param, value: ctx.meta.__setitem__(_DEBUG, value),
            help="On an error, also print the traceback."))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:  # what is still buffered fails here, not at interpreter exit
                sys.stdout.flush()
        except BrokenPipeError:
            _quiet_broken_pipe(ctx)
        except click.NoSuchOption as exc:
            raise _hint_double_dash(exc) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - every other error becomes one line
            if ctx.meta.get(_DEBUG):
                traceback.print_exception(exc, file=sys.stderr)
            message, code = describe(exc, ctx.meta.get(_STATE))
            click.echo(f"Error: {message}", err=True)
            ctx.exit(code)


def _hint_double_dash(exc: click.NoSuchOption) -> click.NoSuchOption:
    """The parser's error, plus how to name an argument it took for an option.

    SPEC §4's id rule allows a leading ``-`` (an id made elsewhere may have
    one), so such a session stays nameable: after ``--``, as for any tool.
    """
    command = exc.ctx.command if exc.ctx is not None else None
    arguments = [p for p in command.params if isinstance(p, click.Argument)] if command else []
    if exc.ctx is None or not arguments:
        return exc
    names = [argument.human_readable_name for argument in arguments]
    hint = (f" A {' or '.join(names)} starting with '-' goes after '--': "
            f"{exc.ctx.command_path} [OPTIONS] -- {' '.join(names)}")
    return click.NoSuchOption(exc.option_name, exc.message + hint, exc.possibilities, exc.ctx)


def _quiet_broken_pipe(ctx: click.Context) -> None:
    """The reader of stdout went away: exit without a line, and without Python's own at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        os.close(devnull)
    except (OSError, ValueError):  # no real descriptor behind stdout (a test runner's buffer)
        pass
    ctx.exit(EXIT_BROKEN_PIPE)
